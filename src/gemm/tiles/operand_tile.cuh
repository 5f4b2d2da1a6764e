// One operand's tile on its way global (any layout) -> registers -> shared memory, stored K-major:
// the register-staged kernel's copies, and the multistage kernel's for a K-contiguous operand
// that goes through registers (KPath::kRegisters).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "gemm/tiles/vector_access.cuh"

namespace lltm_ext::gemm_tiles {

// An MN x BK tile of one operand (MN = BM for A, BN for B), read as 4-element chunks along the
// operand's contiguous dimension; each thread owns PER_THREAD chunks. K_CONTIG: element (i, k) at
// p[i * ld + k]; else at p[k * ld + i]. LDS: shared row length (elements) of the K-major tile.
// Strides are recomputed from `ld` (a kernel parameter) instead of being kept in registers.
// K_CONTIG: a thread's chunks are consecutive along k in one row i (rows i = tid % MN), so that
// the transposing stores of a warp (32 consecutive i at one k) hit 32 different banks, and a
// thread's loads fill whole 32-byte sectors. Otherwise its chunks are ROWS_PER_PASS rows of k
// apart at one i, and a warp's loads are consecutive 16-byte pieces of a row.
template <typename T, typename Acc, int MN, int BK, int THREADS, bool K_CONTIG, int LDS>
struct OperandTile {
  static constexpr int CHUNKS = MN * BK / 4;
  static constexpr int PER_THREAD = CHUNKS / THREADS;
  static_assert(CHUNKS % THREADS == 0, "the tile's chunks must spread evenly over the threads");
  // Chunks along the contiguous dimension, per row of the other one.
  static constexpr int ROW_CHUNKS = K_CONTIG ? BK / 4 : MN / 4;
  static_assert(K_CONTIG ? ROW_CHUNKS % PER_THREAD == 0 : THREADS % ROW_CHUNKS == 0,
                "each thread keeps one row (K_CONTIG), resp. one column, of chunks");
  static constexpr int ROWS_PER_PASS = K_CONTIG ? 1 : THREADS / ROW_CHUNKS;

  const T* ptr;  // this thread's first chunk in the current K step
  Acc regs[PER_THREAD][4];

  // Row (i for K_CONTIG, k otherwise) and first column (k, resp. i) of this thread's chunk c.
  __device__ __forceinline__ static int row(int c) {
    const int t = static_cast<int>(threadIdx.x);
    return K_CONTIG ? t % MN : t / ROW_CHUNKS + c * ROWS_PER_PASS;
  }
  __device__ __forceinline__ static int col(int c) {
    const int t = static_cast<int>(threadIdx.x);
    return K_CONTIG ? (t / MN * PER_THREAD + c) * 4 : t % ROW_CHUNKS * 4;
  }
  // Element offset of chunk c from chunk 0.
  __device__ __forceinline__ static int64_t offset(int c, int64_t ld) {
    return K_CONTIG ? int64_t(4 * c) : c * ROWS_PER_PASS * ld;
  }

  // `base` points at element (i0, k0) of the tile; ld is the operand's leading dimension.
  __device__ __forceinline__ OperandTile(const T* base, int64_t ld) {
    ptr = base + row(0) * ld + col(0);
  }

  // Loads one K step. Fast path (uniform over the block): the whole MN x BK tile is in bounds and
  // 4-element vectors are allowed. Otherwise i_lim: rows/cols of the operand left from the tile's
  // i origin, k_lim: k left from the step's first k; out-of-bounds elements read as zero.
  __device__ __forceinline__ void load(int64_t ld, bool fast, bool vec, int i_lim, int k_lim) {
    if (fast) {
#pragma unroll
      for (int c = 0; c < PER_THREAD; ++c) load4_global(ptr + offset(c, ld), regs[c]);
      return;
    }
#pragma unroll
    for (int c = 0; c < PER_THREAD; ++c) {
      const T* p = ptr + offset(c, ld);
      const bool row_ok = row(c) < (K_CONTIG ? i_lim : k_lim);
      const int n_ok = (K_CONTIG ? k_lim : i_lim) - col(c);  // valid along the chunk
      if (vec && row_ok && n_ok >= 4) {
        load4_global(p, regs[c]);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          regs[c][j] = (row_ok && j < n_ok) ? tile_cast<Acc>(p[j]) : Acc(0);
        }
      }
    }
  }

  __device__ __forceinline__ void advance(int64_t ld) { ptr += K_CONTIG ? int64_t(BK) : BK * ld; }

  // Stores the staged chunks into the K-major shared tile s (BK rows of LDS elements).
  __device__ __forceinline__ void store(Acc* s) const {
#pragma unroll
    for (int c = 0; c < PER_THREAD; ++c) {
      if constexpr (K_CONTIG) {  // transpose: chunk (i = row, k = col .. col + 3)
#pragma unroll
        for (int j = 0; j < 4; ++j) s[(col(c) + j) * LDS + row(c)] = regs[c][j];
      } else {  // chunk (k = row, i = col .. col + 3): one 16-byte store
        store4_shared(s + row(c) * LDS + col(c), regs[c]);
      }
    }
  }
};

}  // namespace lltm_ext::gemm_tiles
