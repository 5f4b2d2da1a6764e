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

constexpr int kCols = 128;  // a block's columns: 16 threads of 8
constexpr int kDepth = 16;  // k per stage

// W's rows in shared memory: [n][k] (k along a row, 16 + 4 floats) where transposed, else [k][n]
// (128 + 4); the 4 floats of padding keep rows 16-byte aligned and a quarter warp's 16-byte reads
// of 8 consecutive rows (or of one row) free of bank conflicts.
template <bool kTransposed>
constexpr int w_stage_floats() {
  return kTransposed ? kCols * (kDepth + 4) : kDepth * (kCols + 4);
}

// Shared-memory stages in flight: as many as fit 48 KB of static shared memory, at most 4.
template <int BM, bool kTransposed>
constexpr int stages() {
  const int bytes = (kDepth * (BM + 4) + w_stage_floats<kTransposed>()) * 4;
  return std::min(4, 48 * 1024 / bytes);
}

// One float (A) or 16 bytes (W) from global src to shared dst, asynchronously where the GPU can
// (sm_80+: cp.async, zero-filled where !valid, src then unread), else at once.
__device__ __forceinline__ void copy_float(float* dst, const float* src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(address), "l"(src),
               "r"(valid ? 4 : 0));
#else
  *dst = valid ? *src : 0.0f;
#endif
}
__device__ __forceinline__ void copy_float4(float* dst, const float* src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(src),
               "r"(valid ? 16 : 0));
#else
  *reinterpret_cast<float4*>(dst) =
      valid ? *reinterpret_cast<const float4*>(src) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
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
// W is (N x K, row-major, ldw: the product takes its transpose) where kTransposed, else (K x N),
// its base 16-byte aligned, ldw a multiple of 4 and the elements past K (transposed) or N (not) in
// each row up to ldw zeros (they are read 4 at a time). Stages of 16 k are copied into shared
// memory (A k-major, [k][m], a float at a time; W 16 bytes at a time, w_stage_floats), stages() -
// 1 ahead of the multiply-adds; thread (ty, tx) keeps rows ty TM ... and 8 columns in registers:
// tx + 16 j where transposed (a W read is 4 k of one column), else 4 tx ... and 64 + 4 tx ... (a W
// read is 4 columns of one k). One split: C = sums (+ C where accumulate); more: partial sums to
// partials[z] (M x N).
template <int BM, int TM, bool kTransposed>
__global__ void __launch_bounds__(BM / TM * 16, BM == 128 ? 1 : 2)
    step_gemm_kernel(const float* __restrict__ a, int64_t lda, const float* __restrict__ w,
                     int64_t ldw, float* __restrict__ c, int64_t ldc, bool accumulate,
                     float* __restrict__ partials, int64_t m_size, int64_t n_size, int64_t k_size,
                     int64_t k_split) {
  constexpr int kThreads = BM / TM * 16, kStages = stages<BM, kTransposed>();
  constexpr int kRowsPerPass = kThreads / kDepth;  // A's rows a pass copies
  constexpr int kWCopies = kCols * kDepth / 4 / kThreads;
  static_assert(BM % kRowsPerPass == 0 && kCols * kDepth / 4 % kThreads == 0 && kStages >= 2);
  static_assert(TM == 2 || TM == 4 || TM == 8);
  __shared__ __align__(16) float as[kStages][kDepth][BM + 4];
  __shared__ __align__(16) float ws[kStages][w_stage_floats<kTransposed>()];

  const int tid = static_cast<int>(threadIdx.x), tx = tid % 16, ty = tid / 16;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * BM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kCols;
  const int64_t k_begin = static_cast<int64_t>(blockIdx.z) * k_split;
  const int64_t k_end = std::min(k_size, k_begin + k_split);
  const int64_t stage_count = (std::max<int64_t>(0, k_end - k_begin) + kDepth - 1) / kDepth;

  // This thread's copies of a stage: A's rows tid / 16 + j kRowsPerPass at k = tid % 16 (16
  // threads read 64 consecutive bytes of a row); W's 16-byte pieces i = tid + j kThreads: row n0 +
  // i / 4, k 4 (i % 4) where transposed, else row k0 + i / 32, columns n0 + 4 (i % 32). A piece
  // that starts inside the operand lies in it (the zeros up to ldw).
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
#pragma unroll
    for (int j = 0; j < kWCopies; ++j) {
      const int i = tid + j * kThreads;
      if constexpr (kTransposed) {
        const int nn = i / 4, kk = 4 * (i % 4);
        const bool valid = n0 + nn < n_size && k0 + kk < k_end;
        copy_float4(&ws[buf][nn * (kDepth + 4) + kk], valid ? w + (n0 + nn) * ldw + k0 + kk : w,
                    valid);
      } else {
        const int kk = i / 32, nn = 4 * (i % 32);
        const bool valid = n0 + nn < n_size && k0 + kk < k_end;
        copy_float4(&ws[buf][kk * (kCols + 4) + nn], valid ? w + (k0 + kk) * ldw + n0 + nn : w,
                    valid);
      }
    }
  };

  float acc[TM][8] = {};
  const auto a_rows = [&](int buf, int kk, float (&av)[TM]) {
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
  };
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
    if constexpr (kTransposed) {
#pragma unroll
      for (int k4 = 0; k4 < kDepth; k4 += 4) {
        float wv[8][4];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float4 v =
              *reinterpret_cast<const float4*>(&ws[buf][(tx + 16 * j) * (kDepth + 4) + k4]);
          wv[j][0] = v.x;
          wv[j][1] = v.y;
          wv[j][2] = v.z;
          wv[j][3] = v.w;
        }
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          float av[TM];
          a_rows(buf, k4 + q, av);
#pragma unroll
          for (int i = 0; i < TM; ++i) {
#pragma unroll
            for (int j = 0; j < 8; ++j) {
              acc[i][j] = fmaf(av[i], wv[j][q], acc[i][j]);
            }
          }
        }
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < kDepth; ++kk) {
        float av[TM];
        a_rows(buf, kk, av);
        const float* row = &ws[buf][kk * (kCols + 4)];
        const float4 w0 = *reinterpret_cast<const float4*>(row + tx * 4);
        const float4 w1 = *reinterpret_cast<const float4*>(row + 64 + tx * 4);
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
      const int64_t n = n0 + (kTransposed ? tx + 16 * j : j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4);
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
