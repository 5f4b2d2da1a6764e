// The split-K reductions: the partial products of the K splits (split-K workspace, or the dense
// tiles of tail split-K) summed into C in a fixed order (split order, or split order within eighths
// of the splits), so that results are deterministic.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/cuda_kernel.cuh"  // pdl_wait
#include "gemm/tiles/tile_position.cuh"
#include "gemm/tiles/vector_access.cuh"

namespace lltm_ext::gemm_tiles {

// Both split-K reductions are programmatic dependent launches (gemm_kernels.cuh): their blocks
// may be scheduled while the GEMM kernel before them ends, and wait for its partials here.

// c[i] = sum over s < splits of partial[s * n + i], in order (deterministic), for i < n.
template <typename Acc, typename OutT>
__global__ void splitk_reduce_kernel(const Acc* __restrict__ partial, OutT* __restrict__ c,
                                     int64_t n, int splits, bool vec) {
  cuda::pdl_wait();
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (vec) {  // n % 4 == 0 and both pointers 4-element aligned
    for (int64_t q = first; q < n / 4; q += stride) {
      Acc v[4] = {Acc(0), Acc(0), Acc(0), Acc(0)};
      for (int s = 0; s < splits; ++s) {
        Acc x[4];
        load_vec4(partial + s * n + 4 * q, x);
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

// The same sum for many splits over few outputs: the 8 warps of a block each add a contiguous
// eighth of the splits, in order, for the same 32 items (4-element chunks where vec, else
// elements; one per lane), then warp 0 adds the eight sums in warp order. The order is a function
// of n and splits alone (deterministic), and a lane waits on splits / 8 loads instead of splits.
template <typename Acc, typename OutT>
__global__ void __launch_bounds__(256)
    splitk_reduce_grouped_kernel(const Acc* __restrict__ partial, OutT* __restrict__ c, int64_t n,
                                 int splits, bool vec) {
  constexpr int kGroups = 8;
  __shared__ Acc sums[kGroups][4][33];  // + 1: the lanes' columns in distinct banks
  cuda::pdl_wait();
  const int lane = static_cast<int>(threadIdx.x) % 32, group = static_cast<int>(threadIdx.x) / 32;
  const int per = (splits + kGroups - 1) / kGroups;
  const int s0 = group * per, s1 = min(splits, s0 + per);
  const int64_t items = vec ? n / 4 : n;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * 32; base < items;
       base += static_cast<int64_t>(gridDim.x) * 32) {
    const int64_t q = base + lane;
    Acc v[4] = {Acc(0), Acc(0), Acc(0), Acc(0)};
    if (q < items) {
      for (int s = s0; s < s1; ++s) {
        if (vec) {
          Acc x[4];
          load_vec4(partial + s * n + 4 * q, x);
#pragma unroll
          for (int j = 0; j < 4; ++j) v[j] += x[j];
        } else {
          v[0] += partial[s * n + q];
        }
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) sums[group][j][lane] = v[j];
    __syncthreads();
    if (group == 0 && q < items) {
      Acc t[4] = {Acc(0), Acc(0), Acc(0), Acc(0)};
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
#pragma unroll
        for (int j = 0; j < 4; ++j) t[j] += sums[g][j][lane];
      }
      if (vec) {
        store4_global(c + 4 * q, t);
      } else {
        c[q] = tile_cast<OutT>(t[0]);
      }
    }
    __syncthreads();  // sums is read before the next items overwrite it
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
    // Columns of this chunk inside C: the partial tiles hold nothing the GEMM kernel did not write
    // past C's last column, so a chunk across that edge is read element by element.
    const int cols = min(4, N - (n0 + col));
    Acc v[4] = {Acc(0), Acc(0), Acc(0), Acc(0)};
    for (int s = 0; s < splits; ++s) {
      const Acc* part = src + s * tile_stride;
      if (cols == 4) {
        Acc x[4];
        load_vec4(part, x);
#pragma unroll
        for (int q4 = 0; q4 < 4; ++q4) v[q4] += x[q4];
      } else {
        for (int q4 = 0; q4 < cols; ++q4) v[q4] += part[q4];
      }
    }
    OutT* dst = c + static_cast<int64_t>(m0 + row) * ldc + n0 + col;
    if (vec_c && n0 + col + 3 < N) {
      store4_global(dst, v);
    } else {
      for (int q4 = 0; q4 < 4 && n0 + col + q4 < N; ++q4) dst[q4] = tile_cast<OutT>(v[q4]);
    }
  }
}

}  // namespace lltm_ext::gemm_tiles
