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
cudaError_t launch_s(const GemvCall& g, bool rows, cudaStream_t stream) {
  const int rows_per_block = gv::kThreads / g.tpr;
  const dim3 grid(static_cast<unsigned int>(rows ? (g.L + rows_per_block - 1) / rows_per_block
                                                 : (g.L + 31) / 32),
                  static_cast<unsigned int>((g.K + g.k_split - 1) / g.k_split));
  if (rows) {
    gv::gemv_rows_kernel<T, Acc, S_MAX><<<grid, gv::kThreads, 0, stream>>>(g);
  } else {
    gv::gemv_cols_kernel<T, Acc, S_MAX><<<grid, gv::kThreads, 0, stream>>>(g);
  }
  return cudaGetLastError();
}

}  // namespace

template <typename T>
cudaError_t launch_gemv(const GemvCall& g, cudaStream_t stream) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  if (g.k_split <= 0 || g.L <= 0 || g.S < 1 || g.S > 4) return cudaErrorInvalidValue;
  if (g.tpr < 1 || g.tpr > gv::kThreads || (g.tpr & (g.tpr - 1)) != 0) return cudaErrorInvalidValue;
  if ((g.K + g.k_split - 1) / g.k_split > 65535) return cudaErrorInvalidConfiguration;
  const bool rows = g.xs_k == 1;
  if (g.S == 1) return launch_s<T, Acc, 1>(g, rows, stream);
  if (g.S == 2) return launch_s<T, Acc, 2>(g, rows, stream);
  return launch_s<T, Acc, 4>(g, rows, stream);
}

template cudaError_t launch_gemv<float>(const GemvCall&, cudaStream_t);
template cudaError_t launch_gemv<double>(const GemvCall&, cudaStream_t);
template cudaError_t launch_gemv<c10::Half>(const GemvCall&, cudaStream_t);
template cudaError_t launch_gemv<c10::BFloat16>(const GemvCall&, cudaStream_t);

}  // namespace lltm_ext::gemm
