// The Ampere-style tensor-core GEMM kernel for bfloat16 / float16 (float32 accumulation): a
// cp.async multistage ring in XOR-swizzled shared memory, ldmatrix fragments and
// mma.sync.m16n8k16, for every GPU from sm_80 on that does not run the Hopper wgmma kernel
// (A100, RTX 30xx / 40xx, Blackwell, a 9.0-only build on Hopper). A trap below sm_80.
//
// Design:
//   - block tile BM x BN x 32 (BK: 64 bytes of K per operand row), WARPS_M x WARPS_N warps, each
//     owning a (BM / WARPS_M) x (BN / WARPS_N) warp tile of 16 x 8 mma tiles (float32
//     accumulators in registers); STAGES stages of A and B in dynamic shared memory;
//   - loads: 16-byte cp.async.cg copies, their src-size zero-filling whatever lies past M, N or K
//     (a whole chunk, or the part of a chunk past the K or M / N edge); the host checks that each
//     chunk is 16-byte aligned (base 16-byte aligned, leading dimension a multiple of 8 elements);
//   - operands of either major-ness, read in place: a K-major operand (A row-major, B a
//     transposed row-major matrix) is stored as rows of 32 K (four 16-byte chunks) and read with
//     ldmatrix; an M- / N-major one as 32 rows of K, each BM or BN elements, read with
//     ldmatrix.trans, which hands out the same fragments as the K-major case;
//   - shared memory swizzle (XOR of the 16-byte chunk index): the eight rows an ldmatrix phase
//     reads and the eight chunks a quarter-warp of cp.async writes land in eight distinct bank
//     groups, so neither side has bank conflicts (see SwizzleK / SwizzleMN);
//   - grid: one block per tile, tiles walked column by column within groups of GROUP_M tile rows,
//     so that the blocks resident together share A and B panels in L2;
//   - epilogue: each thread converts its accumulator pairs with round-to-nearest-even and stores
//     them straight to C, two elements (4 bytes) at a time where C's alignment allows, predicated
//     on M and N.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "gemm/tiles/cp_async.cuh"   // cp.async helpers; LLTM_EXT_GEMM_NO_CP_ASYNC below sm_80
#include "gemm/tiles/pack_half.cuh"  // pack2 / pack1: the 16-bit epilogue

namespace lltm_ext::gemm_tiles::mma {

// The shape, warps and shared memory of one block tile.
template <int BM_, int BN_, int WARPS_M_, int WARPS_N_, int STAGES_, int MIN_BLOCKS_>
struct MmaTile {
  static constexpr int BM = BM_, BN = BN_, BK = 32;
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
  // XOR with (k & 7) stays inside the row.
  static_assert(BM % 64 == 0 && BN % 64 == 0, "tiles are multiples of 64 in M and N");
  static_assert(BK == 32, "the fragment offsets of the second k16 step assume four K chunks");
  static_assert(WTM % 16 == 0 && WTN % 16 == 0, "warp tiles are multiples of 16 x 16");
  static_assert(A_BYTES % (16 * THREADS) == 0 && B_BYTES % (16 * THREADS) == 0,
                "every thread copies the same number of 16-byte chunks per stage");
};

// What the kernel reads. A (M x K) and B (K x N) are 16-bit; A_K / B_K (template arguments) say
// which is K-major. C (M x N) is row-major with leading dimension ldc.
struct MmaParams {
  const uint16_t* a;
  const uint16_t* b;
  uint16_t* c;
  int M, N, K;
  int64_t lda, ldb, ldc;
  int tiles_m, tiles_n;
  bool pairs;  // C's base 4-byte aligned and ldc even: two elements per store
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

#ifndef LLTM_EXT_GEMM_NO_CP_ASYNC
// Four 8 x 8 matrices of 16-bit elements from shared memory, one row address per lane (lanes
// 8j..8j+7 give matrix j's rows); TRANS: each matrix transposed on the way.
template <bool TRANS>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  // "memory": ordered after the barrier that publishes the stage, like a plain shared load.
  if constexpr (TRANS) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
  }
}

// d += a b on one 16 x 8 x 16 tile (A row-major, B column-major fragments), float32 accumulators.
template <bool BF16>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4],
                                          const uint32_t (&b)[2]) {
  if constexpr (BF16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}
#endif

// The copies one thread issues for one operand's stage: COPIES 16-byte chunks, chunk q = tid +
// i * THREADS of the stage. ROWS: the operand's BM or BN. K_MAJOR: rows of the tile are the
// operand's M / N rows (four chunks of K each); else K rows of ROWS elements. THREADS is a
// multiple of the chunks per row, so a thread's copies share one chunk column and sit
// THREADS / CPR rows apart: one pointer, one row step and one bound describe them all (few
// registers, beside the accumulators).
template <int ROWS, int THREADS, bool K_MAJOR>
struct StageCopy {
  static constexpr int BK = 32;
  static constexpr int CHUNKS = ROWS * BK / 8;  // 16-byte chunks per stage
  static constexpr int COPIES = CHUNKS / THREADS;
  static constexpr int CPR = K_MAJOR ? BK / 8 : ROWS / 8;  // chunks per stage row
  static constexpr int ROW_STEP = THREADS / CPR;           // stage rows between copies
  static_assert(THREADS % CPR == 0, "a thread's copies share one chunk column");
  const uint16_t* src;  // K_MAJOR: the first row's chunk at K = 0; else the chunk at M / N
  uint32_t dst;         // byte offset of the first copy in the stage
  int row;              // the first copy's stage row
  // K_MAJOR: operand rows from `row` on inside the matrix, and the chunk's K offset; else the
  // bytes of the chunk inside M / N (0-16).
  int rows_in, k_off, mn_bytes;

  // rows_left: M - m0 (or N - n0), the operand rows / columns inside the matrix from the tile on.
  __device__ __forceinline__ StageCopy(const uint16_t* base, int64_t ld, int rows_left,
                                       int64_t mn0) {
    row = static_cast<int>(threadIdx.x) / CPR;
    const int chunk = static_cast<int>(threadIdx.x) % CPR;
    if constexpr (K_MAJOR) {
      dst = swizzle_k(row, chunk);
      src = base + (mn0 + row) * ld + chunk * 8;
      rows_in = rows_left - row;
      k_off = chunk * 8;
    } else {
      dst = swizzle_mn<ROWS>(row, chunk);
      src = base + mn0 + chunk * 8;  // + k * ld at each stage
      mn_bytes = min(max(rows_left - chunk * 8, 0), 8) * 2;
    }
  }

  // Copies K step kt (K elements kt * 32 .. + 31) into the stage at byte address `stage`.
  __device__ __forceinline__ void copy(uint32_t stage, int kt, int K, int64_t ld,
                                       const uint16_t* base) const {
    const int k0 = kt * BK;
#pragma unroll
    for (int i = 0; i < COPIES; ++i) {
      // Row i * ROW_STEP further: in both layouts the same swizzle phase (ROW_STEP is a multiple
      // of 8 K rows, or of 8 M / N rows), so its offset is the first one's plus whole rows.
      const uint32_t to = dst + i * ROW_STEP * (K_MAJOR ? 64 : ROWS * 2);
      int bytes;
      const uint16_t* from;
      if constexpr (K_MAJOR) {
        bytes = i * ROW_STEP < rows_in ? min(max(K - k0 - k_off, 0), 8) * 2 : 0;
        from = src + i * ROW_STEP * ld + k0;
      } else {
        const int k = k0 + row + i * ROW_STEP;
        bytes = k < K ? mn_bytes : 0;
        from = src + static_cast<int64_t>(k) * ld;
      }
      // Nothing to read: a zero fill from the operand's base, a mapped address.
      cp_async<16>(stage + to, bytes > 0 ? from : base, bytes);
    }
  }
};

// C = A B on one Tile::BM x Tile::BN tile per block, bfloat16 (BF16) or float16.
template <typename Tile, bool BF16, bool A_K, bool B_K>
__global__ void __launch_bounds__(Tile::THREADS, Tile::MIN_BLOCKS)
    gemm_mma_kernel(const MmaParams p) {
#ifdef LLTM_EXT_GEMM_NO_CP_ASYNC
  __trap();  // never launched below sm_80: the host reads the loaded image's PTX version first
#else
  constexpr int BM = Tile::BM, BN = Tile::BN, BK = Tile::BK, S = Tile::STAGES;
  constexpr int MI = Tile::MI, NI = Tile::NI, THREADS = Tile::THREADS;
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t smem_base = shared_address(smem);

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

  const StageCopy<BM, THREADS, A_K> a_copy(p.a, p.lda, p.M - m0, m0);
  const StageCopy<BN, THREADS, B_K> b_copy(p.b, p.ldb, p.N - n0, n0);
  const int k_tiles = (p.K + BK - 1) / BK;
  auto load = [&](int stage, int kt) {
    const uint32_t at = smem_base + stage * Tile::STAGE_BYTES;
    a_copy.copy(at, kt, p.K, p.lda, p.a);
    b_copy.copy(at + Tile::A_BYTES, kt, p.K, p.ldb, p.b);
  };

  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int wm = warp / Tile::WARPS_N * Tile::WTM, wn = warp % Tile::WARPS_N * Tile::WTN;
  // This lane's ldmatrix row addresses, relative to the stage, for the first k16 step. See the
  // fragment layouts of mma.m16n8k16: A's four 8 x 8 matrices are (rows 0-7 | 8-15) x (k 0-7 |
  // 8-15) in the order a0 a1 a2 a3 = (0-7, 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15); a
  // 16-column pair of B's n8 tiles is b[j] = (n 0-7; k 0-7, 8-15), b[j + 1] = (n 8-15; k 0-7,
  // 8-15). The second k16 step needs no registers of its own: K-major, its chunk is this one + 2,
  // i.e. the swizzled offset XOR 32 (the swizzle touches chunk bits 0-1 only; chunk < 2 here);
  // M- / N-major, its K rows are 16 further, with the same k % 8 and so the same swizzle.
  uint32_t a_off[MI], b_off[NI / 2];
#pragma unroll
  for (int i = 0; i < MI; ++i) {
    const int m = wm + i * 16;
    a_off[i] = A_K ? swizzle_k(m + lane % 16, lane / 16)
                   : swizzle_mn<BM>(lane % 8 + lane / 16 * 8, (m >> 3) + (lane / 8) % 2);
  }
#pragma unroll
  for (int j = 0; j < NI / 2; ++j) {
    const int n = wn + j * 16;
    b_off[j] = B_K ? swizzle_k(n + lane % 8 + lane / 16 * 8, (lane / 8) % 2)
                   : swizzle_mn<BN>(lane % 8 + (lane / 8) % 2 * 8, (n >> 3) + lane / 16);
  }
  // Fragment offset `off` moved to k16 step kk (0 or 1).
  constexpr uint32_t A_STEP = A_K ? 32 : 16 * BM * 2, B_STEP = B_K ? 32 : 16 * BN * 2;
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
    const uint32_t a_stage = smem_base + read_stage * Tile::STAGE_BYTES;
    const uint32_t b_stage = a_stage + Tile::A_BYTES;
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      uint32_t af[MI][4], bf[NI][2];
#pragma unroll
      for (int i = 0; i < MI; ++i) {
        ldmatrix_x4<!A_K>(af[i], a_stage + at_step(a_off[i], kk, A_K, A_STEP));
      }
#pragma unroll
      for (int j = 0; j < NI / 2; ++j) {
        uint32_t r[4];
        ldmatrix_x4<!B_K>(r, b_stage + at_step(b_off[j], kk, B_K, B_STEP));
        bf[2 * j][0] = r[0];
        bf[2 * j][1] = r[1];
        bf[2 * j + 1][0] = r[2];
        bf[2 * j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j) mma_16816<BF16>(acc[i][j], af[i], bf[j]);
    }
    read_stage = read_stage == S - 1 ? 0 : read_stage + 1;
    write_stage = write_stage == S - 1 ? 0 : write_stage + 1;
  }
  cp_async_wait<0>();  // no copy outlives the block (the groups left are empty)

  // Epilogue. Accumulator tile (i, j) holds rows g and g + 8 (g = lane / 4), columns 2 (lane % 4)
  // and + 1 of the 16 x 8 tile: each pair converted together and stored as one 4-byte word.
  const int g = lane / 4, c2 = lane % 4 * 2;
#pragma unroll
  for (int i = 0; i < MI; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = m0 + wm + i * 16 + g + h * 8;
      if (row >= p.M) continue;
      uint16_t* const c_row = p.c + static_cast<int64_t>(row) * p.ldc;
#pragma unroll
      for (int j = 0; j < NI; ++j) {
        const int col = n0 + wn + j * 8 + c2;
        const float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
        if (p.pairs && col + 1 < p.N) {
          *reinterpret_cast<uint32_t*>(c_row + col) = pack2<BF16>(v0, v1);
        } else {
          if (col < p.N) c_row[col] = pack1<BF16>(v0);
          if (col + 1 < p.N) c_row[col + 1] = pack1<BF16>(v1);
        }
      }
    }
  }
#endif
}

}  // namespace lltm_ext::gemm_tiles::mma
