#!/usr/bin/env bash
# On a GPU machine: the README's commands as a user runs them (the machine's own PATH and
# compiler, no TORCH_CUDA_ARCH_LIST: the visible GPU decides), the whole test suite with GPU tests
# required, and the GEMM through each of its code paths; logs and timings under OUT_DIR.
#
# Usage: bash tools/ci/gpu_check.sh [PHASE...]   (default: readme paths)
#   readme  install, then tests:
#   dev     an editable install for development (pip install -e ., no bench): the compiled modules
#           land in the source tree, so the phases below also run from the repository root
#   install README install command, in this clone,
#           as README.md spells them from the lltm_ext build on, with the machine's own PATH and
#           environment (its CXX too): the venv and the tools' install are left out (no network
#           here; python3's environment has torch and the tools), and pip gets -v (build log)
#   tests   README test command (GPU tests required)
#   explain lltm-ext plan at five shapes (auto), with the kernels that ran: OUT_DIR/plan.txt
#   paths   GEMM suite through the pre-sm_80 path (LLTM_EXT_GEMM_PATH=staged, native build), and
#           in builds for 8.0+PTX and 7.5+PTX alone (the driver JIT-compiles that PTX: the code
#           compiled for those architectures runs on this GPU); GEMM_PATHS picks (see paths())
#   times   build times: all modules for the default list (as wheels ship), from scratch; then an
#           incremental rebuild after touching one .cu file
#   cpuonly the CPU-only build's error for CUDA tensors
#   bench   python -m lltm_ext bench (BENCH_ARGS)
#   sweep   python -m lltm_ext bench --sweep (SWEEP_ARGS, default "200 --seed 1 --ops gemm"), its
#           output and JSON as OUT_DIR/sweep_SWEEP_TAG.{txt,json} (SWEEP_TAG default: gemm)
#   linear  python -m lltm_ext bench --linear (LINEAR_ARGS, default "--linear-layouts t,n") as
#           OUT_DIR/linear.{txt,json}; then every tensor-core plan, forced, at its layers' shapes
#           (benchmarks/gemm_tc_plan/measure_plans.py, layout nt = x @ W.T, M in LINEAR_PLAN_MS,
#           default 8 16 32 128 512) as OUT_DIR/linear_plans.{txt,json}; LINEAR_PLANS=0: the
#           table alone
#   skinny  the skinny GEMM kernels: tests/test_gemm_skinny.py, the sanitizers over the workload's
#           gemm_skinny section (from the install's in-place build), and
#           benchmarks/gemm_skinny/measure.py for weights stored (N, K) and (K, N), as
#           OUT_DIR/skinny_{t,n}.json (SKINNY_MEASURE=0: tests and sanitizers alone)
#   wgmma   the wgmma kernel: tests/test_gemm_tensor_core.py (PYTEST_ARGS), the sanitizers over
#           the workload's gemm_wgmma and gemm_tc_plans sections, and
#           benchmarks/gemm_tc_plan/measure_wgmma.py (K splits, short A stages, against cuBLAS) per
#           dtype of WGMMA_DTYPES (default bfloat16) as OUT_DIR/wgmma_DTYPE.json; and
#           benchmarks/gemm_tc_plan/measure_pitch.py (an N-major B at several row pitches)
#   accuracy  tools/measure/sequence_accuracy.py: the LLTM sequence's float32 error against float64
#           at each precision setting (ACCURACY_ARGS), as OUT_DIR/accuracy.json
#   sanitize  compute-sanitizer's memcheck, racecheck, initcheck and synccheck over
#           tools/sanitize/sanitize_workload.py (tools/sanitize/sanitize.sh; SANITIZE_* as it reads
#           them), in an in-place build with -lineinfo; logs and summary.txt under OUT_DIR/sanitize
# Env: OUT_DIR (default $OUT, else ./gpu-check-out), PYTHON (python3), PYTEST_ARGS.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT_DIR:-${OUT:-gpu-check-out}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1
unset TORCH_CUDA_ARCH_LIST LLTM_EXT_OPS LLTM_EXT_CPU_TWIN
status=0
step() { echo; echo "=== $* ($(date +%T))"; }
timed() { # timed NAME CMD...: runs CMD, logs to $out/NAME.log, prints wall time and last lines
  local name=$1 t0=$SECONDS rc
  shift
  "$@" >"$out/$name.log" 2>&1
  rc=$?
  echo "$name: rc=$rc, $((SECONDS - t0)) s" | tee -a "$out/times.txt"
  tail -n 4 "$out/$name.log"
  [[ $rc == 0 ]] || status=1
  return $rc
}
copy_tree() { # a clean copy of the working tree (what git would commit) in $1
  mkdir -p "$1"
  git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do [[ -f $f ]] && printf '%s\0' "$f"; done |
    xargs -0 cp --parents -t "$1"
}

step "GPU"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
"$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee -a "$out/gpu.txt"
echo "PATH=$PATH; CXX=${CXX-<unset>} CC=${CC-<unset>}; c++ is $(command -v c++); g++ is $(command -v g++); nproc $(nproc)" | tee -a "$out/gpu.txt"

readme_command() { # the README's command marked $1, less its venv and the `pip install` of
  # torch and the tools (no network here: the machine's python3 environment has them all, and pip
  # --no-index does not count an installed torch as a match), with pip -v
  "$py" - "$1" <<'EOF'
import re, sys
text = open("README.md").read()
cmd = re.search(rf"<!-- {sys.argv[1]}:.*?-->\s*```bash\n(.+?)\n```", text, re.S)[1].strip()
prep = re.match(r"python3 -m venv \.venv && \. \.venv/bin/activate && pip install [\w ]+ && ", cmd)
assert prep, cmd
# python3's own environment takes the place of the README's .venv; its pip is `python3 -m pip`
# (the `pip` on that machine's PATH is another Python's).
rest = cmd[prep.end():].replace("pip install --no-build-isolation", "pip install -v --no-build-isolation")
print(rest.replace("pip install", "python3 -m pip install"))
EOF
}

readme() {
  install
  tests
}

dev() {
  step "editable install (pip install --no-build-isolation -e .)"
  timed dev_install "$py" -m pip install -v --no-build-isolation -e .
  grep -E "^ *lltm_ext build:" "$out/dev_install.log"
}

# python -m lltm_ext from OUT_DIR: a non-editable install (the README's) leaves the source tree
# without compiled modules, and Python started in the repository root would import that tree.
lltm() { (cd "$out" && "$py" -m lltm_ext "$@"); }

install() {
  step "README install command: $(readme_command install-command)"
  timed readme_install bash -euo pipefail -c "$(readme_command install-command)"
  grep -E "^ *lltm_ext build:" "$out/readme_install.log"
}

tests() {
  step "README test command (GPU tests required): $(readme_command test-command)"
  timed readme_test env LLTM_EXT_REQUIRE_CUDA=1 bash -euo pipefail -c \
    "$(readme_command test-command) -q -p no:cacheprovider ${PYTEST_ARGS:-}"
  grep -E "^ *lltm_ext build:" "$out/readme_test.log"
  grep -E "^(FAILED|ERROR)" "$out/readme_test.log" | head -20
}

explain() {
  step "lltm-ext plan: what auto runs at five shapes, and the kernels that ran"
  for spec in "50,8,64,64 float32" "50,64,64,128 float32" "20,16,64,512 bfloat16" \
    "20,256,64,1024 float32" "10,4,32,2048 float32"; do
    # shellcheck disable=SC2086
    set -- $spec
    lltm plan lltm_sequence --shape "$1" --dtype "$2" --run | tee -a "$out/plan.txt" ||
      status=1
    lltm plan lltm_sequence --shape "$1" --dtype "$2" --json >"$out/plan_${1//,/x}_$2.json" ||
      status=1
  done
}

paths() {
  # Each entry: ARCHS:PATH, a build of the GEMM alone for ARCHS (native: the visible GPU's) and
  # the whole GEMM suite run with LLTM_EXT_GEMM_PATH=PATH.
  for entry in ${GEMM_PATHS:-native:staged 8.0+PTX:auto 7.5+PTX:auto}; do
    local archs=${entry%%:*} path=${entry##*:} dir name
    name=${archs%%.*}_$path
    step "GEMM suite, build for $archs, LLTM_EXT_GEMM_PATH=$path (a PTX-only build runs the code"\
      "compiled for that architecture: the driver JIT-compiles it for this GPU)"
    local arch_env=()
    [[ $archs == native ]] || arch_env=("TORCH_CUDA_ARCH_LIST=$archs")
    dir=$(mktemp -d)
    copy_tree "$dir"
    (cd "$dir" && timed "build_gemm_$name" env "${arch_env[@]}" \
      LLTM_EXT_OPS=gemm "$py" setup.py build_ext --inplace &&
      timed "gemm_$name" env LLTM_EXT_REQUIRE_CUDA=1 LLTM_EXT_GEMM_PATH="$path" PYTHONPATH="$dir" \
        "$py" -m pytest -q -p no:cacheprovider tests/test_gemm.py ${PYTEST_ARGS:-})
    rm -rf "$dir"
  done
}

times() {
  step "build from scratch: all modules, the default arch list (what wheels ship)"
  dir=$(mktemp -d)
  copy_tree "$dir"
  default=$("$py" tools/buildsys/archs.py default)
  (cd "$dir" && timed build_default env TORCH_CUDA_ARCH_LIST="$default" "$py" setup.py build_ext --inplace)
  grep -E "lltm_ext build:" "$out/build_default.log"
  step "incremental: touch src/relu/relu_cuda.cu, rebuild"
  (cd "$dir" && touch src/relu/relu_cuda.cu &&
    timed build_incremental env TORCH_CUDA_ARCH_LIST="$default" "$py" setup.py build_ext --inplace)
  grep -E "lltm_ext build:|^\[" "$out/build_incremental.log"
  rm -rf "$dir"
}

cpuonly() {
  step "CPU-only build on the GPU machine: CUDA tensors get a clear error"
  dir=$(mktemp -d)
  copy_tree "$dir"
  (cd "$dir" && timed build_cpu_only env LLTM_EXT_CUDA=0 "$py" setup.py build_ext --inplace &&
    PYTHONPATH="$dir" "$py" -m pytest -q -p no:cacheprovider tests -k cpu_only_build 2>&1 | tail -3)
  rm -rf "$dir"
}

bench() {
  step "bench"
  lltm bench --json "$out/bench.json" ${BENCH_ARGS:-} 2>&1 | tee "$out/bench.txt" || status=1
}

sweep() {
  local tag=${SWEEP_TAG:-gemm}
  step "sweep $tag: bench --sweep ${SWEEP_ARGS:-200 --seed 1 --ops gemm}"
  # shellcheck disable=SC2086
  lltm bench --sweep ${SWEEP_ARGS:-200 --seed 1 --ops gemm} \
    --json "$out/sweep_$tag.json" >"$out/sweep_$tag.txt" 2>&1 ||
    status=1
  sed -n '/^op /,$p' "$out/sweep_$tag.txt"
}

linear() {
  step "GEMM as linear layers call it (${LINEAR_ARGS:---linear-layouts t,n}), and every plan there"
  # shellcheck disable=SC2086
  lltm bench --linear ${LINEAR_ARGS:---linear-layouts t,n} --json "$out/linear.json" \
    >"$out/linear.txt" 2>&1 || status=1
  tail -n 24 "$out/linear.txt"
  [[ ${LINEAR_PLANS:-1} == 0 ]] && return
  local shapes=() k n m
  for kn in 4096x4096 4096x11008 11008x4096 4096x14336 14336x4096 8192x28672 5120x13824 2048x8192; do
    k=${kn%x*} n=${kn#*x}
    for m in ${LINEAR_PLAN_MS:-8 16 32 128 512}; do shapes+=(--shape "${m}x${n}x${k}:nt"); done
  done
  "$py" benchmarks/gemm_tc_plan/measure_plans.py "$out/linear_plans.json" --dtypes bfloat16 \
    "${shapes[@]}" >"$out/linear_plans.txt" 2>&1 || status=1
  tail -n 40 "$out/linear_plans.txt"
}

skinny() {
  step "the skinny kernels: their tests, their sanitizer section, their tile grid at the linear layers"
  timed skinny_tests env LLTM_EXT_REQUIRE_CUDA=1 "$py" -m pytest -q -p no:cacheprovider \
    tests/test_gemm_skinny.py ${PYTEST_ARGS:-}
  timed skinny_sanitize env SANITIZE_TIMEOUT=150 WORKLOAD_ARGS="--ops gemm_skinny" \
    OUT_DIR="$out/sanitize_skinny" PYTHON="$py" bash tools/sanitize/sanitize.sh
  cat "$out/sanitize_skinny/summary.txt" 2>/dev/null
  [[ ${SKINNY_MEASURE:-1} == 0 ]] && return
  for layout in t n; do
    timed "skinny_measure_$layout" "$py" benchmarks/gemm_skinny/measure.py \
      "$out/skinny_$layout.json" --layout "$layout" --ms 1,8,16,32 --random 20 --budget 0.1
  done
}

wgmma() {
  step "the wgmma kernel: its tests, its sanitizer sections, its K splits and A stages measured"
  timed wgmma_tests env LLTM_EXT_REQUIRE_CUDA=1 LLTM_EXT_REQUIRE_WGMMA=1 "$py" -m pytest -q \
    -p no:cacheprovider tests/test_gemm_tensor_core.py ${PYTEST_ARGS:-}
  timed wgmma_sanitize env SANITIZE_TIMEOUT=200 WORKLOAD_ARGS="--ops gemm_wgmma,gemm_tc_plans" \
    OUT_DIR="$out/sanitize_wgmma" PYTHON="$py" bash tools/sanitize/sanitize.sh
  cat "$out/sanitize_wgmma/summary.txt" 2>/dev/null
  for dtype in ${WGMMA_DTYPES:-bfloat16}; do
    timed "wgmma_measure_$dtype" "$py" benchmarks/gemm_tc_plan/measure_wgmma.py \
      "$out/wgmma_$dtype.json" --dtype "$dtype"
  done
  timed wgmma_pitch "$py" benchmarks/gemm_tc_plan/measure_pitch.py "$out/wgmma_pitch.json"
  cat "$out/wgmma_pitch.log"
}

accuracy() {
  step "LLTM sequence accuracy against float64 (${ACCURACY_ARGS:-})"
  # shellcheck disable=SC2086
  "$py" tools/measure/sequence_accuracy.py --json "$out/accuracy.json" ${ACCURACY_ARGS:-} || status=1
}

sanitize() {
  step "compute-sanitizer: memcheck, racecheck, initcheck, synccheck over tools/sanitize/sanitize_workload.py"
  dir=$(mktemp -d)
  copy_tree "$dir"
  # -lineinfo (nvcc reads NVCC_APPEND_FLAGS): the reports name source lines of the kernels.
  (cd "$dir" && timed build_sanitize env NVCC_APPEND_FLAGS=-lineinfo "$py" setup.py build_ext --inplace &&
    timed sanitize env OUT_DIR="$out/sanitize" PYTHON="$py" bash tools/sanitize/sanitize.sh)
  cat "$out/sanitize/summary.txt" 2>/dev/null
  rm -rf "$dir"
}

phases=("$@")
[[ ${#phases[@]} -gt 0 ]] || phases=(readme paths)
for phase in "${phases[@]}"; do "$phase"; done
step "summary"
cat "$out/times.txt"
exit $status
