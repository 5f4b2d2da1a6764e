// CUDA kernels of sigmoid: the shared vectorized element-wise kernels with sigmoid's math.
#include <type_traits>

#include "common/elementwise.cuh"
#include "sigmoid/sigmoid.h"

namespace lltm_ext::sigmoid {

void forward_cuda(const at::Tensor& x, const at::Tensor& y) {
  LLTM_EXT_DISPATCH_FLOATING(x.scalar_type(), "sigmoid_forward_cuda", [&] {
    // float16 / bfloat16 results keep 11 / 8 bits: fast float exp and reciprocal suffice there
    // (and keep the kernel memory-bound); float32 and float64 get the accurate ones.
    using Math = std::conditional_t<std::is_same_v<scalar_t, cuda::opmath_t<scalar_t>>,
                                    cuda::elementwise::Math, cuda::elementwise::FastMath>;
    cuda::elementwise::launch_as<scalar_t>(y, Forward<Math>{}, x);
  });
}

void backward_cuda(const at::Tensor& grad, const at::Tensor& y, const at::Tensor& grad_input) {
  cuda::elementwise::launch(grad_input, Backward{}, grad, y);
}

}  // namespace lltm_ext::sigmoid
