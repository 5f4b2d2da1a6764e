#!/bin/bash
# The wgmma kernel's ping-pong switch measured on a GPU in one call (one build; the switch off, on
# with 128-row tiles and on with 64-row tiles in turn, twice): builds the gemm op in place if it
# is not built, checks that the switch changes no bit, then times what the arguments name, writing
# JSON and logs under $OUT (default /tmp/pingpong-out):
#   linear  the linear layers at M = 128, 512, 2048, 8192 and 3000x5000x2000 in every layout
#           (measure_linear_ab.py run --knobs pingpong=1 / 2 / 3; compare -> linear_cmp.json)
#   sweep   `lltm-ext bench --ops gemm --sweep 100 --seed 1`, bfloat16 and float16 (sweep_*.json)
# Usage: bash benchmarks/gemm_tc_plan/pingpong_ab.sh [linear] [sweep]
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/pingpong-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD LLTM_EXT_REQUIRE_CUDA=1 LLTM_EXT_REQUIRE_WGMMA=1
PY=${PYTHON:-python3}
names=([1]=off [2]=pp128 [3]=pp64)  # the pingpong switch's values
if ! "$PY" -c "from lltm_ext._extension import load_extension as l; l('gemm')" 2>/dev/null; then
  LLTM_EXT_OPS=gemm "$PY" setup.py build_ext --inplace > "$OUT/build.log" 2>&1 ||
    { tail -30 "$OUT/build.log"; exit 1; }
fi
"$PY" -m pytest -q tests/test_gemm_tensor_core.py -k "switches and pingpong" > "$OUT/test.log" 2>&1
rc=$?
tail -3 "$OUT/test.log"
[ $rc = 0 ] || { echo "pingpong_ab.sh: the switch's bit test failed; nothing timed"; exit 1; }
for what in "${@:-linear}"; do
  case $what in
    linear)
      runs=()
      for i in 1 2; do
        for pp in 1 2 3; do
          name=${names[$pp]}$i
          (cd benchmarks/gemm_tc_plan && "$PY" measure_linear_ab.py run "$OUT/linear_$name.json" \
            --ms 128,512,2048,8192 --knobs pingpong=$pp > "$OUT/linear_$name.log" 2>&1) ||
            tail -5 "$OUT/linear_$name.log"
          runs+=("$name=$OUT/linear_$name.json")
        done
      done
      gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
      "$PY" benchmarks/gemm_tc_plan/measure_linear_ab.py compare "$OUT/linear_cmp.json" \
        "${runs[@]}" --what "ping-pong off / 128-row tiles / 64-row tiles, one build, $gpu"
      ;;
    sweep)
      for i in 1 2; do
        for pp in 1 2 3; do
          log=$OUT/sweep_${names[$pp]}$i.log
          "$PY" - "$OUT/sweep_${names[$pp]}$i.json" "$pp" > "$log" 2>&1 <<'PYEOF'
import sys

from lltm_ext._extension import load_extension
from lltm_ext.cli.main import main

load_extension("gemm")._set_gemm_wgmma_knobs(pingpong=int(sys.argv[2]))
sys.exit(main(["bench", "--device", "cuda", "--ops", "gemm", "--sweep", "100", "--seed", "1",
               "--dtypes", "bfloat16,float16", "--json", sys.argv[1]]))
PYEOF
          tail -4 "$log"
        done
      done
      ;;
    *) echo "pingpong_ab.sh: linear or sweep, not $what"; exit 2 ;;
  esac
done
