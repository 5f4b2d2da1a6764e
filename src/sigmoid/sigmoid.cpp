// Python binding of sigmoid: input checks, CPU/CUDA dispatch. Autograd lives in
// lltm_ext/ops/sigmoid.py.
#include "sigmoid/sigmoid.h"

#include "common/elementwise_cpu.h"
#include "common/module.h"

namespace lltm_ext::sigmoid {
namespace {

// y = sigmoid(x), any shape; y is a new contiguous tensor like x.
at::Tensor forward(const at::Tensor& x) {
  CHECK_INPUT(x);
  check_backend(x, "sigmoid");
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

// The gradient wrt x, grad * output * (1 - output), from the saved output (same shape).
at::Tensor backward(const at::Tensor& grad, const at::Tensor& output) {
  CHECK_INPUT(grad);
  CHECK_INPUT(output);
  CHECK_LIKE(grad, output);
  CHECK_SAME_SIZES(grad, output);
  check_backend(output, "sigmoid");
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
}  // namespace lltm_ext::sigmoid

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Sigmoid, y = 1 / (1 + exp(-x)): vectorized element-wise CPU and CUDA kernels.";
  m.def("forward", &lltm_ext::sigmoid::forward, "sigmoid(x) -> y", py::arg("x"));
  m.def("backward", &lltm_ext::sigmoid::backward,
        "sigmoid backward from the output: grad * output * (1 - output)", py::arg("grad"),
        py::arg("output"));
  lltm_ext::bind_build_info(m);
}
