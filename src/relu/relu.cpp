// ReLU's operators, from the element-wise template (common/elementwise_binding.h): the public
// torch.ops.lltm_ext.relu with its autograd in C++, and relu_{forward,backward} below it (schema,
// input checks, CPU/CUDA dispatch); the Python module binds the public operator.
#include "relu/relu.h"

#include "common/elementwise_binding.h"

namespace lltm_ext::relu {
namespace {

struct Relu {
  static constexpr const char* kName = "relu";

  static at::Tensor forward(const at::Tensor& x) {
    return elementwise::forward(kName, x, forward_cpu, LLTM_EXT_CUDA_LAUNCH(launch_forward));
  }

  static at::Tensor backward(const at::Tensor& grad, const at::Tensor& output) {
    return elementwise::backward(kName, grad, output, backward_cpu,
                                 LLTM_EXT_CUDA_LAUNCH(launch_backward));
  }
};

}  // namespace
}  // namespace lltm_ext::relu

TORCH_LIBRARY_FRAGMENT(lltm_ext, m) {
  lltm_ext::elementwise::define_operators<lltm_ext::relu::Relu>(m);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "ReLU, y = max(x, 0): vectorized element-wise CPU and CUDA kernels.";
  lltm_ext::elementwise::bind<lltm_ext::relu::Relu>(
      m, "relu(x) -> y: the operator lltm_ext::relu, max(x, 0) for x of any shape");
}
