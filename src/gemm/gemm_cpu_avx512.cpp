// The CPU GEMM's kernels compiled for AVX-512 (F, VL, BW, DQ, with AVX2 + FMA + F16C), and its
// bfloat16 kernels for AVX-512 BF16 (run only on CPUs that have it); x86-64 only (elsewhere a
// stub that is never called).
#include "gemm/cpu/prelude.h"

#if LLTM_EXT_CPU_X86_COPIES
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,f16c")
#define LLTM_GEMM_CPU_LEVEL 2
#define LLTM_GEMM_CPU_NS avx512
#include "gemm/cpu/driver.h"
#pragma GCC pop_options
#endif

namespace lltm_ext::gemm::cpugemm {

Report run_avx512(Dtype dtype, const Problem& p, const Knobs& knobs) {
#if LLTM_EXT_CPU_X86_COPIES
  return avx512::run(dtype, p, knobs);
#else
  return run_baseline(dtype, p, knobs);
#endif
}

}  // namespace lltm_ext::gemm::cpugemm
