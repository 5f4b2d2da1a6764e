// CPU kernels of ReLU: vectorized, parallel element-wise loops.
#include "common/elementwise_cpu.h"
#include "relu/relu.h"

namespace lltm_ext::relu {

void forward_cpu(const at::Tensor& x, const at::Tensor& y, elementwise::StridedRows x_rows) {
  cpu::elementwise::launch_unary(y, Forward{}, x, x_rows);
}

void backward_cpu(const at::Tensor& grad, const at::Tensor& y, const at::Tensor& grad_input) {
  cpu::elementwise::launch(grad_input, Backward{}, grad, y);
}

}  // namespace lltm_ext::relu
