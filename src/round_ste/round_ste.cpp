// Python binding of round_ste's forward (round half up): checks and CPU/CUDA dispatch
// (common/elementwise_binding.h). The straight-through backward (the incoming gradient,
// unchanged) lives in lltm_ext/ops/round_ste.py.
#include "round_ste/round_ste.h"

#include "common/elementwise_binding.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace lltm_ext;
  m.doc() = "round_ste forward, y = floor(x + 1/2) (halves round up): CPU and CUDA kernels.";
  m.def(
      "forward",
      [](const at::Tensor& x) {
        return elementwise::forward("round_ste", x, round_ste::forward_cpu,
                                    LLTM_EXT_CUDA_LAUNCH(round_ste::launch_forward));
      },
      "round half up: floor(x + 1/2), exactly", py::arg("x"));
  bind_build_info(m);
}
