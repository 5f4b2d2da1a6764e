// The launchers of the GEMM's kernels that take a ShortKCall (gemm_launchers.h: launch_short_k,
// launch_short_k_mma, launch_small_mma): gemm/tiles/short_k.cuh instantiated for float32, float16
// and bfloat16, gemm/tiles/short_k_mma.cuh for float16 and bfloat16 at K <= 16, 32 and 64, and
// gemm/tiles/small_mma.cuh for float16 and bfloat16.
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <limits>
#include <type_traits>

#include "gemm/gemm_launchers.h"
#include "gemm/tiles/short_k.cuh"
#include "gemm/tiles/short_k_mma.cuh"
#include "gemm/tiles/small_mma.cuh"

namespace lltm_ext::gemm {

template <typename T>
cudaError_t launch_short_k(const ShortKCall& g, cudaStream_t stream) {
  namespace sk = lltm_ext::gemm_tiles::short_k;
  if (g.M <= 0 || g.N <= 0 || g.K <= 0 || g.sms <= 0) return cudaErrorInvalidValue;
  const int64_t tiles = (g.M + sk::kBM - 1) / sk::kBM * ((g.N + sk::kBN - 1) / sk::kBN);
  const int64_t blocks = std::min<int64_t>(tiles, int64_t{g.sms} * sk::kBlocksPerSm);
  sk::short_k_kernel<T><<<static_cast<unsigned int>(blocks), sk::kThreads, 0, stream>>>(g);
  return cudaGetLastError();
}

template cudaError_t launch_short_k<float>(const ShortKCall&, cudaStream_t);
template cudaError_t launch_short_k<c10::Half>(const ShortKCall&, cudaStream_t);
template cudaError_t launch_short_k<c10::BFloat16>(const ShortKCall&, cudaStream_t);

template <typename T>
cudaError_t launch_short_k_mma(const ShortKCall& g, cudaStream_t stream) {
  namespace sk = lltm_ext::gemm_tiles::short_k_mma;
  if (g.M <= 0 || g.N <= 0 || g.K <= 0 || g.K > sk::kMaxK) return cudaErrorInvalidValue;
  const int64_t tiles = (g.M + sk::kBM - 1) / sk::kBM * ((g.N + sk::kBN - 1) / sk::kBN);
  if (tiles > std::numeric_limits<int>::max()) return cudaErrorInvalidConfiguration;
  constexpr int DT =
      std::is_same_v<T, c10::BFloat16> ? lltm_ext::cuda::kMmaBF16 : lltm_ext::cuda::kMmaF16;
  const auto blocks = static_cast<unsigned int>(tiles);
  if (g.K <= 16) {
    sk::short_k_mma_kernel<DT, 1><<<blocks, sk::kThreads, 0, stream>>>(g);
  } else if (g.K <= 32) {
    sk::short_k_mma_kernel<DT, 2><<<blocks, sk::kThreads, 0, stream>>>(g);
  } else {
    sk::short_k_mma_kernel<DT, 4><<<blocks, sk::kThreads, 0, stream>>>(g);
  }
  return cudaGetLastError();
}

template cudaError_t launch_short_k_mma<c10::Half>(const ShortKCall&, cudaStream_t);
template cudaError_t launch_short_k_mma<c10::BFloat16>(const ShortKCall&, cudaStream_t);

template <typename T>
cudaError_t launch_small_mma(const ShortKCall& g, cudaStream_t stream) {
  namespace sm = lltm_ext::gemm_tiles::small_mma;
  if (g.M <= 0 || g.N <= 0 || g.K <= 0 || g.K > sm::kMaxK) return cudaErrorInvalidValue;
  const int64_t tiles = (g.M + sm::kBM - 1) / sm::kBM * ((g.N + sm::kBN - 1) / sm::kBN);
  if (tiles > std::numeric_limits<int>::max()) return cudaErrorInvalidConfiguration;
  constexpr int DT =
      std::is_same_v<T, c10::BFloat16> ? lltm_ext::cuda::kMmaBF16 : lltm_ext::cuda::kMmaF16;
  sm::small_mma_kernel<DT><<<static_cast<unsigned int>(tiles), sm::kThreads, 0, stream>>>(g);
  return cudaGetLastError();
}

template cudaError_t launch_small_mma<c10::Half>(const ShortKCall&, cudaStream_t);
template cudaError_t launch_small_mma<c10::BFloat16>(const ShortKCall&, cudaStream_t);

}  // namespace lltm_ext::gemm
