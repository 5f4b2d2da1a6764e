// CUDA kernels of sigmoid: the shared vectorized element-wise kernels with sigmoid's math.
// float16 / bfloat16 results keep 11 / 8 bits: fast float exp and reciprocal suffice there (and
// keep the kernel memory-bound); float32 and float64 get the accurate ones
// (cuda::elementwise::MathFor).
#include "common/elementwise_cuda.cuh"
#include "sigmoid/sigmoid.h"

namespace lltm_ext::sigmoid {

template <typename T>
cudaError_t launch_forward(T* y, const T* x, int64_t n, cudaStream_t stream,
                           elementwise::StridedRows x_rows) {
  return cuda::elementwise::launch_unary(stream, n, x_rows,
                                         Forward<cuda::elementwise::MathFor<T>>{}, y, x);
}

template <typename T>
cudaError_t launch_backward(T* grad_input, const T* grad, const T* y, int64_t n,
                            cudaStream_t stream) {
  return cuda::elementwise::launch(stream, n, Backward{}, grad_input, grad, y);
}

#define LLTM_EXT_INSTANTIATE(T)                                               \
  template cudaError_t launch_forward<T>(T*, const T*, int64_t, cudaStream_t, \
                                         elementwise::StridedRows);           \
  template cudaError_t launch_backward<T>(T*, const T*, const T*, int64_t, cudaStream_t);
LLTM_EXT_FOR_FLOATING_TYPES(LLTM_EXT_INSTANTIATE)

}  // namespace lltm_ext::sigmoid
