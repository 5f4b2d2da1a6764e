// A float32 matrix transpose for the TF32 GEMM's K-major operand copies (and, split into tf32 big
// and small parts, the exact float32 GEMM's): 64 x 64 tiles through shared memory, 16-byte loads
// and stores, tiles walked in column order.
//
// A block of 256 threads takes a 64 x 64 tile of the input: 16-byte loads (a warp reads 2 rows x
// 256 contiguous bytes), scalar stores into shared-memory rows padded to 65 floats (2-way bank
// conflicts at most, both ways), then 16-byte stores of output rows gathered from four tile rows
// (a warp writes 2 rows x 256 contiguous bytes). Consecutive tiles go down the input's rows
// within one 64-column band, so the blocks running at once write long runs of each output row.
// Measured on an H200 (docs/gemm_notes.md): near a plain copy's bandwidth, far ahead of
// register-only 4 x 4 transposes and ahead of this kernel in row order. Figures:
// docs/decisions.md#transpose-f32.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "gemm/tiles/split_tf32.cuh"

namespace lltm_ext::gemm_tiles {

inline constexpr int kTransposeTile = 64, kTransposeThreads = 256;

// out (C x ld_out, row-major) = in (R x C, row-major, leading dimension ld_in) transposed:
// out[c * ld_out + r] = in[r * ld_in + c] for r < R, and 0 for R <= r < round_up(R, 4) (ld_out
// is a multiple of 4 and at least round_up(R, 4); out is 16-byte aligned). VEC: in is 16-byte
// aligned and ld_in % 4 == 0 (or R == 1): 16-byte loads wherever four columns are in range.
// Persistent over the tiles: tiles_r tile rows of 64 input rows, tiles in all. SPLIT: out's rows
// hold the tf32 big parts, and the C rows after them the small parts (tf32_split).
template <bool VEC, bool SPLIT = false>
__global__ void __launch_bounds__(kTransposeThreads)
    transpose_f32_kernel(const float* __restrict__ in, float* __restrict__ out, int64_t R,
                         int64_t C, int64_t ld_in, int64_t ld_out, int64_t tiles_r, int64_t tiles) {
  __shared__ float tile[kTransposeTile][kTransposeTile + 1];
  const int q = threadIdx.x % 16, row = threadIdx.x / 16;  // 16-byte column q of rows row + 16 i
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t r0 = (t % tiles_r) * kTransposeTile, c0 = (t / tiles_r) * kTransposeTile;
    const int64_t c = c0 + 4 * q;
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // tile[x][y] = in[r0 + x][c0 + y], zeros outside R x C
      const int tr = row + 16 * i;
      const int64_t r = r0 + tr;
      float v[4] = {0.f, 0.f, 0.f, 0.f};
      if (r < R) load_run4<VEC>(in + r * ld_in + c, c, C, v);
#pragma unroll
      for (int j = 0; j < 4; ++j) tile[tr][4 * q + j] = v[j];
    }
    __syncthreads();
    // Output row c0 + orow (an input column), columns r .. r + 3 (input rows; those >= R zeros).
    const int64_t r = r0 + 4 * q;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int orow = row + 16 * i;
      if (c0 + orow < C && r < R) {
        float4 v = make_float4(tile[4 * q][orow], tile[4 * q + 1][orow], tile[4 * q + 2][orow],
                               tile[4 * q + 3][orow]);
        float* const dst = out + (c0 + orow) * ld_out + r;
        if constexpr (SPLIT) {
          const float2 x = tf32_split(v.x), y = tf32_split(v.y), z = tf32_split(v.z),
                       u = tf32_split(v.w);
          v = make_float4(x.x, y.x, z.x, u.x);
          *reinterpret_cast<float4*>(dst + C * ld_out) = make_float4(x.y, y.y, z.y, u.y);
        }
        *reinterpret_cast<float4*>(dst) = v;
      }
    }
    __syncthreads();  // the tile is read before the next one overwrites it
  }
}

}  // namespace lltm_ext::gemm_tiles
