// Python binding of ReLU: input checks, CPU/CUDA dispatch. Autograd lives in lltm_ext/ops/relu.py.
#include "relu/relu.h"

#include "common/elementwise_cpu.h"
#include "common/module.h"

namespace lltm_ext::relu {
namespace {

// y = relu(x), any shape; y is a new contiguous tensor like x.
at::Tensor forward(const at::Tensor& x) {
  CHECK_INPUT(x);
  check_backend(x, "relu");
  at::Tensor y = at::empty(x.sizes(), x.options());
  if (x.is_cuda()) {
#ifdef WITH_CUDA
    forward_cuda(x, y);
#endif
  } else {
    forward_cpu(x, y);
  }
  return y;
}

// The gradient wrt x from the incoming gradient and the saved output y (same shape).
at::Tensor backward(const at::Tensor& grad, const at::Tensor& output) {
  CHECK_INPUT(grad);
  CHECK_INPUT(output);
  CHECK_LIKE(grad, output);
  CHECK_SAME_SIZES(grad, output);
  check_backend(output, "relu");
  at::Tensor grad_input = at::empty(output.sizes(), output.options());
  if (output.is_cuda()) {
#ifdef WITH_CUDA
    backward_cuda(grad, output, grad_input);
#endif
  } else {
    backward_cpu(grad, output, grad_input);
  }
  return grad_input;
}

}  // namespace
}  // namespace lltm_ext::relu

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "ReLU, y = max(x, 0): vectorized element-wise CPU and CUDA kernels.";
  m.def("forward", &lltm_ext::relu::forward, "relu(x) -> y", py::arg("x"));
  m.def("backward", &lltm_ext::relu::backward,
        "ReLU backward from the output: grad where output > 0, else 0", py::arg("grad"),
        py::arg("output"));
  lltm_ext::bind_build_info(m);
}
