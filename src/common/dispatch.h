// Dtype dispatch shared by CPU and CUDA kernels: the four floating types, half types in float.
#pragma once

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>

#include "common/macros.h"

// float32, float64, float16, bfloat16; kernels compute half types in at::opmath_type (float).
#define LLTM_EXT_DISPATCH_FLOATING(TYPE, NAME, ...) \
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, TYPE, NAME, __VA_ARGS__)
