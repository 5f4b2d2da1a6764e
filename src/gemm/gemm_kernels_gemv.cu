// The GEMM's matrix-vector kernels' launcher (gemm_launchers.h's launch_gemv): the instantiations
// of gemm/tiles/gemv.cuh for each dtype (float accumulation; double for float64) and small side of
// at most 1, 2 or 4 columns.
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <type_traits>

#include "gemm/gemm_launchers.h"
#include "gemm/tiles/gemv.cuh"

namespace lltm_ext::gemm {
namespace {

namespace gv = lltm_ext::gemm_tiles::gemv;

template <typename T, typename Acc, int S_MAX>
cudaError_t launch_s(const gv::GemvParams<T, Acc>& p, bool rows, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned int>(rows ? (p.L + gv::kThreads / 32 / p.wpr - 1) /
                                                       (gv::kThreads / 32 / p.wpr)
                                                 : (p.L + 31) / 32),
                  static_cast<unsigned int>((p.K + p.k_split - 1) / p.k_split));
  if (rows) {
    gv::gemv_rows_kernel<T, Acc, S_MAX><<<grid, gv::kThreads, 0, stream>>>(p);
  } else {
    gv::gemv_cols_kernel<T, Acc, S_MAX><<<grid, gv::kThreads, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

}  // namespace

template <typename T>
cudaError_t launch_gemv(const GemvCall& g, cudaStream_t stream) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  gv::GemvParams<T, Acc> p;
  p.x = static_cast<const T*>(g.x);
  p.y = static_cast<const T*>(g.y);
  p.out = static_cast<T*>(g.out);
  p.partial = static_cast<Acc*>(g.partial);
  p.L = g.L;
  p.K = g.K;
  p.k_split = g.k_split;
  p.S = g.S;
  p.xs_l = g.xs_l;
  p.xs_k = g.xs_k;
  p.ys_k = g.ys_k;
  p.ys_s = g.ys_s;
  p.os_l = g.os_l;
  p.os_s = g.os_s;
  p.slice = g.slice;
  p.wpr = g.wpr;
  p.vec = g.vec;
  if (g.k_split <= 0 || g.L <= 0 || g.S < 1 || g.S > 4) return cudaErrorInvalidValue;
  if ((g.K + g.k_split - 1) / g.k_split > 65535) return cudaErrorInvalidConfiguration;
  const bool rows = g.xs_k == 1 && g.L > 0;
  if (g.S == 1) return launch_s<T, Acc, 1>(p, rows, stream);
  if (g.S == 2) return launch_s<T, Acc, 2>(p, rows, stream);
  return launch_s<T, Acc, 4>(p, rows, stream);
}

template cudaError_t launch_gemv<float>(const GemvCall&, cudaStream_t);
template cudaError_t launch_gemv<double>(const GemvCall&, cudaStream_t);
template cudaError_t launch_gemv<c10::Half>(const GemvCall&, cudaStream_t);
template cudaError_t launch_gemv<c10::BFloat16>(const GemvCall&, cudaStream_t);

}  // namespace lltm_ext::gemm
