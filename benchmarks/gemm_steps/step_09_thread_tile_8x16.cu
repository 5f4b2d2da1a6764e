// Step 9: bigger thread tiles and K steps. 128 x 256 x 16 block tile, 8 x 16 outputs per thread
// (128 FMAs per 6 16-byte shared loads), BK 16 (half the barriers per K), 3 cp.async stages;
// one block per SM. Its 128 x 256 tiles leave most SMs idle on small problems.
#include "common.cuh"

namespace {
namespace gt = lltm_ext::gemm_tiles;
using Step09Tile = gt::Tile<128, 256, 16, 32, 128, 8, 16, 1, 3>;
}  // namespace

GEMM_STEP_API int gemm_step_09(const float* A, const float* B, float* C, int M, int N, int K,
                               int splits, float* workspace, cudaStream_t stream) {
  return gemm_steps::run_package_tiles<Step09Tile>(A, B, C, M, N, K, splits, workspace, stream);
}
