// The multistage GEMM kernel (Cfg::STAGES >= 2, sm_80 and newer; a trap below): a cp.async ring
// of shared buffers, a K-contiguous operand through registers or async copies as its KPath says,
// then the epilogue.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "common/cp_async.cuh"
#include "gemm/tiles/epilogue.cuh"
#include "gemm/tiles/mma_k_step.cuh"
#include "gemm/tiles/operand_tile.cuh"
#include "gemm/tiles/operand_tile_async.cuh"
#include "gemm/tiles/tile_position.cuh"
#include "gemm/tiles/tile_types.h"

namespace lltm_ext::gemm_tiles {

// cp.async, shared with other ops (common/cp_async.cuh).
using ::lltm_ext::cuda::cp_async;
using ::lltm_ext::cuda::cp_async_commit;
using ::lltm_ext::cuda::cp_async_wait;
using ::lltm_ext::cuda::shared_address;

// C = A B on one BM x BN tile per block; cp.async ring of Cfg::STAGES shared buffers, T = Acc
// (float32 or float64). Iteration t waits for step t, passes one barrier (after which step t - 1's
// buffer is free), starts the copy of step t + STAGES - 1 into it, then does step t's math.
// An operand that goes through registers (KPath::kRegisters, K-contiguous) has its part of that
// copy as a register load issued before the math, stored (transposed) into the free buffer after.
// With KPath::kShared the K-contiguous operands take a staging ring instead (the branch below
// says how), the MN-contiguous one keeps its ring of K-major tiles, and an operand through
// registers (NtPaths::kARegisters) a pair of K-major tiles.
template <typename Cfg, typename T, typename OutT, bool A_KCONTIG, bool B_KCONTIG>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS)
    gemm_async_kernel(const Params<T, OutT> p) {
#ifdef LLTM_EXT_NO_CP_ASYNC
  __trap();  // never launched on these architectures (see LLTM_EXT_NO_CP_ASYNC above)
#else
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, S = Cfg::STAGES;
  constexpr KPath A_P = Cfg::a_path(A_KCONTIG, B_KCONTIG), B_P = Cfg::b_path(A_KCONTIG, B_KCONTIG);
  constexpr bool A_K = A_P == KPath::kKMajor && A_KCONTIG;       // As[m][k] instead of As[k][m]
  constexpr bool A_REG = A_P == KPath::kRegisters && A_KCONTIG;  // through registers
  constexpr bool B_REG = B_P == KPath::kRegisters && B_KCONTIG;
  constexpr bool A_SH = A_P == KPath::kShared && A_KCONTIG;  // through a staging tile
  constexpr bool B_SH = B_P == KPath::kShared && B_KCONTIG;
  constexpr int LDA = A_K ? Cfg::LDK_S : Cfg::LDA_S;
  constexpr uint32_t A_STAGE = Cfg::A_TILE * sizeof(T), B_STAGE = Cfg::B_TILE * sizeof(T);
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // Each operand's region (Tile::a_region): [S][X_TILE] K-major tiles, or with a staging tile
  // [2][X_TILE] K-major tiles, then [S][MN][LDR_S] staging tiles.
  T* const As = reinterpret_cast<T*>(smem_raw);
  T* const Bs = As + Cfg::a_region(A_KCONTIG, B_KCONTIG);
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
      AsyncOperandTile<T, BM, BK, Cfg::THREADS, A_KCONTIG, A_SH ? Cfg::LDR_S : LDA,
                       A_KCONTIG && !A_K && !A_SH, A_SH>>;
  ATile a_tile(a_origin, p.lda);
  using BTile = std::conditional_t<
      B_REG, OperandTile<T, T, BN, BK, Cfg::THREADS, true, Cfg::LDB_S>,
      AsyncOperandTile<T, BN, BK, Cfg::THREADS, B_KCONTIG, B_SH ? Cfg::LDR_S : Cfg::LDB_S,
                       B_KCONTIG && !B_SH, B_SH>>;
  BTile b_tile(b_origin, p.ldb);
  // This thread's first A element (row for As[m][k], column for As[k][m]) and B column.
  const int a_frag = thread_m<Cfg, A_K>() * (A_K ? LDA : 1), b_frag = thread_n<Cfg>();

  // Async copies of K step `t` of A, resp. B, to shared address `dst` (nothing past the last
  // step). FAST: step t is a full, in-bounds, vector one.
  auto copy_a = [&](const BlockPos& at, int t, uint32_t dst, auto fast) {
    if constexpr (!A_REG) {
      constexpr bool FAST = decltype(fast)::value;
      if (FAST || t < at.k_tiles) {
        const int k_left = at.k_end - (at.k_begin + t * BK), m_lim = p.M - at.m0;
        const bool a_fast = FAST || (p.vec_a && m_lim >= BM && k_left >= BK);
        a_tile.copy(dst, p.lda, a_fast, p.vec_a, m_lim, k_left, p.a);
      }
    }
  };
  auto copy_b = [&](const BlockPos& at, int t, uint32_t dst, auto fast) {
    if constexpr (!B_REG) {
      constexpr bool FAST = decltype(fast)::value;
      if (FAST || t < at.k_tiles) {
        const int k_left = at.k_end - (at.k_begin + t * BK), n_lim = p.N - at.n0;
        const bool b_fast = FAST || (p.vec_b && n_lim >= BN && k_left >= BK);
        b_tile.copy(dst, p.ldb, b_fast, p.vec_b, n_lim, k_left, p.b);
      }
    }
  };

  T acc[Cfg::TM][Cfg::TN];
#pragma unroll
  for (int i = 0; i < Cfg::TM; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::TN; ++j) acc[i][j] = T(0);

  // Operands through registers: load_regs loads K step t into the tiles' registers (false past
  // the last step: nothing loaded); store_regs writes them into K-major tile `stage`.
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

  if constexpr (A_SH || B_SH) {
    // Staging path. The copy group committed with K step t holds the staging copies of step t
    // and the direct copies (MN-contiguous operand) of step t - 1, so that when iteration t has
    // waited for step t + 1's group, step t + 1 can be transposed and step t's direct tile is in.
    // Iteration t: wait, one barrier (everyone's copies of group t + 1 are visible; step t - 1's
    // K-major tiles and step t's staging tiles are no longer read), start group t + S, transpose
    // step t + 1 into the K-major tiles step t - 1 used, then step t's math. With Cfg::LATE_T the
    // transpose comes after the math (the next barrier still orders it before step t + 1's
    // math). An operand through registers holds step t + 1, stores it into its K-major tile
    // (t + 1) & 1 after step t's math and loads step t + 2, which the next math hides.
    constexpr int A_RAW = BM * Cfg::LDR_S, B_RAW = BN * Cfg::LDR_S;
    // Staging tile `slot`, and the shared tiles of step `t`'s math (read ring slot `slot`).
    auto a_raw = [&](int slot) { return As + 2 * Cfg::A_TILE + slot * A_RAW; };
    auto b_raw = [&](int slot) { return Bs + 2 * Cfg::B_TILE + slot * B_RAW; };
    auto a_math = [&](int t, int slot) {
      return As + (A_SH || A_REG ? t & 1 : slot) * Cfg::A_TILE;
    };
    auto b_math = [&](int t, int slot) {
      return Bs + (B_SH || B_REG ? t & 1 : slot) * Cfg::B_TILE;
    };
    auto copy_group = [&](const BlockPos& at, int t, int slot, int direct_slot, auto fast) {
      if constexpr (A_SH) {
        copy_a(at, t, shared_address(a_raw(slot)), fast);
      } else if (t > 0) {
        copy_a(at, t - 1, as_addr + direct_slot * A_STAGE, fast);
      }
      if constexpr (B_SH) {
        copy_b(at, t, shared_address(b_raw(slot)), fast);
      } else if (t > 0) {
        copy_b(at, t - 1, bs_addr + direct_slot * B_STAGE, fast);
      }
      cp_async_commit();
    };
    // Transposes step t's staging tiles (slot) into its K-major tiles (t & 1): blocks
    // 0 .. NA - 1 of A, then NB of B, spread over the threads.
    constexpr int NA = A_SH ? BM * BK / 16 : 0, NB = B_SH ? BN * BK / 16 : 0;
    auto transpose = [&](int t, int slot) {
#pragma unroll
      for (int i = 0; i < (NA + NB + Cfg::THREADS - 1) / Cfg::THREADS; ++i) {
        const int blk = static_cast<int>(threadIdx.x) + i * Cfg::THREADS;
        if constexpr (A_SH) {
          if (blk < NA) {
            ATile::template transpose_block<Cfg::LDA_S>(a_raw(slot), As + (t & 1) * Cfg::A_TILE,
                                                        blk);
            continue;
          }
        }
        if constexpr (B_SH) {
          if (blk < NA + NB) {
            BTile::template transpose_block<Cfg::LDB_S>(b_raw(slot), Bs + (t & 1) * Cfg::B_TILE,
                                                        blk - NA);
          }
        }
      }
    };
#pragma unroll
    for (int s = 0; s < S; ++s) copy_group(pos, s, s, s - 1, std::false_type{});
    cp_async_wait<S - 1>();  // group 0: step 0's staging tiles
    __syncthreads();         // ... everyone's; saved_pos is written
    if (pos.k_tiles > 0) transpose(0, 0);
    if (load_regs(pos, 0, std::false_type{})) store_regs(0);
    load_regs(pos, 1, std::false_type{});
    int slot = 0;  // ring slot of step t (staging and direct tiles)
    auto step = [&](const BlockPos& at, int t, auto fast) {
      constexpr bool FAST = decltype(fast)::value;
      const int next = slot == S - 1 ? 0 : slot + 1, prev = slot == 0 ? S - 1 : slot - 1;
      cp_async_wait<S - 2>();  // this thread's group t + 1 has landed ...
      __syncthreads();         // ... and everyone's; step t - 1's tiles are free
      copy_group(at, t + S, slot, prev, fast);
      const bool more = FAST || t + 1 < at.k_tiles;  // a step t + 1
      if (!Cfg::LATE_T && more) transpose(t + 1, next);
      mma_k_step<Cfg, false>(acc, a_math(t, slot) + a_frag, b_math(t, slot) + b_frag);
      if (Cfg::LATE_T && more) transpose(t + 1, next);
      if constexpr (A_REG || B_REG) {
        if (more) store_regs((t + 1) & 1);
        load_regs(at, t + 2, fast);
      }
      slot = next;
    };
    int t = 0;
    if (p.vec_a && p.vec_b && p.M - pos.m0 >= BM && p.N - pos.n0 >= BN) {
      const int fast_end = (pos.k_end - pos.k_begin) / BK - S;  // group t + S is a full one
      for (; t < fast_end; ++t) step(pos, t, std::true_type{});
    }
    const BlockPos tail = saved_pos;
    for (; t < tail.k_tiles; ++t) step(tail, t, std::false_type{});
    store_tile<Cfg, false>(p, acc, tail);
  } else {
    // Copies K step `t` into its stage; the group is committed even when empty (past the last
    // step), so that group counts stay uniform.
    auto copy_step = [&](const BlockPos& at, int t, int stage, auto fast) {
      if constexpr (!A_REG) copy_a(at, t, as_addr + stage * A_STAGE, fast);
      if constexpr (!B_REG) copy_b(at, t, bs_addr + stage * B_STAGE, fast);
      cp_async_commit();
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
  }
#endif
}

}  // namespace lltm_ext::gemm_tiles
