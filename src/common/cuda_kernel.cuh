// What CUDA kernel files include instead of ATen: the half types, the type they compute in, and
// the list of dtypes for explicit instantiations of the kernels' launchers.
//
// .cu files include no ATen, torch or c10-cuda header: nvcc parses such headers again for every
// GPU architecture, which made ATen the largest part of each .cu file's compile time
// (docs/kernel_notes.md has the measurements). The launchers take raw pointers, sizes
// and a stream and return the launch's cudaError_t; the host side (the op's binding, compiled
// once by the C++ compiler) does the device guard, the current stream, the dtype dispatch and
// C10_CUDA_CHECK of that error.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <cuda_runtime.h>

#include "common/macros.h"

namespace lltm_ext::cuda {

// The type kernels compute in: float for the half types, the type itself otherwise (what
// at::opmath_type gives, without ATen).
template <typename T>
struct OpMath {
  using type = T;
};
template <>
struct OpMath<c10::Half> {
  using type = float;
};
template <>
struct OpMath<c10::BFloat16> {
  using type = float;
};
template <typename T>
using opmath_t = typename OpMath<T>::type;

}  // namespace lltm_ext::cuda

// M(T) for each dtype the ops take (LLTM_EXT_DISPATCH_FLOATING's four): explicit instantiations.
#define LLTM_EXT_FOR_FLOATING_TYPES(M) M(float) M(double) M(c10::Half) M(c10::BFloat16)
