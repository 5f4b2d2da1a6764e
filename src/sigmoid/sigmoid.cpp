// Python binding of sigmoid: checks and CPU/CUDA dispatch (common/elementwise_binding.h); autograd
// lives in lltm_ext/ops/sigmoid.py.
#include "sigmoid/sigmoid.h"

#include "common/elementwise_binding.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace lltm_ext;
  m.doc() = "Sigmoid, y = 1 / (1 + exp(-x)): vectorized element-wise CPU and CUDA kernels.";
  m.def(
      "forward",
      [](const at::Tensor& x) {
        return elementwise::forward("sigmoid", x, sigmoid::forward_cpu,
                                    LLTM_EXT_CUDA_LAUNCH(sigmoid::launch_forward));
      },
      "sigmoid(x) -> y", py::arg("x"));
  m.def(
      "backward",
      [](const at::Tensor& grad, const at::Tensor& output) {
        return elementwise::backward("sigmoid", grad, output, sigmoid::backward_cpu,
                                     LLTM_EXT_CUDA_LAUNCH(sigmoid::launch_backward));
      },
      "sigmoid backward from the output: grad * output * (1 - output)", py::arg("grad"),
      py::arg("output"));
  bind_build_info(m);
}
