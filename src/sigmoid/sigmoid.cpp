// Sigmoid's operators, from the element-wise template (common/elementwise_binding.h): the public
// torch.ops.lltm_ext.sigmoid with its autograd in C++, and sigmoid_{forward,backward} below it
// (schema, input checks, CPU/CUDA dispatch); the Python module binds the public operator.
#include "sigmoid/sigmoid.h"

#include "common/elementwise_binding.h"

namespace lltm_ext::sigmoid {
namespace {

struct Sigmoid {
  static constexpr const char* kName = "sigmoid";

  static at::Tensor forward(const at::Tensor& x) {
    return elementwise::forward(kName, x, forward_cpu, LLTM_EXT_CUDA_LAUNCH(launch_forward));
  }

  static at::Tensor backward(const at::Tensor& grad, const at::Tensor& output) {
    return elementwise::backward(kName, grad, output, backward_cpu,
                                 LLTM_EXT_CUDA_LAUNCH(launch_backward));
  }
};

}  // namespace
}  // namespace lltm_ext::sigmoid

TORCH_LIBRARY_FRAGMENT(lltm_ext, m) {
  lltm_ext::elementwise::define_operators<lltm_ext::sigmoid::Sigmoid>(m);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Sigmoid, y = 1 / (1 + exp(-x)): vectorized element-wise CPU and CUDA kernels.";
  lltm_ext::elementwise::bind<lltm_ext::sigmoid::Sigmoid>(
      m, "sigmoid(x) -> y: the operator lltm_ext::sigmoid, 1 / (1 + exp(-x)) for x of any shape");
}
