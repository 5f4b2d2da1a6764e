// Step 10: 8 x 8 per thread on a 64 x 128 x 16 tile, 3 blocks (12 warps) per SM, and A kept
// K-major in shared memory (KPath::kKMajor: 16-byte async copies, fragments read 4 k at a time
// with a row mapping that keeps a warp's 16-byte shared loads conflict-free).
#include "common.cuh"

namespace {
namespace gt = lltm_ext::gemm_tiles;
using Step10Tile = gt::Tile<64, 128, 16, 32, 64, 8, 8, 3, 3, gt::KPath::kKMajor>;
}  // namespace

GEMM_STEP_API int gemm_step_10(const float* A, const float* B, float* C, int M, int N, int K,
                               int splits, float* workspace, cudaStream_t stream) {
  return gemm_steps::run_package_tiles<Step10Tile>(A, B, C, M, N, K, splits, workspace, stream);
}
