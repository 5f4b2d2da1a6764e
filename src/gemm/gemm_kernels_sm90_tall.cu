// The Hopper tensor-core GEMM's kernels of 256-row block tiles (gemm_tc_plan.h's kWgmmaTallTiles:
// 256 x 152), bf16 / fp16, B K-major, A either way. A file of their own, so that the build
// compiles them beside the others.
#include <cuda.h>

#include "gemm/gemm_tc_plan.h"
#include "gemm/tiles/kernel_sm90.cuh"

namespace lltm_ext::gemm_tiles::sm90 {
namespace {

constexpr int kTallRows = 256;

// B K-major only (152 is not whole 64-column atoms of an N-major B).
template <int BN, int DT>
Sm90KernelFn tall_width_kernel(bool a_k, bool b_k) {
  if (!b_k) return nullptr;
  return a_k ? &gemm_sm90_kernel<BN, DT, true, true, false, kTallRows>
             : &gemm_sm90_kernel<BN, DT, false, true, false, kTallRows>;
}

template <int BN>
Sm90KernelFn tall_typed_kernel(int dt, bool a_k, bool b_k, int* smem) {
  *smem = sm90_smem_bytes<BN, kTallRows>(dt);
  return dt == kSm90BF16  ? tall_width_kernel<BN, kSm90BF16>(a_k, b_k)
         : dt == kSm90F16 ? tall_width_kernel<BN, kSm90F16>(a_k, b_k)
                          : nullptr;
}

}  // namespace

Sm90KernelFn tall_kernel(int bn, int dt, bool a_k, bool b_k, int* smem) {
  using gemm::kWgmmaTallTiles;
  static_assert(kWgmmaTallTiles.size() == 1, "one case below for each of kWgmmaTallTiles");
  return bn == kWgmmaTallTiles[0] ? tall_typed_kernel<kWgmmaTallTiles[0]>(dt, a_k, b_k, smem)
                                  : nullptr;
}

}  // namespace lltm_ext::gemm_tiles::sm90
