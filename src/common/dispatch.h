// Dtype dispatch shared by CPU and CUDA kernels: the four floating types, half types in float.
#pragma once

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>

// float32, float64, float16, bfloat16; kernels compute half types in at::opmath_type (float).
#define LLTM_EXT_DISPATCH_FLOATING(TYPE, NAME, ...) \
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, TYPE, NAME, __VA_ARGS__)

// Marks functions callable from host and device code (plain inline functions elsewhere).
#ifdef __CUDACC__
#define LLTM_EXT_HD __host__ __device__ __forceinline__
#else
#define LLTM_EXT_HD inline
#endif
