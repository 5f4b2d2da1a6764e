// The GEMM's short-K kernel, for products whose K is short beside a larger output (lltm_ext.gemm
// takes it up to a K of 8-16 by dtype): the time there is C's writes and the tile's set-up, not
// the math, so one block
// computes a 64 x 128 tile of C from all of K staged once in shared memory, in float FMAs (exact
// float32; the half types' products are exact in float), and writes C row by row.
//
// 256 threads: warp w owns rows 8w .. 8w + 7 of the tile, lane j its columns j, j + 32, j + 64
// and j + 96, so that each store instruction of a warp writes 32 consecutive elements of a row of
// C (whole sectors at any alignment; lanes owning 4 adjacent columns wrote each sector in four
// partial stores, and the L2's store traffic, not DRAM, bounded the kernel).
// K is staged 32 at a time (any K runs; the sums go in k order, deterministic). The operands'
// loads follow each one's unit stride (coalesced), one element per thread and load, converted to
// float on the way to shared memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "gemm/gemm_launchers.h"         // ShortKCall: what the kernel reads
#include "gemm/tiles/vector_access.cuh"  // tile_cast

namespace lltm_ext::gemm_tiles::short_k {

using lltm_ext::gemm::ShortKCall;

constexpr int kThreads = 256;
constexpr int kRows = 8;                    // rows of the tile per warp (and per thread)
constexpr int kBM = kThreads / 32 * kRows;  // 64
constexpr int kBN = 128;                    // 4 columns per lane
constexpr int kKC = 32;                     // K elements staged per round
// Padding of the staging rows (a multiple of 4 floats keeps float4 reads aligned): the stores of
// an operand read along its other dimension hit 8 banks instead of 1.
constexpr int kPad = 4;

template <typename T>
__global__ void __launch_bounds__(kThreads) short_k_kernel(const ShortKCall p) {
  __shared__ __align__(16) float sa[kBM][kKC + kPad];  // A's chunk, [m][k]
  __shared__ __align__(16) float sb[kKC][kBN + kPad];  // B's chunk, [k][n]
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int64_t tiles_n = (p.N + kBN - 1) / kBN;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) / tiles_n * kBM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) % tiles_n * kBN;
  const T* const a = static_cast<const T*>(p.a);
  const T* const b = static_cast<const T*>(p.b);
  float acc[kRows][4];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[r][j] = 0.0f;
  }
  for (int64_t k0 = 0; k0 < p.K; k0 += kKC) {
    const int kc = static_cast<int>(p.K - k0 < kKC ? p.K - k0 : kKC);
    const int kc4 = (kc + 3) / 4 * 4;  // staged (zeros past kc: 0 * 0 adds nothing)
    if (k0 > 0) __syncthreads();       // the last chunk is read
    for (int q = tid; q < kBM * kc4; q += kThreads) {
      const int r = p.a_kcontig ? q / kc4 : q % kBM;
      const int k = p.a_kcontig ? q % kc4 : q / kBM;
      const int64_t m = m0 + r;
      sa[r][k] = m < p.M && k < kc ? tile_cast<float>(a[m * p.as_m + (k0 + k) * p.as_k]) : 0.0f;
    }
    for (int q = tid; q < kBN * kc4; q += kThreads) {
      const int n = p.b_kcontig ? q / kc4 : q % kBN;
      const int k = p.b_kcontig ? q % kc4 : q / kBN;
      const int64_t col = n0 + n;
      sb[k][n] = col < p.N && k < kc ? tile_cast<float>(b[(k0 + k) * p.bs_k + col * p.bs_n]) : 0.0f;
    }
    __syncthreads();
    for (int k = 0; k < kc4; k += 4) {
      float av[kRows][4];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float4 x = *reinterpret_cast<const float4*>(&sa[warp * kRows + r][k]);
        av[r][0] = x.x, av[r][1] = x.y, av[r][2] = x.z, av[r][3] = x.w;
      }
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        float bv[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) bv[j] = sb[k + kk][lane + 32 * j];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[r][j] = fmaf(av[r][kk], bv[j], acc[r][j]);
        }
      }
    }
  }
  const int64_t n = n0 + lane;
  if (n >= p.N) return;
  T* const c = static_cast<T*>(p.c);
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t m = m0 + warp * kRows + r;
    if (m >= p.M) break;
    T* const out = c + m * p.ldc + n;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (n + 32 * j < p.N) out[32 * j] = tile_cast<T>(acc[r][j]);
    }
  }
}

}  // namespace lltm_ext::gemm_tiles::short_k
