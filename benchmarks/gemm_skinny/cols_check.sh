#!/bin/bash
# The skinny column kernel's block widths (32 / 64 columns) checked and measured on a GPU in one
# call: builds the gemm op in place if it is not built, runs the skinny kernel's tests and the four
# sanitizers over its workload, then measure_cols.py (the linear layers in layout n, random
# shapes), writing JSON and logs under $OUT (default /tmp/cols-out).
# Usage: bash benchmarks/gemm_skinny/cols_check.sh [test] [sanitize] [measure]
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/cols-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD LLTM_EXT_REQUIRE_CUDA=1
PY=${PYTHON:-python3}
if ! "$PY" -c "from lltm_ext._extension import load_extension as l; l('gemm')" 2>/dev/null; then
  LLTM_EXT_OPS=gemm,lltm MAX_JOBS=${MAX_JOBS:-16} "$PY" setup.py build_ext --inplace \
    > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
fi
for what in "${@:-test sanitize measure}"; do
  for w in $what; do
    case $w in
      test)
        "$PY" -m pytest -q -m cuda tests/test_gemm_skinny.py > "$OUT/test.log" 2>&1 ||
          { tail -30 "$OUT/test.log"; echo "cols_check.sh: tests failed; nothing timed"; exit 1; }
        tail -1 "$OUT/test.log"
        ;;
      sanitize)
        SANITIZE_TIMEOUT=${SANITIZE_TIMEOUT:-240} WORKLOAD_ARGS="--ops gemm_skinny" \
          SANITIZE_ARGS="--kernel-name kns=skinny" OUT_DIR=/tmp/cols-san PYTHON="$PY" \
          bash tools/sanitize/sanitize.sh > "$OUT/sanitize.log" 2>&1
        tail -5 "$OUT/sanitize.log"
        ;;
      measure)
        "$PY" benchmarks/gemm_skinny/measure_cols.py "$OUT/cols.json" > "$OUT/measure.log" 2>&1 ||
          tail -5 "$OUT/measure.log"
        tail -2 "$OUT/measure.log"
        ;;
      *) echo "cols_check.sh: test, sanitize or measure, not $w"; exit 2 ;;
    esac
  done
done
