// Python binding of round_ste's forward (round half up): input checks, CPU/CUDA dispatch. The
// straight-through backward (the incoming gradient, unchanged) lives in lltm_ext/ops/round.py.
#include "round/round.h"

#include "common/module.h"

namespace lltm_ext::round {
namespace {

// y = floor(x + 1/2) computed exactly, any shape; y is a new contiguous tensor like x.
at::Tensor forward(const at::Tensor& x) {
  CHECK_INPUT(x);
  check_backend(x, "round_ste");
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

}  // namespace
}  // namespace lltm_ext::round

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "round_ste forward, y = floor(x + 1/2) (halves round up): CPU and CUDA kernels.";
  m.def("forward", &lltm_ext::round::forward, "round half up: floor(x + 1/2), exactly",
        py::arg("x"));
  lltm_ext::bind_build_info(m);
}
