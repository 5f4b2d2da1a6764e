// Definitions of gemm_launchers.h's launchers over the kernels of gemm/tiles/, and the macros
// that instantiate them: each gemm_kernels_*.cu file instantiates a share of the configs, so that
// nvcc compiles them in parallel. Plain CUDA: no ATen (common/cuda_kernel.cuh says why).
#pragma once

#include "common/cuda_kernel.cuh"
#include "gemm/gemm_launchers.h"
#include "gemm/tiles/launch.cuh"

namespace lltm_ext::gemm {

template <typename Cfg, typename T, typename OutT>
cudaError_t launch(const gt::Params<T, OutT>& p, bool a_kcontig, bool b_kcontig, int splits,
                   cudaStream_t stream) {
  using Acc = cuda::opmath_t<T>;
  if (a_kcontig && b_kcontig)
    return gt::launch_tiles<Cfg, T, Acc, OutT, true, true>(p, splits, stream);
  if (a_kcontig) return gt::launch_tiles<Cfg, T, Acc, OutT, true, false>(p, splits, stream);
  if (b_kcontig) return gt::launch_tiles<Cfg, T, Acc, OutT, false, true>(p, splits, stream);
  return gt::launch_tiles<Cfg, T, Acc, OutT, false, false>(p, splits, stream);
}

template <typename Cfg>
cudaError_t blocks_per_sm(int* blocks) {
  const auto kernel = gt::kernel_of<Cfg, float, float, float, true, false>();
  const cudaError_t err = gt::allow_smem<Cfg, float>(kernel);
  if (err != cudaSuccess) return err;
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, kernel, Cfg::THREADS,
                                                       Cfg::template smem_bytes<float>());
}

template <typename Cfg>
cudaError_t ptx_version(int* version) {
  cudaFuncAttributes attr{};
  const cudaError_t err =
      cudaFuncGetAttributes(&attr, gt::kernel_of<Cfg, float, float, float, true, false>());
  *version = attr.ptxVersion;
  return err;
}

template <typename Acc, typename OutT>
cudaError_t launch_splitk_reduce(const Acc* partial, OutT* c, int64_t n, int splits, bool vec,
                                 unsigned int blocks, int threads, cudaStream_t stream) {
  return cuda::launch_dependent(gt::splitk_reduce_kernel<Acc, OutT>, dim3(blocks), dim3(threads), 0,
                                stream, partial, c, n, splits, vec);
}

template <typename Acc, typename OutT>
cudaError_t launch_splitk_reduce_grouped(const Acc* partial, OutT* c, int64_t n, int splits,
                                         bool vec, unsigned int blocks, cudaStream_t stream) {
  return cuda::launch_dependent(gt::splitk_reduce_grouped_kernel<Acc, OutT>, dim3(blocks),
                                dim3(256), 0, stream, partial, c, n, splits, vec);
}

template <typename Cfg, typename T>
cudaError_t launch_tail_reduce(const T* partial, T* c, int M, int N, int64_t ldc, int main_tiles,
                               int tail_tiles, int splits, bool vec_c, unsigned int blocks,
                               int threads, cudaStream_t stream) {
  gt::tail_reduce_kernel<Cfg::BM, Cfg::BN, T, T><<<blocks, threads, 0, stream>>>(
      partial, c, M, N, ldc, main_tiles, tail_tiles, splits, vec_c);
  return cudaGetLastError();
}

}  // namespace lltm_ext::gemm

// Everything the host code uses of float32 config I (F32Configs' index): its launches, its
// occupancy and image queries, its tail split-K reduction.
#define LLTM_EXT_GEMM_F32_CONFIG(I)                                                               \
  namespace lltm_ext::gemm {                                                                      \
  using Cfg##I = std::tuple_element_t<I, F32Configs>;                                             \
  template cudaError_t launch<Cfg##I, float, float>(const gt::Params<float, float>&, bool, bool,  \
                                                    int, cudaStream_t);                           \
  template cudaError_t blocks_per_sm<Cfg##I>(int*);                                               \
  template cudaError_t ptx_version<Cfg##I>(int*);                                                 \
  template cudaError_t launch_tail_reduce<Cfg##I, float>(const float*, float*, int, int, int64_t, \
                                                         int, int, int, bool, unsigned int, int,  \
                                                         cudaStream_t);                           \
  }
