#!/usr/bin/env bash
# On a machine with two (or more) CUDA GPUs: build lltm_ext in place, run the distributed tests with
# GPU tests required (NCCL on 2 GPUs, and the CPU/gloo cases beside them), then the example's
# throughput on 1 and 2 GPUs (DDP and FSDP2, eager and compiled); logs, a summary and JSON under
# OUT_DIR.
#
# Usage: bash tools/ci/multigpu_check.sh [PHASE...]   (default: build tests throughput)
#   build       python setup.py build_ext --inplace for the visible GPUs (no CPU twins)
#   tests       LLTM_EXT_REQUIRE_CUDA=1 pytest tests/test_distributed.py (multigpu cases need
#               >= 2 GPUs: with fewer, they skip and this phase says so)
#   throughput  tools/measure/dist_throughput.py --gpus 1,2 --require 1.8: table and
#               dist_throughput.json
# Env: OUT_DIR (default $OUT, else ./multigpu-check-out), PYTHON (python3), PYTEST_ARGS,
#   THROUGHPUT_ARGS (more options for tools/measure/dist_throughput.py).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT_DIR:-${OUT:-multigpu-check-out}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
status=0
step() { echo; echo "=== $* ($(date +%T))"; }

gpus=$("$py" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
step "GPUs: $gpus"
nvidia-smi --query-gpu=index,name,memory.total --format=csv | tee "$out/gpu.txt"
nvidia-smi topo -m >>"$out/gpu.txt" 2>&1 || true
"$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())' | tee -a "$out/gpu.txt"

build() {
  step "build (in place, visible GPUs, MAX_JOBS=${MAX_JOBS:-$(nproc)})"
  # A compiler that links libstdc++ statically is refused by the build, which then picks the
  # system one (see docs/troubleshooting.md).
  MAX_JOBS=${MAX_JOBS:-$(nproc)} LLTM_EXT_CPU_TWIN=0 "$py" setup.py build_ext --inplace \
    >"$out/build.log" 2>&1 || { echo "build failed: $out/build.log"; tail -20 "$out/build.log"; return 1; }
  grep -E "^ *lltm_ext build:" "$out/build.log"
}

tests() {
  step "tests/test_distributed.py, GPU tests required"
  [[ $gpus -ge 2 ]] || echo "note: $gpus GPU(s): the multigpu (NCCL) cases will skip"
  LLTM_EXT_REQUIRE_CUDA=1 "$py" -m pytest tests/test_distributed.py -v -p no:cacheprovider \
    --junitxml="$out/test_distributed.xml" ${PYTEST_ARGS:-} >"$out/tests.log" 2>&1
  local rc=$?
  grep -E "PASSED|FAILED|ERROR|SKIPPED" "$out/tests.log" | sed 's/^/  /' | tail -60
  tail -n 3 "$out/tests.log"
  return $rc
}

throughput() {
  step "throughput: 1 and 2 GPUs, DDP and FSDP2, eager and compiled"
  "$py" tools/measure/dist_throughput.py --gpus 1,2 --require 1.8 --logs "$out/throughput" \
    --json "$out/dist_throughput.json" ${THROUGHPUT_ARGS:-} 2>&1 | tee "$out/throughput.log"
  return "${PIPESTATUS[0]}"
}

phases=("$@")
[[ ${#phases[@]} -gt 0 ]] || phases=(build tests throughput)
for phase in "${phases[@]}"; do
  "$phase" || { status=1; echo "phase $phase: FAILED" | tee -a "$out/summary.txt"; continue; }
  echo "phase $phase: ok" | tee -a "$out/summary.txt"
done
exit $status
