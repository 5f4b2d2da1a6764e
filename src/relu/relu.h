// ReLU's per-element math (shared by the CPU and CUDA kernels) and the kernels' entry points.
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

namespace lltm_ext::relu {

// y = max(x, 0), with NaN passed through (as torch.relu does).
struct Forward {
  template <typename A>
  LLTM_EXT_HD A operator()(A x) const {
    return x < A(0) ? A(0) : x;
  }
};

// dx = grad where y > 0 (or y is NaN), else 0: torch's threshold_backward(grad, y, 0). From the
// output y, whose sign is that of x (so the gradient at x == 0 is 0).
struct Backward {
  template <typename A>
  LLTM_EXT_HD A operator()(A grad, A y) const {
    return y <= A(0) ? A(0) : grad;
  }
};

// All tensors dense and laid out alike (forward: or x read as strided rows x_rows, y
// contiguous), one dtype and device, one element count; outputs are
// written whole.
void forward_cpu(const at::Tensor& x, const at::Tensor& y, elementwise::StridedRows x_rows);
void backward_cpu(const at::Tensor& grad, const at::Tensor& y, const at::Tensor& grad_input);

#ifdef WITH_CUDA
// CUDA launchers (relu_cuda.cu), for T = float, double, c10::Half, c10::BFloat16: n elements on
// `stream` (out's device current); they return the launch's error. x_rows: x dense (rows 0), or
// x's strided rows, y contiguous.
template <typename T>
cudaError_t launch_forward(T* y, const T* x, int64_t n, cudaStream_t stream,
                           elementwise::StridedRows x_rows);
template <typename T>
cudaError_t launch_backward(T* grad_input, const T* grad, const T* y, int64_t n,
                            cudaStream_t stream);
#endif

}  // namespace lltm_ext::relu
