// The sequence's weight and bias gradients in one kernel (any GPU), for the short sequences where
// cuBLAS's three products, their split-K reductions and a column sum cost more in launches than in
// work: d W (3S, S + I) = sum over the T B rows k of d_gates[k]^T [h_{k - B} | x_k] and d b (3S)
// = the column sums of d_gates, one product whose right operand gains a column of ones.
#include <algorithm>
#include <cstdint>

#include "common/cuda_kernel.cuh"
#include "lltm_sequence/sequence_launchers.h"

namespace lltm_ext::lltm {
namespace {

constexpr int kTile = 64;      // a block's outputs: 64 gate rows x 64 columns
constexpr int kDepth = 16;     // k (rows of d_gates) per stage
constexpr int kThreads = 256;  // 16 x 16, a thread 4 x 4 outputs

// The product's right operand at row k < rows, column n < cols: h_{k - B} (h0 for k < B, zeros
// where h0 is nullptr; then output's rows), x_k, or 1 (the bias column, n = S + I).
template <typename T>
__device__ __forceinline__ cuda::opmath_t<T> right(const WeightGradArgs<T>& p, int64_t k,
                                                   int64_t n) {
  using acc_t = cuda::opmath_t<T>;
  if (n < p.state) {
    if (k < p.batch) {
      return p.h0 != nullptr ? static_cast<acc_t>(p.h0[k * p.state + n]) : acc_t(0);
    }
    return static_cast<acc_t>(p.output[(k - p.batch) * p.state + n]);
  }
  if (n < p.state + p.features) {
    return static_cast<acc_t>(p.input[k * p.features + (n - p.state)]);
  }
  return acc_t(1);
}

// Four consecutive acc_t from 16-byte-aligned shared memory (two 16-byte reads for double).
template <typename acc_t>
__device__ __forceinline__ void read4(const acc_t* src, acc_t (&v)[4]) {
  if constexpr (sizeof(acc_t) == 4) {
    const float4 f = *reinterpret_cast<const float4*>(src);
    v[0] = f.x;
    v[1] = f.y;
    v[2] = f.z;
    v[3] = f.w;
  } else {
    const double2 lo = *reinterpret_cast<const double2*>(src);
    const double2 hi = *reinterpret_cast<const double2*>(src + 2);
    v[0] = lo.x;
    v[1] = lo.y;
    v[2] = hi.x;
    v[3] = hi.y;
  }
}

// Output (m, n) of the product, m < 3S, n < cols: d W's element, or d b's at n = S + I.
template <typename T>
__device__ __forceinline__ void write_out(const WeightGradArgs<T>& p, int64_t m, int64_t n,
                                          cuda::opmath_t<T> v) {
  const int64_t k_cols = p.state + p.features;
  if (n < k_cols) {
    p.d_weights[m * k_cols + n] = static_cast<T>(v);
  } else {
    p.d_bias[m] = static_cast<T>(v);
  }
}

// Block (x, y, z): outputs [64 y, 64 y + 64) x [64 x, 64 x + 64) summed over rows [z k_split, (z +
// 1) k_split) in row order, each stage's 16 rows summed apart first. Stages of 16 rows of both
// operands go through registers into shared memory ([k][m], [k][n]: a row's 64 elements read 4 to a
// thread), the next stage's global reads in flight while the current one's multiply-adds run. One
// split writes the outputs; more write their sums to partials[z] (3S x cols), which
// weight_grad_sum_kernel adds in split order: the same bits run to run (float32's tensor-core
// kernel, weight_grad/weight_grad_sm90.cu, writes the same outputs).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    weight_grad_kernel(WeightGradArgs<T> p, cuda::opmath_t<T>* __restrict__ partials,
                       int64_t k_split) {
  cuda::pdl_wait_then_release();  // launched by launch_dependent
  using acc_t = cuda::opmath_t<T>;
  __shared__ __align__(16) acc_t as[2][kDepth][kTile];
  __shared__ __align__(16) acc_t bs[2][kDepth][kTile];
  const int tid = static_cast<int>(threadIdx.x), tx = tid % 16, ty = tid / 16;
  const int64_t width = 3 * p.state;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t k_begin = static_cast<int64_t>(blockIdx.z) * k_split;
  const int64_t k_end = std::min(p.rows, k_begin + k_split);
  const int64_t stages = (std::max<int64_t>(0, k_end - k_begin) + kDepth - 1) / kDepth;

  // This thread's loads of a stage: row lk of it, columns lc .. lc + 3 of both tiles.
  const int lk = tid / 16, lc = 4 * (tid % 16);
  acc_t ra[4], rb[4];
  const auto load = [&](int64_t k0) {
    const int64_t k = k0 + lk;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t m = m0 + lc + j, n = n0 + lc + j;
      ra[j] = k < k_end && m < width ? static_cast<acc_t>(p.d_gates[k * width + m]) : acc_t(0);
      rb[j] = k < k_end && n < p.cols ? right(p, k, n) : acc_t(0);
    }
  };
  const auto store = [&](int buf) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      as[buf][lk][lc + j] = ra[j];
      bs[buf][lk][lc + j] = rb[j];
    }
  };

  acc_t acc[4][4] = {};
  if (stages > 0) {
    load(k_begin);
    store(0);
  }
  __syncthreads();
  for (int64_t s = 0; s < stages; ++s) {
    const int buf = static_cast<int>(s & 1);
    if (s + 1 < stages) {
      load(k_begin + (s + 1) * kDepth);
    }
    acc_t stage[4][4] = {};  // the stage's sums apart: long k sums round less
#pragma unroll
    for (int kk = 0; kk < kDepth; ++kk) {
      acc_t a[4], b[4];
      read4(&as[buf][kk][4 * ty], a);
      read4(&bs[buf][kk][4 * tx], b);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          stage[i][j] += a[i] * b[j];
        }
      }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        acc[i][j] += stage[i][j];
      }
    }
    if (s + 1 < stages) {
      store(buf ^ 1);  // read by everyone in stage s - 1, before the barrier that ended it
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t m = m0 + 4 * ty + i;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t n = n0 + 4 * tx + j;
      if (m < width && n < p.cols) {
        if (gridDim.z > 1) {
          partials[(static_cast<int64_t>(blockIdx.z) * width + m) * p.cols + n] = acc[i][j];
        } else {
          write_out(p, m, n, acc[i][j]);
        }
      }
    }
  }
}

// The splits' sums added in split order: output e of 3S x cols, grid-stride.
template <typename T>
__global__ void __launch_bounds__(256)
    weight_grad_sum_kernel(WeightGradArgs<T> p, const cuda::opmath_t<T>* __restrict__ partials,
                           int splits) {
  cuda::pdl_wait_then_release();  // likewise
  using acc_t = cuda::opmath_t<T>;
  const int64_t total = 3 * p.state * p.cols;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    acc_t sum = partials[e];
    for (int z = 1; z < splits; ++z) {
      sum += partials[z * total + e];
    }
    write_out(p, e / p.cols, e % p.cols, sum);
  }
}

}  // namespace

int64_t weight_grad_blocks(int64_t state, int64_t cols) {
  return (cols + kTile - 1) / kTile * ((3 * state + kTile - 1) / kTile);
}

template <typename T>
cudaError_t launch_weight_grad(const WeightGradArgs<T>& p, cuda::opmath_t<T>* partials, int splits,
                               int64_t k_split, int sm_count, cudaStream_t stream) {
  if (p.state == 0 || p.cols == 0) {
    return cudaSuccess;
  }
  const dim3 grid(static_cast<unsigned int>((p.cols + kTile - 1) / kTile),
                  static_cast<unsigned int>((3 * p.state + kTile - 1) / kTile),
                  static_cast<unsigned int>(splits));
  cudaError_t err = cuda::launch_dependent(weight_grad_kernel<T>, grid, dim3(kThreads), 0, stream,
                                           p, partials, k_split);
  if (err != cudaSuccess || splits == 1) {
    return err;
  }
  return launch_weight_grad_sum(p, partials, splits, sm_count, stream);
}

template <typename T>
cudaError_t launch_weight_grad_sum(const WeightGradArgs<T>& p, const cuda::opmath_t<T>* partials,
                                   int splits, int sm_count, cudaStream_t stream) {
  const int64_t total = 3 * p.state * p.cols;
  const auto blocks = static_cast<unsigned int>(
      std::clamp<int64_t>((total + 255) / 256, 1, 4 * static_cast<int64_t>(sm_count)));
  return cuda::launch_dependent(weight_grad_sum_kernel<T>, dim3(blocks), dim3(256), 0, stream, p,
                                partials, splits);
}

#define LLTM_EXT_INSTANTIATE(T)                                                                 \
  template cudaError_t launch_weight_grad<T>(const WeightGradArgs<T>&, cuda::opmath_t<T>*, int, \
                                             int64_t, int, cudaStream_t);                       \
  template cudaError_t launch_weight_grad_sum<T>(                                               \
      const WeightGradArgs<T>&, const cuda::opmath_t<T>*, int, int, cudaStream_t);
LLTM_EXT_FOR_FLOATING_TYPES(LLTM_EXT_INSTANTIATE)

}  // namespace lltm_ext::lltm
