// The bindings of the element-wise ops, written once: input checks, output allocation, dispatch.
#pragma once

#include "common/module.h"

// A CUDA kernel entry point where this build compiles CUDA kernels, else nullptr (check_backend
// has rejected CUDA tensors before a kernel is chosen).
#ifdef WITH_CUDA
#define LLTM_EXT_CUDA_KERNEL(fn) (&(fn))
#else
#define LLTM_EXT_CUDA_KERNEL(fn) nullptr
#endif

namespace lltm_ext::elementwise {

// Kernels write every element of their last argument; all tensors contiguous, one shape.
using ForwardKernel = void (*)(const at::Tensor& x, const at::Tensor& y);
using BackwardKernel = void (*)(const at::Tensor& grad, const at::Tensor& output,
                                const at::Tensor& grad_input);

// y = op(x) for x of any shape: a new contiguous tensor like x.
inline at::Tensor forward(const char* op, const at::Tensor& x, ForwardKernel cpu,
                          ForwardKernel cuda) {
  CHECK_INPUT(x);
  check_backend(x, op);
  at::Tensor y = at::empty(x.sizes(), x.options());
  (x.is_cuda() ? cuda : cpu)(x, y);
  return y;
}

// The gradient wrt x from the incoming gradient and the saved output (one shape, dtype, device).
inline at::Tensor backward(const char* op, const at::Tensor& grad, const at::Tensor& output,
                           BackwardKernel cpu, BackwardKernel cuda) {
  CHECK_INPUT(grad);
  CHECK_INPUT(output);
  CHECK_LIKE(grad, output);
  CHECK_SAME_SIZES(grad, output);
  check_backend(output, op);
  at::Tensor grad_input = at::empty(output.sizes(), output.options());
  (output.is_cuda() ? cuda : cpu)(grad, output, grad_input);
  return grad_input;
}

}  // namespace lltm_ext::elementwise
