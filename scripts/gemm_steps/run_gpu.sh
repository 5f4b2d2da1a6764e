#!/usr/bin/env bash
# GPU-machine script for lltm_ext's GEMM: build, check, time; logs and JSON under $OUT.
#   bash scripts/gemm_steps/run_gpu.sh [phase ...]   phases: build steps sweep extras bench tests
#                                                    ncu (default: build steps bench tests)
set -u
OUT=${OUT:-/tmp/gemm_out}
mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
PHASES=${*:-build steps bench tests}
has() { [[ " $PHASES " == *" $1 "* ]]; }
LIB=/tmp/libgemm_steps.so
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }

if has build; then
  stamp "build: steps library (background) and the gemm op"
  (nvcc -O3 -std=c++17 -arch=sm_90 -shared -Xcompiler -fPIC -I src -Xptxas -v \
      scripts/gemm_steps/steps.cu -o "$LIB" >"$OUT/steps_build.log" 2>&1; echo "steps lib rc=$?") &
  LLTM_EXT_OPS=gemm TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 python3 setup.py build_ext --inplace \
      >"$OUT/build.log" 2>&1
  echo "gemm op build rc=$?"; tail -3 "$OUT/build.log"
  wait
  grep -E "spill|stack frame" "$OUT/steps_build.log" | sort | uniq -c
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv

ARGS=""
has sweep && ARGS="$ARGS --sweep"
has extras && ARGS="$ARGS --extras"
if has steps || has sweep || has extras; then
  stamp "steps / sweep / extras"
  STEPARGS=""
  has steps || STEPARGS="--no-steps"
  timeout 240 python3 scripts/gemm_steps/bench.py --lib "$LIB" --json "$OUT/steps.json" \
      $STEPARGS $ARGS 2>&1 | tee "$OUT/steps.log" | grep -v "^$"
fi
if has bench; then
  stamp "python -m lltm_ext bench --ops gemm"
  timeout 120 python3 -m lltm_ext bench --ops gemm --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log"
fi
if has ncu; then
  stamp "ncu: one 4096^3 call"
  timeout 120 ncu --clock-control none -k regex:gemm_tile_kernel -c 1 \
      --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
      --section SchedulerStats python3 -c "
import torch, lltm_ext
a = torch.randn(4096, 4096, device='cuda'); b = torch.randn(4096, 4096, device='cuda')
lltm_ext.gemm(a, b); torch.cuda.synchronize()" >"$OUT/ncu.log" 2>&1
  grep -E "Throughput|Issue|Occupancy|Registers|Eligible|Active Warps|No Eligible|Duration|Stall" \
      "$OUT/ncu.log" | head -40
fi
if has tests; then
  stamp "pytest tests/test_gemm.py"
  timeout 300 python3 -m pytest tests/test_gemm.py -q -x -p no:cacheprovider 2>&1 \
      | tee "$OUT/pytest.log" | tail -15
fi
stamp done
