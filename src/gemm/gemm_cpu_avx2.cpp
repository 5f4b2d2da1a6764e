// The CPU GEMM's kernels compiled for AVX2 + FMA + F16C (x86-64 only; elsewhere a stub that is
// never called).
#include "gemm/cpu/prelude.h"

#if LLTM_EXT_CPU_X86_COPIES
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#define LLTM_GEMM_CPU_LEVEL 1
#define LLTM_GEMM_CPU_NS avx2
#include "gemm/cpu/driver.h"
#pragma GCC pop_options
#endif

namespace lltm_ext::gemm::cpugemm {

Report run_avx2(Dtype dtype, const Problem& p, const Knobs& knobs) {
#if LLTM_EXT_CPU_X86_COPIES
  return avx2::run(dtype, p, knobs);
#else
  return run_baseline(dtype, p, knobs);
#endif
}

}  // namespace lltm_ext::gemm::cpugemm
