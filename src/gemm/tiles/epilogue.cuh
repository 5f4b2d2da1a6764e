// The epilogue of the tiled GEMM kernels: a thread's TM x TN results written to C, to its split's
// slice of the split-K workspace, or to a dense tile of the tail split-K workspace.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "gemm/tiles/tile_position.cuh"
#include "gemm/tiles/vector_access.cuh"

namespace lltm_ext::gemm_tiles {

// Writes the thread's TM x TN results: row-wise 4-element stores, coalesced across the warp.
// A tail split-K block (out_tile >= 0) writes its dense tile in the workspace instead (row length
// BN; elements outside C are left unwritten and never read).
template <typename Cfg, bool A_K, typename Acc, typename Prm>
__device__ __forceinline__ void store_tile(const Prm& p, const Acc (&acc)[Cfg::TM][Cfg::TN],
                                           const BlockPos& pos) {
  using OutT = std::remove_pointer_t<decltype(p.c)>;
  const bool dense = pos.out_tile >= 0;
  // The block's element (m0, n0) and the row stride around it.
  OutT* const c =
      dense ? p.tail_c + static_cast<int64_t>(pos.out_tile) * (Cfg::BM * Cfg::BN)
            : p.c + static_cast<int64_t>(blockIdx.z) * p.split_stride + pos.m0 * p.ldc + pos.n0;
  const int64_t ldc = dense ? int64_t(Cfg::BN) : p.ldc;
  const bool vec = dense || p.vec_c;
  const int m_lim = p.M - pos.m0, n_lim = p.N - pos.n0;
  const int tm = thread_m<Cfg, A_K>(), tn = thread_n<Cfg>();
#pragma unroll
  for (int i = 0; i < Cfg::TM; ++i) {
    const int row = tm + row_offset<Cfg, A_K>(i);
    if (row >= m_lim) continue;
    OutT* const c_row = c + row * ldc;
#pragma unroll
    for (int j = 0; j < Cfg::TN / 4; ++j) {
      const int col = tn + j * Cfg::TWN * 4;
      const Acc* v = &acc[i][j * 4];
      if (vec && col + 3 < n_lim) {
        store4_global(c_row + col, v);
      } else {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          if (col + q < n_lim) c_row[col + q] = tile_cast<OutT>(v[q]);
        }
      }
    }
  }
}

}  // namespace lltm_ext::gemm_tiles
