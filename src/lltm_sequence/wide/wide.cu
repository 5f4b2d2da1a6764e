// The sequence's wide-state kernels (wide/wide_kernels.cuh), host side: the columns per block
// whose grid runs at once on the device (the planner's facts, plan_cuda_host.cpp),
// whether the device runs the tensor-core code, and the cooperative launches.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "common/cuda_kernel.cuh"
#include "lltm_sequence/sequence_launchers.h"
#include "lltm_sequence/wide/wide_kernels.cuh"

namespace lltm_ext::lltm {
namespace {

template <typename T, int C, Product P>
void* wide_kernel_for(bool backward) {
  return backward ? reinterpret_cast<void*>(wide_backward_kernel<T, C, P>)
                  : reinterpret_cast<void*>(wide_forward_kernel<T, C, P>);
}

// The kernel for C columns per block and the product (the tensor cores for float32 and the half
// types, in three passes for float32 only; null where T has no such kernel).
template <typename T, int C>
void* wide_kernel_of(bool backward, Product product) {
  if constexpr (std::is_same_v<T, float>) {
    if (product == Product::kTf32x3) {
      return wide_kernel_for<T, C, Product::kTf32x3>(backward);
    }
  }
  if constexpr (std::is_same_v<cuda::opmath_t<T>, float>) {
    if (product == Product::kTf32) {
      return wide_kernel_for<T, C, Product::kTf32>(backward);
    }
  }
  return product == Product::kSimt ? wide_kernel_for<T, C, Product::kSimt>(backward) : nullptr;
}

// The kernels for C columns per block (4, 8 or 16), null otherwise.
template <typename T>
void* wide_kernel(int cols, bool backward, Product product) {
  switch (cols) {
    case 4:
      return wide_kernel_of<T, 4>(backward, product);
    case 8:
      return wide_kernel_of<T, 8>(backward, product);
    case 16:
      return wide_kernel_of<T, 16>(backward, product);
    default:
      return nullptr;
  }
}

size_t wide_smem_bytes(int64_t state, int cols, bool backward, size_t acc_size, Product product) {
  const int k = backward ? 3 * static_cast<int>(state) : static_cast<int>(state);
  const int n_out = backward ? cols : 3 * cols;
  return static_cast<size_t>(product != Product::kSimt ? wide_mma_smem(k, n_out)
                                                       : wide_smem(k, n_out)) *
         acc_size;
}

dim3 wide_grid(int64_t batch, int64_t state, int cols) {
  return dim3(static_cast<unsigned int>((state + cols - 1) / cols),
              static_cast<unsigned int>((batch + kWideRows - 1) / kWideRows));
}

}  // namespace

template <typename T>
cudaError_t wide_mma_loaded(bool* loaded) {
  *loaded = false;
  if constexpr (std::is_same_v<cuda::opmath_t<T>, float>) {  // older code traps in mma_16816
    return cuda::image_compiled_for(wide_forward_kernel<T, 8, Product::kTf32>, 80, loaded);
  }
  return cudaSuccess;
}

template <typename T>
cudaError_t wide_step_columns(int64_t batch, int64_t state, int sm_count, int max_smem, int* cols,
                              int only, Product product) {
  *cols = 0;
  if (batch < 1 || state < 1 || state > kWideMaxState) {
    return cudaSuccess;
  }
  bool cooperative = false;
  cudaError_t err = cuda::cooperative_launch_supported(&cooperative);
  if (err != cudaSuccess || !cooperative) {
    return err;
  }
  // The fewest columns whose grid has at most one block per SM, else the fewest whose grid runs
  // at once (figures: docs/decisions_sequence.md#wide-columns). Each column block reads the whole
  // of x from L2 every step, so more blocks than SMs only add traffic.
  const size_t acc_size = sizeof(cuda::opmath_t<T>);
  int fallback = 0;
  for (const int c : {4, 8, 16}) {
    if (only != 0 && c != only) {
      continue;
    }
    const dim3 grid = wide_grid(batch, state, c);
    const int64_t blocks = static_cast<int64_t>(grid.x) * grid.y;
    // At most what the SMs could hold at once (below), each direction's slice in shared memory.
    const auto smem_limit = static_cast<size_t>(max_smem);
    if (blocks > sm_count * 2 || wide_smem_bytes(state, c, false, acc_size, product) > smem_limit ||
        wide_smem_bytes(state, c, true, acc_size, product) > smem_limit) {
      continue;
    }
    int per_sm = 0;
    err = wide_blocks_per_sm<T>(state, c, product, max_smem, &per_sm);
    if (err != cudaSuccess) {
      return err;
    }
    // per_sm is 0 where no kernel has these columns and this product.
    const bool fits = blocks <= static_cast<int64_t>(per_sm) * sm_count;
    if (fits && blocks <= sm_count) {
      *cols = c;
      return cudaSuccess;
    }
    if (fits && fallback == 0) {
      fallback = c;
    }
  }
  *cols = fallback;
  return cudaSuccess;
}

template <typename T>
cudaError_t wide_blocks_per_sm(int64_t state, int cols, Product product, int max_smem,
                               int* per_sm) {
  *per_sm = 0;
  const size_t acc_size = sizeof(cuda::opmath_t<T>);
  int least = 0;
  for (const bool backward : {false, true}) {
    const void* kernel = wide_kernel<T>(cols, backward, product);
    if (kernel == nullptr) {
      return cudaSuccess;
    }
    int n = 0;
    // The device's limit, not this state's size: a kernel serves every state, and a limit set to
    // a smaller state's size would fail the launches of a larger one that found its columns
    // earlier (the plan is cached per state).
    cudaError_t err =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem);
    if (err == cudaSuccess) {
      err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &n, kernel, kWideThreads, wide_smem_bytes(state, cols, backward, acc_size, product));
    }
    if (err != cudaSuccess) {
      return err;
    }
    least = backward ? std::min(least, n) : n;
  }
  *per_sm = least;
  return cudaSuccess;
}

int64_t wide_flag_count(int64_t batch, int64_t state, int cols) {
  const dim3 grid = wide_grid(batch, state, cols);
  return static_cast<int64_t>(grid.x) * grid.y;
}

namespace {

// Zeroes the step counters, then launches `kernel` cooperatively (the row barriers need every
// block resident at once: a cooperative launch fails rather than hang where they would not be).
cudaError_t launch_wide(void* kernel, int64_t batch, int64_t state, int cols, bool backward,
                        size_t acc_size, Product product, unsigned int* flags, void** params,
                        cudaStream_t stream) {
  if (kernel == nullptr) {
    return cudaErrorInvalidValue;
  }
  cudaError_t err = cudaMemsetAsync(
      flags, 0, static_cast<size_t>(wide_flag_count(batch, state, cols)) * sizeof(*flags), stream);
  if (err != cudaSuccess) {
    return err;
  }
  return cudaLaunchCooperativeKernel(
      kernel, wide_grid(batch, state, cols), dim3(kWideThreads), params,
      wide_smem_bytes(state, cols, backward, acc_size, product), stream);
}

}  // namespace

template <typename T>
cudaError_t launch_wide_forward(T* gates, const T* bias, const T* h0, const T* c0, const T* w,
                                int64_t ld, T* output, T* cells, unsigned int* flags, int64_t batch,
                                int64_t state, int64_t steps, int cols, Product product,
                                cudaStream_t stream) {
  int state_arg = static_cast<int>(state);
  bool h0_vec = reinterpret_cast<uintptr_t>(h0) % (4 * sizeof(T)) == 0;
  void* params[] = {&gates, &bias,  &h0,    &c0,        &w,     &ld,    &output,
                    &cells, &flags, &batch, &state_arg, &steps, &h0_vec};
  return launch_wide(wide_kernel<T>(cols, false, product), batch, state, cols, false,
                     sizeof(cuda::opmath_t<T>), product, flags, params, stream);
}

template <typename T>
cudaError_t launch_wide_backward(T* d_gates, const T* w, int64_t ld, const T* grad_output,
                                 const T* grad_h_n, const T* grad_c_n, const T* cells,
                                 const T* gates, const T* bias, T* d_cell, unsigned int* flags,
                                 int64_t batch, int64_t state, int64_t steps, int cols,
                                 Product product, cudaStream_t stream) {
  int state_arg = static_cast<int>(state);
  void* params[] = {&d_gates, &w,    &ld,     &grad_output, &grad_h_n, &grad_c_n,  &cells,
                    &gates,   &bias, &d_cell, &flags,       &batch,    &state_arg, &steps};
  return launch_wide(wide_kernel<T>(cols, true, product), batch, state, cols, true,
                     sizeof(cuda::opmath_t<T>), product, flags, params, stream);
}

#define LLTM_EXT_INSTANTIATE(T)                                                                    \
  template cudaError_t wide_mma_loaded<T>(bool*);                                                  \
  template cudaError_t wide_step_columns<T>(int64_t, int64_t, int, int, int*, int, Product);       \
  template cudaError_t wide_blocks_per_sm<T>(int64_t, int, Product, int, int*);                    \
  template cudaError_t launch_wide_forward<T>(T*, const T*, const T*, const T*, const T*, int64_t, \
                                              T*, T*, unsigned int*, int64_t, int64_t, int64_t,    \
                                              int, Product, cudaStream_t);                         \
  template cudaError_t launch_wide_backward<T>(                                                    \
      T*, const T*, int64_t, const T*, const T*, const T*, const T*, const T*, const T*, T*,       \
      unsigned int*, int64_t, int64_t, int64_t, int, Product, cudaStream_t);
LLTM_EXT_FOR_FLOATING_TYPES(LLTM_EXT_INSTANTIATE)

}  // namespace lltm_ext::lltm
