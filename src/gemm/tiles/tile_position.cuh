// Where a thread block and a thread work: the block's tile of C and range of k (block order
// grouped for L2 reuse, split-K, tail split-K), and a thread's rows and columns in the block tile.
#pragma once

#include <cuda_runtime.h>

#include "gemm/tiles/tile_types.h"

namespace lltm_ext::gemm_tiles {

// The block's tile of C (groups of kGroupM tile rows, column-major inside a group; blockIdx.x)
// and its range of k (split blockIdx.z).
// out_tile: -1 when the block writes C (or its split's slice of the split-K workspace), else
// the index of its dense BM x BN tile in the tail split-K workspace.
struct BlockPos {
  int m0, n0, k_begin, k_end, k_tiles, out_tile;
};

// Origin (m0, n0) of tile `t` in block order (host and device: the tail reduction uses it too).
template <int BM, int BN>
__host__ __device__ __forceinline__ void tile_origin(int M, int N, int t, int& m0, int& n0) {
  const int tiles_m = (M + BM - 1) / BM;
  const int tiles_n = (N + BN - 1) / BN;
  const int per_group = kGroupM * tiles_n;
  const int first_m = (t / per_group) * kGroupM;
  const int group_m = tiles_m - first_m < kGroupM ? tiles_m - first_m : kGroupM;
  m0 = (first_m + (t % per_group) % group_m) * BM;
  n0 = ((t % per_group) / group_m) * BN;
}

template <typename Cfg, typename Prm>
__device__ __forceinline__ BlockPos block_position(const Prm& p) {
  int bid = static_cast<int>(blockIdx.x);
  int split = static_cast<int>(blockIdx.z), k_split = p.k_split;
  BlockPos b;
  b.out_tile = -1;
  if (p.tail_splits > 0 && bid >= p.main_tiles) {  // tail split-K block
    b.out_tile = bid - p.main_tiles;
    split = b.out_tile / p.tail_tiles;
    bid = p.main_tiles + (b.out_tile - split * p.tail_tiles);
    k_split = p.tail_k_split;
  }
  tile_origin<Cfg::BM, Cfg::BN>(p.M, p.N, bid, b.m0, b.n0);
  b.k_begin = split * k_split;
  b.k_end = min(p.K, b.k_begin + k_split);
  b.k_tiles = b.k_end > b.k_begin ? (b.k_end - b.k_begin + Cfg::BK - 1) / Cfg::BK : 0;
  return b;
}

// This thread's first m and n within the block tile. Its TM rows are A_K ? a_row + i * TWM (a
// K-major A tile: consecutive threads read consecutive rows, each 4 k at once) : in 4 x 4 blocks,
// thread_m() + (i / 4) * TWM * 4 + i % 4; its TN columns likewise in blocks TWN * 4 apart.
template <typename Cfg, bool A_K>
__device__ __forceinline__ int thread_m() {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  return (warp / Cfg::WARPS_N) * Cfg::WM + (lane / Cfg::TWN) * (A_K ? 1 : 4);
}
template <typename Cfg>
__device__ __forceinline__ int thread_n() {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  return (warp % Cfg::WARPS_N) * Cfg::WN + (lane % Cfg::TWN) * 4;
}
template <typename Cfg, bool A_K>
__device__ __forceinline__ constexpr int row_offset(int i) {
  return A_K ? i * Cfg::TWM : (i / 4) * Cfg::TWM * 4 + i % 4;
}

}  // namespace lltm_ext::gemm_tiles
