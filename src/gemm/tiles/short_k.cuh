// The GEMM's short-K kernel, for products whose K is short beside a larger output (lltm_ext.gemm
// takes it up to a K of 8 to 64 by dtype and output size): the time there is C's writes and the
// operands' load latency, not the math, so a block keeps the loads in flight while it computes and
// writes. Each block computes 64 x 128 tiles of C in float FMAs (exact float32; the half types'
// products are exact in float), from K staged 16 at a time in shared memory, and writes C row by
// row.
//
// The grid is persistent (at most kBlocksPerSm blocks per SM, each taking every gridDim.x-th
// tile): a block's work is a sequence of (tile, K chunk) items, and the operands of the next item
// are loaded into registers while the current one is computed and its tile written, so that the
// global loads' latency hides behind the math and the stores (one block per tile staged its chunk,
// waited, then computed: the latency of each chunk's loads stood between them).
//
// 256 threads: warp w owns rows 8w .. 8w + 7 of the tile, lane j its columns j, j + 32, j + 64
// and j + 96, so that each store instruction of a warp writes 32 consecutive elements of a row of
// C (whole sectors at any alignment; lanes owning 4 adjacent columns wrote each sector in four
// partial stores, and the L2's store traffic, not DRAM, bounded the kernel). A chunk's loads
// follow each operand's unit stride (coalesced), a fixed number per thread (4 of A, 8 of B),
// converted to float on the way to shared memory. The sums go in k order (deterministic).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "gemm/gemm_launchers.h"         // ShortKCall: what the kernel reads
#include "gemm/tiles/vector_access.cuh"  // tile_cast

namespace lltm_ext::gemm_tiles::short_k {

using lltm_ext::gemm::ShortKCall;

constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 2;                    // resident blocks the registers are sized for
constexpr int kRows = 8;                           // rows of the tile per warp (and per thread)
constexpr int kBM = lltm_ext::gemm::kShortKTileM;  // 64: 8 warps of kRows rows
constexpr int kBN = lltm_ext::gemm::kShortKTileN;  // 128: 4 columns per lane
static_assert(kBM == kThreads / 32 * kRows && kBN == 4 * 32,
              "one warp per 8 rows, 4 columns a lane");
// K elements staged per item: 16 keeps the next item's loads, the sums and a step's operands in
// the 128 registers that two blocks per SM leave a thread (32 spilled, and the spills cost most
// at the smallest products).
constexpr int kKC = 16;
constexpr int kLoadsA = kBM * kKC / kThreads;  // 4 elements of A per thread and chunk
constexpr int kLoadsB = kKC * kBN / kThreads;  // 8 of B
// Padding of the staging rows (a multiple of 4 floats keeps float4 reads aligned): the stores of
// an operand read along its other dimension hit 8 banks instead of 1.
constexpr int kPad = 4;

// Where the i-th element a thread loads of a chunk sits in the operand's staging tile: (m, k) of
// A's [kKC][kBM] or (n, k) of B's [kKC][kBN], consecutive threads along the unit stride. It is
// affine in i (other + i * d_other, k + i * d_k), so that a thread's loads take one address and
// one step, not one 64-bit address each.
struct Slots {
  int other, k, d_other, d_k;
};

template <int kOther>
__device__ __forceinline__ Slots chunk_slots(bool kcontig, int tid) {
  constexpr int kRowsPerPass = kThreads / kKC, kKPerPass = kThreads / kOther;
  return kcontig ? Slots{tid / kKC, tid % kKC, kRowsPerPass, 0}
                 : Slots{tid % kOther, tid / kOther, 0, kKPerPass};
}

template <typename T>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) short_k_kernel(const ShortKCall p) {
  __shared__ __align__(16) float sa[kKC][kBM + kPad];  // A's chunk, [k][m]
  __shared__ __align__(16) float sb[kKC][kBN + kPad];  // B's chunk, [k][n]
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int64_t tiles_n = (p.N + kBN - 1) / kBN;
  const int64_t tiles = (p.M + kBM - 1) / kBM * tiles_n;
  const T* const a = static_cast<const T*>(p.a);
  const T* const b = static_cast<const T*>(p.b);
  float ra[kLoadsA], rb[kLoadsB];  // the next item's operands, in flight

  const Slots sa_at = chunk_slots<kBM>(p.a_kcontig, tid),
              sb_at = chunk_slots<kBN>(p.b_kcontig, tid);
  const int64_t a_step = sa_at.d_other * p.as_m + sa_at.d_k * p.as_k;
  const int64_t b_step = sb_at.d_other * p.bs_n + sb_at.d_k * p.bs_k;

  // Issues the loads of the chunk at k0 of tile t into ra / rb (zeros outside the operands). The
  // addresses step along (not i * step: hoisted out of the tile loop, those took registers).
  const auto fetch = [&](int64_t t, int64_t k0) {
    const int kc = static_cast<int>(p.K - k0 < kKC ? p.K - k0 : kKC);
    const int64_t m = t / tiles_n * kBM + sa_at.other, n = t % tiles_n * kBN + sb_at.other;
    const int64_t rows_left = p.M - m, cols_left = p.N - n;
    const T* pa = a + m * p.as_m + (k0 + sa_at.k) * p.as_k;
    const T* pb = b + n * p.bs_n + (k0 + sb_at.k) * p.bs_k;
#pragma unroll
    for (int i = 0; i < kLoadsA; ++i, pa += a_step) {
      const bool in = i * sa_at.d_other < rows_left && sa_at.k + i * sa_at.d_k < kc;
      ra[i] = in ? tile_cast<float>(*pa) : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kLoadsB; ++i, pb += b_step) {
      const bool in = i * sb_at.d_other < cols_left && sb_at.k + i * sb_at.d_k < kc;
      rb[i] = in ? tile_cast<float>(*pb) : 0.0f;
    }
  };

  float acc[kRows][4];
  int64_t tile = blockIdx.x, k0 = 0;
  if (tile < tiles) fetch(tile, 0);
  while (tile < tiles) {
    __syncthreads();  // the last item's chunk is read
    {
      float* const sa_first = &sa[sa_at.k][sa_at.other];
      const int sa_step = sa_at.d_k * (kBM + kPad) + sa_at.d_other;
      float* to = sa_first;
#pragma unroll
      for (int i = 0; i < kLoadsA; ++i, to += sa_step) *to = ra[i];
      float* const sb_first = &sb[sb_at.k][sb_at.other];
      const int sb_step = sb_at.d_k * (kBN + kPad) + sb_at.d_other;
      to = sb_first;
#pragma unroll
      for (int i = 0; i < kLoadsB; ++i, to += sb_step) *to = rb[i];
    }
    __syncthreads();
    // The next item: this tile's next chunk, or the block's next tile from its first.
    const int64_t kc = p.K - k0 < kKC ? p.K - k0 : kKC;
    const bool last_chunk = k0 + kKC >= p.K;
    const int64_t next_tile = last_chunk ? tile + gridDim.x : tile;
    const int64_t next_k0 = last_chunk ? 0 : k0 + kKC;
    if (next_tile < tiles) fetch(next_tile, next_k0);

    if (k0 == 0) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[r][j] = 0.0f;
      }
    }
    const int kc4 = static_cast<int>(kc + 3) / 4 * 4;  // staged zeros past kc add nothing
#pragma unroll 4
    for (int k = 0; k < kc4; ++k) {
      float av[kRows], bv[4];
      const float4 lo = *reinterpret_cast<const float4*>(&sa[k][warp * kRows]);
      const float4 hi = *reinterpret_cast<const float4*>(&sa[k][warp * kRows + 4]);
      av[0] = lo.x, av[1] = lo.y, av[2] = lo.z, av[3] = lo.w;
      av[4] = hi.x, av[5] = hi.y, av[6] = hi.z, av[7] = hi.w;
#pragma unroll
      for (int j = 0; j < 4; ++j) bv[j] = sb[k][lane + 32 * j];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[r][j] = fmaf(av[r], bv[j], acc[r][j]);
      }
    }
    if (last_chunk) {
      const int64_t m0 = tile / tiles_n * kBM, n = tile % tiles_n * kBN + lane;
      T* const c = static_cast<T*>(p.c);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int64_t m = m0 + warp * kRows + r;
        if (m < p.M && n < p.N) {
          T* const out = c + m * p.ldc + n;
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            if (n + 32 * j < p.N) out[32 * j] = tile_cast<T>(acc[r][j]);
          }
        }
      }
    }
    tile = next_tile;
    k0 = next_k0;
  }
}

}  // namespace lltm_ext::gemm_tiles::short_k
