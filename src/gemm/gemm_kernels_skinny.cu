// The GEMM's skinny kernel's launcher (gemm_launchers.h's launch_skinny): the instantiations of
// gemm/tiles/skinny_mma.cuh for float16 and bfloat16 and small sides of at most 8, 16 and 32, the
// large operand K-contiguous (one 16-row tile of it per block: two measured slower on an H200,
// and spill at a side of 9 to 16, docs/decisions.md#skinny-tiles) or L-contiguous (the column
// kernel, in blocks of 32 or 64 columns).
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <type_traits>

#include "gemm/gemm_launchers.h"
#include "gemm/tiles/skinny_mma.cuh"

namespace lltm_ext::gemm {
namespace {

namespace sk = lltm_ext::gemm_tiles::skinny;

// The shared memory a block may opt in to on the current device (227 KB on sm_90, 163 KB on
// sm_80).
int smem_optin() {
  int device = 0, bytes = 48 * 1024;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
          cudaSuccess) {
    return 48 * 1024;
  }
  return bytes;
}

template <int ST, int RT>
int ring_bytes(const SkinnyCall& g) {
  if (!g.l_contig) return sk::ring_bytes_per_warp<ST, RT>();
  return g.cols == 32 ? sk::cols_ring_bytes_per_warp<ST, 2>()
                      : sk::cols_ring_bytes_per_warp<ST, 4>();
}

template <int DT, int ST, int RT>
cudaError_t launch_tile(const SkinnyCall& g, cudaStream_t stream) {
  const int rows = g.l_contig ? g.cols : 16 * RT;
  const dim3 grid(static_cast<unsigned int>((g.L + rows - 1) / rows),
                  static_cast<unsigned int>((g.K + g.k_split - 1) / g.k_split));
  const int smem = g.warps * ring_bytes<ST, RT>(g);
  if (smem > smem_optin()) return cudaErrorInvalidValue;
  const auto kernel = !g.l_contig    ? sk::skinny_kernel<DT, ST, RT>
                      : g.cols == 32 ? sk::skinny_cols_kernel<DT, ST, 2>
                                     : sk::skinny_cols_kernel<DT, ST, 4>;
  if (smem > 48 * 1024) {
    const cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
  }
  kernel<<<grid, 32 * g.warps, smem, stream>>>(g);
  return cudaGetLastError();
}

constexpr int kRT = 1;

template <int ST, int RT>
int max_warps_of(const SkinnyCall& g) {
  const int fit = smem_optin() / ring_bytes<ST, RT>(g);
  return fit < 1 ? 1 : fit > sk::kMaxWarps ? sk::kMaxWarps : fit;
}

}  // namespace

int skinny_max_warps(const SkinnyCall& g) {
  return g.S <= 8    ? max_warps_of<1, kRT>(g)
         : g.S <= 16 ? max_warps_of<2, kRT>(g)
                     : max_warps_of<4, kRT>(g);
}

template <typename T>
cudaError_t launch_skinny(const SkinnyCall& g, cudaStream_t stream) {
  constexpr int DT =
      std::is_same_v<T, c10::BFloat16> ? lltm_ext::cuda::kMmaBF16 : lltm_ext::cuda::kMmaF16;
  if (g.L <= 0 || g.K <= 0 || g.S < 1 || g.S > 32 || g.K % 8 != 0 || g.k_split <= 0 ||
      g.k_split % 8 != 0 || g.warps < 1 || g.warps > sk::kMaxWarps ||
      (g.l_contig && (g.L % 8 != 0 || g.xs_k % 8 != 0 || (g.cols != 32 && g.cols != 64)))) {
    return cudaErrorInvalidValue;
  }
  if ((g.L + 31) / 16 > 0x7fffffff || (g.K + g.k_split - 1) / g.k_split > 65535) {
    return cudaErrorInvalidConfiguration;
  }
  if (g.S <= 8) return launch_tile<DT, 1, kRT>(g, stream);
  if (g.S <= 16) return launch_tile<DT, 2, kRT>(g, stream);
  return launch_tile<DT, 4, kRT>(g, stream);
}

template cudaError_t launch_skinny<c10::Half>(const SkinnyCall&, cudaStream_t);
template cudaError_t launch_skinny<c10::BFloat16>(const SkinnyCall&, cudaStream_t);

}  // namespace lltm_ext::gemm
