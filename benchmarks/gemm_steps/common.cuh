// What the step files share: the C entry point each exports, and the launch of the package's own
// tile kernel (src/gemm/tiles/) used by steps 7-14.
//
// Every step_NN_*.cu defines one function with C linkage, loaded by bench.py through ctypes:
//
//   GEMM_STEP_API int gemm_step_NN(const float* A, const float* B, float* C, int M, int N, int K,
//                                  int splits, float* workspace, cudaStream_t stream);
//
// computing C = A B for row-major float32 A (M x K), B (K x N), C (M x N) on `stream`, and
// returning a cudaError_t (0: launched fine). `splits` and `workspace` (splits x M x N floats)
// matter only to the steps that split K. Steps 1-6 assume M, N, K multiples of 128 and 16-byte
// aligned rows (the benchmark's shapes); the package's kernel handles any shape and layout.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "gemm/tiles/launch.cuh"

#define GEMM_STEP_API extern "C" __attribute__((visibility("default")))

namespace gemm_steps {

namespace gt = lltm_ext::gemm_tiles;

// The launch parameters of the package's kernel for row-major A, B and C, K cut into `splits`
// parts (rounded up to whole BK steps).
template <typename Cfg>
gt::Params<float, float> row_major_params(const float* A, const float* B, float* C, int M, int N,
                                          int K, int splits) {
  gt::Params<float, float> p{};
  p.a = A;
  p.b = B;
  p.c = C;
  p.M = M;
  p.N = N;
  p.K = K;
  p.lda = K;
  p.ldb = N;
  p.ldc = N;
  p.k_split = ((K + splits - 1) / splits + Cfg::BK - 1) / Cfg::BK * Cfg::BK;
  p.split_stride = static_cast<int64_t>(M) * N;
  p.vec_a = p.vec_b = p.vec_c = true;
  return p;
}

// C = A B with the package's kernel for tile config Cfg (gemm_tile_types.h), split-K when
// splits > 1: the splits write partial products to `workspace`, a second kernel sums them.
template <typename Cfg>
int run_package_tiles(const float* A, const float* B, float* C, int M, int N, int K, int splits,
                      float* workspace, cudaStream_t stream) {
  gt::Params<float, float> p = row_major_params<Cfg>(A, B, C, M, N, K, splits);
  splits = (K + p.k_split - 1) / p.k_split;
  if (splits > 1) p.c = workspace;
  cudaError_t err = gt::launch_tiles<Cfg, float, float, float, true, false>(p, splits, stream);
  if (err != cudaSuccess || splits == 1) return static_cast<int>(err);
  const int64_t n = static_cast<int64_t>(M) * N;
  gt::splitk_reduce_kernel<float, float><<<528, 256, 0, stream>>>(workspace, C, n, splits, true);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace gemm_steps
