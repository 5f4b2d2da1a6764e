// The Hopper tensor-core GEMM's Stream-K kernels (gemm/tiles/kernel_sm90.cuh with SK): the
// 128 x 256 tile's last, partial round cut into equal ranges of K steps, bf16 / fp16 with the four
// operand major-ness pairs, tf32 K-major. A file of their own, so that the build compiles them
// beside the others.
#include <cuda.h>

#include "gemm/tiles/kernel_sm90.cuh"

namespace lltm_ext::gemm_tiles::sm90 {
namespace {

template <int DT>
Sm90KernelFn typed_stream_k_kernel(bool a_k, bool b_k) {
  constexpr int BN = 256;
  if constexpr (DT == kSm90TF32) {
    return a_k && b_k ? &gemm_sm90_kernel<BN, DT, true, true, true> : nullptr;
  } else {
    if (a_k) {
      return b_k ? &gemm_sm90_kernel<BN, DT, true, true, true>
                 : &gemm_sm90_kernel<BN, DT, true, false, true>;
    }
    return b_k ? &gemm_sm90_kernel<BN, DT, false, true, true>
               : &gemm_sm90_kernel<BN, DT, false, false, true>;
  }
}

}  // namespace

Sm90KernelFn stream_k_kernel(int dt, bool a_k, bool b_k) {
  return dt == kSm90TF32   ? typed_stream_k_kernel<kSm90TF32>(a_k, b_k)
         : dt == kSm90BF16 ? typed_stream_k_kernel<kSm90BF16>(a_k, b_k)
         : dt == kSm90F16  ? typed_stream_k_kernel<kSm90F16>(a_k, b_k)
                           : nullptr;
}

}  // namespace lltm_ext::gemm_tiles::sm90
