// A float32 matrix transpose for the TF32 GEMM's K-major operand copies: 16-byte loads and stores,
// each thread transposing a 4 x 4 block in registers (no shared memory).
//
// A block of 256 threads takes a 64 x 64 tile of the input: thread (ty, tx) = (threadIdx.x / 16,
// threadIdx.x % 16) loads the 4 x 4 block at rows 4 ty .. 4 ty + 3, columns 4 tx .. 4 tx + 3
// (four 16-byte loads in flight before any store) and writes it transposed as four 16-byte
// stores, one per output row. A warp (ty of two neighbours, tx 0..15) then reads 2 rows x 256
// contiguous bytes per load and writes 16 rows x 32 contiguous bytes per store: every 32-byte
// sector it touches is used whole, on both sides, without a shared-memory round trip.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lltm_ext::gemm_tiles {

inline constexpr int kTransposeTile = 64, kTransposeThreads = 256;

// out (C x ld_out, row-major) = in (R x C, row-major, leading dimension ld_in) transposed:
// out[c * ld_out + r] = in[r * ld_in + c] for r < R, and 0 for R <= r < round_up(R, 4) (ld_out
// is a multiple of 4 and at least round_up(R, 4); out is 16-byte aligned). VEC: in is 16-byte
// aligned and ld_in % 4 == 0 (or R == 1): 16-byte loads wherever four columns are in range.
// Persistent over the tiles (tiles_c tiles of 64 columns per 64-row tile row).
template <bool VEC>
__global__ void __launch_bounds__(kTransposeThreads)
    transpose_f32_kernel(const float* __restrict__ in, float* __restrict__ out, int64_t R,
                         int64_t C, int64_t ld_in, int64_t ld_out, int64_t tiles_c, int64_t tiles) {
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t r = (t / tiles_c) * kTransposeTile + 4 * ty;
    const int64_t c = (t % tiles_c) * kTransposeTile + 4 * tx;
    if (r >= R || c >= C) continue;  // nothing of this 4 x 4 block exists
    float v[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (r + i >= R) {
        v[i][0] = v[i][1] = v[i][2] = v[i][3] = 0.f;  // the output's padding columns
        continue;
      }
      const float* const src = in + (r + i) * ld_in + c;
      if (VEC && c + 3 < C) {
        const float4 x = __ldg(reinterpret_cast<const float4*>(src));
        v[i][0] = x.x, v[i][1] = x.y, v[i][2] = x.z, v[i][3] = x.w;
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) v[i][j] = c + j < C ? __ldg(src + j) : 0.f;
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (c + j < C) {
        *reinterpret_cast<float4*>(out + (c + j) * ld_out + r) =
            make_float4(v[0][j], v[1][j], v[2][j], v[3][j]);
      }
    }
  }
}

}  // namespace lltm_ext::gemm_tiles
