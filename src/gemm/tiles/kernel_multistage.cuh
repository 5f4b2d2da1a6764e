// The multistage GEMM kernel (Cfg::STAGES >= 2, sm_80 and newer; a trap below): a cp.async ring
// of shared buffers, a K-contiguous operand through registers or async copies as its KPath says,
// then the epilogue.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "gemm/tiles/cp_async.cuh"
#include "gemm/tiles/epilogue.cuh"
#include "gemm/tiles/mma_k_step.cuh"
#include "gemm/tiles/operand_tile.cuh"
#include "gemm/tiles/operand_tile_async.cuh"
#include "gemm/tiles/tile_position.cuh"
#include "gemm/tiles/tile_types.h"

namespace lltm_ext::gemm_tiles {

// C = A B on one BM x BN tile per block; cp.async ring of Cfg::STAGES shared buffers, T = Acc
// (float32 or float64). Iteration t waits for step t, passes one barrier (after which step t - 1's
// buffer is free), starts the copy of step t + STAGES - 1 into it, then does step t's math.
// An operand that goes through registers (KPath::kRegisters, K-contiguous) has its part of that
// copy as a register load issued before the math, stored (transposed) into the free buffer after.
template <typename Cfg, typename T, typename OutT, bool A_KCONTIG, bool B_KCONTIG>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS)
    gemm_async_kernel(const Params<T, OutT> p) {
#ifdef LLTM_EXT_GEMM_NO_CP_ASYNC
  __trap();  // never launched on these architectures (see LLTM_EXT_GEMM_NO_CP_ASYNC above)
#else
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, S = Cfg::STAGES;
  constexpr bool A_K = Cfg::A_SMEM_K && A_KCONTIG;  // As[m][k] instead of As[k][m]
  constexpr bool A_REG = Cfg::A_PATH == KPath::kRegisters && A_KCONTIG;  // through registers
  constexpr bool B_REG = Cfg::B_PATH == KPath::kRegisters && B_KCONTIG;
  constexpr int LDA = A_K ? Cfg::LDK_S : Cfg::LDA_S;
  constexpr uint32_t A_STAGE = Cfg::A_TILE * sizeof(T), B_STAGE = Cfg::B_TILE * sizeof(T);
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* const As = reinterpret_cast<T*>(smem_raw);  // [S][A_TILE]
  T* const Bs = As + S * Cfg::A_TILE;            // [S][BK][LDB_S]
  const uint32_t as_addr = shared_address(As), bs_addr = shared_address(Bs);
  const BlockPos pos = block_position<Cfg>(p);
  // Kept in shared memory for the tail loop and the epilogue, so that no register holds it across
  // the main loop (which needs all 128 in the 2-blocks-per-SM configs).
  __shared__ BlockPos saved_pos;
  if (threadIdx.x == 0) saved_pos = pos;

  const T* a_origin =
      A_KCONTIG ? p.a + pos.m0 * p.lda + pos.k_begin : p.a + pos.k_begin * p.lda + pos.m0;
  const T* b_origin =
      B_KCONTIG ? p.b + pos.n0 * p.ldb + pos.k_begin : p.b + pos.k_begin * p.ldb + pos.n0;
  using ATile = std::conditional_t<
      A_REG, OperandTile<T, T, BM, BK, Cfg::THREADS, true, LDA>,
      AsyncOperandTile<T, BM, BK, Cfg::THREADS, A_KCONTIG, LDA, A_KCONTIG && !A_K>>;
  ATile a_tile(a_origin, p.lda);
  using BTile = std::conditional_t<
      B_REG, OperandTile<T, T, BN, BK, Cfg::THREADS, true, Cfg::LDB_S>,
      AsyncOperandTile<T, BN, BK, Cfg::THREADS, B_KCONTIG, Cfg::LDB_S, B_KCONTIG>>;
  BTile b_tile(b_origin, p.ldb);
  // This thread's first A element (row for As[m][k], column for As[k][m]) and B column.
  const int a_frag = thread_m<Cfg, A_K>() * (A_K ? LDA : 1), b_frag = thread_n<Cfg>();

  // Copies K step `t` into its stage (nothing past the last step; the group is still committed,
  // so that group counts stay uniform). FAST: step t is a full, in-bounds, vector one.
  auto copy_step = [&](const BlockPos& at, int t, int stage, auto fast) {
    if constexpr (!A_REG || !B_REG) {
      constexpr bool FAST = decltype(fast)::value;
      if (FAST || t < at.k_tiles) {
        const int k_left = at.k_end - (at.k_begin + t * BK);
        if constexpr (!A_REG) {
          const int m_lim = p.M - at.m0;
          const bool a_fast = FAST || (p.vec_a && m_lim >= BM && k_left >= BK);
          a_tile.copy(as_addr + stage * A_STAGE, p.lda, a_fast, p.vec_a, m_lim, k_left, p.a);
        }
        if constexpr (!B_REG) {
          const int n_lim = p.N - at.n0;
          const bool b_fast = FAST || (p.vec_b && n_lim >= BN && k_left >= BK);
          b_tile.copy(bs_addr + stage * B_STAGE, p.ldb, b_fast, p.vec_b, n_lim, k_left, p.b);
        }
      }
    }
    cp_async_commit();
  };

  T acc[Cfg::TM][Cfg::TN];
#pragma unroll
  for (int i = 0; i < Cfg::TM; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::TN; ++j) acc[i][j] = T(0);

  // Operands through registers: load_regs loads K step t into the tiles' registers (false past
  // the last step: nothing loaded); store_regs writes them into a stage.
  auto load_regs = [&](const BlockPos& at, int t, auto fast) {
    if constexpr (A_REG || B_REG) {
      constexpr bool FAST = decltype(fast)::value;
      if (!FAST && t >= at.k_tiles) return false;
      const int k_left = at.k_end - (at.k_begin + t * BK);
      if constexpr (A_REG) {
        const int m_lim = p.M - at.m0;
        a_tile.load(p.lda, FAST || (p.vec_a && m_lim >= BM && k_left >= BK), p.vec_a, m_lim,
                    k_left);
        a_tile.advance(p.lda);
      }
      if constexpr (B_REG) {
        const int n_lim = p.N - at.n0;
        b_tile.load(p.ldb, FAST || (p.vec_b && n_lim >= BN && k_left >= BK), p.vec_b, n_lim,
                    k_left);
        b_tile.advance(p.ldb);
      }
      return true;
    } else {
      return false;
    }
  };
  auto store_regs = [&](int stage) {
    if constexpr (A_REG) a_tile.store(As + stage * Cfg::A_TILE);
    if constexpr (B_REG) b_tile.store(Bs + stage * Cfg::B_TILE);
  };

#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (load_regs(pos, s, std::false_type{})) store_regs(s);
    copy_step(pos, s, s, std::false_type{});
  }
  __syncthreads();  // saved_pos (and the stages written from registers) are written
  int read_stage = 0, write_stage = S - 1;
  auto step = [&](const BlockPos& at, int t, auto fast) {
    cp_async_wait<S - 2>();  // this thread's copies of step t have landed ...
    __syncthreads();         // ... and everyone's; step t - 1's buffer is no longer read
    const bool loaded = load_regs(at, t + S - 1, fast);
    copy_step(at, t + S - 1, write_stage, fast);
    mma_k_step<Cfg, A_K>(acc, As + read_stage * Cfg::A_TILE + a_frag,
                         Bs + read_stage * Cfg::B_TILE + b_frag);
    if (loaded) store_regs(write_stage);
    read_stage = read_stage == S - 1 ? 0 : read_stage + 1;
    write_stage = write_stage == S - 1 ? 0 : write_stage + 1;
  };
  // Interior blocks: steps whose copies are full run without any bounds logic.
  int t = 0;
  if (p.vec_a && p.vec_b && p.M - pos.m0 >= BM && p.N - pos.n0 >= BN) {
    const int fast_end = (pos.k_end - pos.k_begin) / BK - (S - 1);
    for (; t < fast_end; ++t) step(pos, t, std::true_type{});
  }
  // The rest (and the epilogue) work from the shared copy of the block's position.
  const BlockPos tail = saved_pos;
  for (; t < tail.k_tiles; ++t) step(tail, t, std::false_type{});
  store_tile<Cfg, A_K>(p, acc, tail);
#endif
}

}  // namespace lltm_ext::gemm_tiles
