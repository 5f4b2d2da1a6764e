// The road to lltm_ext's float32 GEMM, one kernel per step, for timing against cuBLAS (bench.py).
//
// Built on its own (not part of the package): nvcc -O3 -std=c++17 -arch=sm_90 -shared
// -Xcompiler -fPIC -I ../../src steps.cu -o libgemm_steps.so. All steps compute C = A B for
// row-major float32 A (M x K), B (K x N), C (M x N). Steps 1-6 assume M, N, K multiples of 128
// and 16-byte aligned rows (the benchmark shapes); steps 7-10 and 14 are the package's own kernels
// (src/gemm/tiles/), which handle any shape and layout.
#include <cuda_runtime.h>

#include <cstdint>

#include "gemm/tiles/launch.cuh"

namespace {

// ------------------------------------------------------------------------------------------
// Step 1: naive. One thread per element of C; consecutive threads take consecutive columns, so
// the B reads coalesce and the A reads are warp-wide broadcasts.
// ------------------------------------------------------------------------------------------
__global__ void naive_kernel(const float* A, const float* B, float* C, int M, int N, int K) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  const int m = blockIdx.y * blockDim.y + threadIdx.y;
  if (m >= M || n >= N) return;
  const float* a = A + static_cast<int64_t>(m) * K;
  float sum = 0.f;
  for (int k = 0; k < K; ++k) sum += a[k] * B[static_cast<int64_t>(k) * N + n];
  C[static_cast<int64_t>(m) * N + n] = sum;
}

// ------------------------------------------------------------------------------------------
// Step 2: shared-memory tiling. 32 x 32 tiles of A and B staged in shared memory, each element
// read from global memory once per block instead of once per thread.
// ------------------------------------------------------------------------------------------
__global__ void smem_kernel(const float* A, const float* B, float* C, int M, int N, int K) {
  constexpr int T = 32;
  __shared__ float As[T][T];
  __shared__ float Bs[T][T];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t m = blockIdx.y * T + ty, n = blockIdx.x * T + tx;
  float sum = 0.f;
  for (int k0 = 0; k0 < K; k0 += T) {
    As[ty][tx] = A[m * K + k0 + tx];
    Bs[ty][tx] = B[static_cast<int64_t>(k0 + ty) * N + n];
    __syncthreads();
#pragma unroll
    for (int k = 0; k < T; ++k) sum += As[ty][k] * Bs[k][tx];
    __syncthreads();
  }
  C[m * N + n] = sum;
}

// ------------------------------------------------------------------------------------------
// Step 3: 1-D register blocking. 64 x 64 block tile, BK = 8; each thread computes 8 rows of one
// column, reusing one B value from a register for 8 products.
// ------------------------------------------------------------------------------------------
__global__ void __launch_bounds__(512)
    blocktile1d_kernel(const float* A, const float* B, float* C, int M, int N, int K) {
  constexpr int BM = 64, BN = 64, BK = 8, TM = 8;
  __shared__ float As[BM][BK];
  __shared__ float Bs[BK][BN];
  const int t = threadIdx.x;
  const int col = t % BN, row = (t / BN) * TM;
  const int64_t m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int a_r = t / BK, a_c = t % BK, b_r = t / BN, b_c = t % BN;
  float acc[TM] = {};
  for (int k0 = 0; k0 < K; k0 += BK) {
    As[a_r][a_c] = A[(m0 + a_r) * K + k0 + a_c];
    Bs[b_r][b_c] = B[static_cast<int64_t>(k0 + b_r) * N + n0 + b_c];
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      const float b = Bs[k][col];
#pragma unroll
      for (int i = 0; i < TM; ++i) acc[i] += As[row + i][k] * b;
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < TM; ++i) C[(m0 + row + i) * N + n0 + col] = acc[i];
}

// ------------------------------------------------------------------------------------------
// Step 4: 2-D register blocking. 128 x 128 block tile, BK = 8, 256 threads of 8 x 8 outer
// products: 64 FMAs per 16 shared-memory reads (scalar loads everywhere).
// ------------------------------------------------------------------------------------------
__global__ void __launch_bounds__(256)
    blocktile2d_kernel(const float* A, const float* B, float* C, int M, int N, int K) {
  constexpr int BM = 128, BN = 128, BK = 8, TM = 8, TN = 8;
  __shared__ float As[BM][BK];
  __shared__ float Bs[BK][BN];
  const int t = threadIdx.x;
  const int tr = (t / (BN / TN)) * TM, tc = (t % (BN / TN)) * TN;
  const int64_t m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  float acc[TM][TN] = {};
  for (int k0 = 0; k0 < K; k0 += BK) {
    for (int i = t; i < BM * BK; i += 256) As[i / BK][i % BK] = A[(m0 + i / BK) * K + k0 + i % BK];
    for (int i = t; i < BK * BN; i += 256) {
      Bs[i / BN][i % BN] = B[static_cast<int64_t>(k0 + i / BN) * N + n0 + i % BN];
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      float ra[TM], rb[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) ra[i] = As[tr + i][k];
#pragma unroll
      for (int j = 0; j < TN; ++j) rb[j] = Bs[k][tc + j];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] += ra[i] * rb[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) C[(m0 + tr + i) * N + n0 + tc + j] = acc[i][j];
}

// ------------------------------------------------------------------------------------------
// Step 5: vectorized. As step 4, with 16-byte global loads and stores, A stored transposed
// (K-major) in shared memory so that both fragments are read with 16-byte shared loads.
// ------------------------------------------------------------------------------------------
__global__ void __launch_bounds__(256)
    vectorized_kernel(const float* A, const float* B, float* C, int M, int N, int K) {
  constexpr int BM = 128, BN = 128, BK = 8, TM = 8, TN = 8;
  __shared__ __align__(16) float As[BK][BM];
  __shared__ __align__(16) float Bs[BK][BN];
  const int t = threadIdx.x;
  const int tr = (t / (BN / TN)) * TM, tc = (t % (BN / TN)) * TN;
  const int64_t m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int a_r = t / 2, a_c = (t % 2) * 4;    // A tile: 128 rows x 2 float4
  const int b_r = t / 32, b_c = (t % 32) * 4;  // B tile: 8 rows x 32 float4
  float acc[TM][TN] = {};
  for (int k0 = 0; k0 < K; k0 += BK) {
    const float4 va = *reinterpret_cast<const float4*>(A + (m0 + a_r) * K + k0 + a_c);
    As[a_c + 0][a_r] = va.x;
    As[a_c + 1][a_r] = va.y;
    As[a_c + 2][a_r] = va.z;
    As[a_c + 3][a_r] = va.w;
    *reinterpret_cast<float4*>(&Bs[b_r][b_c]) =
        *reinterpret_cast<const float4*>(B + static_cast<int64_t>(k0 + b_r) * N + n0 + b_c);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      float ra[TM], rb[TN];
      *reinterpret_cast<float4*>(ra) = *reinterpret_cast<const float4*>(&As[k][tr]);
      *reinterpret_cast<float4*>(ra + 4) = *reinterpret_cast<const float4*>(&As[k][tr + 4]);
      *reinterpret_cast<float4*>(rb) = *reinterpret_cast<const float4*>(&Bs[k][tc]);
      *reinterpret_cast<float4*>(rb + 4) = *reinterpret_cast<const float4*>(&Bs[k][tc + 4]);
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] += ra[i] * rb[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    float* c = C + (m0 + tr + i) * N + n0 + tc;
    reinterpret_cast<float4*>(c)[0] = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
    reinterpret_cast<float4*>(c)[1] = make_float4(acc[i][4], acc[i][5], acc[i][6], acc[i][7]);
  }
}

// ------------------------------------------------------------------------------------------
// Step 6: warp tiling. As step 5, but each warp owns a 32 x 64 tile and each thread's 8 x 8 is
// four 4 x 4 sub-blocks spread over it: a warp's 16-byte shared reads hit 4 (A) and 8 (B)
// consecutive addresses (broadcasts, no bank conflicts), and padded shared rows keep the
// transposing stores conflict-free. Still one shared buffer: load, barrier, math, barrier.
// ------------------------------------------------------------------------------------------
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

namespace gt = lltm_ext::gemm_tiles;

// Steps 7-10: the package's kernels (register-staged double buffering; cp.async pipelines).
template <typename Cfg>
int run_tiles(const float* A, const float* B, float* C, int M, int N, int K, int splits,
              float* workspace, cudaStream_t stream) {
  gt::Params<float, float> p{};
  p.a = A;
  p.b = B;
  p.M = M;
  p.N = N;
  p.K = K;
  p.lda = K;
  p.ldb = N;
  p.ldc = N;
  p.k_split = ((K + splits - 1) / splits + Cfg::BK - 1) / Cfg::BK * Cfg::BK;
  splits = (K + p.k_split - 1) / p.k_split;
  p.split_stride = static_cast<int64_t>(M) * N;
  p.vec_a = p.vec_b = p.vec_c = true;
  p.c = splits > 1 ? workspace : C;
  cudaError_t err = gt::launch_tiles<Cfg, float, float, float, true, false>(p, splits, stream);
  if (err != cudaSuccess || splits == 1) return static_cast<int>(err);
  const int64_t n = static_cast<int64_t>(M) * N;
  gt::splitk_reduce_kernel<float, float><<<528, 256, 0, stream>>>(workspace, C, n, splits, true);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

// C entry point for ctypes: step 1..10 (see bench.py); returns a cudaError_t (0: launched fine).
// `workspace` (splits x M x N floats) is needed only when splits > 1 (step 7).
extern "C" int gemm_step(int step, const float* A, const float* B, float* C, int M, int N, int K,
                         int splits, float* workspace, cudaStream_t stream) {
  switch (step) {
    case 1: {
      const dim3 block(32, 8), grid((N + 31) / 32, (M + 7) / 8);
      naive_kernel<<<grid, block, 0, stream>>>(A, B, C, M, N, K);
      break;
    }
    case 2:
      smem_kernel<<<dim3(N / 32, M / 32), dim3(32, 32), 0, stream>>>(A, B, C, M, N, K);
      break;
    case 3:
      blocktile1d_kernel<<<dim3(N / 64, M / 64), 512, 0, stream>>>(A, B, C, M, N, K);
      break;
    case 4:
      blocktile2d_kernel<<<dim3(N / 128, M / 128), 256, 0, stream>>>(A, B, C, M, N, K);
      break;
    case 5:
      vectorized_kernel<<<dim3(N / 128, M / 128), 256, 0, stream>>>(A, B, C, M, N, K);
      break;
    case 6:
      warptile_kernel<<<dim3(N / 128, M / 128), 256, 0, stream>>>(A, B, C, M, N, K);
      break;
    case 7:  // register-staged double buffering
      return run_tiles<gt::Tile<128, 128, 8, 32, 64, 8, 8, 2>>(A, B, C, M, N, K, splits, workspace,
                                                               stream);
    case 8:  // cp.async, 4 stages
      return run_tiles<gt::Tile<128, 128, 8, 32, 64, 8, 8, 2, 4>>(A, B, C, M, N, K, splits,
                                                                  workspace, stream);
    case 9:  // + 8 x 16 per thread, 128 x 256 x 16 tiles, 3 stages
      return run_tiles<gt::Tile<128, 256, 16, 32, 128, 8, 16, 1, 3>>(A, B, C, M, N, K, splits,
                                                                     workspace, stream);
    case 10:  // 8 x 8 per thread, 64 x 128 x 16 tiles, 3 blocks per SM, A kept K-major in smem
      return run_tiles<gt::Tile<64, 128, 16, 32, 64, 8, 8, 3, 3, gt::KPath::kKMajor>>(
          A, B, C, M, N, K, splits, workspace, stream);
    case 14:  // the same tiles, A transposed through registers one K step ahead
      return run_tiles<gt::Tile<64, 128, 16, 32, 64, 8, 8, 3, 3, gt::KPath::kRegisters>>(
          A, B, C, M, N, K, splits, workspace, stream);
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(cudaGetLastError());
}
