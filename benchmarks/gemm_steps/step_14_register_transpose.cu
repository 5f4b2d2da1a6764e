// Step 14 (the shipped path): step 10's tile, but row-major A is loaded with 16-byte loads into
// registers one K step ahead and stored transposed (As[k][m]) into the free stage of the cp.async
// ring after the current step's math (KPath::kRegisters). The math loop is then the one of a
// column-major A, at the cost of 8 staging registers and 8 4-byte shared stores per thread and
// K step. Step 11 (choosing a config and K splits per shape) and step 12 (tail split-K) are
// launch schedules on top of this kernel; lltm_ext.gemm runs them all.
#include "common.cuh"

namespace {
namespace gt = lltm_ext::gemm_tiles;
using Step14Tile = gt::Tile<64, 128, 16, 32, 64, 8, 8, 3, 3, gt::KPath::kRegisters>;
}  // namespace

GEMM_STEP_API int gemm_step_14(const float* A, const float* B, float* C, int M, int N, int K,
                               int splits, float* workspace, cudaStream_t stream) {
  return gemm_steps::run_package_tiles<Step14Tile>(A, B, C, M, N, K, splits, workspace, stream);
}
