// CUDA kernels of the LLTM cell: one fused kernel for the forward gate math, one for backward.
#include "common/cuda_utils.cuh"
#include "lltm/lltm.h"

namespace lltm_ext::lltm {
namespace {

constexpr int kThreads = 256;

// One thread per (batch, state) element, 64-bit grid-stride loop.
template <typename scalar_t>
__global__ void __launch_bounds__(kThreads)
    forward_gates_kernel(const scalar_t* __restrict__ gates, const scalar_t* __restrict__ old_cell,
                         scalar_t* __restrict__ new_h, scalar_t* __restrict__ new_cell,
                         scalar_t* __restrict__ input_gate, scalar_t* __restrict__ output_gate,
                         scalar_t* __restrict__ candidate_cell, int64_t n, int64_t state) {
  using acc_t = cuda::opmath_t<scalar_t>;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const int64_t b = i / state;
    const scalar_t* g = gates + i + 2 * b * state;  // row b of gates starts at 3 * b * state
    const auto r = forward_element<acc_t>(g[0], g[state], g[2 * state], old_cell[i]);
    new_h[i] = r.new_h;
    new_cell[i] = r.new_cell;
    input_gate[i] = r.input_gate;
    output_gate[i] = r.output_gate;
    candidate_cell[i] = r.candidate_cell;
  }
}

template <typename scalar_t>
__global__ void __launch_bounds__(kThreads) backward_gates_kernel(
    const scalar_t* __restrict__ grad_h, const scalar_t* __restrict__ grad_cell,
    const scalar_t* __restrict__ new_cell, const scalar_t* __restrict__ input_gate,
    const scalar_t* __restrict__ output_gate, const scalar_t* __restrict__ candidate_cell,
    scalar_t* __restrict__ d_gates, scalar_t* __restrict__ d_old_cell, int64_t n, int64_t state) {
  using acc_t = cuda::opmath_t<scalar_t>;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const int64_t b = i / state;
    const auto r = backward_element<acc_t>(grad_h[i], grad_cell[i], new_cell[i], input_gate[i],
                                           output_gate[i], candidate_cell[i]);
    scalar_t* dg = d_gates + i + 2 * b * state;
    d_old_cell[i] = r.d_old_cell;
    dg[0] = r.d_z_i;
    dg[state] = r.d_z_o;
    dg[2 * state] = r.d_z_c;
  }
}

}  // namespace

void forward_gates_cuda(const at::Tensor& gates, const at::Tensor& old_cell,
                        const at::Tensor& new_h, const at::Tensor& new_cell,
                        const at::Tensor& input_gate, const at::Tensor& output_gate,
                        const at::Tensor& candidate_cell) {
  const int64_t n = old_cell.numel();
  if (n == 0) {
    return;
  }
  const c10::cuda::CUDAGuard guard(old_cell.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const unsigned int blocks = cuda::grid_for(n, kThreads, old_cell.get_device());
  LLTM_EXT_DISPATCH_FLOATING(gates.scalar_type(), "lltm_forward_cuda", [&] {
    forward_gates_kernel<scalar_t><<<blocks, kThreads, 0, stream>>>(
        gates.const_data_ptr<scalar_t>(), old_cell.const_data_ptr<scalar_t>(),
        new_h.data_ptr<scalar_t>(), new_cell.data_ptr<scalar_t>(), input_gate.data_ptr<scalar_t>(),
        output_gate.data_ptr<scalar_t>(), candidate_cell.data_ptr<scalar_t>(), n, old_cell.size(1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

void backward_gates_cuda(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                         const at::Tensor& new_cell, const at::Tensor& input_gate,
                         const at::Tensor& output_gate, const at::Tensor& candidate_cell,
                         const at::Tensor& d_gates, const at::Tensor& d_old_cell) {
  const int64_t n = new_cell.numel();
  if (n == 0) {
    return;
  }
  const c10::cuda::CUDAGuard guard(new_cell.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const unsigned int blocks = cuda::grid_for(n, kThreads, new_cell.get_device());
  LLTM_EXT_DISPATCH_FLOATING(new_cell.scalar_type(), "lltm_backward_cuda", [&] {
    backward_gates_kernel<scalar_t><<<blocks, kThreads, 0, stream>>>(
        grad_h.const_data_ptr<scalar_t>(), grad_cell.const_data_ptr<scalar_t>(),
        new_cell.const_data_ptr<scalar_t>(), input_gate.const_data_ptr<scalar_t>(),
        output_gate.const_data_ptr<scalar_t>(), candidate_cell.const_data_ptr<scalar_t>(),
        d_gates.data_ptr<scalar_t>(), d_old_cell.data_ptr<scalar_t>(), n, new_cell.size(1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

}  // namespace lltm_ext::lltm
