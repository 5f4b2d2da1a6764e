// The Ampere-style tensor-core GEMM kernel for bfloat16 / float16, and float32 as TF32 (float32
// accumulation): a cp.async multistage ring in XOR-swizzled shared memory, ldmatrix (or 32-bit
// shared loads) into fragments and mma.sync (m16n8k16; m16n8k8 for tf32), for every GPU from sm_80
// on that does not run the Hopper wgmma kernel (A100, RTX 30xx / 40xx, Blackwell, a 9.0-only build
// on Hopper). A trap below sm_80.
//
// Design:
//   - block tile BM x BN x BK, BK 64 bytes of K per operand row (32 16-bit elements, 16 tf32
//     ones; the byte geometry of a stage is the same for every type), WARPS_M x WARPS_N warps, each
//     owning a (BM / WARPS_M) x (BN / WARPS_N) warp tile of 16 x 8 mma tiles (float32
//     accumulators in registers); STAGES stages of A and B in dynamic shared memory;
//   - loads: 16-byte cp.async.cg copies, their src-size zero-filling whatever lies past M, N or K
//     (a whole chunk, or the part of a chunk past the K or M / N edge), where the host has checked
//     that each chunk is 16-byte aligned (base 16-byte aligned, leading dimension a multiple of 16
//     bytes); where only 4 bytes are (float32 rows of any length, 16-bit rows of an even one),
//     4-byte cp.async.ca copies into the same ring, a lane per word (WordStageCopy); otherwise
//     (LOAD kLoadRegisters: any base and leading dimension) register-staged loads of one element
//     per lane, a warp reading consecutive elements of a stage row, issued before the step's math
//     and stored into the same swizzled stage after it (RegStageCopy);
//   - split-K: gridDim.y K splits of k_split elements each (a multiple of the stage's K); with
//     more than one, each writes its float32 partial products to a workspace slice (M x N), which
//     a separate kernel sums in split order (deterministic);
//   - operands of either major-ness, read in place: a K-major operand (A row-major, B a
//     transposed row-major matrix) is stored as rows of BK (four 16-byte chunks) and read with
//     ldmatrix; an M- / N-major one as BK rows of K, each BM or BN elements, read with
//     ldmatrix.trans, which hands out the same fragments as the K-major case (tf32: ldmatrix has
//     no 32-bit transpose, so those fragments are read with 32-bit shared loads, see
//     SwizzleMnTf32);
//   - tf32: the float32 operands rounded to tf32 with cvt.rna (to nearest, ties away, as cuBLAS
//     does) as they enter the fragments, mma.sync.m16n8k8.tf32, float32 C stored as is;
//   - shared memory swizzle (XOR of the 16-byte chunk index): the eight rows an ldmatrix phase
//     reads and the eight chunks a quarter-warp of cp.async writes land in eight distinct bank
//     groups, so neither side has bank conflicts (see SwizzleK / SwizzleMN);
//   - grid: one block per tile, tiles walked column by column within groups of GROUP_M tile rows,
//     so that the blocks resident together share A and B panels in L2;
//   - epilogue: the accumulators staged in shared memory as float32, then whole rows of the tile
//     copied out by all threads, converted with round-to-nearest-even (16-bit C), in 16-byte
//     stores where C's rows allow, else one element per thread and store (coalesced either way),
//     predicated on M and N.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "common/mma_sync.cuh"
#include "common/cp_async.cuh"       // cp.async helpers; LLTM_EXT_NO_CP_ASYNC below sm_80
#include "gemm/tiles/pack_half.cuh"  // pack2 / pack1: the 16-bit epilogue

namespace lltm_ext::gemm_tiles::mma {

// cp.async, shared with other ops (common/cp_async.cuh).
using ::lltm_ext::cuda::cp_async;
using ::lltm_ext::cuda::cp_async_commit;
using ::lltm_ext::cuda::cp_async_wait;
using ::lltm_ext::cuda::shared_address;

// The shape, warps and shared memory of one block tile.
template <int BM_, int BN_, int WARPS_M_, int WARPS_N_, int STAGES_, int MIN_BLOCKS_>
struct MmaTile {
  static constexpr int BM = BM_, BN = BN_, BK = 32;  // BK: in 16-bit elements (16 for tf32)
  static constexpr int WARPS_M = WARPS_M_, WARPS_N = WARPS_N_;
  static constexpr int THREADS = 32 * WARPS_M * WARPS_N;
  static constexpr int STAGES = STAGES_, MIN_BLOCKS = MIN_BLOCKS_;
  static constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N;  // the warp tile
  static constexpr int MI = WTM / 16, NI = WTN / 8;             // its 16 x 8 mma tiles
  static constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2;
  static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
  static constexpr int SMEM_BYTES = STAGES * STAGE_BYTES;
  static constexpr int GROUP_M = 8;
  // An M- / N-major stage row is BM or BN elements: at least eight 16-byte chunks, so that the
  // XOR with (k & 7) (tf32: ((k & 3) << 1)) stays inside the row.
  static_assert(BM % 64 == 0 && BN % 64 == 0, "tiles are multiples of 64 in M and N");
  static_assert(BK == 32, "the fragment offsets of the second k16 step assume four K chunks");
  static_assert(WTM % 16 == 0 && WTN % 16 == 0, "warp tiles are multiples of 16 x 16");
  static_assert(A_BYTES % (16 * THREADS) == 0 && B_BYTES % (16 * THREADS) == 0,
                "every thread copies the same number of 16-byte chunks per stage");
};

// The element types: the kernel's DT template argument (A, B and C of one type); mma_16816 and
// to_tf32 (common/mma_sync.cuh) take the same.
using lltm_ext::cuda::kMmaBF16;
using lltm_ext::cuda::kMmaF16;
using lltm_ext::cuda::kMmaTF32;
using lltm_ext::cuda::mma_16816;
using lltm_ext::cuda::to_tf32;

// The storage type of DT's elements.
template <int DT>
using MmaElem = std::conditional_t<DT == kMmaTF32, float, uint16_t>;

// What the kernel reads. A (M x K) and B (K x N) are of the kernel's DT; A_K / B_K (template
// arguments) say which is K-major. C (M x N) is row-major with leading dimension ldc.
struct MmaParams {
  const void* a;
  const void* b;
  void* c;
  int M, N, K;
  int64_t lda, ldb, ldc;
  int tiles_m, tiles_n;
  bool vec_c;  // C's base 16-byte aligned and ldc a multiple of 16 bytes: 16-byte stores
  // Split-K (gridDim.y > 1): K elements per split, and the float32 workspace of gridDim.y M x N
  // row-major slices that the splits write instead of C (nullptr: one split, C written).
  int k_split;
  float* partial;
};

// Byte offset of 16-byte chunk `chunk` (0..3) of row `row` in a K-major stage (rows of 64 bytes).
// Two rows share a 128-byte bank line; XOR-ing the chunk with (row / 2) % 4 spreads the eight
// rows an ldmatrix phase reads (same logical chunk, rows r0..r0+7) over all eight 16-byte bank
// groups, while the eight chunks a quarter-warp copies (two whole rows) stay one 128-byte line.
__device__ __forceinline__ uint32_t swizzle_k(int row, int chunk) {
  return static_cast<uint32_t>(row * 64 + ((chunk ^ ((row >> 1) & 3)) << 4));
}

// Byte offset of chunk `chunk` (0..ROW_ELEMS / 8 - 1) of K row `k` in an M- / N-major stage (rows
// of ROW_ELEMS elements, a multiple of 128 bytes): the chunk XOR-ed with k % 8, so that the eight
// K rows of an ldmatrix.trans phase hit eight different bank groups, and the eight consecutive
// chunks a quarter-warp copies stay one permuted 128-byte line.
template <int ROW_ELEMS>
__device__ __forceinline__ uint32_t swizzle_mn(int k, int chunk) {
  return static_cast<uint32_t>(k * ROW_ELEMS * 2 + ((chunk ^ (k & 7)) << 4));
}

// The same for tf32 (rows of ROW_ELEMS float32, four per chunk), whose M- / N-major fragments are
// read with 32-bit loads, not ldmatrix. A fragment load has lane (g, t) = (lane / 4, lane % 4)
// read K row k0 + t (k0 a multiple of 4) at M / N column mn0 + g (mn0 a multiple of 8): four K
// rows x two chunks, one 4-byte word each. Unswizzled, all four rows hit the same two bank groups
// (4-way conflicts). XOR-ing the chunk with (k % 4) * 2 moves row k0 + t's chunk pair (even, odd)
// to bank groups {2t, 2t + 1} ^ (its first chunk % 8): the four rows' pairs are disjoint, so the
// 32 lanes read 32 distinct banks. The eight consecutive chunks a quarter-warp of cp.async writes
// (one row) stay a permuted 128-byte line. The XOR flips chunk bits 1-2 only, so chunk c + 2 (the
// M / N column 8 further, c even and c % 4 == 0) sits at byte offset (that of c) ^ 32.
template <int ROW_ELEMS>
__device__ __forceinline__ uint32_t swizzle_mn_tf32(int k, int chunk) {
  return static_cast<uint32_t>(k * ROW_ELEMS * 4 + ((chunk ^ ((k & 3) << 1)) << 4));
}

#ifndef LLTM_EXT_NO_CP_ASYNC
using lltm_ext::cuda::ldmatrix_x4;

// One 32-bit word from shared memory (tf32's M- / N-major fragments).
__device__ __forceinline__ uint32_t lds32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
  return v;
}

#endif

// The copies one thread issues for one operand's stage: COPIES 16-byte chunks, chunk q = tid +
// i * THREADS of the stage. T: the element type (16-bit, or float32 for tf32). ROWS: the operand's
// BM or BN. K_MAJOR: rows of the tile are the operand's M / N rows (four chunks of K each); else K
// rows of ROWS elements. THREADS is a multiple of the chunks per row, so a thread's copies share
// one chunk column and sit THREADS / CPR rows apart: one pointer, one row step and one bound
// describe them all (few registers, beside the accumulators).
template <typename T, int ROWS, int THREADS, bool K_MAJOR>
struct StageCopy {
  static constexpr int E = static_cast<int>(sizeof(T));
  static constexpr int EPC = 16 / E;       // elements per 16-byte chunk
  static constexpr int BK = 64 / E;        // K elements per stage
  static constexpr int CHUNKS = ROWS * 4;  // 16-byte chunks per stage (64 bytes of K per row)
  static constexpr int COPIES = CHUNKS / THREADS;
  static constexpr int CPR = K_MAJOR ? 4 : ROWS / EPC;  // chunks per stage row
  static constexpr int ROW_STEP = THREADS / CPR;        // stage rows between copies
  static constexpr int ROW_BYTES = K_MAJOR ? 64 : ROWS * E;
  static_assert(THREADS % CPR == 0, "a thread's copies share one chunk column");
  // Copies ROW_STEP rows apart share one swizzle phase (8 rows for the K-major and 16-bit M- /
  // N-major swizzles, 4 for tf32's): their offsets differ by whole rows.
  static_assert(ROW_STEP % (K_MAJOR || E == 2 ? 8 : 4) == 0, "copies share one swizzle phase");
  const T* src;  // K_MAJOR: the first row's chunk at K = 0; else the chunk at M / N
  uint32_t dst;  // byte offset of the first copy in the stage
  int row;       // the first copy's stage row
  // K_MAJOR: operand rows from `row` on inside the matrix, and the chunk's K offset; else the
  // bytes of the chunk inside M / N (0-16).
  int rows_in, k_off, mn_bytes;

  // rows_left: M - m0 (or N - n0), the operand rows / columns inside the matrix from the tile on.
  __device__ __forceinline__ StageCopy(const T* base, int64_t ld, int rows_left, int64_t mn0) {
    row = static_cast<int>(threadIdx.x) / CPR;
    const int chunk = static_cast<int>(threadIdx.x) % CPR;
    if constexpr (K_MAJOR) {
      dst = swizzle_k(row, chunk);
      src = base + (mn0 + row) * ld + chunk * EPC;
      rows_in = rows_left - row;
      k_off = chunk * EPC;
    } else {
      dst = E == 2 ? swizzle_mn<ROWS>(row, chunk) : swizzle_mn_tf32<ROWS>(row, chunk);
      src = base + mn0 + chunk * EPC;  // + k * ld at each stage
      mn_bytes = min(max(rows_left - chunk * EPC, 0), EPC) * E;
    }
  }

  // Copies the K step of elements k0 .. k0 + BK - 1 (those below k_end; k0 a multiple of BK) into
  // the stage at byte address `stage`.
  __device__ __forceinline__ void copy(uint32_t stage, int k0, int k_end, int64_t ld,
                                       const T* base) const {
#pragma unroll
    for (int i = 0; i < COPIES; ++i) {
      // Row i * ROW_STEP further: the same swizzle phase, so its offset is the first one's plus
      // whole rows.
      const uint32_t to = dst + i * ROW_STEP * ROW_BYTES;
      int bytes;
      const T* from;
      if constexpr (K_MAJOR) {
        bytes = i * ROW_STEP < rows_in ? min(max(k_end - k0 - k_off, 0), EPC) * E : 0;
        from = src + i * ROW_STEP * ld + k0;
      } else {
        const int k = k0 + row + i * ROW_STEP;
        bytes = k < k_end ? mn_bytes : 0;
        from = src + static_cast<int64_t>(k) * ld;
      }
      // Nothing to read: a zero fill from the operand's base, a mapped address.
      cp_async<16>(stage + to, bytes > 0 ? from : base, bytes);
    }
  }
};

// The 4-byte cp.async copies of one operand's stage, for operands whose rows are 4-byte aligned
// but not 16-byte aligned (float32 rows of any length, 16-bit rows of an even one): the stage
// StageCopy fills (same rows, same swizzle), each lane copying one word (one float32 or two 16-bit
// elements) of a stage row, a warp's 32 words consecutive; asynchronous, into the same ring as
// StageCopy's chunks. Words past M, N or the split's K end are zero-filled (a 16-bit pair across
// the edge: its first element loaded and stored by the thread, the second zero). A thread's word
// within its stage rows is fixed, its rows ROW_STEP apart.
template <typename T, int ROWS, int THREADS, bool K_MAJOR>
struct WordStageCopy {
  static constexpr int E = static_cast<int>(sizeof(T));
  static constexpr int EPW = 4 / E;                              // elements per word
  static constexpr int EPC = 16 / E;                             // elements per 16-byte chunk
  static constexpr int BK = 64 / E;                              // K elements per stage
  static constexpr int ROW_WORDS = (K_MAJOR ? BK : ROWS) / EPW;  // words per stage row
  static constexpr int COPIES = ROWS * BK / EPW / THREADS;
  static constexpr int ROW_STEP = THREADS / ROW_WORDS;  // stage rows between a thread's copies
  static_assert(THREADS % ROW_WORDS == 0, "a thread's copies share one word of their rows");
  const T* src;  // K-major: the thread's first row at its word, K = 0; else its M / N word
  int row0;      // the first stage row
  int e;         // the word's first element within its stage rows
  int rows_in;   // K-major: operand rows from row0 on inside the matrix
  int mn_bytes;  // M- / N-major: the word's bytes inside M / N (0, 2 or 4)

  // rows_left: M - m0 (or N - n0), the operand rows / columns inside the matrix from the tile on.
  __device__ __forceinline__ WordStageCopy(const T* base, int64_t ld, int rows_left, int64_t mn0) {
    row0 = static_cast<int>(threadIdx.x) / ROW_WORDS;
    e = static_cast<int>(threadIdx.x) % ROW_WORDS * EPW;
    if constexpr (K_MAJOR) {
      src = base + (mn0 + row0) * ld + e;
      rows_in = rows_left - row0;
      mn_bytes = 0;
    } else {
      src = base + mn0 + e;  // + k * ld at each stage row
      rows_in = 0;
      mn_bytes = min(max(rows_left - e, 0), EPW) * E;
    }
  }

  // Copies the K step of elements k0 .. k0 + BK - 1 (those below k_end; k0 a multiple of BK) into
  // the stage at byte address `stage`.
  __device__ __forceinline__ void copy(uint32_t stage, int k0, int k_end, int64_t ld,
                                       const T* base) const {
#pragma unroll
    for (int i = 0; i < COPIES; ++i) {
      const int row = row0 + i * ROW_STEP;
      int bytes;
      const T* from;
      uint32_t off;
      if constexpr (K_MAJOR) {
        bytes = i * ROW_STEP < rows_in ? min(max(k_end - k0 - e, 0), EPW) * E : 0;
        from = src + static_cast<int64_t>(i) * ROW_STEP * ld + k0;
        off = swizzle_k(row, e / EPC);
      } else {
        const int k = k0 + row;
        bytes = k < k_end ? mn_bytes : 0;
        from = src + static_cast<int64_t>(k) * ld;
        off = E == 2 ? swizzle_mn<ROWS>(row, e / EPC) : swizzle_mn_tf32<ROWS>(row, e / EPC);
      }
      const uint32_t to = stage + off + (e % EPC) * E;
      if constexpr (EPW == 2) {
        if (bytes == E) {
          // A pair across the matrix's edge: its first element alone, read and stored here (a
          // 4-byte copy with src-size 2 still counts as a 4-byte read past the edge), its second
          // a zero; the stage is read only after the barrier that publishes the copies too.
          const uint32_t v = __ldg(reinterpret_cast<const unsigned short*>(from));
          asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(to), "r"(v) : "memory");
          continue;
        }
      }
      // Nothing to read: a zero fill from the operand's base, a mapped address.
      cp_async<4>(to, bytes > 0 ? from : base, bytes);
    }
  }
};

// How the kernel's stages reach shared memory: 16-byte cp.async chunks (StageCopy: both operands'
// rows 16-byte aligned), 4-byte cp.async words (WordStageCopy: both 4-byte aligned), or
// register-staged element loads (RegStageCopy: any alignment).
enum StageLoad : int { kLoadChunks = 0, kLoadWords = 1, kLoadRegisters = 2 };

// The register-staged copies of one operand's stage, for operands the 16-byte copies cannot read
// (a base, or a leading dimension, not a multiple of 16 bytes: e.g. bfloat16 rows of an odd
// length). The stage is the same as StageCopy's (same rows, same swizzle); a warp reads
// consecutive elements of one stage row (K-major: a row's BK elements of K; else a K row's M / N
// elements), one per lane and load, so that each load instruction touches one or two 128-byte
// lines. Elements past M, N or the split's K end are zeros. A thread's element within its stage
// rows is fixed (THREADS is a multiple of the row length), its rows ROW_STEP apart.
template <typename T, int ROWS, int THREADS, bool K_MAJOR>
struct RegStageCopy {
  static constexpr int E = static_cast<int>(sizeof(T));
  static constexpr int EPC = 16 / E;                     // elements per 16-byte chunk
  static constexpr int BK = 64 / E;                      // K elements per stage
  static constexpr int ROW_ELEMS = K_MAJOR ? BK : ROWS;  // elements per stage row
  static constexpr int COPIES = ROWS * BK / THREADS;
  static constexpr int ROW_STEP = THREADS / ROW_ELEMS;  // stage rows between a thread's copies
  static_assert(THREADS % ROW_ELEMS == 0, "a thread's copies share one element of their rows");
  using Bits = std::conditional_t<E == 4, unsigned int, unsigned short>;
  const Bits* src;  // K-major: element e of the thread's first row at K = 0; else M / N element e
  int row0;         // the first stage row
  int e;            // the element within its stage rows
  int rows_in;      // K-major: operand rows from row0 on inside the matrix
  bool col_in;      // M- / N-major: the thread's column lies inside the matrix
  Bits regs[COPIES];

  // rows_left: M - m0 (or N - n0), the operand rows / columns inside the matrix from the tile on.
  __device__ __forceinline__ RegStageCopy(const T* base, int64_t ld, int rows_left, int64_t mn0) {
    row0 = static_cast<int>(threadIdx.x) / ROW_ELEMS;
    e = static_cast<int>(threadIdx.x) % ROW_ELEMS;
    const Bits* b = reinterpret_cast<const Bits*>(base);
    if constexpr (K_MAJOR) {
      src = b + (mn0 + row0) * ld + e;
      rows_in = rows_left - row0;
      col_in = true;
    } else {
      src = b + mn0 + e;  // + k * ld at each stage row
      rows_in = 0;
      col_in = e < rows_left;
    }
  }

  // Loads the K step of elements k0 .. k0 + BK - 1 (those below k_end) into registers.
  __device__ __forceinline__ void load(int k0, int k_end, int64_t ld) {
#pragma unroll
    for (int i = 0; i < COPIES; ++i) {
      bool ok;
      const Bits* from;
      if constexpr (K_MAJOR) {
        ok = i * ROW_STEP < rows_in && k0 + e < k_end;
        from = src + static_cast<int64_t>(i) * ROW_STEP * ld + k0;
      } else {
        const int k = k0 + row0 + i * ROW_STEP;
        ok = col_in && k < k_end;
        from = src + static_cast<int64_t>(k) * ld;
      }
      regs[i] = ok ? __ldg(from) : Bits(0);
    }
  }

  // Stores the registers into the stage at byte address `stage`, where StageCopy would put them.
  __device__ __forceinline__ void store(uint32_t stage) const {
#pragma unroll
    for (int i = 0; i < COPIES; ++i) {
      const int row = row0 + i * ROW_STEP;
      uint32_t off;
      if constexpr (K_MAJOR) {
        off = swizzle_k(row, e / EPC);
      } else if constexpr (E == 2) {
        off = swizzle_mn<ROWS>(row, e / EPC);
      } else {
        off = swizzle_mn_tf32<ROWS>(row, e / EPC);
      }
      const uint32_t addr = stage + off + (e % EPC) * E;
      if constexpr (E == 2) {
        asm volatile("st.shared.u16 [%0], %1;\n" ::"r"(addr), "h"(regs[i]) : "memory");
      } else {
        asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(regs[i]) : "memory");
      }
    }
  }
};

// C = A B on one Tile::BM x Tile::BN tile per block (and K split, blockIdx.y), of element type DT
// (kMmaF16, kMmaBF16, or kMmaTF32: float32 operands and C, tf32 products). LOAD: how the stages
// are filled (StageLoad: cp.async chunks or words in a ring, or register-staged loads).
template <typename Tile, int DT, bool A_K, bool B_K, int LOAD = kLoadChunks>
__global__ void __launch_bounds__(Tile::THREADS, Tile::MIN_BLOCKS)
    gemm_mma_kernel(const MmaParams p) {
#ifdef LLTM_EXT_NO_CP_ASYNC
  __trap();  // never launched below sm_80: the host reads the loaded image's PTX version first
#else
  using T = MmaElem<DT>;
  constexpr bool TF32 = DT == kMmaTF32;
  constexpr int BM = Tile::BM, BN = Tile::BN, S = Tile::STAGES;
  constexpr int BK = TF32 ? 16 : 32;    // K elements per stage (64 bytes per operand row)
  constexpr int KSTEP = TF32 ? 8 : 16;  // K of one mma
  constexpr int MI = Tile::MI, NI = Tile::NI, THREADS = Tile::THREADS;
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t smem_base = shared_address(smem);
  const T* const a_ptr = static_cast<const T*>(p.a);
  const T* const b_ptr = static_cast<const T*>(p.b);

  // Grouped rasterization: consecutive blocks walk down a group of GROUP_M tile rows, one tile
  // column at a time, so that the blocks in flight reuse the same B columns and A rows from L2.
  int tm, tn;
  {
    const int t = static_cast<int>(blockIdx.x);
    const int per_group = Tile::GROUP_M * p.tiles_n;
    const int first = t / per_group * Tile::GROUP_M;
    const int rows = min(p.tiles_m - first, Tile::GROUP_M);
    const int r = t % per_group;
    tm = first + r % rows;
    tn = r / rows;
  }
  const int m0 = tm * BM, n0 = tn * BN;

  // This block's K split: elements k_begin .. k_end - 1 (k_begin a multiple of BK).
  const int k_begin = static_cast<int>(blockIdx.y) * p.k_split;
  const int k_end = min(p.K, k_begin + p.k_split);
  const int k_tiles = (k_end - k_begin + BK - 1) / BK;
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int wm = warp / Tile::WARPS_N * Tile::WTM, wn = warp % Tile::WARPS_N * Tile::WTN;
  // This lane's fragment addresses, relative to the stage, for the first k step.
  //
  // 16-bit, ldmatrix row addresses. See the fragment layouts of mma.m16n8k16: A's four 8 x 8
  // matrices are (rows 0-7 | 8-15) x (k 0-7 | 8-15) in the order a0 a1 a2 a3 = (0-7, 0-7), (8-15,
  // 0-7), (0-7, 8-15), (8-15, 8-15); a 16-column pair of B's n8 tiles is b[j] = (n 0-7; k 0-7,
  // 8-15), b[j + 1] = (n 8-15; k 0-7, 8-15). The second k16 step needs no registers of its own:
  // K-major, its chunk is this one + 2, i.e. the swizzled offset XOR 32 (the swizzle touches
  // chunk bits 0-1 only; chunk < 2 here); M- / N-major, its K rows are 16 further, with the same
  // k % 8 and so the same swizzle.
  //
  // tf32, K-major: the same ldmatrix addresses. A b16 8 x 8 matrix is 8 rows of four 32-bit words,
  // and ldmatrix hands lane l the word (row l / 4, word l % 4): exactly the tf32 m16n8k8 A / B
  // fragment element (row g = l / 4, k t = l % 4). So a0 a1 a2 a3 = (m 0-7 | 8-15) x (k 0-3 | 4-7)
  // and b0 b1 = k 0-3 | 4-7 are the 16-bit layout's matrices, a chunk (16 bytes) now being 4 K.
  // tf32, M- / N-major: 32-bit loads of element (k t, m / n g) at swizzle_mn_tf32 (its comment
  // has the bank argument); a0 / a2 and b0 / b1 are K rows t and t + 4 (same swizzle, + 4 rows),
  // a1 / a3 the M columns 8 further (offset ^ 32), as is B's odd n8 tile; the second k8 step is 8
  // rows further (same swizzle).
  uint32_t a_off[MI], b_off[NI / 2];
  const int g = lane / 4, t4 = lane % 4;
#pragma unroll
  for (int i = 0; i < MI; ++i) {
    const int m = wm + i * 16;
    if constexpr (A_K) {
      a_off[i] = swizzle_k(m + lane % 16, lane / 16);
    } else if constexpr (TF32) {
      a_off[i] = swizzle_mn_tf32<BM>(t4, (m + g) / 4) + (g % 4) * 4;
    } else {
      a_off[i] = swizzle_mn<BM>(lane % 8 + lane / 16 * 8, (m >> 3) + (lane / 8) % 2);
    }
  }
#pragma unroll
  for (int j = 0; j < NI / 2; ++j) {
    const int n = wn + j * 16;
    if constexpr (B_K) {
      b_off[j] = swizzle_k(n + lane % 8 + lane / 16 * 8, (lane / 8) % 2);
    } else if constexpr (TF32) {
      b_off[j] = swizzle_mn_tf32<BN>(t4, (n + g) / 4) + (g % 4) * 4;
    } else {
      b_off[j] = swizzle_mn<BN>(lane % 8 + (lane / 8) % 2 * 8, (n >> 3) + lane / 16);
    }
  }
  // Fragment offset `off` moved to k step kk (0 or 1): K-major, chunk + 2; else KSTEP rows on.
  constexpr uint32_t A_ROW = BM * sizeof(T), B_ROW = BN * sizeof(T);
  constexpr uint32_t A_STEP = A_K ? 32 : KSTEP * A_ROW, B_STEP = B_K ? 32 : KSTEP * B_ROW;
  auto at_step = [](uint32_t off, int kk, bool k_major, uint32_t step) {
    return kk == 0 ? off : k_major ? off ^ step : off + step;
  };

  float acc[MI][NI][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  // The math of one stage: per k step, the fragments from shared memory, then the mmas.
  auto multiply = [&](int read_stage) {
    const uint32_t a_stage = smem_base + read_stage * Tile::STAGE_BYTES;
    const uint32_t b_stage = a_stage + Tile::A_BYTES;
#pragma unroll
    for (int kk = 0; kk < BK / KSTEP; ++kk) {
      uint32_t af[MI][4], bf[NI][2];
#pragma unroll
      for (int i = 0; i < MI; ++i) {
        const uint32_t addr = a_stage + at_step(a_off[i], kk, A_K, A_STEP);
        if constexpr (TF32 && !A_K) {
          const uint32_t addr8 = a_stage + (at_step(a_off[i], kk, false, A_STEP) ^ 32);
          af[i][0] = lds32(addr);
          af[i][1] = lds32(addr8);
          af[i][2] = lds32(addr + 4 * A_ROW);
          af[i][3] = lds32(addr8 + 4 * A_ROW);
        } else {
          ldmatrix_x4<!A_K>(af[i], addr);
        }
      }
#pragma unroll
      for (int j = 0; j < NI / 2; ++j) {
        const uint32_t addr = b_stage + at_step(b_off[j], kk, B_K, B_STEP);
        if constexpr (TF32 && !B_K) {
          const uint32_t addr8 = b_stage + (at_step(b_off[j], kk, false, B_STEP) ^ 32);
          bf[2 * j][0] = lds32(addr);
          bf[2 * j][1] = lds32(addr + 4 * B_ROW);
          bf[2 * j + 1][0] = lds32(addr8);
          bf[2 * j + 1][1] = lds32(addr8 + 4 * B_ROW);
        } else {
          uint32_t r[4];
          ldmatrix_x4<!B_K>(r, addr);
          bf[2 * j][0] = r[0];
          bf[2 * j][1] = r[1];
          bf[2 * j + 1][0] = r[2];
          bf[2 * j + 1][1] = r[3];
        }
      }
      if constexpr (TF32) {  // float32 bits to tf32, rounded to nearest
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) af[i][e] = to_tf32(af[i][e]);
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) bf[j][e] = to_tf32(bf[j][e]);
      }
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j) mma_16816<DT>(acc[i][j], af[i], bf[j]);
    }
  };

  if constexpr (LOAD != kLoadRegisters) {
    using ACopy = std::conditional_t<LOAD == kLoadChunks, StageCopy<T, BM, THREADS, A_K>,
                                     WordStageCopy<T, BM, THREADS, A_K>>;
    using BCopy = std::conditional_t<LOAD == kLoadChunks, StageCopy<T, BN, THREADS, B_K>,
                                     WordStageCopy<T, BN, THREADS, B_K>>;
    const ACopy a_copy(a_ptr, p.lda, p.M - m0, m0);
    const BCopy b_copy(b_ptr, p.ldb, p.N - n0, n0);
    auto load = [&](int stage, int kt) {
      const uint32_t at = smem_base + stage * Tile::STAGE_BYTES;
      a_copy.copy(at, k_begin + kt * BK, k_end, p.lda, a_ptr);
      b_copy.copy(at + Tile::A_BYTES, k_begin + kt * BK, k_end, p.ldb, b_ptr);
    };
    // The ring: S - 1 steps in flight ahead of the one being multiplied. Every thread commits one
    // group per step, empty past the last K step, so that wait_group's count stays uniform.
#pragma unroll
    for (int s = 0; s < S - 1; ++s) {
      if (s < k_tiles) load(s, s);
      cp_async_commit();
    }
    int read_stage = 0, write_stage = S - 1;
    for (int kt = 0; kt < k_tiles; ++kt) {
      cp_async_wait<S - 2>();  // this thread's copies of step kt have landed ...
      __syncthreads();         // ... and everyone's; step kt - 1's stage is free to refill
      if (kt + S - 1 < k_tiles) load(write_stage, kt + S - 1);
      cp_async_commit();
      multiply(read_stage);
      read_stage = read_stage == S - 1 ? 0 : read_stage + 1;
      write_stage = write_stage == S - 1 ? 0 : write_stage + 1;
    }
    cp_async_wait<0>();  // no copy outlives the block (the groups left are empty)
  } else {
    RegStageCopy<T, BM, THREADS, A_K> a_copy(a_ptr, p.lda, p.M - m0, m0);
    RegStageCopy<T, BN, THREADS, B_K> b_copy(b_ptr, p.ldb, p.N - n0, n0);
    auto load = [&](int kt) {
      a_copy.load(k_begin + kt * BK, k_end, p.lda);
      b_copy.load(k_begin + kt * BK, k_end, p.ldb);
    };
    auto store = [&](int stage) {
      const uint32_t at = smem_base + stage * Tile::STAGE_BYTES;
      a_copy.store(at);
      b_copy.store(at + Tile::A_BYTES);
    };
    // The first S - 1 stages, then per step: the loads of step kt + S - 1 into registers, the
    // math of step kt, and the registers into step kt - 1's stage (free since the barrier).
#pragma unroll
    for (int s = 0; s < S - 1; ++s) {
      if (s < k_tiles) {
        load(s);
        store(s);
      }
    }
    int read_stage = 0, write_stage = S - 1;
    for (int kt = 0; kt < k_tiles; ++kt) {
      __syncthreads();  // step kt's stage is written; step kt - 1's is free to refill
      const bool more = kt + S - 1 < k_tiles;
      if (more) load(kt + S - 1);
      multiply(read_stage);
      if (more) store(write_stage);
      read_stage = read_stage == S - 1 ? 0 : read_stage + 1;
      write_stage = write_stage == S - 1 ? 0 : write_stage + 1;
    }
  }

  // Epilogue, through shared memory so that each store instruction writes whole rows of C
  // (coalesced; 16-byte vectors where C's rows allow), also for odd N: the accumulators as float32
  // into a staging tile of PASS_ROWS rows (padded by 8 floats: the fragment's 8-byte writes hit
  // distinct banks), then copied out by all threads, converted to C's type, into C, or with K
  // splits as float32 into this split's workspace slice (M x N, ld N). Accumulator tile (i, j)
  // holds rows g and g + 8, columns 2 t4 and 2 t4 + 1 of its 16 x 8 tile.
  constexpr int LDS = BN + 8;  // staging row, floats
  constexpr int PASS_ROWS = BM <= Tile::SMEM_BYTES / (LDS * 4)
                                ? BM
                                : Tile::SMEM_BYTES / (LDS * 4) / Tile::WTM * Tile::WTM;
  static_assert(PASS_ROWS >= Tile::WTM && BM % PASS_ROWS == 0, "whole warp rows per pass");
  float* const stage_f = reinterpret_cast<float*>(smem);
  float* const part =
      p.partial != nullptr ? p.partial + static_cast<int64_t>(blockIdx.y) * p.M * p.N : nullptr;
  const int64_t ld_out = part != nullptr ? static_cast<int64_t>(p.N) : p.ldc;
  // 16-byte stores: rows a multiple of 16 bytes apart, the base 16-byte aligned.
  const bool vec_out = part != nullptr ? p.N % 4 == 0 : p.vec_c;
  constexpr int CV = 16 / static_cast<int>(sizeof(T));  // C elements per 16 bytes
#pragma unroll
  for (int pass = 0; pass < BM / PASS_ROWS; ++pass) {
    const int r0 = pass * PASS_ROWS;
    __syncthreads();  // the stages (or the last pass's staging) are free
    if (wm >= r0 && wm < r0 + PASS_ROWS) {
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int j = 0; j < NI; ++j) {
            const int r = wm - r0 + i * 16 + g + h * 8, c = wn + j * 8 + 2 * t4;
            *reinterpret_cast<float2*>(stage_f + r * LDS + c) =
                make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
          }
    }
    __syncthreads();
    const int rows = min(PASS_ROWS, p.M - m0 - r0);
    const int cols = min(BN, p.N - n0);
    if (part != nullptr) {
      float* const out = part + static_cast<int64_t>(m0 + r0) * ld_out + n0;
      if (vec_out) {
        for (int q = threadIdx.x; q < rows * (BN / 4); q += THREADS) {
          const int r = q / (BN / 4), c = q % (BN / 4) * 4;
          if (c + 4 <= cols) {
            *reinterpret_cast<float4*>(out + r * ld_out + c) =
                *reinterpret_cast<const float4*>(stage_f + r * LDS + c);
          } else {
            for (int e = c; e < cols; ++e) out[r * ld_out + e] = stage_f[r * LDS + e];
          }
        }
      } else {
        for (int q = threadIdx.x; q < rows * BN; q += THREADS) {
          const int r = q / BN, c = q % BN;
          if (c < cols) out[r * ld_out + c] = stage_f[r * LDS + c];
        }
      }
    } else {
      T* const out = static_cast<T*>(p.c) + static_cast<int64_t>(m0 + r0) * ld_out + n0;
      auto to_c = [](float v) -> T {
        if constexpr (TF32) {
          return v;
        } else {
          return pack1<DT == kMmaBF16>(v);
        }
      };
      if (vec_out) {
        for (int q = threadIdx.x; q < rows * (BN / CV); q += THREADS) {
          const int r = q / (BN / CV), c = q % (BN / CV) * CV;
          const float* const src = stage_f + r * LDS + c;
          if (c + CV <= cols) {
            if constexpr (TF32) {
              *reinterpret_cast<float4*>(out + r * ld_out + c) =
                  *reinterpret_cast<const float4*>(src);
            } else {
              const float4 lo = *reinterpret_cast<const float4*>(src);
              const float4 hi = *reinterpret_cast<const float4*>(src + 4);
              uint4 v;
              v.x = pack2<DT == kMmaBF16>(lo.x, lo.y);
              v.y = pack2<DT == kMmaBF16>(lo.z, lo.w);
              v.z = pack2<DT == kMmaBF16>(hi.x, hi.y);
              v.w = pack2<DT == kMmaBF16>(hi.z, hi.w);
              *reinterpret_cast<uint4*>(out + r * ld_out + c) = v;
            }
          } else {
            for (int e = c; e < cols; ++e) out[r * ld_out + e] = to_c(src[e - c]);
          }
        }
      } else {
        for (int q = threadIdx.x; q < rows * BN; q += THREADS) {
          const int r = q / BN, c = q % BN;
          if (c < cols) out[r * ld_out + c] = to_c(stage_f[r * LDS + c]);
        }
      }
    }
  }
#endif
}

}  // namespace lltm_ext::gemm_tiles::mma
