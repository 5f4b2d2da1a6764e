// The Hopper tensor-core GEMM's ping-pong kernels (gemm/tiles/kernel_sm90.cuh with PP): one
// consumer warpgroup sums a whole 128 x BN block tile while the other takes the block's next work
// item, so that one's epilogue runs under the other's main loop; 16-bit types, tiles 128 x 128
// and 128 x 64, the four operand major-ness pairs. A file of their own, so that the build
// compiles them beside the others.
#include <cuda.h>

#include "gemm/tiles/kernel_sm90.cuh"

namespace lltm_ext::gemm_tiles::sm90 {
namespace {

template <int BN, int DT>
Sm90KernelFn layout_kernel(bool a_k, bool b_k) {
  if (a_k) {
    return b_k ? &gemm_sm90_kernel<BN, DT, true, true, true>
               : &gemm_sm90_kernel<BN, DT, true, false, true>;
  }
  return b_k ? &gemm_sm90_kernel<BN, DT, false, true, true>
             : &gemm_sm90_kernel<BN, DT, false, false, true>;
}

template <int BN>
Sm90KernelFn width_kernel(int dt, bool a_k, bool b_k, int* smem) {
  *smem = sm90_smem_bytes<BN>(dt);
  return dt == kSm90BF16 ? layout_kernel<BN, kSm90BF16>(a_k, b_k)
                         : layout_kernel<BN, kSm90F16>(a_k, b_k);
}

}  // namespace

Sm90KernelFn pingpong_kernel(int bn, int dt, bool a_k, bool b_k, int* smem) {
  if (dt != kSm90BF16 && dt != kSm90F16) return nullptr;
  switch (bn) {
    case 128:
      return width_kernel<128>(dt, a_k, b_k, smem);
    case 64:
      return width_kernel<64>(dt, a_k, b_k, smem);
    default:
      return nullptr;
  }
}

}  // namespace lltm_ext::gemm_tiles::sm90
