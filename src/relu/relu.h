// ReLU's per-element math (shared by the CPU and CUDA kernels) and the kernels' entry points.
#pragma once

#include <ATen/ATen.h>

#include "common/dispatch.h"

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

// All tensors contiguous, one dtype and device, one element count; outputs are written whole.
void forward_cpu(const at::Tensor& x, const at::Tensor& y);
void forward_cuda(const at::Tensor& x, const at::Tensor& y);
void backward_cpu(const at::Tensor& grad, const at::Tensor& y, const at::Tensor& grad_input);
void backward_cuda(const at::Tensor& grad, const at::Tensor& y, const at::Tensor& grad_input);

}  // namespace lltm_ext::relu
