// The register-staged GEMM kernel (Cfg::STAGES == 0, any architecture): double-buffered shared
// tiles filled through registers one K step ahead of the math, then the epilogue.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "gemm/tiles/epilogue.cuh"
#include "gemm/tiles/mma_k_step.cuh"
#include "gemm/tiles/operand_tile.cuh"
#include "gemm/tiles/tile_position.cuh"
#include "gemm/tiles/tile_types.h"

namespace lltm_ext::gemm_tiles {

// C = A B on one BM x BN tile per block; register-staged double buffering (Cfg::STAGES == 0).
template <typename Cfg, typename T, typename Acc, typename OutT, bool A_KCONTIG, bool B_KCONTIG>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS)
    gemm_tile_kernel(const Params<T, OutT> p) {
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK;
  constexpr int LDA_S = Cfg::LDA_S, LDB_S = Cfg::LDB_S;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Acc* const As = reinterpret_cast<Acc*>(smem_raw);  // [2][BK][LDA_S]
  Acc* const Bs = As + 2 * BK * LDA_S;               // [2][BK][LDB_S]
  const BlockPos pos = block_position<Cfg>(p);

  const T* a_origin =
      A_KCONTIG ? p.a + pos.m0 * p.lda + pos.k_begin : p.a + pos.k_begin * p.lda + pos.m0;
  const T* b_origin =
      B_KCONTIG ? p.b + pos.n0 * p.ldb + pos.k_begin : p.b + pos.k_begin * p.ldb + pos.n0;
  OperandTile<T, Acc, BM, BK, Cfg::THREADS, A_KCONTIG, LDA_S> a_tile(a_origin, p.lda);
  OperandTile<T, Acc, BN, BK, Cfg::THREADS, B_KCONTIG, LDB_S> b_tile(b_origin, p.ldb);
  const int m_lim = p.M - pos.m0, n_lim = p.N - pos.n0;
  // Interior block tiles (the common case) load whole vectors without bounds checks.
  const bool a_fast = p.vec_a && m_lim >= BM;
  const bool b_fast = p.vec_b && n_lim >= BN;
  const int a_frag = thread_m<Cfg, false>(), b_frag = thread_n<Cfg>();

  Acc acc[Cfg::TM][Cfg::TN];
#pragma unroll
  for (int i = 0; i < Cfg::TM; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::TN; ++j) acc[i][j] = Acc(0);

  if (pos.k_tiles > 0) {
    const int k_left = pos.k_end - pos.k_begin;
    a_tile.load(p.lda, a_fast && k_left >= BK, p.vec_a, m_lim, k_left);
    b_tile.load(p.ldb, b_fast && k_left >= BK, p.vec_b, n_lim, k_left);
    a_tile.store(As);
    b_tile.store(Bs);
    __syncthreads();
  }
  // Step t: loads of step t + 1 (global -> registers, in flight during step t's math), math,
  // stores into the other buffer (last read before the previous barrier), barrier. FAST: step
  // t + 1 is a full, in-bounds, vector one (no bounds checks).
  auto step = [&](int t, auto fast) {
    constexpr bool FAST = decltype(fast)::value;
    const int cur = t & 1;
    const bool more = FAST || t + 1 < pos.k_tiles;
    if (more) {
      const int k_left = pos.k_end - (pos.k_begin + (t + 1) * BK);
      a_tile.advance(p.lda);
      b_tile.advance(p.ldb);
      a_tile.load(p.lda, FAST || (a_fast && k_left >= BK), p.vec_a, m_lim, k_left);
      b_tile.load(p.ldb, FAST || (b_fast && k_left >= BK), p.vec_b, n_lim, k_left);
    }
    mma_k_step<Cfg, false>(acc, As + cur * BK * LDA_S + a_frag, Bs + cur * BK * LDB_S + b_frag);
    if (more) {
      a_tile.store(As + (cur ^ 1) * BK * LDA_S);
      b_tile.store(Bs + (cur ^ 1) * BK * LDB_S);
    }
    __syncthreads();
  };
  // One general loop: a second, check-free copy of it (as in the cp.async kernel) pushes the
  // 2-blocks-per-SM configs over their 128 registers.
  for (int t = 0; t < pos.k_tiles; ++t) step(t, std::false_type{});
  store_tile<Cfg, false>(p, acc, pos);
}

}  // namespace lltm_ext::gemm_tiles
