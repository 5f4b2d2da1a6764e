// float32 -> bfloat16 / float16 with round-to-nearest-even, in pairs (one 32-bit word) or singly:
// the epilogues of the tensor-core kernels (kernel_sm80.cuh, kernel_sm90.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace lltm_ext::gemm_tiles {

// (lo, hi) rounded to nearest even into two 16-bit values (bfloat16 when BF16, else float16), lo
// in the low half.
template <bool BF16>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (BF16) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// x rounded to nearest even into one 16-bit value.
template <bool BF16>
__device__ __forceinline__ uint16_t pack1(float x) {
  if constexpr (BF16) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  } else {
    return __half_as_ushort(__float2half_rn(x));
  }
}

}  // namespace lltm_ext::gemm_tiles
