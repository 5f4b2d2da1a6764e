// CUDA kernel of round_ste's forward: the shared vectorized element-wise kernels with its math.
#include "common/elementwise.cuh"
#include "round/round.h"

namespace lltm_ext::round {

void forward_cuda(const at::Tensor& x, const at::Tensor& y) {
  cuda::elementwise::launch(y, Forward<cuda::elementwise::Math>{}, x);
}

}  // namespace lltm_ext::round
