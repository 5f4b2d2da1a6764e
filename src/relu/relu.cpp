// ReLU's operators: schema, input checks and CPU/CUDA dispatch (common/elementwise_binding.h),
// registered as torch.ops.lltm_ext.relu_{forward,backward} and bound in Python; autograd lives in
// lltm_ext/ops/relu.py.
#include "relu/relu.h"

#include "common/elementwise_binding.h"

namespace lltm_ext::relu {
namespace {

at::Tensor forward(const at::Tensor& x) {
  return elementwise::forward("relu", x, forward_cpu, LLTM_EXT_CUDA_LAUNCH(launch_forward));
}

at::Tensor backward(const at::Tensor& grad, const at::Tensor& output) {
  return elementwise::backward("relu", grad, output, backward_cpu,
                               LLTM_EXT_CUDA_LAUNCH(launch_backward));
}

}  // namespace
}  // namespace lltm_ext::relu

TORCH_LIBRARY_FRAGMENT(lltm_ext, m) {
  m.def("relu_forward(Tensor x) -> Tensor");
  m.def("relu_backward(Tensor grad, Tensor output) -> Tensor");
  lltm_ext::impl_cpu_cuda(m, "relu_forward", TORCH_FN(lltm_ext::relu::forward));
  lltm_ext::impl_cpu_cuda(m, "relu_backward", TORCH_FN(lltm_ext::relu::backward));
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "ReLU, y = max(x, 0): vectorized element-wise CPU and CUDA kernels.";
  m.def("forward", &lltm_ext::relu::forward, "relu(x) -> y", py::arg("x"));
  m.def("backward", &lltm_ext::relu::backward,
        "ReLU backward from the output: grad where output > 0 (or NaN), else 0", py::arg("grad"),
        py::arg("output"));
  lltm_ext::bind_build_info(m);
}
