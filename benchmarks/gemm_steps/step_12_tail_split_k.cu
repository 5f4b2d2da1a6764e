// Step 12: tail split-K on step 10's tile. The tiles that fill whole waves (blocks per SM x SMs
// slots) run as before; the tiles past the last full wave, the tail, are each split along K into
// `splits` parts (default 4) that run as extra blocks of the same launch and write dense BM x BN
// partial tiles to `workspace`; a second kernel on the stream sums them into C in split order
// (deterministic). This removes the wave quantization of a mostly empty last wave. Step 11 (the
// package picking a config and whole-problem K splits per shape) has no kernel of its own:
// bench.py times it as lltm_ext.gemm.
#include "common.cuh"

namespace {
namespace gt = lltm_ext::gemm_tiles;
using Step12Tile = gt::Tile<64, 128, 16, 32, 64, 8, 8, 3, 3, gt::KPath::kKMajor>;
constexpr int kDefaultTailSplits = 4;
}  // namespace

GEMM_STEP_API int gemm_step_12(const float* A, const float* B, float* C, int M, int N, int K,
                               int splits, float* workspace, cudaStream_t stream) {
  using Cfg = Step12Tile;
  const auto kernel = gt::kernel_of<Cfg, float, float, float, true, false>();
  cudaError_t err = gt::allow_smem<Cfg, float>(kernel);
  int device = 0, sms = 0, per_sm = 0;
  if (err == cudaSuccess) err = cudaGetDevice(&device);
  if (err == cudaSuccess)
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err == cudaSuccess) {
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Cfg::THREADS,
                                                        Cfg::smem_bytes<float>());
  }
  if (err != cudaSuccess) return static_cast<int>(err);

  gt::Params<float, float> p = gemm_steps::row_major_params<Cfg>(A, B, C, M, N, K, 1);
  const int tiles = static_cast<int>(gt::tile_count<Cfg>(M, N));
  const int slots = per_sm * sms;
  const int tail_tiles = slots > 0 && tiles > slots ? tiles % slots : 0;
  const int want = splits > 1 ? splits : kDefaultTailSplits;
  const int tail_k_split = ((K + want - 1) / want + Cfg::BK - 1) / Cfg::BK * Cfg::BK;
  const int tail_splits = (K + tail_k_split - 1) / tail_k_split;
  if (tail_tiles == 0 || tail_splits < 2) {  // whole waves already, or K too short to split
    return static_cast<int>(gt::launch_tiles<Cfg, float, float, float, true, false>(p, 1, stream));
  }
  p.tail_c = workspace;  // tail_splits x tail_tiles dense BM x BN tiles
  p.main_tiles = tiles - tail_tiles;
  p.tail_tiles = tail_tiles;
  p.tail_splits = tail_splits;
  p.tail_k_split = tail_k_split;
  err = gt::launch_tiles<Cfg, float, float, float, true, false>(p, 1, stream);
  if (err != cudaSuccess) return static_cast<int>(err);
  gt::tail_reduce_kernel<Cfg::BM, Cfg::BN, float, float><<<2 * sms, 256, 0, stream>>>(
      workspace, C, M, N, N, p.main_tiles, tail_tiles, tail_splits, true);
  return static_cast<int>(cudaGetLastError());
}
