#!/usr/bin/env bash
# One device call's worth of tools/ci/gpu_check.sh, shaped for the device tool's limits: the phases
# run under a time limit (so that the call ends before the tool kills it, and what was measured
# comes back), their logs and JSON go to a scratch folder, and everything comes back as one
# archive, $OUT/gpu-check.tgz (the tool returns at most 8 files from $OUT), with the summary and
# each failed test printed at the end.
#
# Usage: bash tools/ci/gpu_run.sh SECONDS PHASE...   (the phases as gpu_check.sh takes them, and
#        its environment: PYTEST_ARGS, LINEAR_PLANS, SWEEP_ARGS, ...)
set -uo pipefail
cd "$(dirname "$0")/../.."
limit=${1:?usage: gpu_run.sh SECONDS PHASE...}
shift
dest=${OUT:-gpu-check-out}
scratch=$(mktemp -d)
mkdir -p "$dest"
OUT_DIR=$scratch timeout --kill-after=10 "$limit" bash tools/ci/gpu_check.sh "$@" \
  >"$scratch/console.txt" 2>&1
rc=$?
[[ $rc == 124 || $rc == 137 ]] && echo "gpu_run.sh: stopped at its limit of $limit s" |
  tee -a "$scratch/console.txt"
tar czf "$dest/gpu-check.tgz" -C "$scratch" .
sed -n '/^=== summary/,$p' "$scratch/console.txt"
grep -h -E "^(FAILED|ERROR) " "$scratch"/*.log 2>/dev/null | head -20
echo "gpu_run.sh: rc=$rc; logs and JSON in gpu-check.tgz"
exit $rc
