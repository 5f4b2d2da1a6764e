// The GEMM's short-K kernel's launcher (gemm_launchers.h's launch_short_k): gemm/tiles/short_k.cuh
// instantiated for float32, float16 and bfloat16.
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <limits>

#include "gemm/gemm_launchers.h"
#include "gemm/tiles/short_k.cuh"

namespace lltm_ext::gemm {

template <typename T>
cudaError_t launch_short_k(const ShortKCall& g, cudaStream_t stream) {
  namespace sk = lltm_ext::gemm_tiles::short_k;
  if (g.M <= 0 || g.N <= 0 || g.K <= 0) return cudaErrorInvalidValue;
  const int64_t tiles = (g.M + sk::kBM - 1) / sk::kBM * ((g.N + sk::kBN - 1) / sk::kBN);
  if (tiles > std::numeric_limits<int>::max()) return cudaErrorInvalidConfiguration;
  sk::short_k_kernel<T><<<static_cast<unsigned int>(tiles), sk::kThreads, 0, stream>>>(g);
  return cudaGetLastError();
}

template cudaError_t launch_short_k<float>(const ShortKCall&, cudaStream_t);
template cudaError_t launch_short_k<c10::Half>(const ShortKCall&, cudaStream_t);
template cudaError_t launch_short_k<c10::BFloat16>(const ShortKCall&, cudaStream_t);

}  // namespace lltm_ext::gemm
