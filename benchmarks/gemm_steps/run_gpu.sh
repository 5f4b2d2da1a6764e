#!/usr/bin/env bash
# GPU-machine script for lltm_ext's GEMM: build, check, time; logs and JSON under $OUT.
#   bash benchmarks/gemm_steps/run_gpu.sh [phase ...]
#   phases: build steps sweep tail tests bench cpubench extras ncu (default: build steps tests bench)
#   tail: the package vs cuBLAS with the tail split-K variants in $TAIL_ARGS (bench.py --tail)
set -u
OUT=${OUT:-/tmp/gemm_out}
mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
# The GPU image's default CXX links libstdc++ statically, which crashes next to torch.
export CXX=${LLTM_EXT_CXX:-/usr/bin/g++} CC=${LLTM_EXT_CC:-/usr/bin/gcc}
PHASES=${*:-build steps tests bench}
has() { [[ " $PHASES " == *" $1 "* ]]; }
LIB=/tmp/libgemm_steps.so
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0))s] $*"; }

if has build; then
  stamp "build: steps library (background) and the gemm op"
  need_lib=0
  for p in steps sweep extras; do has $p && need_lib=1; done
  # One library of every step file (each exports gemm_step_NN; see common.cuh).
  [[ $need_lib == 1 ]] && (nvcc -O3 -std=c++17 -arch=sm_90 -ccbin "$CXX" -shared -Xcompiler -fPIC -I src -Xptxas -v \
    benchmarks/gemm_steps/step_*.cu -o "$LIB" >"$OUT/build.log" 2>&1 && echo "steps lib built") &
  LLTM_EXT_OPS=gemm TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 python3 setup.py build_ext --inplace \
    >"$OUT/build_op.log" 2>&1
  echo "gemm op build rc=$?"
  tail -2 "$OUT/build_op.log"
  wait
  grep -E "spill" "$OUT/build.log" 2>/dev/null | sort | uniq -c
  cat "$OUT/build_op.log" >>"$OUT/build.log" && rm "$OUT/build_op.log"
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv

if has steps || has sweep; then
  stamp "steps / sweep vs cuBLAS"
  ARGS=""
  has steps || ARGS="$ARGS --no-steps"
  has sweep && ARGS="$ARGS --sweep"
  timeout "${STEPS_TIMEOUT:-170}" python3 benchmarks/gemm_steps/bench.py --lib "$LIB" \
    --json "$OUT/steps.json" $ARGS >"$OUT/steps.log" 2>&1
  echo "rc=$?"
fi
if has tail; then
  stamp "tail split-K variants vs cuBLAS"
  TARGS=""
  for t in ${TAIL_ARGS:-}; do TARGS="$TARGS --tail $t"; done
  timeout "${TAIL_TIMEOUT:-150}" python3 benchmarks/gemm_steps/bench.py --no-steps --rounds 5 \
    --json "$OUT/tail.json" $TARGS >"$OUT/tail.log" 2>&1
  echo "rc=$?"
fi
if has tests; then
  stamp "pytest tests/test_gemm.py"
  LLTM_EXT_REQUIRE_CUDA=1 timeout "${TESTS_TIMEOUT:-170}" python3 -m pytest tests/test_gemm.py -q -x \
    -p no:cacheprovider >"$OUT/pytest.log" 2>&1
  echo "rc=$?"
  grep -E "passed|failed|Error|error" "$OUT/pytest.log" | tail -25
fi
if has bench; then
  stamp "python -m lltm_ext bench --ops gemm (cuda)"
  timeout 60 python3 -m lltm_ext bench --ops gemm >"$OUT/bench.log" 2>&1
fi
if has cpubench; then
  stamp "python -m lltm_ext bench --ops gemm --device cpu"
  timeout 60 python3 -m lltm_ext bench --ops gemm --device cpu >>"$OUT/bench.log" 2>&1
fi
if has extras; then
  stamp "extras: transposed layouts, other dtypes"
  timeout 60 python3 benchmarks/gemm_steps/bench.py --lib "$LIB" --no-shapes --extras --rounds 2 \
    >"$OUT/extras.log" 2>&1
fi
if has ncu; then
  stamp "ncu: one 4096^3 call"
  timeout 90 ncu --clock-control none -k regex:gemm_ -c 1 --section SpeedOfLight \
    --section Occupancy --section WarpStateStats --section SchedulerStats python3 -c "
import torch, lltm_ext
a = torch.randn(4096, 4096, device='cuda'); b = torch.randn(4096, 4096, device='cuda')
lltm_ext.gemm(a, b); torch.cuda.synchronize()" >"$OUT/ncu.log" 2>&1
fi
stamp done
# Summaries last (the reply shows the end of the output).
for f in steps.log tail.log extras.log bench.log ncu.log; do
  [[ -f "$OUT/$f" ]] && { echo "----- $f"; grep -vE "^\s*$" "$OUT/$f" | cut -c1-110; }
done
exit 0
