// What CUDA kernel files include instead of ATen: the half types, the type they compute in, and
// the list of dtypes for explicit instantiations of the kernels' launchers.
//
// .cu files include no ATen, torch or c10-cuda header: nvcc compiles a header's device side once
// per GPU architecture in every .cu file that includes it, so those headers would cost more
// compile time than the kernels (docs/build_notes.md). The launchers take raw pointers, sizes
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

// Whether `kernel`'s machine code for the current device was compiled from source for
// architecture min_arch (e.g. 80, 90) or newer, up to max_arch: false where the module has no image
// for the device, and where the driver compiled an older architecture's PTX (whose kernels that
// need newer instructions hold a trapping body), as cudaFuncGetAttributes' ptxVersion and
// binaryVersion say; max_arch for kernels compiled for one architecture only (a trapping body on
// newer ones too).
template <typename Kernel>
cudaError_t image_compiled_for(Kernel kernel, int min_arch, bool* loaded, int max_arch = 1 << 30) {
  *loaded = false;
  cudaFuncAttributes attr{};
  const cudaError_t err = cudaFuncGetAttributes(&attr, kernel);
  if (err == cudaErrorInvalidDeviceFunction || err == cudaErrorNoKernelImageForDevice) {
    (void)cudaGetLastError();  // no image for this device at all
    return cudaSuccess;
  }
  if (err == cudaSuccess) {
    *loaded = attr.ptxVersion >= min_arch && attr.binaryVersion >= min_arch &&
              attr.ptxVersion <= max_arch && attr.binaryVersion <= max_arch;
  }
  return err;
}

// Whether the current device takes cooperative launches (the persistent kernels whose blocks
// wait on each other need every block resident: a cooperative launch fails rather than hangs).
inline cudaError_t cooperative_launch_supported(bool* supported) {
  *supported = false;
  int device = 0, cooperative = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) {
    err = cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device);
  }
  *supported = err == cudaSuccess && cooperative != 0;
  return err;
}

}  // namespace lltm_ext::cuda

// M(T) for each dtype the ops take (LLTM_EXT_DISPATCH_FLOATING's four): explicit instantiations.
#define LLTM_EXT_FOR_FLOATING_TYPES(M) M(float) M(double) M(c10::Half) M(c10::BFloat16)
