// Tiled SIMT matrix-multiply kernel C = A B (any layout of A and B, split-K), for lltm_ext.gemm.
//
// Plain CUDA (no ATen), so that scripts/gemm_steps/ times the very same kernel. Design:
//   - a BM x BN block tile of C per thread block, walked along K in steps of BK;
//   - each warp owns a WM x WN warp tile, each thread a TM x TN register tile made of 4 x 4
//     sub-blocks spread over the warp tile, so that one warp's 16-byte shared-memory reads are
//     broadcasts over consecutive addresses (no bank conflicts) and its C stores are coalesced;
//   - both operands are staged in shared memory "K-major" (As[k][m], Bs[k][n]), whatever their
//     layout in global memory: a K-contiguous operand is transposed on its way through registers;
//   - two pipelines for the global -> shared copies, one barrier per K step either way:
//     STAGES == 0: register-staged double buffering (loads of the next K step issued before the
//     current step's math, stored after it; converts half types to float on the way), and
//     STAGES >= 2: a cp.async ring of STAGES shared buffers for float32 and float64, where a
//     K-contiguous operand takes the path its config names (KPath: through registers one step
//     ahead, element-wise async copies, or, for A, kept K-major);
//   - 16-byte (4-element) global accesses when the operand's layout and alignment allow,
//     per-element predicated ones otherwise; all element offsets are 64-bit.
#pragma once

#include <cuda_runtime.h>

// cp.async, which the pipelined kernel's copies use, exists from sm_80 (Ampere) on. In device code
// for older architectures (Volta, Turing) gemm_async_kernel compiles to a trap and the cp.async
// helpers to nothing: the host never launches that kernel there, because it checks at run time
// which PTX version the loaded image of the kernel was compiled from (gemm_cuda.cu,
// async_image()), and runs the register-staged kernel instead.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define LLTM_EXT_GEMM_NO_CP_ASYNC 1
#endif

#include <cstdint>
#include <type_traits>

#include "common/gemm_tile_types.h"

namespace lltm_ext::gemm_tiles {

// ------------------------------------------------------------------------------------------
// Device helpers: 4-element loads and stores with conversion to / from the accumulator type.
// ------------------------------------------------------------------------------------------

template <typename To, typename From>
__device__ __forceinline__ To tile_cast(From x) {
  return static_cast<To>(x);
}

// Four consecutive elements at p (aligned to 4 * sizeof(T)), converted to Acc.
template <typename T, typename Acc>
__device__ __forceinline__ void load4_global(const T* p, Acc (&v)[4]) {
  if constexpr (sizeof(T) == 8) {
    const double2 lo = __ldg(reinterpret_cast<const double2*>(p));
    const double2 hi = __ldg(reinterpret_cast<const double2*>(p) + 1);
    v[0] = tile_cast<Acc>(lo.x), v[1] = tile_cast<Acc>(lo.y);
    v[2] = tile_cast<Acc>(hi.x), v[3] = tile_cast<Acc>(hi.y);
  } else if constexpr (sizeof(T) == 4) {
    const float4 x = __ldg(reinterpret_cast<const float4*>(p));
    v[0] = tile_cast<Acc>(x.x), v[1] = tile_cast<Acc>(x.y);
    v[2] = tile_cast<Acc>(x.z), v[3] = tile_cast<Acc>(x.w);
  } else {
    static_assert(sizeof(T) == 2, "float64, float32 or a 16-bit float");
    const uint2 bits = __ldg(reinterpret_cast<const uint2*>(p));
    T x[4];
    __builtin_memcpy(x, &bits, sizeof(bits));
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = tile_cast<Acc>(x[j]);
  }
}

// Four consecutive Acc values from shared memory (16-byte aligned).
template <typename Acc>
__device__ __forceinline__ void load4_shared(const Acc* p, Acc* v) {
  if constexpr (sizeof(Acc) == 8) {
    const double2 lo = reinterpret_cast<const double2*>(p)[0];
    const double2 hi = reinterpret_cast<const double2*>(p)[1];
    v[0] = lo.x, v[1] = lo.y, v[2] = hi.x, v[3] = hi.y;
  } else {
    const float4 x = *reinterpret_cast<const float4*>(p);
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
  }
}

template <typename Acc>
__device__ __forceinline__ void store4_shared(Acc* p, const Acc (&v)[4]) {
  if constexpr (sizeof(Acc) == 8) {
    reinterpret_cast<double2*>(p)[0] = make_double2(v[0], v[1]);
    reinterpret_cast<double2*>(p)[1] = make_double2(v[2], v[3]);
  } else {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  }
}

// Four Acc values converted to OutT, stored at p (aligned to 4 * sizeof(OutT)).
template <typename OutT, typename Acc>
__device__ __forceinline__ void store4_global(OutT* p, const Acc* v) {
  if constexpr (sizeof(OutT) == 8) {
    reinterpret_cast<double2*>(p)[0] =
        make_double2(tile_cast<double>(v[0]), tile_cast<double>(v[1]));
    reinterpret_cast<double2*>(p)[1] =
        make_double2(tile_cast<double>(v[2]), tile_cast<double>(v[3]));
  } else if constexpr (sizeof(OutT) == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(tile_cast<float>(v[0]), tile_cast<float>(v[1]),
                                                tile_cast<float>(v[2]), tile_cast<float>(v[3]));
  } else {
    OutT x[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) x[j] = tile_cast<OutT>(v[j]);
    uint2 bits;
    __builtin_memcpy(&bits, x, sizeof(bits));
    *reinterpret_cast<uint2*>(p) = bits;
  }
}

// ------------------------------------------------------------------------------------------
// Operand tiles: global (any layout) -> registers -> shared memory, stored K-major.
// ------------------------------------------------------------------------------------------

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

// ------------------------------------------------------------------------------------------
// Operand tiles: global (any layout) -> shared memory by cp.async, stored K-major.
// ------------------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Async copy of BYTES (4, 8 or 16) from global src to shared dst, of which only the first
// src_bytes are read and the rest zero-filled (src_bytes 0: src is not read, but must still be a
// mapped address).
template <int BYTES>
__device__ __forceinline__ void cp_async(uint32_t dst, const void* src, int src_bytes) {
#ifndef LLTM_EXT_GEMM_NO_CP_ASYNC
  if constexpr (BYTES == 16) {  // .cg: through L2 only
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes));
  } else {  // .ca: also through L1, where the neighbouring elements of the row are reused
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(src), "n"(BYTES),
                 "r"(src_bytes));
  }
#endif
}

template <int BYTES>
__device__ __forceinline__ void cp_async(uint32_t dst, const void* src) {
#ifndef LLTM_EXT_GEMM_NO_CP_ASYNC
  if constexpr (BYTES == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(dst), "l"(src), "n"(BYTES));
  }
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#ifndef LLTM_EXT_GEMM_NO_CP_ASYNC
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

template <int PENDING>
__device__ __forceinline__ void cp_async_wait() {
#ifndef LLTM_EXT_GEMM_NO_CP_ASYNC
  asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING));
#endif
}

// As OperandTile, but copying straight into a shared stage with cp.async (T is the shared type).
// TRANSPOSE (K_CONTIG only): the tile is stored K-major (s[k][i]), each chunk by four element
// copies; otherwise it keeps its global layout (s[k][i] for an MN-contiguous operand, s[i][k] for
// a K-contiguous one), one 16-byte copy per chunk (two for float64) when vectors are allowed.
template <typename T, int MN, int BK, int THREADS, bool K_CONTIG, int LDS, bool TRANSPOSE>
struct AsyncOperandTile {
  static_assert(K_CONTIG || !TRANSPOSE, "only a K-contiguous tile is transposed");
  static constexpr int CHUNKS = MN * BK / 4;
  static constexpr int PER_THREAD = CHUNKS / THREADS;
  static_assert(CHUNKS % THREADS == 0, "the tile's chunks must spread evenly over the threads");
  static constexpr int ROW_CHUNKS = K_CONTIG ? BK / 4 : MN / 4;
  static_assert(THREADS % ROW_CHUNKS == 0, "each thread keeps its column of chunks");
  static constexpr int ROWS_PER_PASS = THREADS / ROW_CHUNKS;
  static constexpr int E = sizeof(T);
  // Shared byte offsets: between a chunk's elements, and between one thread's chunks.
  static constexpr uint32_t ELEM_STEP = TRANSPOSE ? LDS * E : E;
  static constexpr uint32_t PASS_STEP = TRANSPOSE ? ROWS_PER_PASS * E : ROWS_PER_PASS * LDS * E;

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
    s_off = static_cast<uint32_t>(TRANSPOSE ? col0() * LDS + row0() : row0() * LDS + col0()) * E;
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
      if (!TRANSPOSE && vec) {       // 16-byte copies, the part past the edge zero-filled
        constexpr int PER = 16 / E;  // elements per copy
#pragma unroll
        for (int h = 0; h < 4 / PER; ++h) {
          const int n = min(max(n_ok - h * PER, 0), PER);
          cp_async<16>(d + 16 * h, n > 0 ? p + h * PER : safe, n * E);
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

// ------------------------------------------------------------------------------------------
// Pieces of both kernels: the block's place, one K step of math, the epilogue.
// ------------------------------------------------------------------------------------------

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

// acc += one BK-deep K step from shared tiles (as, bs already offset to this thread's first row
// and column). B is K-major (Bs[k][n]); A is K-major (As[k][m]) or, with A_K, As[m][k].
template <typename Cfg, bool A_K, typename Acc>
__device__ __forceinline__ void mma_k_step(Acc (&acc)[Cfg::TM][Cfg::TN], const Acc* as,
                                           const Acc* bs) {
  constexpr int TM = Cfg::TM, TN = Cfg::TN;
  if constexpr (A_K) {
#pragma unroll
    for (int kc = 0; kc < Cfg::BK; kc += 4) {
      Acc fa[TM][4];  // rows i, k = kc .. kc + 3
#pragma unroll
      for (int i = 0; i < TM; ++i) load4_shared(as + i * Cfg::TWM * Cfg::LDK_S + kc, fa[i]);
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        Acc fb[TN];
#pragma unroll
        for (int j = 0; j < TN / 4; ++j) {
          load4_shared(bs + (kc + kk) * Cfg::LDB_S + j * Cfg::TWN * 4, fb + 4 * j);
        }
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
          for (int j = 0; j < TN; ++j) acc[i][j] = fa[i][kk] * fb[j] + acc[i][j];
      }
    }
  } else {
#pragma unroll
    for (int kk = 0; kk < Cfg::BK; ++kk) {
      Acc fa[TM], fb[TN];
#pragma unroll
      for (int i = 0; i < TM / 4; ++i) {
        load4_shared(as + kk * Cfg::LDA_S + i * Cfg::TWM * 4, fa + 4 * i);
      }
#pragma unroll
      for (int j = 0; j < TN / 4; ++j) {
        load4_shared(bs + kk * Cfg::LDB_S + j * Cfg::TWN * 4, fb + 4 * j);
      }
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fa[i] * fb[j] + acc[i][j];
    }
  }
}

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

// ------------------------------------------------------------------------------------------
// Kernels.
// ------------------------------------------------------------------------------------------

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

// c[i] = sum over s < splits of partial[s * n + i], in order (deterministic), for i < n.
template <typename Acc, typename OutT>
__global__ void splitk_reduce_kernel(const Acc* __restrict__ partial, OutT* __restrict__ c,
                                     int64_t n, int splits, bool vec) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (vec) {  // n % 4 == 0 and both pointers 4-element aligned
    for (int64_t q = first; q < n / 4; q += stride) {
      Acc v[4] = {Acc(0), Acc(0), Acc(0), Acc(0)};
      for (int s = 0; s < splits; ++s) {
        Acc x[4];
        load4_shared(partial + s * n + 4 * q, x);  // 16-byte loads (any address space)
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] += x[j];
      }
      store4_global(c + 4 * q, v);
    }
  } else {
    for (int64_t i = first; i < n; i += stride) {
      Acc v = Acc(0);
      for (int s = 0; s < splits; ++s) v += partial[s * n + i];
      c[i] = tile_cast<OutT>(v);
    }
  }
}

// C's part of the tail split-K tiles: for each of the tail_tiles dense BM x BN workspace tiles,
// the sum over s < splits of tile s * tail_tiles + j, in split order (deterministic), written to
// C where it lies inside C. 4 consecutive elements of a row per thread and step.
template <int BM, int BN, typename Acc, typename OutT>
__global__ void tail_reduce_kernel(const Acc* __restrict__ partial, OutT* __restrict__ c, int M,
                                   int N, int64_t ldc, int main_tiles, int tail_tiles, int splits,
                                   bool vec_c) {
  static_assert(BN % 4 == 0, "rows of whole 4-element chunks");
  constexpr int CHUNKS = BM * BN / 4;  // per tile
  const int64_t n_chunks = static_cast<int64_t>(tail_tiles) * CHUNKS;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  const int64_t tile_stride = static_cast<int64_t>(tail_tiles) * BM * BN;  // between splits
  for (int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; q < n_chunks;
       q += stride) {
    const int j = static_cast<int>(q / CHUNKS), e = static_cast<int>(q % CHUNKS) * 4;
    int m0, n0;
    tile_origin<BM, BN>(M, N, main_tiles + j, m0, n0);
    const int row = e / BN, col = e % BN;
    if (m0 + row >= M || n0 + col >= N) continue;
    const Acc* src = partial + static_cast<int64_t>(j) * BM * BN + e;
    Acc v[4] = {Acc(0), Acc(0), Acc(0), Acc(0)};
    for (int s = 0; s < splits; ++s) {
      Acc x[4];
      load4_shared(src + s * tile_stride, x);  // 16-byte loads (any address space)
#pragma unroll
      for (int q4 = 0; q4 < 4; ++q4) v[q4] += x[q4];
    }
    OutT* dst = c + static_cast<int64_t>(m0 + row) * ldc + n0 + col;
    if (vec_c && n0 + col + 3 < N) {
      store4_global(dst, v);
    } else {
      for (int q4 = 0; q4 < 4 && n0 + col + q4 < N; ++q4) dst[q4] = tile_cast<OutT>(v[q4]);
    }
  }
}

// ------------------------------------------------------------------------------------------
// Launch helpers.
// ------------------------------------------------------------------------------------------

// The kernel of config Cfg (register-staged or cp.async) for one layout pair.
template <typename Cfg, typename T, typename Acc, typename OutT, bool A_KCONTIG, bool B_KCONTIG>
constexpr auto kernel_of() {
  if constexpr (Cfg::STAGES == 0) {
    return &gemm_tile_kernel<Cfg, T, Acc, OutT, A_KCONTIG, B_KCONTIG>;
  } else {
    static_assert(sizeof(T) == sizeof(Acc), "cp.async configs copy T straight into shared");
    return &gemm_async_kernel<Cfg, T, OutT, A_KCONTIG, B_KCONTIG>;
  }
}

// Allows `kernel` its dynamic shared memory when that is above the default 48 KB limit.
template <typename Cfg, typename Acc, typename Kernel>
cudaError_t allow_smem(Kernel kernel) {
  constexpr size_t smem = Cfg::template smem_bytes<Acc>();
  if constexpr (smem > 48 * 1024) {
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  }
  return cudaSuccess;
}

// Launches the kernel of config Cfg for one layout pair on `stream` with `splits` K splits;
// returns the launch error (cudaSuccess when fine). The caller checks M, N > 0 and fills
// p.k_split. cp.async configs need T == Acc. With tail split-K (p.tail_splits > 0, splits 1) the
// grid holds main_tiles + tail_tiles * tail_splits blocks.
template <typename Cfg, typename T, typename Acc, typename OutT, bool A_KCONTIG, bool B_KCONTIG>
cudaError_t launch_tiles(const Params<T, OutT>& p, int splits, cudaStream_t stream) {
  const auto kernel = kernel_of<Cfg, T, Acc, OutT, A_KCONTIG, B_KCONTIG>();
  const cudaError_t err = allow_smem<Cfg, Acc>(kernel);
  if (err != cudaSuccess) return err;
  const unsigned int blocks =
      p.tail_splits > 0 ? static_cast<unsigned int>(p.main_tiles + p.tail_tiles * p.tail_splits)
                        : tile_count<Cfg>(p.M, p.N);
  const dim3 grid(blocks, 1, static_cast<unsigned int>(splits));
  kernel<<<grid, Cfg::THREADS, Cfg::template smem_bytes<Acc>(), stream>>>(p);
  return cudaGetLastError();
}

}  // namespace lltm_ext::gemm_tiles
