// Step 6: warp tiling. As step 5, but each warp owns a 32 x 64 tile and each thread's 8 x 8 is
// four 4 x 4 sub-blocks spread over it: a warp's 16-byte shared reads hit 4 (A) and 8 (B)
// consecutive addresses (broadcasts, no bank conflicts), and padded shared rows keep the
// transposing stores conflict-free. Still one shared buffer: load, barrier, math, barrier.
#include "common.cuh"

namespace {

__global__ void __launch_bounds__(256, 2)
    warptile_kernel(const float* A, const float* B, float* C, int M, int N, int K) {
  constexpr int BM = 128, BN = 128, BK = 8, LDA = BM + 4, LDB = BN + 4;
  __shared__ __align__(16) float As[BK * LDA];
  __shared__ __align__(16) float Bs[BK * LDB];
  const int t = threadIdx.x, warp = t / 32, lane = t % 32;
  const int wm = (warp / 2) * 32 + (lane / 8) * 4;  // warps 4 (m) x 2 (n); lanes 4 x 8
  const int wn = (warp % 2) * 64 + (lane % 8) * 4;
  const int64_t m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int a_r = t / 2, a_c = (t % 2) * 4;
  const int b_r = t / 32, b_c = (t % 32) * 4;
  float acc[8][8] = {};
  for (int k0 = 0; k0 < K; k0 += BK) {
    const float4 va = __ldg(reinterpret_cast<const float4*>(A + (m0 + a_r) * K + k0 + a_c));
    const float4 vb =
        __ldg(reinterpret_cast<const float4*>(B + static_cast<int64_t>(k0 + b_r) * N + n0 + b_c));
    As[(a_c + 0) * LDA + a_r] = va.x;
    As[(a_c + 1) * LDA + a_r] = va.y;
    As[(a_c + 2) * LDA + a_r] = va.z;
    As[(a_c + 3) * LDA + a_r] = va.w;
    *reinterpret_cast<float4*>(&Bs[b_r * LDB + b_c]) = vb;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      float ra[8], rb[8];
      *reinterpret_cast<float4*>(ra) = *reinterpret_cast<const float4*>(&As[k * LDA + wm]);
      *reinterpret_cast<float4*>(ra + 4) = *reinterpret_cast<const float4*>(&As[k * LDA + wm + 16]);
      *reinterpret_cast<float4*>(rb) = *reinterpret_cast<const float4*>(&Bs[k * LDB + wn]);
      *reinterpret_cast<float4*>(rb + 4) = *reinterpret_cast<const float4*>(&Bs[k * LDB + wn + 32]);
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] += ra[i] * rb[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    float* c = C + (m0 + wm + (i / 4) * 16 + i % 4) * N + n0 + wn;
    reinterpret_cast<float4*>(c)[0] = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
    reinterpret_cast<float4*>(c + 32)[0] = make_float4(acc[i][4], acc[i][5], acc[i][6], acc[i][7]);
  }
}

}  // namespace

GEMM_STEP_API int gemm_step_06(const float* A, const float* B, float* C, int M, int N, int K,
                               int /*splits*/, float* /*workspace*/, cudaStream_t stream) {
  warptile_kernel<<<dim3(N / 128, M / 128), 256, 0, stream>>>(A, B, C, M, N, K);
  return static_cast<int>(cudaGetLastError());
}
