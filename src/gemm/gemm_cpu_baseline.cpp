// The CPU GEMM's kernels compiled for the baseline ISA (x86-64: SSE2; other CPUs: their default).
#include "gemm/cpu/prelude.h"

#define LLTM_GEMM_CPU_LEVEL 0
#define LLTM_GEMM_CPU_NS baseline
#include "gemm/cpu/driver.h"

namespace lltm_ext::gemm::cpugemm {

Report run_baseline(Dtype dtype, const Problem& p, const Knobs& knobs) {
  return baseline::run(dtype, p, knobs);
}

}  // namespace lltm_ext::gemm::cpugemm
