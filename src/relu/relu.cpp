// Python binding of ReLU: checks and CPU/CUDA dispatch (common/elementwise_binding.h); autograd
// lives in lltm_ext/ops/relu.py.
#include "relu/relu.h"

#include "common/elementwise_binding.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace lltm_ext;
  m.doc() = "ReLU, y = max(x, 0): vectorized element-wise CPU and CUDA kernels.";
  m.def(
      "forward",
      [](const at::Tensor& x) {
        return elementwise::forward("relu", x, relu::forward_cpu,
                                    LLTM_EXT_CUDA_LAUNCH(relu::launch_forward));
      },
      "relu(x) -> y", py::arg("x"));
  m.def(
      "backward",
      [](const at::Tensor& grad, const at::Tensor& output) {
        return elementwise::backward("relu", grad, output, relu::backward_cpu,
                                     LLTM_EXT_CUDA_LAUNCH(relu::launch_backward));
      },
      "ReLU backward from the output: grad where output > 0 (or NaN), else 0", py::arg("grad"),
      py::arg("output"));
  bind_build_info(m);
}
