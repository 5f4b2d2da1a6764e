// Step 8: a cp.async pipeline of 4 shared buffers (STAGES 4) on step 7's tiles. Row-major A is
// transposed on its way into shared memory by element-wise 4-byte async copies
// (KPath::kAsyncTranspose), each of which costs an L1 wavefront per sector: this step is slower
// than step 7, which is why step 14 exists.
#include "common.cuh"

namespace {
namespace gt = lltm_ext::gemm_tiles;
using Step08Tile = gt::Tile<128, 128, 8, 32, 64, 8, 8, 2, 4>;
}  // namespace

GEMM_STEP_API int gemm_step_08(const float* A, const float* B, float* C, int M, int N, int K,
                               int splits, float* workspace, cudaStream_t stream) {
  return gemm_steps::run_package_tiles<Step08Tile>(A, B, C, M, N, K, splits, workspace, stream);
}
