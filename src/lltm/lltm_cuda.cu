// CUDA kernels of the LLTM cell: one fused kernel for the forward gate math, one for backward.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "common/cuda_kernel.cuh"
#include "lltm/lltm.h"

namespace lltm_ext::lltm {
namespace {

constexpr int kThreads = 256;

// One thread per (batch, state) element, grid-stride loop. index_t is int32_t when every index
// (up to 3 n, the gates) fits, else int64_t: the row index i / state is a 32-bit division in the
// common case. Forward writes the outputs only; backward recomputes the gates from their
// pre-activations.
template <typename scalar_t, typename index_t>
__global__ void __launch_bounds__(kThreads)
    forward_gates_kernel(const scalar_t* __restrict__ gates, const scalar_t* __restrict__ old_cell,
                         scalar_t* __restrict__ new_h, scalar_t* __restrict__ new_cell, index_t n,
                         index_t state) {
  using acc_t = cuda::opmath_t<scalar_t>;
  const index_t stride = static_cast<index_t>(blockDim.x) * gridDim.x;
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const index_t b = i / state;
    const scalar_t* g = gates + i + 2 * b * state;  // row b of gates starts at 3 * b * state
    const auto r = forward_element<acc_t>(g[0], g[state], g[2 * state], old_cell[i]);
    new_h[i] = r.new_h;
    new_cell[i] = r.new_cell;
  }
}

template <typename scalar_t, typename index_t>
__global__ void __launch_bounds__(kThreads)
    backward_gates_kernel(const scalar_t* __restrict__ grad_h, index_t grad_h_ld,
                          const scalar_t* __restrict__ grad_cell,
                          const scalar_t* __restrict__ new_cell, const scalar_t* __restrict__ gates,
                          scalar_t* __restrict__ d_gates, scalar_t* __restrict__ d_old_cell,
                          index_t n, index_t state) {
  using acc_t = cuda::opmath_t<scalar_t>;
  const index_t stride = static_cast<index_t>(blockDim.x) * gridDim.x;
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const index_t b = i / state;
    const index_t g = i + 2 * b * state;  // (b, s) of the first third of a (B, 3S) row
    const auto r =
        backward_element<acc_t>(grad_h[i + b * (grad_h_ld - state)], grad_cell[i], new_cell[i],
                                gates[g], gates[g + state], gates[g + 2 * state]);
    d_old_cell[i] = r.d_old_cell;
    d_gates[g] = r.d_z_i;
    d_gates[g + state] = r.d_z_o;
    d_gates[g + 2 * state] = r.d_z_c;
  }
}

// Whether 32-bit indices reach every element: the gates' 3 n, grad_h's rows (B - 1) ld + S, and
// a grid-stride index past the end (n plus the grid's threads).
bool fits_int32(int64_t n, int64_t state, int64_t grad_h_ld, unsigned int blocks) {
  const int64_t limit = std::numeric_limits<int32_t>::max();
  const int64_t rows = state > 0 ? n / state : 0;
  return 3 * n + static_cast<int64_t>(blocks) * kThreads <= limit &&
         (rows == 0 || (rows - 1) * grad_h_ld + state <= limit);
}

// Blocks for a grid-stride loop over n elements: 8 per SM at most, never more than needed.
unsigned int blocks_for(int64_t n, int sm_count) {
  const int64_t needed = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned int>(
      std::max<int64_t>(1, std::min<int64_t>(needed, static_cast<int64_t>(sm_count) * 8)));
}

}  // namespace

template <typename T>
cudaError_t launch_forward_gates(const T* gates, const T* old_cell, T* new_h, T* new_cell,
                                 int64_t n, int64_t state, int sm_count, cudaStream_t stream) {
  if (n == 0) {
    return cudaSuccess;
  }
  const unsigned int blocks = blocks_for(n, sm_count);
  if (fits_int32(n, state, state, blocks)) {
    forward_gates_kernel<T, int32_t><<<blocks, kThreads, 0, stream>>>(
        gates, old_cell, new_h, new_cell, static_cast<int32_t>(n), static_cast<int32_t>(state));
  } else {
    forward_gates_kernel<T, int64_t>
        <<<blocks, kThreads, 0, stream>>>(gates, old_cell, new_h, new_cell, n, state);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_backward_gates(const T* grad_h, int64_t grad_h_ld, const T* grad_cell,
                                  const T* new_cell, const T* gates, T* d_gates, T* d_old_cell,
                                  int64_t n, int64_t state, int sm_count, cudaStream_t stream) {
  if (n == 0) {
    return cudaSuccess;
  }
  const unsigned int blocks = blocks_for(n, sm_count);
  if (fits_int32(n, state, grad_h_ld, blocks)) {
    backward_gates_kernel<T, int32_t><<<blocks, kThreads, 0, stream>>>(
        grad_h, static_cast<int32_t>(grad_h_ld), grad_cell, new_cell, gates, d_gates, d_old_cell,
        static_cast<int32_t>(n), static_cast<int32_t>(state));
  } else {
    backward_gates_kernel<T, int64_t><<<blocks, kThreads, 0, stream>>>(
        grad_h, grad_h_ld, grad_cell, new_cell, gates, d_gates, d_old_cell, n, state);
  }
  return cudaGetLastError();
}

#define LLTM_EXT_INSTANTIATE(T)                                                                   \
  template cudaError_t launch_forward_gates<T>(const T*, const T*, T*, T*, int64_t, int64_t, int, \
                                               cudaStream_t);                                     \
  template cudaError_t launch_backward_gates<T>(const T*, int64_t, const T*, const T*, const T*,  \
                                                T*, T*, int64_t, int64_t, int, cudaStream_t);
LLTM_EXT_FOR_FLOATING_TYPES(LLTM_EXT_INSTANTIATE)

}  // namespace lltm_ext::lltm
