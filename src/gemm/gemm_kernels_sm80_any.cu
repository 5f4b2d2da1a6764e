// The sm_80+ tensor-core GEMM for operands of any alignment (gemm_launchers.h's
// launch_mma_unaligned): the register-staged instantiations of gemm/tiles/kernel_sm80.cuh
// (bf16 / fp16 / tf32, the four operand major-ness pairs, the 64 x 64 block tile), in a file of
// their own so that nvcc compiles them beside the aligned ones.
#include "gemm/gemm_mma_launch.cuh"

namespace lltm_ext::gemm {

cudaError_t launch_mma_unaligned(const MmaGemm& g, cudaStream_t stream) {
  if (g.M > INT_MAX || g.N > INT_MAX || g.K > INT_MAX) return cudaErrorInvalidValue;
  if (g.tile != 64) return cudaErrorInvalidValue;
  return mma_launch::launch_tile<mma_launch::Tile64, gemm_tiles::mma::kLoadRegisters>(g, stream);
}

}  // namespace lltm_ext::gemm
