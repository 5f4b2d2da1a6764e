# CI's stage clock, sourced by .ci/run and tools/ci/ci_wheel.sh: each stage's time against its share
# of CI's budget (45 minutes on the 2-core CI machine, half of CI's limit), a line when a stage
# takes longer than its share, and a table of every stage with the total at the end.
#
#   ci_stage NAME SHARE_SECONDS   ends the stage before it (if any) and starts NAME
#   ci_stage_end                  ends the current stage (ci_summary does too)
#   ci_summary BUDGET_SECONDS     the table; a line when the total is past BUDGET_SECONDS
#
# Stages are recorded in $CI_STAGES_FILE ("seconds<TAB>share<TAB>name" a line), which .ci/run
# exports, so the stages of tools/ci/ci_wheel.sh land in .ci/run's table. tests/test_packaging.py
# checks that the shares of both scripts add up to the budget at most.

: "${CI_STAGES_FILE:=$(mktemp "${TMPDIR:-/tmp}/lltm_ext-ci-stages.XXXXXX")}"
export CI_STAGES_FILE
_ci_stage_name=
_ci_stage_share=0
_ci_stage_start=0

_ci_free() { df -h --output=avail . 2>/dev/null | tail -n1 | tr -d ' '; }

ci_stage_end() {
  [[ -n $_ci_stage_name ]] || return 0
  local took=$((SECONDS - _ci_stage_start))
  printf '%s\t%s\t%s\n' "$took" "$_ci_stage_share" "$_ci_stage_name" >>"$CI_STAGES_FILE"
  if ((took > _ci_stage_share)); then
    printf '== %s: %s s, PAST ITS SHARE of %s s\n' "$_ci_stage_name" "$took" "$_ci_stage_share"
  else
    printf '== %s: %s s (its share: %s s)\n' "$_ci_stage_name" "$took" "$_ci_stage_share"
  fi
  _ci_stage_name=
}

ci_stage() {
  ci_stage_end
  _ci_stage_name=$1
  _ci_stage_share=$2
  _ci_stage_start=$SECONDS
  printf '\n== %s (share %s s; %s free)\n' "$1" "$2" "$(_ci_free)"
}

ci_summary() {
  ci_stage_end
  local budget=$1 took share name total=0 shares=0 mark
  printf '\n== stage times (s)\n%8s %8s  %s\n' took share stage
  while IFS=$'\t' read -r took share name; do
    mark=
    ((took <= share)) || mark='  <- past its share'
    printf '%8s %8s  %s%s\n' "$took" "$share" "$name" "$mark"
    total=$((total + took))
    shares=$((shares + share))
  done <"$CI_STAGES_FILE"
  printf '%8s %8s  total (budget %s s; CI stops at 5400 s)\n' "$total" "$shares" "$budget"
  ((total <= budget)) || printf '== the stages took %s s, PAST THE BUDGET of %s s\n' "$total" "$budget"
}
