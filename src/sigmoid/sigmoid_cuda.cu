// CUDA kernels of sigmoid: the shared vectorized element-wise kernels with sigmoid's math.
#include "common/elementwise.cuh"
#include "sigmoid/sigmoid.h"

namespace lltm_ext::sigmoid {

void forward_cuda(const at::Tensor& x, const at::Tensor& y) {
  cuda::elementwise::launch(y, Forward<cuda::elementwise::Math>{}, x);
}

void backward_cuda(const at::Tensor& grad, const at::Tensor& y, const at::Tensor& grad_input) {
  cuda::elementwise::launch(grad_input, Backward{}, grad, y);
}

}  // namespace lltm_ext::sigmoid
