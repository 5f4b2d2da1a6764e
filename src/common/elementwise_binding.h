// The bindings of the element-wise ops, written once: input checks, output allocation, dispatch.
#pragma once

#include "common/module.h"

// The CUDA launcher of an op (a template over the dtype, defined in its .cu file:
// cudaError_t fn(T* out, const T* in..., int64_t n, cudaStream_t)) as a generic callable where this
// build compiles CUDA kernels, else nullptr (check_backend has rejected CUDA tensors before then).
#ifdef WITH_CUDA
#include "common/cuda_host.h"
#define LLTM_EXT_CUDA_LAUNCH(fn) [](auto... args) { return fn(args...); }
#else
#define LLTM_EXT_CUDA_LAUNCH(fn) nullptr
#endif

namespace lltm_ext::elementwise {

// CPU kernels write every element of their last argument; all tensors contiguous, one shape.
using ForwardKernel = void (*)(const at::Tensor& x, const at::Tensor& y);
using BackwardKernel = void (*)(const at::Tensor& grad, const at::Tensor& output,
                                const at::Tensor& grad_input);

#ifdef WITH_CUDA
// out = op(inputs...) on out's GPU through `launch` (LLTM_EXT_CUDA_LAUNCH): device guard, current
// stream, dtype dispatch, launch check.
template <typename Launch, typename... Inputs>
void run_cuda(const Launch& launch, const at::Tensor& out, const Inputs&... inputs) {
  const int64_t n = out.numel();
  if (n == 0) {
    return;
  }
  const c10::cuda::CUDAGuard guard(out.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  LLTM_EXT_DISPATCH_FLOATING(out.scalar_type(), "lltm_ext_elementwise", [&] {
    C10_CUDA_CHECK(launch(out.mutable_data_ptr<scalar_t>(),
                          inputs.template const_data_ptr<scalar_t>()..., n, stream));
  });
}
#endif

// y = op(x) for x of any shape: a new contiguous tensor like x.
template <typename CudaLaunch>
at::Tensor forward(const char* op, const at::Tensor& x, ForwardKernel cpu,
                   [[maybe_unused]] const CudaLaunch& cuda) {
  CHECK_INPUT(x);
  check_backend(x, op);
  at::Tensor y = at::empty(x.sizes(), x.options());
  if (x.is_cuda()) {
#ifdef WITH_CUDA
    run_cuda(cuda, y, x);
#else
    fail_not_compiled_with_cuda(op);
#endif
  } else {
    cpu(x, y);
  }
  return y;
}

// The gradient wrt x from the incoming gradient and the saved output (one shape, dtype, device).
template <typename CudaLaunch>
at::Tensor backward(const char* op, const at::Tensor& grad, const at::Tensor& output,
                    BackwardKernel cpu, [[maybe_unused]] const CudaLaunch& cuda) {
  CHECK_INPUT(grad);
  CHECK_INPUT(output);
  CHECK_LIKE(grad, output);
  CHECK_SAME_SIZES(grad, output);
  check_backend(output, op);
  at::Tensor grad_input = at::empty(output.sizes(), output.options());
  if (output.is_cuda()) {
#ifdef WITH_CUDA
    run_cuda(cuda, grad_input, grad, output);
#else
    fail_not_compiled_with_cuda(op);
#endif
  } else {
    cpu(grad, output, grad_input);
  }
  return grad_input;
}

}  // namespace lltm_ext::elementwise
