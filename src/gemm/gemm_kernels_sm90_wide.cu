// The Hopper tensor-core GEMM's kernels at the block tile widths besides the powers of two
// (gemm_tc_plan.h's kWgmmaWideTiles: 128 x 168, 192, 224): bf16 / fp16 with a K-major B (either
// A), and an N-major B at widths of whole 64-column atoms (192); tf32 K-major. A file of their
// own, so that the build compiles them beside the others.
#include <cuda.h>

#include "gemm/gemm_tc_plan.h"
#include "gemm/tiles/kernel_sm90.cuh"

namespace lltm_ext::gemm_tiles::sm90 {
namespace {

template <int BN, int DT>
Sm90KernelFn width_kernel(bool a_k, bool b_k) {
  if constexpr (DT == kSm90TF32) {
    return a_k && b_k ? &gemm_sm90_kernel<BN, DT, true, true> : nullptr;
  } else {
    if (b_k)
      return a_k ? &gemm_sm90_kernel<BN, DT, true, true> : &gemm_sm90_kernel<BN, DT, false, true>;
    if constexpr (BN % 64 == 0) {  // an N-major B: whole (64 N) x (64 K) atoms a stage
      return a_k ? &gemm_sm90_kernel<BN, DT, true, false> : &gemm_sm90_kernel<BN, DT, false, false>;
    }
    return nullptr;
  }
}

template <int BN>
Sm90KernelFn typed_kernel(int dt, bool a_k, bool b_k, int* smem) {
  *smem = Sm90Tile<BN>::SMEM_BYTES;
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
