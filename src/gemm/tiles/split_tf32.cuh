// Float32 operands split into TF32 "big" and "small" parts for the exact float32 GEMM on Hopper's
// tensor cores (three TF32 passes, gemm/tiles/kernel_sm90.cuh): a copy of the operand, K-major,
// with the big parts in its first rows and the small parts in as many rows after them.
//
// x = big + small + r: big is x rounded to tf32 (10 mantissa bits, to nearest, ties away from
// zero, as cvt.rna), small is (x - big) rounded so, and |r| <= 2^-22 |x|: the products big x big +
// big x small + small x big miss x y by about float32's own rounding. Integer operations, so that
// every architecture of the build compiles it (the copy is bound by memory either way).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lltm_ext::gemm_tiles {

// x rounded to the nearest tf32 value (ties away from zero); Inf stays Inf, a finite x past tf32's
// largest value becomes Inf (the GEMM then recomputes its outputs from the operands as given).
__device__ __forceinline__ float tf32_round(float x) {
  return __uint_as_float((__float_as_uint(x) + 0x1000u) & 0xffffe000u);
}

// (big, small) of x.
__device__ __forceinline__ float2 tf32_split(float x) {
  const float big = tf32_round(x);
  return make_float2(big, tf32_round(x - big));
}

// v = the run of four floats src[0 .. 3], of columns c .. c + 3 of a row of C columns, zeros from
// column C on. VEC: one 16-byte load where all four are in range (src then 16-byte aligned).
template <bool VEC>
__device__ __forceinline__ void load_run4(const float* src, int64_t c, int64_t C, float (&v)[4]) {
  if (VEC && c + 3 < C) {
    const float4 x = __ldg(reinterpret_cast<const float4*>(src));
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = c + j < C ? __ldg(src + j) : 0.f;
  }
}

inline constexpr int kSplitThreads = 256;

// out rows r < R: the big parts of in's row r (R x C, row-major, leading dimension ld_in); out
// rows R + r: its small parts; each ld_out apart (a multiple of 4, at least round_up(C, 4); out
// 16-byte aligned), the columns C .. round_up(C, 4) - 1 zeros. VEC: in 16-byte aligned and ld_in a
// multiple of 4 (or R == 1): 16-byte loads wherever four columns are in range. Grid-stride over
// runs of four columns.
template <bool VEC>
__global__ void __launch_bounds__(kSplitThreads)
    split_rows_tf32_kernel(const float* __restrict__ in, float* __restrict__ out, int64_t R,
                           int64_t C, int64_t ld_in, int64_t ld_out) {
  const int64_t runs = (C + 3) / 4;
  const int64_t total = R * runs;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / runs, c = (i - r * runs) * 4;
    float v[4];
    load_run4<VEC>(in + r * ld_in + c, c, C, v);
    float2 s[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) s[j] = tf32_split(v[j]);
    *reinterpret_cast<float4*>(out + r * ld_out + c) = make_float4(s[0].x, s[1].x, s[2].x, s[3].x);
    *reinterpret_cast<float4*>(out + (R + r) * ld_out + c) =
        make_float4(s[0].y, s[1].y, s[2].y, s[3].y);
  }
}

}  // namespace lltm_ext::gemm_tiles
