// The math of the tiled GEMM kernels: one BK-deep K step of a thread's TM x TN register tile,
// FFMAs over fragments read from the shared operand tiles.
#pragma once

#include <cuda_runtime.h>

#include "gemm/tiles/vector_access.cuh"

namespace lltm_ext::gemm_tiles {

// acc += one BK-deep K step from shared tiles (as, bs already offset to this thread's first row
// and column). B is K-major (Bs[k][n]); A is K-major (As[k][m]) or, with A_K, As[m][k].
template <typename Cfg, bool A_K, typename Acc>
__device__ __forceinline__ void mma_k_step(Acc (&acc)[Cfg::TM][Cfg::TN], const Acc* as,
                                           const Acc* bs) {
  constexpr int TM = Cfg::TM, TN = Cfg::TN;
  if constexpr (A_K) {
#pragma unroll
    for (int kc = 0; kc < Cfg::BK; kc += 4) {
      Acc fa[TM][4];  // rows i, k = kc .. kc + 3
#pragma unroll
      for (int i = 0; i < TM; ++i) load_vec4(as + i * Cfg::TWM * Cfg::LDK_S + kc, fa[i]);
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        Acc fb[TN];
#pragma unroll
        for (int j = 0; j < TN / 4; ++j) {
          load_vec4(bs + (kc + kk) * Cfg::LDB_S + j * Cfg::TWN * 4, fb + 4 * j);
        }
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
          for (int j = 0; j < TN; ++j) acc[i][j] = fa[i][kk] * fb[j] + acc[i][j];
      }
    }
  } else {
#pragma unroll
    for (int kk = 0; kk < Cfg::BK; ++kk) {
      Acc fa[TM], fb[TN];
#pragma unroll
      for (int i = 0; i < TM / 4; ++i) {
        load_vec4(as + kk * Cfg::LDA_S + i * Cfg::TWM * 4, fa + 4 * i);
      }
#pragma unroll
      for (int j = 0; j < TN / 4; ++j) {
        load_vec4(bs + kk * Cfg::LDB_S + j * Cfg::TWN * 4, fb + 4 * j);
      }
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fa[i] * fb[j] + acc[i][j];
    }
  }
}

}  // namespace lltm_ext::gemm_tiles
