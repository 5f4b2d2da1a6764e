// Step 7: register-staged double buffering, in the package's kernel (src/gemm/tiles/,
// STAGES 0). Step 6's tiles (128 x 128 x 8, warp tile 32 x 64, 8 x 8 per thread), but the next K
// step's 16-byte global loads are issued into registers before this step's math and stored to
// the other shared buffer after it: one barrier per K step, load latency hidden behind the math.
#include "common.cuh"

namespace {
namespace gt = lltm_ext::gemm_tiles;
using Step07Tile = gt::Tile<128, 128, 8, 32, 64, 8, 8, 2>;
}  // namespace

GEMM_STEP_API int gemm_step_07(const float* A, const float* B, float* C, int M, int N, int K,
                               int splits, float* workspace, cudaStream_t stream) {
  return gemm_steps::run_package_tiles<Step07Tile>(A, B, C, M, N, K, splits, workspace, stream);
}
