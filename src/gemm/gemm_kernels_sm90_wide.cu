// The Hopper tensor-core GEMM's kernels at the block tile widths besides the powers of two
// (gemm_tc_plan.h's kWgmmaWideTiles: 128 x 192): bf16 / fp16 with the four operand major-ness
// pairs, tf32 K-major. A file of their own, so that the build compiles them beside the others.
#include <cuda.h>

#include "gemm/gemm_tc_plan.h"
#include "gemm/tiles/kernel_sm90.cuh"

namespace lltm_ext::gemm_tiles::sm90 {
namespace {

template <int BN, int DT>
Sm90KernelFn width_kernel(bool a_k, bool b_k) {
  if constexpr (DT == kSm90TF32) {
    return a_k && b_k ? &gemm_sm90_kernel<BN, DT, true, true> : nullptr;
  } else if constexpr (BN % 64 != 0) {
    // Not whole 64-column atoms of an N-major B: B K-major only.
    if (!b_k) return nullptr;
    return a_k ? &gemm_sm90_kernel<BN, DT, true, true> : &gemm_sm90_kernel<BN, DT, false, true>;
  } else {
    if (a_k)
      return b_k ? &gemm_sm90_kernel<BN, DT, true, true> : &gemm_sm90_kernel<BN, DT, true, false>;
    return b_k ? &gemm_sm90_kernel<BN, DT, false, true> : &gemm_sm90_kernel<BN, DT, false, false>;
  }
}

template <int BN>
Sm90KernelFn typed_kernel(int dt, bool a_k, bool b_k, int* smem) {
  *smem = sm90_smem_bytes<BN>(dt);
  return dt == kSm90TF32   ? width_kernel<BN, kSm90TF32>(a_k, b_k)
         : dt == kSm90BF16 ? width_kernel<BN, kSm90BF16>(a_k, b_k)
                           : width_kernel<BN, kSm90F16>(a_k, b_k);
}

}  // namespace

Sm90KernelFn wide_kernel(int bn, int dt, bool a_k, bool b_k, int* smem) {
  using gemm::kWgmmaWideTiles;
  static_assert(kWgmmaWideTiles.size() == 3, "one case below for each of kWgmmaWideTiles");
  switch (bn) {
    case kWgmmaWideTiles[0]:
      return typed_kernel<kWgmmaWideTiles[0]>(dt, a_k, b_k, smem);
    case kWgmmaWideTiles[1]:
      return typed_kernel<kWgmmaWideTiles[1]>(dt, a_k, b_k, smem);
    case kWgmmaWideTiles[2]:
      return typed_kernel<kWgmmaWideTiles[2]>(dt, a_k, b_k, smem);
    default:
      return nullptr;
  }
}

}  // namespace lltm_ext::gemm_tiles::sm90
