// The GEMM's small-product kernel (bfloat16 / float16, sm_80 on): for products whose output is a
// few tiles and whose K is at most a few hundred, where the time is one tile's latency rather than
// throughput. One block of 8 warps computes a 32 x 32 tile of C, the warps splitting K between them
// (16 elements at a time, warp w taking steps w, w + 8, ...): each warp loads its mma fragments
// straight from global memory (one element per load, any strides and alignment; rows past M / N
// read row M - 1 / N - 1, whose products land in rows and columns never stored, and k past K reads
// zeros), runs m16n8k16 into float32 accumulators, and the 8 warps' partial tiles are summed in
// warp order through shared memory (deterministic) and written row by row, a warp's store covering
// 32 consecutive elements of a row. No shared-memory staging of the operands, no second launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/mma_sync.cuh"
#include "gemm/gemm_launchers.h"     // ShortKCall: what the kernel reads
#include "gemm/tiles/pack_half.cuh"  // pack1: the epilogue's rounding

namespace lltm_ext::gemm_tiles::small_mma {

using lltm_ext::gemm::ShortKCall;

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kBM = 32, kBN = 32;  // the tile: 2 x 4 mma tiles of 16 x 8, every warp all of them
constexpr int kMI = kBM / 16, kNI = kBN / 8;
constexpr int kMaxK = 512;        // 4 k16 steps per warp
constexpr int kRedRow = kBN + 1;  // the reduction's rows, padded (float)

__device__ __forceinline__ uint32_t pair(uint16_t lo, uint16_t hi) {
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}

// C = A B for K <= kMaxK, DT kMmaBF16 or kMmaF16 (operands and C of that type, as raw 16 bits).
template <int DT>
__global__ void __launch_bounds__(kThreads) small_mma_kernel(const ShortKCall p) {
  constexpr bool BF16 = DT == lltm_ext::cuda::kMmaBF16;
  __shared__ float red[kWarps][kBM][kRedRow];
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t tiles_n = (p.N + kBN - 1) / kBN;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) / tiles_n * kBM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) % tiles_n * kBN;
  const uint16_t* const a = static_cast<const uint16_t*>(p.a);
  const uint16_t* const b = static_cast<const uint16_t*>(p.b);

  // The lane's rows of A (mi, upper half) and columns of B (ni), clamped into the matrices.
  const uint16_t* arow[kMI][2];
#pragma unroll
  for (int i = 0; i < kMI; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t m = m0 + i * 16 + g + 8 * h;
      arow[i][h] = a + (m < p.M ? m : p.M - 1) * p.as_m;
    }
  }
  const uint16_t* bcol[kNI];
#pragma unroll
  for (int j = 0; j < kNI; ++j) {
    const int64_t n = n0 + j * 8 + g;
    bcol[j] = b + (n < p.N ? n : p.N - 1) * p.bs_n;
  }

  float acc[kMI][kNI][4];
#pragma unroll
  for (int i = 0; i < kMI; ++i) {
#pragma unroll
    for (int j = 0; j < kNI; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
    }
  }
  for (int64_t k0 = 16 * warp; k0 < p.K; k0 += 16 * kWarps) {
    // The lane's four k: 2t, 2t + 1, 2t + 8, 2t + 9 of the step (m16n8k16's fragment pairs).
    int64_t ka[4], kb[4];
    bool kin[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int64_t k = k0 + 2 * t + (q & 1) + 8 * (q >> 1);
      kin[q] = k < p.K;
      ka[q] = k * p.as_k;
      kb[q] = k * p.bs_k;
    }
    uint16_t av[kMI][2][4], bv[kNI][4];
#pragma unroll
    for (int i = 0; i < kMI; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int q = 0; q < 4; ++q) av[i][h][q] = kin[q] ? arow[i][h][ka[q]] : uint16_t{0};
      }
    }
#pragma unroll
    for (int j = 0; j < kNI; ++j) {
#pragma unroll
      for (int q = 0; q < 4; ++q) bv[j][q] = kin[q] ? bcol[j][kb[q]] : uint16_t{0};
    }
    uint32_t bf[kNI][2];
#pragma unroll
    for (int j = 0; j < kNI; ++j) {
      bf[j][0] = pair(bv[j][0], bv[j][1]);
      bf[j][1] = pair(bv[j][2], bv[j][3]);
    }
#pragma unroll
    for (int i = 0; i < kMI; ++i) {
      // a = {A[g][2t..], A[g + 8][2t..], A[g][2t + 8..], A[g + 8][2t + 8..]}.
      const uint32_t af[4] = {pair(av[i][0][0], av[i][0][1]), pair(av[i][1][0], av[i][1][1]),
                              pair(av[i][0][2], av[i][0][3]), pair(av[i][1][2], av[i][1][3])};
#pragma unroll
      for (int j = 0; j < kNI; ++j) lltm_ext::cuda::mma_16816<DT>(acc[i][j], af, bf[j]);
    }
  }

  // d = {D[g][2t], D[g][2t + 1], D[g + 8][2t], D[g + 8][2t + 1]} of each 16 x 8 tile.
#pragma unroll
  for (int i = 0; i < kMI; ++i) {
#pragma unroll
    for (int j = 0; j < kNI; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        red[warp][i * 16 + g + 8 * (e >> 1)][j * 8 + 2 * t + (e & 1)] = acc[i][j][e];
      }
    }
  }
  __syncthreads();
  uint16_t* const c = static_cast<uint16_t*>(p.c);
  const int col = tid % kBN;
  const int64_t n = n0 + col;
#pragma unroll
  for (int r = tid / kBN; r < kBM; r += kThreads / kBN) {
    const int64_t m = m0 + r;
    if (m >= p.M || n >= p.N) continue;
    float sum = red[0][r][col];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) sum += red[w][r][col];
    c[m * p.ldc + n] = pack1<BF16>(sum);
  }
}

}  // namespace lltm_ext::gemm_tiles::small_mma
