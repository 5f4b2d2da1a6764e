// round_ste's operators, from the element-wise template (common/elementwise_binding.h): the public
// torch.ops.lltm_ext.round_ste with its straight-through autograd in C++ (backward returns the
// incoming gradient unchanged: no kernel), and round_ste_forward below it (round half up: schema,
// input checks, CPU/CUDA dispatch); the Python module binds the public operator.
#include "round_ste/round_ste.h"

#include "common/elementwise_binding.h"

namespace lltm_ext::round_ste {
namespace {

struct RoundSte {
  static constexpr const char* kName = "round_ste";
  static constexpr bool kStraightThrough = true;

  static at::Tensor forward(const at::Tensor& x) {
    return elementwise::forward(kName, x, forward_cpu, LLTM_EXT_CUDA_LAUNCH(launch_forward));
  }
};

}  // namespace
}  // namespace lltm_ext::round_ste

TORCH_LIBRARY_FRAGMENT(lltm_ext, m) {
  lltm_ext::elementwise::define_operators<lltm_ext::round_ste::RoundSte>(m);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "round_ste, y = floor(x + 1/2) (halves round up): CPU and CUDA kernels.";
  lltm_ext::elementwise::bind<lltm_ext::round_ste::RoundSte>(
      m,
      "round_ste(x) -> y: the operator lltm_ext::round_ste, floor(x + 1/2) exactly, with a "
      "straight-through gradient");
}
