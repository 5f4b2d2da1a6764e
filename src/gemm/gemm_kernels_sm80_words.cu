// The sm_80+ tensor-core GEMM for operands whose rows are 4-byte aligned (gemm_launchers.h's
// launch_mma_words): the 4-byte cp.async instantiations of gemm/tiles/kernel_sm80.cuh (bf16 /
// fp16 / tf32, the four operand major-ness pairs, the 64 x 64 and 128 x 128 block tiles), in a
// file of their own so that nvcc compiles them beside the others.
#include "gemm/gemm_mma_launch.cuh"

namespace lltm_ext::gemm {

cudaError_t launch_mma_words(const MmaGemm& g, cudaStream_t stream) {
  if (g.M > INT_MAX || g.N > INT_MAX || g.K > INT_MAX) return cudaErrorInvalidValue;
  constexpr int kWords = gemm_tiles::mma::kLoadWords;
  if (g.tile == 128) return mma_launch::launch_tile<mma_launch::Tile128, kWords>(g, stream);
  if (g.tile == 64) return mma_launch::launch_tile<mma_launch::Tile64, kWords>(g, stream);
  return cudaErrorInvalidValue;
}

}  // namespace lltm_ext::gemm
