// Sigmoid's per-element math (shared by the CPU and CUDA kernels) and the kernels' entry points.
#pragma once

#include <cstdint>

#include "common/macros.h"
#include "common/strided_rows.h"

#ifdef WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace at {
class Tensor;
}  // namespace at

namespace lltm_ext::sigmoid {

// y = 1 / (1 + e^-x). Stable at both ends: for x -> +inf e^-x -> 0 and y -> 1; for x -> -inf
// e^-x overflows to inf and y -> 1 / inf = 0, never NaN. Computed in float for half types. `Math`
// supplies exp and the reciprocal: cuda::elementwise::Math (FastMath for half types) or
// cpu::elementwise::Math.
template <typename Math>
struct Forward {
  template <typename A>
  LLTM_EXT_HD A operator()(A x) const {
    return Math::reciprocal(A(1) + Math::exp(-x));
  }
};

// dx = grad * y * (1 - y), from the saved output y.
struct Backward {
  template <typename A>
  LLTM_EXT_HD A operator()(A grad, A y) const {
    return grad * (A(1) - y) * y;
  }
};

// All tensors dense and laid out alike (forward: or x read as strided rows x_rows, y
// contiguous), one dtype and device, one element count; outputs are
// written whole.
void forward_cpu(const at::Tensor& x, const at::Tensor& y, elementwise::StridedRows x_rows);
void backward_cpu(const at::Tensor& grad, const at::Tensor& y, const at::Tensor& grad_input);

#ifdef WITH_CUDA
// CUDA launchers (sigmoid_cuda.cu), for T = float, double, c10::Half, c10::BFloat16: n elements on
// `stream` (out's device current); they return the launch's error. x_rows: x dense (rows 0), or
// x's strided rows, y contiguous.
template <typename T>
cudaError_t launch_forward(T* y, const T* x, int64_t n, cudaStream_t stream,
                           elementwise::StridedRows x_rows);
template <typename T>
cudaError_t launch_backward(T* grad_input, const T* grad, const T* y, int64_t n,
                            cudaStream_t stream);
#endif

}  // namespace lltm_ext::sigmoid
