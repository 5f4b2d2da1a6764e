#!/bin/bash
# The wgmma kernel's ping-pong switch measured on a GPU in one call (one build, the switch off and
# on in turn, twice): builds the gemm op in place if it is not built, checks that the switch
# changes no bit, then times what the argument names, writing JSON and logs under $OUT (default
# /tmp/pingpong-out):
#   linear  the linear layers at M = 128, 512, 2048, 8192 and 3000x5000x2000 in every layout
#           (measure_linear_ab.py run --knobs pingpong=1 / =2; compare -> linear_cmp.json)
#   sweep   `lltm-ext bench --ops gemm --sweep 100 --seed 1`, bfloat16 and float16 (sweep_*.json)
# Usage: bash benchmarks/gemm_tc_plan/pingpong_ab.sh [linear] [sweep]
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/pingpong-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD LLTM_EXT_REQUIRE_CUDA=1 LLTM_EXT_REQUIRE_WGMMA=1
PY=${PYTHON:-python3}
if ! "$PY" -c "import lltm_ext._gemm" 2>/dev/null; then
  LLTM_EXT_OPS=gemm "$PY" setup.py build_ext --inplace > "$OUT/build.log" 2>&1 ||
    { tail -30 "$OUT/build.log"; exit 1; }
fi
"$PY" -m pytest -q tests/test_gemm_tensor_core.py -k "switches_change_no_bit and pingpong" \
  2>&1 | tail -3
for what in "${@:-linear}"; do
  case $what in
    linear)
      runs=()
      for i in 1 2; do
        for pp in 1 2; do
          name=$([ $pp = 1 ] && echo off || echo pingpong)$i
          (cd benchmarks/gemm_tc_plan && "$PY" measure_linear_ab.py run "$OUT/linear_$name.json" \
            --ms 128,512,2048,8192 --knobs pingpong=$pp > "$OUT/linear_$name.log" 2>&1) ||
            tail -5 "$OUT/linear_$name.log"
          runs+=("$name=$OUT/linear_$name.json")
        done
      done
      "$PY" benchmarks/gemm_tc_plan/measure_linear_ab.py compare "$OUT/linear_cmp.json" \
        "${runs[@]}" --what "ping-pong off / on, one build, $(nvidia-smi --query-gpu=name \
        --format=csv,noheader | head -1)"
      ;;
    sweep)
      for i in 1 2; do
        for pp in 1 2; do
          "$PY" - "$OUT/sweep_pp${pp}_$i.json" "$pp" > "$OUT/sweep_pp${pp}_$i.log" 2>&1 <<'PYEOF'
import sys

from lltm_ext._extension import load_extension
from lltm_ext.cli.main import main

load_extension("gemm")._set_gemm_wgmma_knobs(pingpong=int(sys.argv[2]))
sys.exit(main(["bench", "--device", "cuda", "--ops", "gemm", "--sweep", "100", "--seed", "1",
               "--dtypes", "bfloat16,float16", "--json", sys.argv[1]]))
PYEOF
          tail -4 "$OUT/sweep_pp${pp}_$i.log"
        done
      done
      ;;
    *) echo "pingpong_ab.sh: linear or sweep, not $what"; exit 2 ;;
  esac
done
