// Host-side launch helpers for the ops' bindings (C++ compiler, CUDA builds): per-device values,
// SM counts and grid sizing. Device guard, current stream and launch checks come from the c10
// headers included here.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/CallOnce.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>

#include "common/cuda_kernel.cuh"

namespace lltm_ext::cuda {

// One value per CUDA device, computed by the first caller that asks for that device and read
// without a lock afterwards: thread-safe (c10::call_once per device; a computation that throws is
// retried by the next caller), for any number of devices. Hosts may mix GPUs, so a per-process
// value would be wrong on all but the first device asked about.
template <typename T>
class PerDevice {
 public:
  // The value of `device`: compute(device) the first time.
  template <typename Compute>
  const T& get(int device, const Compute& compute) {
    c10::call_once(init_, [this] {
      count_ = c10::cuda::device_count();
      slots_ = std::make_unique<Slot[]>(count_);
    });
    TORCH_CHECK(device >= 0 && device < count_, "lltm_ext: CUDA device ", device,
                " does not exist (this process sees ", count_, " CUDA devices).");
    Slot& slot = slots_[device];
    c10::call_once(slot.once, [&] { slot.value = compute(device); });
    return slot.value;
  }

 private:
  struct Slot {
    c10::once_flag once;
    T value{};
  };
  c10::once_flag init_;
  int count_ = 0;
  std::unique_ptr<Slot[]> slots_;
};

// Streaming multiprocessors of `device`, read once per device.
inline int sm_count(int device) {
  static PerDevice<int> cache;
  return cache.get(device, [](int d) {
    int n = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, d));
    return n;
  });
}

// The device's L2 cache size in bytes, once per device.
inline int64_t l2_bytes(int device) {
  static PerDevice<int64_t> cache;
  return cache.get(device, [](int d) {
    int n = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrL2CacheSize, d));
    return static_cast<int64_t>(n);
  });
}

// What the launch planners read of a device, once per device: the shared memory a block may opt
// in to, and the compute capability's major version.
struct DeviceLimits {
  int smem_optin;
  int major;
};

inline const DeviceLimits& device_limits(int device) {
  static PerDevice<DeviceLimits> cache;
  return cache.get(device, [](int d) {
    DeviceLimits limits{};
    C10_CUDA_CHECK(
        cudaDeviceGetAttribute(&limits.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, d));
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&limits.major, cudaDevAttrComputeCapabilityMajor, d));
    return limits;
  });
}

// Blocks for a grid-stride loop over `work_items` items of `per_block` each: enough to fill the
// GPU `blocks_per_sm` deep, never more than the work needs (>= 1; callers return early on 0).
inline unsigned int grid_for(int64_t work_items, int per_block, int device, int blocks_per_sm = 8) {
  const int64_t needed = (work_items + per_block - 1) / per_block;
  const int64_t full = static_cast<int64_t>(sm_count(device)) * blocks_per_sm;
  return static_cast<unsigned int>(std::max<int64_t>(1, std::min(needed, full)));
}

}  // namespace lltm_ext::cuda
