// round_ste's forward operator (round half up): schema, input checks and CPU/CUDA dispatch
// (common/elementwise_binding.h), registered as torch.ops.lltm_ext.round_ste_forward and bound in
// Python. The straight-through backward (the incoming gradient, unchanged) needs no kernel; it
// lives in lltm_ext/ops/round_ste.py.
#include "round_ste/round_ste.h"

#include "common/elementwise_binding.h"

namespace lltm_ext::round_ste {
namespace {

at::Tensor forward(const at::Tensor& x) {
  return elementwise::forward("round_ste", x, forward_cpu, LLTM_EXT_CUDA_LAUNCH(launch_forward));
}

}  // namespace
}  // namespace lltm_ext::round_ste

TORCH_LIBRARY_FRAGMENT(lltm_ext, m) {
  m.def("round_ste_forward(Tensor x) -> Tensor");
  lltm_ext::impl_cpu_cuda(m, "round_ste_forward", TORCH_FN(lltm_ext::round_ste::forward));
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "round_ste forward, y = floor(x + 1/2) (halves round up): CPU and CUDA kernels.";
  m.def("forward", &lltm_ext::round_ste::forward, "round half up: floor(x + 1/2), exactly",
        py::arg("x"));
  lltm_ext::bind_build_info(m);
}
