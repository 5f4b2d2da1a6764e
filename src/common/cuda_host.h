// Host-side launch helpers for the ops' bindings (C++ compiler, CUDA builds): SM counts and grid
// sizing. Device guard, current stream and launch checks come from the c10 headers included here.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "common/cuda_kernel.cuh"

namespace lltm_ext::cuda {

// Streaming multiprocessors of `device`, read once per device.
inline int sm_count(int device) {
  static int cache[64] = {0};
  if (device < 0 || device >= 64) {
    int n = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    return n;
  }
  if (cache[device] == 0) {
    int n = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    cache[device] = n;
  }
  return cache[device];
}

// Blocks for a grid-stride loop over `work_items` items of `per_block` each: enough to fill the
// GPU `blocks_per_sm` deep, never more than the work needs (>= 1; callers return early on 0).
inline unsigned int grid_for(int64_t work_items, int per_block, int device, int blocks_per_sm = 8) {
  const int64_t needed = (work_items + per_block - 1) / per_block;
  const int64_t full = static_cast<int64_t>(sm_count(device)) * blocks_per_sm;
  return static_cast<unsigned int>(std::max<int64_t>(1, std::min(needed, full)));
}

}  // namespace lltm_ext::cuda
