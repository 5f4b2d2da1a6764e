// The Hopper tensor-core GEMM's ping-pong kernels (gemm/tiles/kernel_sm90.cuh with PP): one
// consumer warpgroup sums a whole block tile while the other takes the block's next work item, so
// that one's epilogue runs under the other's main loop; 16-bit types, block tiles 128 or 64 rows
// by 128 or 64 columns, the four operand major-ness pairs. A file of their own, so that the build
// compiles them beside the others.
#include <cuda.h>

#include "gemm/tiles/kernel_sm90.cuh"

namespace lltm_ext::gemm_tiles::sm90 {
namespace {

template <int ROWS, int BN, int DT>
Sm90KernelFn layout_kernel(bool a_k, bool b_k) {
  if (a_k) {
    return b_k ? &gemm_sm90_kernel<BN, DT, true, true, ROWS>
               : &gemm_sm90_kernel<BN, DT, true, false, ROWS>;
  }
  return b_k ? &gemm_sm90_kernel<BN, DT, false, true, ROWS>
             : &gemm_sm90_kernel<BN, DT, false, false, ROWS>;
}

template <int ROWS, int BN>
Sm90KernelFn shape_kernel(int dt, bool a_k, bool b_k, int* smem) {
  *smem = Sm90Tile<BN, kSm90BF16, ROWS>::SMEM_BYTES;  // float16's the same
  return dt == kSm90BF16 ? layout_kernel<ROWS, BN, kSm90BF16>(a_k, b_k)
                         : layout_kernel<ROWS, BN, kSm90F16>(a_k, b_k);
}

}  // namespace

Sm90KernelFn pingpong_kernel(int rows, int bn, int dt, bool a_k, bool b_k, int* smem) {
  if (dt != kSm90BF16 && dt != kSm90F16) return nullptr;
  if (rows == 128 && bn == 128) return shape_kernel<128, 128>(dt, a_k, b_k, smem);
  if (rows == 128 && bn == 64) return shape_kernel<128, 64>(dt, a_k, b_k, smem);
  if (rows == 64 && bn == 128) return shape_kernel<64, 128>(dt, a_k, b_k, smem);
  if (rows == 64 && bn == 64) return shape_kernel<64, 64>(dt, a_k, b_k, smem);
  return nullptr;
}

}  // namespace lltm_ext::gemm_tiles::sm90
