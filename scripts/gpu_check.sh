#!/usr/bin/env bash
# On a GPU machine: build lltm_ext (editable, CUDA required), run the whole test suite with GPU
# tests required, check the CPU-only build's CUDA error, print `info` and run the benchmarks.
# Usage: bash scripts/gpu_check.sh [OUT_DIR]      (OUT_DIR default: $OUT, else ./gpu-check-out)
# Env: PYTHON (python3), TORCH_CUDA_ARCH_LIST (9.0), TESTS (pytest paths, default: tests),
#      PYTEST_ARGS, BENCH_ARGS (extra arguments), SKIP_CPU_ONLY=1 to skip the CPU-only build check;
#      LLTM_EXT_OPS (build only these ops).
set -uo pipefail
out=${1:-${OUT:-gpu-check-out}}
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
export MAX_JOBS=${MAX_JOBS:-$(nproc)}
# The GPU image sets CXX to a compiler that links libstdc++ statically, which crashes next to
# torch (setup.py refuses it); use the system compiler unless LLTM_EXT_CXX names another.
export CXX=${LLTM_EXT_CXX:-/usr/bin/g++} CC=${LLTM_EXT_CC:-/usr/bin/gcc}
status=0
step() { echo; echo "=== $* ($(date +%T))"; }

step "GPU"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"
"$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee -a "$out/gpu.txt"

step "build (editable, LLTM_EXT_CUDA=1, archs $TORCH_CUDA_ARCH_LIST)"
if ! LLTM_EXT_CUDA=1 "$py" -m pip install --no-build-isolation --no-deps --no-index -e . \
    >"$out/build.log" 2>&1; then
  tail -40 "$out/build.log"
  echo "BUILD FAILED"
  exit 1
fi
grep -E "lltm_ext setup|ptxas (warning|error)|error" "$out/build.log" | head -20
"$py" -m lltm_ext info | tee "$out/info.txt"

step "tests (GPU tests required)"
LLTM_EXT_REQUIRE_CUDA=1 "$py" -m pytest ${TESTS:-tests} -q -p no:cacheprovider ${PYTEST_ARGS:-} \
  >"$out/tests.log" 2>&1 || status=1
grep -E "^(FAILED|ERROR)" "$out/tests.log" | head -30
tail -3 "$out/tests.log"

if [ "${SKIP_CPU_ONLY:-0}" != 1 ]; then
  step "CPU-only build on the GPU machine: CUDA tensors get a clear error"
  cpu=$(mktemp -d)
  git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$cpu"
  (cd "$cpu" && LLTM_EXT_CUDA=0 "$py" setup.py build_ext --inplace >"$out/build_cpu_only.log" 2>&1 &&
    PYTHONPATH="$cpu" "$py" -m pytest ${TESTS:-tests} -q -p no:cacheprovider -k cpu_only_build \
      2>&1 | tail -3) || status=1
fi

step "bench"
"$py" -m lltm_ext bench --json "$out/bench.json" ${BENCH_ARGS:-} 2>&1 | tee "$out/bench.txt" || status=1

step "summary"
tail -1 "$out/tests.log"
exit $status
