// One operand's tile copied global (any layout) -> shared memory by cp.async, K-major or in its
// global layout: the multistage kernel's copies (KPath::kAsyncTranspose, kKMajor, kShared's
// staging tiles and their transpose, and every MN-contiguous operand).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/cp_async.cuh"
#include "gemm/tiles/vector_access.cuh"

namespace lltm_ext::gemm_tiles {

// cp.async, shared with other ops (common/cp_async.cuh).
using ::lltm_ext::cuda::cp_async;
using ::lltm_ext::cuda::cp_async_commit;
using ::lltm_ext::cuda::cp_async_wait;
using ::lltm_ext::cuda::shared_address;

// As OperandTile, but copying straight into a shared stage with cp.async (T is the shared type).
// TRANSPOSE (K_CONTIG only): the tile is stored K-major (s[k][i]), each chunk by four element
// copies; otherwise it keeps its global layout (s[k][i] for an MN-contiguous operand, s[i][k] for
// a K-contiguous one), one 16-byte copy per chunk (two for float64) when vectors are allowed.
// SWIZZLE (K_CONTIG, float32, BK = LDS = 16: the staging tile of KPath::kShared): rows i and
// i + 1 (i even) share one 128-byte line of 8 chunks, chunk c of row i at position
// ((i & 1) * 4 + c) ^ ((i >> 2) & 7) of it. A warp's copies then fill four whole lines, and
// transpose_block's 16-byte reads of eight consecutive 4-row blocks hit each bank once.
template <typename T, int MN, int BK, int THREADS, bool K_CONTIG, int LDS, bool TRANSPOSE,
          bool SWIZZLE = false>
struct AsyncOperandTile {
  static_assert(K_CONTIG || !TRANSPOSE, "only a K-contiguous tile is transposed");
  static constexpr int CHUNKS = MN * BK / 4;
  static constexpr int PER_THREAD = CHUNKS / THREADS;
  static_assert(CHUNKS % THREADS == 0, "the tile's chunks must spread evenly over the threads");
  static constexpr int ROW_CHUNKS = K_CONTIG ? BK / 4 : MN / 4;
  static_assert(THREADS % ROW_CHUNKS == 0, "each thread keeps its column of chunks");
  static constexpr int ROWS_PER_PASS = THREADS / ROW_CHUNKS;
  static constexpr int E = sizeof(T);
  static_assert(!SWIZZLE || (K_CONTIG && !TRANSPOSE && E == 4 && ROW_CHUNKS == 4 && LDS == 16 &&
                             ROWS_PER_PASS % 32 == 0 && MN % 32 == 0),
                "the swizzle is for float32 rows of 4 chunks, unpadded, whose swizzle a "
                "thread's chunks share");
  // Shared byte offsets: between a chunk's elements, and between one thread's chunks.
  static constexpr uint32_t ELEM_STEP = TRANSPOSE ? LDS * E : E;
  static constexpr uint32_t PASS_STEP = TRANSPOSE ? ROWS_PER_PASS * E : ROWS_PER_PASS * LDS * E;
  // Element offset of chunk c of row i from the tile's start.
  __device__ __forceinline__ static int chunk_at(int i, int c) {
    return SWIZZLE ? 32 * (i >> 1) + 4 * ((((i & 1) << 2) | c) ^ ((i >> 2) & 7)) : i * LDS + 4 * c;
  }

  const T* ptr;    // this thread's first chunk in the next K step to copy
  uint32_t s_off;  // byte offset of that chunk's first element within a stage

  __device__ __forceinline__ static int row0() {
    return static_cast<int>(threadIdx.x) / ROW_CHUNKS;
  }
  __device__ __forceinline__ static int col0() {
    return (static_cast<int>(threadIdx.x) % ROW_CHUNKS) * 4;
  }

  __device__ __forceinline__ AsyncOperandTile(const T* base, int64_t ld) {
    ptr = base + row0() * ld + col0();
    s_off =
        static_cast<uint32_t>(TRANSPOSE ? col0() * LDS + row0() : chunk_at(row0(), col0() / 4)) * E;
  }

  // SWIZZLE: transposes 4 x 4 block `b` (< MN * BK / 16; rows 4 * (b % (MN / 4)) + 0..3, chunk
  // b / (MN / 4)) of the staging tile `raw` into the K-major tile `dst` (BK rows of LDD
  // elements): four 16-byte reads, four 16-byte writes. Consecutive b of one chunk read and write
  // consecutive rows, so eight of them (a 16-byte access's phase) hit each bank once.
  template <int LDD>
  __device__ __forceinline__ static void transpose_block(const T* raw, T* dst, int b) {
    static_assert(SWIZZLE, "only the swizzled staging tile is transposed this way");
    const int kc = b / (MN / 4), i0 = 4 * (b % (MN / 4));
    T v[4][4];
#pragma unroll
    for (int r = 0; r < 4; ++r) load_vec4(raw + chunk_at(i0 + r, kc), v[r]);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const T col[4] = {v[0][c], v[1][c], v[2][c], v[3][c]};
      store4_shared(dst + (4 * kc + c) * LDD + i0, col);
    }
  }

  // Copies one K step into the stage at shared address `stage`, then moves on to the next step.
  // fast: the whole tile is in bounds and vectors are allowed; otherwise out-of-bounds elements
  // (i >= i_lim, k >= k_lim, counted from the step's origin) are zero-filled. `safe`: any mapped
  // element address, read by nothing.
  __device__ __forceinline__ void copy(uint32_t stage, int64_t ld, bool fast, bool vec, int i_lim,
                                       int k_lim, const T* safe) {
#pragma unroll
    for (int c = 0; c < PER_THREAD; ++c) {
      const T* p = ptr + c * ROWS_PER_PASS * ld;
      const uint32_t d = stage + s_off + c * PASS_STEP;
      const int row = row0() + c * ROWS_PER_PASS;
      if (fast) {
        if constexpr (TRANSPOSE) {
#pragma unroll
          for (int j = 0; j < 4; ++j) cp_async<E>(d + j * ELEM_STEP, p + j);
        } else {
#pragma unroll
          for (int h = 0; h < 4 * E / 16; ++h) cp_async<16>(d + 16 * h, p + h * (16 / E));
        }
        continue;
      }
      const bool row_ok = K_CONTIG ? row < i_lim : row < k_lim;
      const int n_ok = row_ok ? (K_CONTIG ? k_lim - col0() : i_lim - col0()) : 0;
      if (!TRANSPOSE && vec) {       // 16-byte copies where all of a vector is in bounds
        constexpr int PER = 16 / E;  // elements per copy
#pragma unroll
        for (int h = 0; h < 4 / PER; ++h) {
          const int n = n_ok - h * PER;  // elements of this vector in bounds
          if (n >= PER) {
            cp_async<16>(d + 16 * h, p + h * PER);
            continue;
          }
          // A vector across the edge (or past it): element copies, the rest zero-filled. Not one
          // 16-byte copy with src-size n * E: that is a 16-byte read as compute-sanitizer counts
          // it, past the end of a tensor that ends here.
#pragma unroll
          for (int j = 0; j < PER; ++j) {
            const bool ok = j < n;
            cp_async<E>(d + 16 * h + j * E, ok ? p + h * PER + j : safe, ok ? E : 0);
          }
        }
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const bool ok = j < n_ok;
          cp_async<E>(d + j * ELEM_STEP, ok ? p + j : safe, ok ? E : 0);
        }
      }
    }
    ptr += K_CONTIG ? int64_t(BK) : BK * ld;
  }
};

}  // namespace lltm_ext::gemm_tiles
