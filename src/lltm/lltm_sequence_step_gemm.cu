// The sequence's per-step recurrent product in exact float32 on the SIMT cores, for the steps that
// would otherwise call cuBLAS: C (M x N) = A (M x K) op(W), K split over the blocks of a grid that
// fills the GPU at small M (cuBLAS's float32 kernels leave most SMs idle there); each split's
// partial sums go to scratch, which the gate kernel that reads C adds in split order.
#include <algorithm>
#include <cstdint>

#include "common/cuda_kernel.cuh"
#include "lltm/lltm_launchers.h"

namespace lltm_ext::lltm {
namespace {

constexpr int kCols = 128;  // a block's columns: 16 threads of 8 (two runs of 4, 64 apart)
constexpr int kDepth = 16;  // k per stage

// Shared-memory stages in flight: as many as fit 48 KB of static shared memory.
template <int BM>
constexpr int stages() {
  return BM <= 32 ? 4 : BM == 64 ? 3 : 2;
}

// One float from global src to shared dst, asynchronously where the GPU can (sm_80+: cp.async,
// zero-filled where !valid, src then unread), else at once.
__device__ __forceinline__ void copy_float(float* dst, const float* src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(address), "l"(src),
               "r"(valid ? 4 : 0));
#else
  *dst = valid ? *src : 0.0f;
#endif
}

__device__ __forceinline__ void commit_copies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// Until at most `pending` of this thread's copy groups are in flight.
template <int pending>
__device__ __forceinline__ void wait_copies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending) : "memory");
#endif
}

// A block of (BM / TM) x 16 threads: rows [m0, m0 + BM) x columns [n0, n0 + 128) of the product
// over k in [z k_split, (z + 1) k_split) for z = blockIdx.z. A (row-major, lda) is read along k;
// W is (N x K, row-major, ldw: the product takes its transpose) where kTransposed, else (K x N).
// Stages of 16 k are copied into shared memory k-major (A [k][m], W [k][n]), stages() - 1 ahead
// of the multiply-adds; thread (ty, tx) keeps rows ty TM ... and columns 4 tx ... and 64 + 4 tx ...
// in registers. One split: C = sums (+ C where accumulate); more: partial sums to partials[z]
// (M x N).
template <int BM, int TM, bool kTransposed>
__global__ void __launch_bounds__(BM / TM * 16, BM == 64    ? 2
                                                : BM == 128 ? 2
                                                            : 4)
    step_gemm_kernel(const float* __restrict__ a, int64_t lda, const float* __restrict__ w,
                     int64_t ldw, float* __restrict__ c, int64_t ldc, bool accumulate,
                     float* __restrict__ partials, int64_t m_size, int64_t n_size, int64_t k_size,
                     int64_t k_split) {
  constexpr int kThreads = BM / TM * 16, kStages = stages<BM>();
  constexpr int kRowsPerPass = kThreads / kDepth;  // A's and transposed W's rows a pass copies
  constexpr int kKPerPass = kThreads / kCols;      // W's k a pass copies (not transposed)
  static_assert(kThreads % kCols == 0 && BM % kRowsPerPass == 0);
  static_assert(TM == 2 || TM == 4 || TM == 8);
  // Rows padded by 4 floats: 16-byte aligned, and copies along k fall in different banks.
  __shared__ __align__(16) float as[kStages][kDepth][BM + 4];
  __shared__ __align__(16) float ws[kStages][kDepth][kCols + 4];

  const int tid = static_cast<int>(threadIdx.x), tx = tid % 16, ty = tid / 16;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * BM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kCols;
  const int64_t k_begin = static_cast<int64_t>(blockIdx.z) * k_split;
  const int64_t k_end = std::min(k_size, k_begin + k_split);
  const int64_t stage_count = (std::max<int64_t>(0, k_end - k_begin) + kDepth - 1) / kDepth;

  // This thread's copies of a stage: A's rows tid / 16 + j kRowsPerPass at k = tid % 16 (16 threads
  // read 64 consecutive bytes of a row); W's likewise where transposed, else k = tid / 128 + j
  // kKPerPass of column n0 + tid % 128.
  const int lane_k = tid % kDepth, lane_row = tid / kDepth;
  const auto issue = [&](int64_t stage) {
    const int buf = static_cast<int>(stage % kStages);
    const int64_t k0 = k_begin + stage * kDepth;
    const int64_t k = k0 + lane_k;
#pragma unroll
    for (int j = 0; j < BM / kRowsPerPass; ++j) {
      const int mm = lane_row + j * kRowsPerPass;
      const bool valid = m0 + mm < m_size && k < k_end;
      copy_float(&as[buf][lane_k][mm], valid ? a + (m0 + mm) * lda + k : a, valid);
    }
    if constexpr (kTransposed) {
#pragma unroll
      for (int j = 0; j < kCols / kRowsPerPass; ++j) {
        const int nn = lane_row + j * kRowsPerPass;
        const bool valid = n0 + nn < n_size && k < k_end;
        copy_float(&ws[buf][lane_k][nn], valid ? w + (n0 + nn) * ldw + k : w, valid);
      }
    } else {
      const int nn = tid % kCols;
#pragma unroll
      for (int j = 0; j < kDepth / kKPerPass; ++j) {
        const int kk = tid / kCols + j * kKPerPass;
        const bool valid = n0 + nn < n_size && k0 + kk < k_end;
        copy_float(&ws[buf][kk][nn], valid ? w + (k0 + kk) * ldw + n0 + nn : w, valid);
      }
    }
  };

  float acc[TM][8] = {};
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < stage_count) {
      issue(s);
    }
    commit_copies();  // a group every time, empty or not: the waits count groups
  }
  for (int64_t stage = 0; stage < stage_count; ++stage) {
    wait_copies<kStages - 2>();  // this thread's copies of `stage` have landed
    __syncthreads();  // everyone's; and everyone is done with the stage before (its buffer reused)
    if (stage + kStages - 1 < stage_count) {
      issue(stage + kStages - 1);
    }
    commit_copies();
    const int buf = static_cast<int>(stage % kStages);
#pragma unroll
    for (int kk = 0; kk < kDepth; ++kk) {
      float av[TM];
      if constexpr (TM == 2) {
        const float2 v = *reinterpret_cast<const float2*>(&as[buf][kk][ty * 2]);
        av[0] = v.x;
        av[1] = v.y;
      } else {
#pragma unroll
        for (int h = 0; h < TM / 4; ++h) {
          const float4 v = *reinterpret_cast<const float4*>(&as[buf][kk][ty * TM + 4 * h]);
          av[4 * h] = v.x;
          av[4 * h + 1] = v.y;
          av[4 * h + 2] = v.z;
          av[4 * h + 3] = v.w;
        }
      }
      const float4 w0 = *reinterpret_cast<const float4*>(&ws[buf][kk][tx * 4]);
      const float4 w1 = *reinterpret_cast<const float4*>(&ws[buf][kk][64 + tx * 4]);
      const float bv[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
#pragma unroll
      for (int i = 0; i < TM; ++i) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
      }
    }
  }
  wait_copies<0>();  // no copy outlives the block (the trailing groups are empty)

  const bool split = gridDim.z > 1;
  float* out = split ? partials + static_cast<int64_t>(blockIdx.z) * m_size * n_size : c;
  const int64_t ld = split ? n_size : ldc;
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int64_t m = m0 + ty * TM + i;
    if (m >= m_size) {
      break;
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int64_t n = n0 + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4);
      if (n < n_size) {
        float* o = out + m * ld + n;
        *o = !split && accumulate ? *o + acc[i][j] : acc[i][j];
      }
    }
  }
}

template <int BM, int TM>
cudaError_t launch_rows(const float* a, int64_t lda, const float* w, int64_t ldw, bool transposed,
                        float* c, int64_t ldc, bool accumulate, float* partials, int64_t m,
                        int64_t n, int64_t k, int splits, int64_t k_split, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned int>((n + kCols - 1) / kCols),
                  static_cast<unsigned int>((m + BM - 1) / BM), static_cast<unsigned int>(splits));
  const auto kernel = transposed ? step_gemm_kernel<BM, TM, true> : step_gemm_kernel<BM, TM, false>;
  kernel<<<grid, BM / TM * 16, 0, stream>>>(a, lda, w, ldw, c, ldc, accumulate, partials, m, n, k,
                                            k_split);
  return cudaGetLastError();
}

}  // namespace

int step_gemm_rows(int64_t m) {
  return m <= 16 ? 16 : m <= 32 ? 32 : m <= 64 ? 64 : 128;
}

int64_t step_gemm_k_split(int64_t k, int splits) {
  const int64_t per = (k + splits - 1) / splits;
  return std::max<int64_t>(kDepth, (per + kDepth - 1) / kDepth * kDepth);
}

int step_gemm_splits(int64_t k, int wanted) {
  const int64_t k_split = step_gemm_k_split(k, std::max(1, wanted));
  return static_cast<int>(std::max<int64_t>(1, (k + k_split - 1) / k_split));
}

int64_t step_gemm_tiles(int64_t m, int64_t n, int rows) {
  return ((m + rows - 1) / rows) * ((n + kCols - 1) / kCols);
}

cudaError_t launch_step_gemm(const float* a, int64_t lda, const float* w, int64_t ldw,
                             bool transposed, float* c, int64_t ldc, bool accumulate,
                             float* partials, int64_t m, int64_t n, int64_t k,
                             const StepGemmShape& shape, cudaStream_t stream) {
  if (m == 0 || n == 0) {
    return cudaSuccess;
  }
  const int splits = shape.splits;
  if (splits < 1 || splits != step_gemm_splits(k, splits)) {
    return cudaErrorInvalidValue;  // a split would be empty
  }
  const int64_t k_split = step_gemm_k_split(k, splits);
  switch (shape.rows) {
    case 16:
      return launch_rows<16, 2>(a, lda, w, ldw, transposed, c, ldc, accumulate, partials, m, n, k,
                                splits, k_split, stream);
    case 32:
      return launch_rows<32, 4>(a, lda, w, ldw, transposed, c, ldc, accumulate, partials, m, n, k,
                                splits, k_split, stream);
    case 64:
      return launch_rows<64, 8>(a, lda, w, ldw, transposed, c, ldc, accumulate, partials, m, n, k,
                                splits, k_split, stream);
    case 128:
      return launch_rows<128, 8>(a, lda, w, ldw, transposed, c, ldc, accumulate, partials, m, n, k,
                                 splits, k_split, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace lltm_ext::lltm
