// The sequence's per-step recurrent product in float32 for the steps that would otherwise call
// cuBLAS: C (M x N) = A (M x K) op(W), exact on the SIMT cores or as 3xTF32 on the tensor cores
// (sm_80+), K split over the blocks of a grid that fills the GPU (cuBLAS's float32 kernels leave
// most SMs idle at small M, and run on the SIMT cores); each split's partial sums go to scratch,
// which the gate kernel that reads C adds in split order.
#include <algorithm>
#include <cstdint>

#include "common/cuda_kernel.cuh"
#include "common/mma_sync.cuh"
#include "lltm_sequence/sequence_launchers.h"
#include "lltm_sequence/sequence_mma.cuh"

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

// The cp.async pipeline of both kernels: stages 0 .. stage_count - 1 of k, each copied into its
// shared-memory buffer by issue(stage) kStages - 1 stages ahead of use(stage), which runs once
// every thread's copies of it have landed; issue(stage) may overwrite the buffer of stage - 1,
// which everyone is done with by then (the barrier before it). No copy outlives the call.
template <int kStages, typename Issue, typename Use>
__device__ __forceinline__ void run_stages(int64_t stage_count, const Issue& issue,
                                           const Use& use) {
  static_assert(kStages >= 2);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < stage_count) {
      issue(static_cast<int64_t>(s));
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
    use(stage);
  }
  wait_copies<0>();  // the trailing groups are empty
}

// One sum of C's element (m, n), m < m_size and n < n_size: to c (row stride ldc; added to c's
// value where accumulate) with one split, else to split z's partial sums (M x N, z = blockIdx.z).
__device__ __forceinline__ void store_sum(float* c, int64_t ldc, bool accumulate, float* partials,
                                          int64_t m_size, int64_t n_size, int64_t m, int64_t n,
                                          float v) {
  if (gridDim.z > 1) {
    partials[(static_cast<int64_t>(blockIdx.z) * m_size + m) * n_size + n] = v;
  } else {
    float* o = c + m * ldc + n;
    *o = accumulate ? *o + v : v;
  }
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
  cuda::pdl_wait_then_release();  // launched by launch_dependent
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
  run_stages<kStages>(stage_count, issue, [&](int64_t stage) {
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
  });

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
        store_sum(c, ldc, accumulate, partials, m_size, n_size, m, n, acc[i][j]);
      }
    }
  }
}

// The tensor-core kernel (3xTF32, sm_80+): stages of kTcDepth k, kMmaChains k steps of eight, three
// of them in flight (dynamic shared memory, tc_smem_bytes), a block of 8 warps over BM rows x kCols
// columns. Its warps tile the block as TcWarps<BM> says: each keeps MT x NT mma tiles of 16 x 8.
constexpr int kTcDepth = 8 * kMmaChains;
constexpr int kTcStages = 3;
constexpr int kTcThreads = 8 * 32;

template <int BM>
struct TcWarps {
  static constexpr int kRows = BM == 16 ? 1 : 2;    // warps along M
  static constexpr int kColumns = 8 / kRows;        // warps along N
  static constexpr int kMt = BM / kRows / 16;       // a warp's m-tiles
  static constexpr int kNt = kCols / kColumns / 8;  // a warp's n-tiles
};

// A stage in shared memory, in floats: A's BM rows [m][k] (kTcDepth + 4 a row), then W's as [n][k]
// (kTcDepth + 4) where transposed, else [k][n] (kCols + 8). The padding puts the 32 lanes of a
// fragment read (lane 4 g + t: row g, k t; or k t, column g) on 32 banks, and keeps rows 16-byte
// aligned.
template <bool kTransposed>
constexpr int tc_w_floats() {
  return kTransposed ? kCols * (kTcDepth + 4) : kTcDepth * (kCols + 8);
}
template <int BM, bool kTransposed>
constexpr int tc_stage_floats() {
  return BM * (kTcDepth + 4) + tc_w_floats<kTransposed>();
}
template <int BM, bool kTransposed>
constexpr int tc_smem_bytes() {
  return kTcStages * tc_stage_floats<BM, kTransposed>() * static_cast<int>(sizeof(float));
}

// As step_gemm_kernel, on the tensor cores: a block computes rows [m0, m0 + BM) x columns [n0, n0 +
// 128) over k's split z, each k step of eight as 3xTF32 (mma_chains_split: small x big, big x
// small, big x big, each k step summed from zero and added on the SIMT cores; split_tf32_fast).
// A's stage is copied a float at a time (any lda, any alignment), W's 16 bytes at a time (as the
// SIMT kernel reads it). Warp w owns rows (w / kColumns) MT 16 ... and columns (w % kColumns) NT 8
// ...; it splits its A fragments once a stage and each B fragment once for its MT m-tiles.
template <int BM, bool kTransposed>
__global__ void __launch_bounds__(kTcThreads)
    step_gemm_tf32x3_kernel(const float* __restrict__ a, int64_t lda, const float* __restrict__ w,
                            int64_t ldw, float* __restrict__ c, int64_t ldc, bool accumulate,
                            float* __restrict__ partials, int64_t m_size, int64_t n_size,
                            int64_t k_size, int64_t k_split) {
  cuda::pdl_wait_then_release();  // launched by launch_dependent
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using Warps = TcWarps<BM>;
  constexpr int kMt = Warps::kMt, kNt = Warps::kNt, kAs = kTcDepth + 4;
  constexpr int kWs = kTransposed ? kTcDepth + 4 : kCols + 8;
  constexpr int kWCopies = kCols * kTcDepth / 4 / kTcThreads;
  static_assert(BM * kTcDepth % kTcThreads == 0 && kCols * kTcDepth / 4 % kTcThreads == 0);
  extern __shared__ __align__(16) float tc_smem[];

  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  const int wm = warp / Warps::kColumns * kMt * 16, wn = warp % Warps::kColumns * kNt * 8;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * BM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kCols;
  const int64_t k_begin = static_cast<int64_t>(blockIdx.z) * k_split;
  const int64_t k_end = std::min(k_size, k_begin + k_split);
  const int64_t stage_count = (std::max<int64_t>(0, k_end - k_begin) + kTcDepth - 1) / kTcDepth;

  // A stage's copies: A's element (e / kTcDepth, e % kTcDepth) for e = tid + j kTcThreads (a warp
  // reads 128 consecutive bytes of a row); W's 16-byte pieces i = tid + j kTcThreads: row n0 + i /
  // 8, k 4 (i % 8) where transposed, else row k0 + i / 32, columns n0 + 4 (i % 32).
  const auto issue = [&](int64_t stage) {
    float* as = tc_smem + static_cast<int>(stage % kTcStages) * tc_stage_floats<BM, kTransposed>();
    float* ws = as + BM * kAs;
    const int64_t k0 = k_begin + stage * kTcDepth;
#pragma unroll
    for (int j = 0; j < BM * kTcDepth / kTcThreads; ++j) {
      const int e = tid + j * kTcThreads, mm = e / kTcDepth, kk = e % kTcDepth;
      const bool valid = m0 + mm < m_size && k0 + kk < k_end;
      copy_float(&as[mm * kAs + kk], valid ? a + (m0 + mm) * lda + k0 + kk : a, valid);
    }
#pragma unroll
    for (int j = 0; j < kWCopies; ++j) {
      const int i = tid + j * kTcThreads;
      const int nn = kTransposed ? i / 8 : 4 * (i % 32), kk = kTransposed ? 4 * (i % 8) : i / 32;
      const bool valid = n0 + nn < n_size && k0 + kk < k_end;
      const float* src =
          kTransposed ? w + (n0 + nn) * ldw + k0 + kk : w + (k0 + kk) * ldw + n0 + nn;
      copy_float4(&ws[kTransposed ? nn * kWs + kk : kk * kWs + nn], valid ? src : w, valid);
    }
  };

  float acc[kMt][kNt][4] = {};
  run_stages<kTcStages>(stage_count, issue, [&](int64_t stage) {
    const float* as =
        tc_smem + static_cast<int>(stage % kTcStages) * tc_stage_floats<BM, kTransposed>();
    const float* ws = as + BM * kAs;
    uint32_t a_big[kMt][kMmaChains][4], a_small[kMt][kMmaChains][4];
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) {
      const float* row = as + (wm + mt * 16 + g) * kAs + t;
#pragma unroll
      for (int i = 0; i < kMmaChains; ++i) {
        const float av[4] = {row[8 * i], row[8 * kAs + 8 * i], row[8 * i + 4],
                             row[8 * kAs + 8 * i + 4]};
        mma_split_a<Product::kTf32x3>(av, a_big[mt][i], a_small[mt][i]);
      }
    }
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
      const int col = wn + nt * 8 + g;
      uint32_t b_big[kMmaChains][2], b_small[kMmaChains][2];
#pragma unroll
      for (int i = 0; i < kMmaChains; ++i) {
        const int k = 8 * i + t;
        const float b0 = kTransposed ? ws[col * kWs + k] : ws[k * kWs + col];
        const float b1 = kTransposed ? ws[col * kWs + k + 4] : ws[(k + 4) * kWs + col];
        split_tf32_fast(b0, b_big[i][0], b_small[i][0]);
        split_tf32_fast(b1, b_big[i][1], b_small[i][1]);
      }
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
        mma_chains_split<Product::kTf32x3>(acc[mt][nt], a_big[mt], a_small[mt], b_big, b_small);
      }
    }
  });

  // Lane 4 g + t holds rows g and g + 8, columns 2 t and 2 t + 1 of each of its tiles.
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t m = m0 + wm + mt * 16 + g + 8 * half;
      if (m < m_size) {
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int64_t n = n0 + wn + nt * 8 + 2 * t + e;
            if (n < n_size) {
              store_sum(c, ldc, accumulate, partials, m_size, n_size, m, n,
                        acc[mt][nt][2 * half + e]);
            }
          }
        }
      }
    }
  }
#else
  __trap();
#endif
}

template <int BM, int TM>
cudaError_t launch_rows(const float* a, int64_t lda, const float* w, int64_t ldw, bool transposed,
                        float* c, int64_t ldc, bool accumulate, float* partials, int64_t m,
                        int64_t n, int64_t k, int splits, int64_t k_split, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned int>((n + kCols - 1) / kCols),
                  static_cast<unsigned int>((m + BM - 1) / BM), static_cast<unsigned int>(splits));
  const auto kernel = transposed ? step_gemm_kernel<BM, TM, true> : step_gemm_kernel<BM, TM, false>;
  // Each step's product follows its gate kernel: launched to start as that one ends.
  return cuda::launch_dependent(kernel, grid, dim3(BM / TM * 16), 0, stream, a, lda, w, ldw, c, ldc,
                                accumulate, partials, m, n, k, k_split);
}

// The tensor-core kernel for BM rows, its dynamic shared memory allowed at every launch (the
// attribute is the current device's; the planner checked that the device has that much:
// step_gemm_smem_bytes).
template <int BM, bool kTransposed>
cudaError_t launch_tc(const float* a, int64_t lda, const float* w, int64_t ldw, float* c,
                      int64_t ldc, bool accumulate, float* partials, int64_t m, int64_t n,
                      int64_t k, int splits, int64_t k_split, cudaStream_t stream) {
  const auto kernel = step_gemm_tf32x3_kernel<BM, kTransposed>;
  constexpr int kBytes = tc_smem_bytes<BM, kTransposed>();
  const cudaError_t allowed =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
  if (allowed != cudaSuccess) {
    return allowed;
  }
  const dim3 grid(static_cast<unsigned int>((n + kCols - 1) / kCols),
                  static_cast<unsigned int>((m + BM - 1) / BM), static_cast<unsigned int>(splits));
  return cuda::launch_dependent(kernel, grid, dim3(kTcThreads), kBytes, stream, a, lda, w, ldw, c,
                                ldc, accumulate, partials, m, n, k, k_split);
}

template <int BM>
cudaError_t launch_tc_rows(const float* a, int64_t lda, const float* w, int64_t ldw,
                           bool transposed, float* c, int64_t ldc, bool accumulate, float* partials,
                           int64_t m, int64_t n, int64_t k, int splits, int64_t k_split,
                           cudaStream_t stream) {
  return transposed ? launch_tc<BM, true>(a, lda, w, ldw, c, ldc, accumulate, partials, m, n, k,
                                          splits, k_split, stream)
                    : launch_tc<BM, false>(a, lda, w, ldw, c, ldc, accumulate, partials, m, n, k,
                                           splits, k_split, stream);
}

int depth(bool tensor) {
  return tensor ? kTcDepth : kDepth;
}

}  // namespace

int step_gemm_rows(int64_t m, bool tensor) {
  return m <= 16 ? 16 : m <= 32 ? 32 : m <= 64 || tensor ? 64 : 128;
}

int64_t step_gemm_k_split(int64_t k, int splits, bool tensor) {
  const int64_t per = (k + splits - 1) / splits, d = depth(tensor);
  return std::max<int64_t>(d, (per + d - 1) / d * d);
}

int step_gemm_splits(int64_t k, int wanted, bool tensor) {
  const int64_t k_split = step_gemm_k_split(k, std::max(1, wanted), tensor);
  return static_cast<int>(std::max<int64_t>(1, (k + k_split - 1) / k_split));
}

int64_t step_gemm_tiles(int64_t m, int64_t n, int rows) {
  return ((m + rows - 1) / rows) * ((n + kCols - 1) / kCols);
}

cudaError_t step_gemm_tensor_loaded(bool* loaded) {
  return cuda::image_compiled_for(step_gemm_tf32x3_kernel<16, true>, 80, loaded);
}

int step_gemm_smem_bytes(int rows, bool tensor) {
  if (!tensor) {
    return 0;  // static, within 48 KB
  }
  switch (rows) {
    case 16:
      return std::max(tc_smem_bytes<16, true>(), tc_smem_bytes<16, false>());
    case 32:
      return std::max(tc_smem_bytes<32, true>(), tc_smem_bytes<32, false>());
    default:
      return std::max(tc_smem_bytes<64, true>(), tc_smem_bytes<64, false>());
  }
}

cudaError_t launch_step_gemm(const float* a, int64_t lda, const float* w, int64_t ldw,
                             bool transposed, float* c, int64_t ldc, bool accumulate,
                             float* partials, int64_t m, int64_t n, int64_t k,
                             const StepGemmShape& shape, bool w_early, cudaStream_t stream) {
  if (m == 0 || n == 0) {
    return cudaSuccess;
  }
  const int splits = shape.splits;
  if (splits < 1 || splits != step_gemm_splits(k, splits, shape.tensor)) {
    return cudaErrorInvalidValue;  // a split would be empty
  }
  const int64_t k_split = step_gemm_k_split(k, splits, shape.tensor);
  if (shape.wgmma) {
    return shape.tensor && shape.rows == 128 && transposed
               ? launch_step_gemm_sm90(a, lda, w, ldw, c, ldc, accumulate, partials, m, n, k,
                                       splits, k_split, w_early, stream)
               : cudaErrorInvalidValue;
  }
  if (shape.tensor) {
    switch (shape.rows) {
      case 16:
        return launch_tc_rows<16>(a, lda, w, ldw, transposed, c, ldc, accumulate, partials, m, n, k,
                                  splits, k_split, stream);
      case 32:
        return launch_tc_rows<32>(a, lda, w, ldw, transposed, c, ldc, accumulate, partials, m, n, k,
                                  splits, k_split, stream);
      case 64:
        return launch_tc_rows<64>(a, lda, w, ldw, transposed, c, ldc, accumulate, partials, m, n, k,
                                  splits, k_split, stream);
      default:
        return cudaErrorInvalidValue;
    }
  }
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
