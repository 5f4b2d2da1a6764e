// CUDA kernel of round_ste's forward: the shared vectorized element-wise kernels with its math.
#include "common/elementwise_cuda.cuh"
#include "round_ste/round_ste.h"

namespace lltm_ext::round_ste {

template <typename T>
cudaError_t launch_forward(T* y, const T* x, int64_t n, cudaStream_t stream,
                           elementwise::StridedRows x_rows) {
  return cuda::elementwise::launch_unary(stream, n, x_rows, Forward<cuda::elementwise::Math>{}, y,
                                         x);
}

#define LLTM_EXT_INSTANTIATE(T)                                               \
  template cudaError_t launch_forward<T>(T*, const T*, int64_t, cudaStream_t, \
                                         elementwise::StridedRows);
LLTM_EXT_FOR_FLOATING_TYPES(LLTM_EXT_INSTANTIATE)

}  // namespace lltm_ext::round_ste
