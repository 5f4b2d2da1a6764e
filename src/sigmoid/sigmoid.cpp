// Sigmoid's operators: schema, input checks and CPU/CUDA dispatch (common/elementwise_binding.h),
// registered as torch.ops.lltm_ext.sigmoid_{forward,backward} and bound in Python; autograd lives
// in lltm_ext/ops/sigmoid.py.
#include "sigmoid/sigmoid.h"

#include "common/elementwise_binding.h"

namespace lltm_ext::sigmoid {
namespace {

at::Tensor forward(const at::Tensor& x) {
  return elementwise::forward("sigmoid", x, forward_cpu, LLTM_EXT_CUDA_LAUNCH(launch_forward));
}

at::Tensor backward(const at::Tensor& grad, const at::Tensor& output) {
  return elementwise::backward("sigmoid", grad, output, backward_cpu,
                               LLTM_EXT_CUDA_LAUNCH(launch_backward));
}

}  // namespace
}  // namespace lltm_ext::sigmoid

TORCH_LIBRARY_FRAGMENT(lltm_ext, m) {
  m.def("sigmoid_forward(Tensor x) -> Tensor");
  m.def("sigmoid_backward(Tensor grad, Tensor output) -> Tensor");
  lltm_ext::impl_cpu_cuda(m, "sigmoid_forward", TORCH_FN(lltm_ext::sigmoid::forward));
  lltm_ext::impl_cpu_cuda(m, "sigmoid_backward", TORCH_FN(lltm_ext::sigmoid::backward));
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Sigmoid, y = 1 / (1 + exp(-x)): vectorized element-wise CPU and CUDA kernels.";
  m.def("forward", &lltm_ext::sigmoid::forward, "sigmoid(x) -> y", py::arg("x"));
  m.def("backward", &lltm_ext::sigmoid::backward,
        "sigmoid backward from the output: grad * output * (1 - output)", py::arg("grad"),
        py::arg("output"));
  lltm_ext::bind_build_info(m);
}
