// The GEMM's matrix-vector kernels, for products with one small side (M or N of at most 4): each
// reads the large operand once, coalesced, at memory speed, and accumulates in float (double for
// float64) in a fixed order. Any strides with one of the large operand's dimensions contiguous.
//
// The problem, in the large operand's terms: out[l, s] = sum over k of X[l, k] Y[k, s], for l < L
// (the large side: N when M is small, else M), s < S <= S_MAX (the small side), k in this block's
// K split. Two kernels, by X's unit-stride dimension:
//   - gemv_rows_kernel (X K-contiguous): TPR threads per row of X (a few lanes for a short K, up to
//     8 warps for a long one), striding over K with 16-byte loads (each row cut at its own
//     16-byte boundaries: any row stride), Y staged in shared memory a chunk of K at a time (so
//     that Y's reads cost no more than X's; padded where X's rows start off 16-byte boundaries,
//     so that its element reads meet no bank conflicts); shuffle sums within a row's lanes, then
//     a row's warps summed through shared memory;
//   - gemv_cols_kernel (X L-contiguous): 32 consecutive l per block (one per lane: coalesced), its
//     8 warps striding over K; the warps' sums added through shared memory.
// With gridDim.y > 1 each block row of the grid takes one K split and writes its float partials
// to its M x N slice of `partial` (the host sums them in split order), else the result to out.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "gemm/gemm_launchers.h"         // GemvCall: what the kernels read
#include "gemm/tiles/vector_access.cuh"  // tile_cast

namespace lltm_ext::gemm_tiles::gemv {

using lltm_ext::gemm::GemvCall;

constexpr int kThreads = 256;

// Adds x * Y[k, s] to acc[s] for each s < S.
template <typename T, typename Acc, int S_MAX>
__device__ __forceinline__ void fma_row(Acc (&acc)[S_MAX], Acc x, const T* y, int64_t k,
                                        int64_t ys_k, int64_t ys_s, int S) {
#pragma unroll
  for (int s = 0; s < S_MAX; ++s) {
    if (s < S) acc[s] += x * tile_cast<Acc>(y[k * ys_k + s * ys_s]);
  }
}

// Writes the S sums of row l: to out, or (K splits) to this split's partial slice.
template <typename T, typename Acc, int S_MAX>
__device__ __forceinline__ void write_sums(const GemvCall& p, int64_t l, const Acc (&sum)[S_MAX]) {
#pragma unroll
  for (int s = 0; s < S_MAX; ++s) {
    if (s >= p.S) continue;
    const int64_t at = l * p.os_l + s * p.os_s;
    if (p.partial != nullptr) {
      static_cast<Acc*>(p.partial)[blockIdx.y * p.slice + at] = sum[s];
    } else {
      static_cast<T*>(p.out)[at] = tile_cast<T>(sum[s]);
    }
  }
}

// Y's K elements staged in shared memory per chunk by gemv_rows_kernel (32 KB: K up to 8192 float
// elements in one chunk, one round of staging and barriers).
template <typename Acc>
inline constexpr int kChunk = 32768 / static_cast<int>(sizeof(Acc));

template <typename T, typename Acc, int S_MAX>
__global__ void __launch_bounds__(kThreads) gemv_rows_kernel(const GemvCall p) {
  constexpr int CH = kChunk<Acc> / S_MAX;
  // Where X's rows do not all start on 16-byte boundaries (its base or row stride), a lane's run
  // of V elements starts off them in Y's chunk too, and Y is read one element at a time: lanes
  // V elements apart would then meet in the same shared-memory banks (8 ways for 16-bit types).
  // So there Y's chunk is staged with one element of padding after every 32 (element k at
  // k + k / 32: the lanes' reads fall in distinct banks), in chunks of CHP elements to fit.
  constexpr int CHP = CH * 32 / 33 / 32 * 32;
  static_assert(CHP + CHP / 32 <= CH, "the padded chunk fits the staging buffer");
  const bool pad = reinterpret_cast<uintptr_t>(p.x) % 16 != 0 ||
                   p.xs_l * static_cast<int64_t>(sizeof(T)) % 16 != 0;
  const int ch = pad ? CHP : CH;
  const auto at = [pad](int k) { return pad ? k + k / 32 : k; };
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int tpr = p.tpr;  // threads per row: a power of two, 1 to kThreads
  const int64_t l = static_cast<int64_t>(blockIdx.x) * (kThreads / tpr) + threadIdx.x / tpr;
  const int part = static_cast<int>(threadIdx.x) % tpr;  // the thread's share of the row's K
  const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * p.k_split;
  const int64_t k_end = min(p.K, k_begin + p.k_split);
  const T* const y = static_cast<const T*>(p.y);
  const T* const row = static_cast<const T*>(p.x) + min(l, p.L - 1) * p.xs_l;
  // Y's chunk as Acc, [s][k].
  __shared__ __align__(16) Acc ys[S_MAX][CH];
  Acc acc[S_MAX];
#pragma unroll
  for (int s = 0; s < S_MAX; ++s) acc[s] = Acc(0);
  for (int64_t c0 = k_begin; c0 < k_end; c0 += ch) {  // c0 - k_begin: a multiple of ch
    const int n = static_cast<int>(k_end - c0 < ch ? k_end - c0 : ch);
    __syncthreads();  // the last chunk is read
    for (int q = static_cast<int>(threadIdx.x); q < n * p.S; q += kThreads) {
      const int s = q / n, k = q % n;
      ys[s][at(k)] = tile_cast<Acc>(y[(c0 + k) * p.ys_k + s * p.ys_s]);
    }
    __syncthreads();
    if (l >= p.L) continue;
    // The row's chunk cut at X's own 16-byte boundaries: `head` elements before the first one,
    // then whole 16-byte runs, then the tail (any base and row stride: element-aligned only).
    constexpr int V = 16 / static_cast<int>(sizeof(T));
    const int head = min(
        n, static_cast<int>((16 - reinterpret_cast<uintptr_t>(row + c0) % 16) % 16 / sizeof(T)));
    const int runs = (n - head) / V, body_end = head + runs * V;
    // ALIGNED (!pad, and so head 0 in every row): k is a multiple of V, so that Y's run is read
    // from shared memory in 16-byte loads too (with S = 3 or 4 the scalar reads of Y's runs cost
    // more than X's loads); else one element at a time from the padded chunk.
    auto runs_of = [&](auto aligned) {
      constexpr bool ALIGNED = decltype(aligned)::value;
#pragma unroll 2
      for (int q = part; q < runs; q += tpr) {
        const int k = (ALIGNED ? 0 : head) + q * V;
        const uint4 bits = __ldg(reinterpret_cast<const uint4*>(row + c0 + k));
        T v[V];
        __builtin_memcpy(v, &bits, sizeof(bits));
#pragma unroll
        for (int s = 0; s < S_MAX; ++s) {
          if (s >= p.S) continue;
#pragma unroll
          for (int e = 0; e < V; ++e) {
            acc[s] += tile_cast<Acc>(v[e]) * ys[s][ALIGNED ? k + e : at(k + e)];
          }
        }
      }
    };
    if (!pad && head == 0) {
      runs_of(std::true_type{});
    } else {
      runs_of(std::false_type{});
    }
    // The head and the tail, one element per thread.
    const int scalars = head + (n - body_end);
    for (int j = part; j < scalars; j += tpr) {
      const int k = j < head ? j : body_end + (j - head);
      const Acc x = tile_cast<Acc>(row[c0 + k]);
#pragma unroll
      for (int s = 0; s < S_MAX; ++s) {
        if (s < p.S) acc[s] += x * ys[s][at(k)];
      }
    }
  }
  // The row's sum: across its lanes by shuffles (offsets below tpr stay inside the row's lanes),
  // then, past a warp per row, across its warps through shared memory.
#pragma unroll
  for (int s = 0; s < S_MAX; ++s) {
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
      if (off < tpr) acc[s] += __shfl_xor_sync(0xffffffffu, acc[s], off);
    }
  }
  if (tpr <= 32) {
    if (part == 0 && l < p.L) write_sums<T, Acc, S_MAX>(p, l, acc);
    return;
  }
  const int wpr = tpr / 32;
  __shared__ Acc sums[kThreads / 32][S_MAX];
  if (lane == 0) {
#pragma unroll
    for (int s = 0; s < S_MAX; ++s) sums[warp][s] = acc[s];
  }
  __syncthreads();
  if (part == 0 && l < p.L) {
    Acc total[S_MAX];
#pragma unroll
    for (int s = 0; s < S_MAX; ++s) {
      total[s] = Acc(0);
      for (int w = 0; w < wpr; ++w) total[s] += sums[warp + w][s];
    }
    write_sums<T, Acc, S_MAX>(p, l, total);
  }
}

template <typename T, typename Acc, int S_MAX>
__global__ void __launch_bounds__(kThreads) gemv_cols_kernel(const GemvCall p) {
  constexpr int GROUPS = kThreads / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32, group = static_cast<int>(threadIdx.x) / 32;
  const int64_t l = static_cast<int64_t>(blockIdx.x) * 32 + lane;
  const T* const x = static_cast<const T*>(p.x);
  const T* const y = static_cast<const T*>(p.y);
  const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * p.k_split;
  const int64_t k_end = min(p.K, k_begin + p.k_split);
  Acc acc[S_MAX];
#pragma unroll
  for (int s = 0; s < S_MAX; ++s) acc[s] = Acc(0);
  if (l < p.L) {
#pragma unroll 4
    for (int64_t k = k_begin + group; k < k_end; k += GROUPS) {
      fma_row<T, Acc, S_MAX>(acc, tile_cast<Acc>(x[l + k * p.xs_k]), y, k, p.ys_k, p.ys_s, p.S);
    }
  }
  __shared__ Acc sums[GROUPS][S_MAX][33];  // + 1: the 32 lanes' columns in distinct banks
#pragma unroll
  for (int s = 0; s < S_MAX; ++s) sums[group][s][lane] = acc[s];
  __syncthreads();
  if (group == 0 && l < p.L) {
    Acc total[S_MAX];
#pragma unroll
    for (int s = 0; s < S_MAX; ++s) {
      total[s] = Acc(0);
#pragma unroll
      for (int g = 0; g < GROUPS; ++g) total[s] += sums[g][s][lane];
    }
    write_sums<T, Acc, S_MAX>(p, l, total);
  }
}

}  // namespace lltm_ext::gemm_tiles::gemv
