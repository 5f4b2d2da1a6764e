// The Hopper tensor-core GEMM's kernels that store a 16-bit C transposed through TMA (the swapped
// a.T @ b.T: A K-major, B N-major; docs/decisions.md#wgmma-swap) at the 128-row tiles' widths an
// N-major B takes. A file of their own, so that the build compiles them beside the others.
#include <cuda.h>

#include "gemm/tiles/kernel_sm90.cuh"

namespace lltm_ext::gemm_tiles::sm90 {
namespace {

template <int BN>
Sm90KernelFn trans_typed_kernel(int dt, int* smem) {
  *smem = sm90_smem_bytes<BN>(dt);
  return dt == kSm90BF16  ? &gemm_sm90_kernel<BN, kSm90BF16, true, false, false, 128, true>
         : dt == kSm90F16 ? &gemm_sm90_kernel<BN, kSm90F16, true, false, false, 128, true>
                          : nullptr;
}

}  // namespace

Sm90KernelFn trans_kernel(int bn, int dt, bool a_k, bool b_k, int* smem) {
  if (!a_k || b_k) return nullptr;
  switch (bn) {
    case 64:
      return trans_typed_kernel<64>(dt, smem);
    case 128:
      return trans_typed_kernel<128>(dt, smem);
    case 192:
      return trans_typed_kernel<192>(dt, smem);
    case 256:
      return trans_typed_kernel<256>(dt, smem);
    default:
      return nullptr;
  }
}

}  // namespace lltm_ext::gemm_tiles::sm90
