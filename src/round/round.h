// round_ste's per-element math (shared by the CPU and CUDA kernels) and the kernel entry points.
#pragma once

#include <ATen/ATen.h>

#include "common/dispatch.h"

namespace lltm_ext::round {

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

// All tensors contiguous, one dtype and device, one element count; y is written whole. (Backward is
// the straight-through estimator, the incoming gradient itself: no kernel.)
void forward_cpu(const at::Tensor& x, const at::Tensor& y);
void forward_cuda(const at::Tensor& x, const at::Tensor& y);

}  // namespace lltm_ext::round
