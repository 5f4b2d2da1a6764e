// round_ste's per-element math (shared by the CPU and CUDA kernels) and the kernel entry points.
#pragma once

#include <cstdint>

#include "common/macros.h"
#include "common/strided_rows.h"

#ifdef WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace at {
class Tensor;
}  // namespace at

namespace lltm_ext::round_ste {

// y = floor(x + 1/2), rounding halves up, exactly. From t = rint(x) (nearest, ties to even):
// y = t + 1 where x - t == +1/2 (a tie that rint took down), else t. x - t is exact in floating
// point
// (|x - t| <= 1/2, both multiples of x's ulp or t == 0), unlike x + 1/2, which rounds up to 1 for
// x = 0.49999997f. Integral x (every |x| >= 2^23 in float), +-inf and NaN come back unchanged (for
// inf, x - t is NaN). `Math` supplies rint: cuda::elementwise::Math or cpu::elementwise::Math.
template <typename Math>
struct Forward {
  template <typename A>
  LLTM_EXT_HD A operator()(A x) const {
    const A t = Math::rint(x);
    return t + A(x - t == A(0.5));
  }
};

// All tensors dense and laid out alike (forward: or x read as strided rows x_rows, y
// contiguous), one dtype and device, one element count; y is written
// whole. (Backward is the straight-through estimator, the incoming gradient itself: no kernel.)
void forward_cpu(const at::Tensor& x, const at::Tensor& y, elementwise::StridedRows x_rows);

#ifdef WITH_CUDA
// CUDA launchers (round_ste_cuda.cu), for T = float, double, c10::Half, c10::BFloat16: n elements
// on `stream` (out's device current); they return the launch's error. x_rows: x dense (rows 0),
// or x's strided rows, y contiguous.
template <typename T>
cudaError_t launch_forward(T* y, const T* x, int64_t n, cudaStream_t stream,
                           elementwise::StridedRows x_rows);
#endif

}  // namespace lltm_ext::round_ste
