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

#include <atomic>

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

// `kernel`'s attributes on the current device (cudaFuncGetAttributes); *found false, and no error,
// where the module has no image for the device at all.
template <typename Kernel>
cudaError_t image_attributes(Kernel kernel, cudaFuncAttributes* attr, bool* found) {
  *found = false;
  *attr = cudaFuncAttributes{};
  const cudaError_t err = cudaFuncGetAttributes(attr, kernel);
  if (err == cudaErrorInvalidDeviceFunction || err == cudaErrorNoKernelImageForDevice) {
    (void)cudaGetLastError();  // no image for this device at all
    return cudaSuccess;
  }
  *found = err == cudaSuccess;
  return err;
}

// Whether `kernel`'s machine code for the current device was compiled from source for
// architecture min_arch (e.g. 80, 90) or newer, up to max_arch: false where the module has no image
// for the device, and where the driver compiled an older architecture's PTX (whose kernels that
// need newer instructions hold a trapping body), as cudaFuncGetAttributes' ptxVersion and
// binaryVersion say; max_arch for kernels compiled for one architecture only (a trapping body on
// newer ones too).
template <typename Kernel>
cudaError_t image_compiled_for(Kernel kernel, int min_arch, bool* loaded, int max_arch = 1 << 30) {
  cudaFuncAttributes attr{};
  bool found = false;
  const cudaError_t err = image_attributes(kernel, &attr, &found);
  *loaded = found && attr.ptxVersion >= min_arch && attr.binaryVersion >= min_arch &&
            attr.ptxVersion <= max_arch && attr.binaryVersion <= max_arch;
  return err;
}

// Whether the device runs `kernel`'s body that declares static shared memory: for kernels whose
// architecture-specific body (sm_90a) alone declares it, and whose other bodies are empty stubs.
template <typename Kernel>
cudaError_t image_with_static_smem(Kernel kernel, bool* loaded) {
  cudaFuncAttributes attr{};
  bool found = false;
  const cudaError_t err = image_attributes(kernel, &attr, &found);
  *loaded = found && attr.sharedSizeBytes > 0;
  return err;
}

// Programmatic dependent launch (compute capability 9.0): a kernel started by launch_dependent
// below may be scheduled while the kernel before it on the stream still runs, once every block of
// that one has called pdl_release() (or ended), which hides the launch's latency between the
// kernels of a sequence. Such a kernel calls pdl_wait() before it reads or writes global memory:
// that waits until the kernel before it has ended and its writes are visible. pdl_release() lets
// the kernel after it be scheduled: early in a short kernel; near the end of a long one, whose
// followers' blocks would otherwise sit resident and waiting all along. One thread's call
// releases its block (later calls add nothing). No-ops in code compiled for older architectures,
// and where the kernel was launched the ordinary way.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}
// Both, for a short kernel.
__device__ __forceinline__ void pdl_wait_then_release() {
  pdl_wait();
  pdl_release();
}

// kernel<<<grid, block, smem, stream>>>(args...), as a programmatic dependent launch where
// `dependent` and the current device runs the kernel's code compiled for 9.0 or newer (whose
// pdl_wait() is there; an image the driver compiled from older PTX has none), else the ordinary
// way. The kernel must call pdl_wait() first. Which launch a device takes is read once per device
// (the kernels of one module share their images' architectures). cluster_x > 1: in clusters of
// that many blocks along x (gridDim.x a multiple of it; sm_90 images only).
template <typename... Params, typename... Args>
cudaError_t launch_dependent_clusters(bool dependent, unsigned int cluster_x,
                                      void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                                      cudaStream_t stream, Args... args) {
  constexpr int kMaxDevices = 64;
  static std::atomic<signed char> known[kMaxDevices];  // 0 unknown, 1 ordinary, 2 dependent
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) {
    return err;
  }
  signed char how = device < kMaxDevices ? known[device].load(std::memory_order_relaxed) : 0;
  if (how == 0) {
    bool compiled_for_90 = false;
    err = image_compiled_for(kernel, 90, &compiled_for_90);
    if (err != cudaSuccess) {
      return err;
    }
    how = compiled_for_90 ? 2 : 1;
    if (device < kMaxDevices) {
      known[device].store(how, std::memory_order_relaxed);
    }
  }
  cudaLaunchAttribute attribute[2]{};
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = dependent && how == 2 ? 1 : 0;
  attribute[1].id = cudaLaunchAttributeClusterDimension;
  attribute[1].val.clusterDim.x = cluster_x;
  attribute[1].val.clusterDim.y = 1;
  attribute[1].val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = cluster_x > 1 ? 2 : 1;
  return cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
}

// launch_dependent_clusters(dependent, 1, ...): no clusters.
template <typename... Params, typename... Args>
cudaError_t launch_dependent_if(bool dependent, void (*kernel)(Params...), dim3 grid, dim3 block,
                                size_t smem, cudaStream_t stream, Args... args) {
  return launch_dependent_clusters(dependent, 1, kernel, grid, block, smem, stream, args...);
}

// launch_dependent_if(true, ...).
template <typename... Params, typename... Args>
cudaError_t launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                             cudaStream_t stream, Args... args) {
  return launch_dependent_if(true, kernel, grid, block, smem, stream, args...);
}

// *count: the clusters of cluster_x blocks (`block` threads, `smem` bytes of dynamic shared memory
// each) of `kernel` that the current device runs at once.
template <typename... Params>
cudaError_t max_active_clusters(void (*kernel)(Params...), unsigned int cluster_x, dim3 block,
                                size_t smem, int* count) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = cluster_x;
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(cluster_x);
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaOccupancyMaxActiveClusters(count, kernel, &config);
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
