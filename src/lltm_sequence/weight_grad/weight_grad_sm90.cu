// The sequence's float32 weight gradient on Hopper's tensor cores (sm_90a): d W and d b as
// weight_grad/weight_grad.cu defines them, in three TF32 passes of wgmma with float32 sums, for
// the long sequences' large products, where cuBLAS's exact float32 kernels run on the SIMT cores.
#include <algorithm>
#include <cstdint>

#include "common/cuda_kernel.cuh"
#include "lltm_sequence/sequence_launchers.h"
#include "lltm_sequence/sequence_wgmma.cuh"

namespace lltm_ext::lltm {
namespace {

using wgmma3::kSmemBytes;
using wgmma3::kThreads;
using wgmma3::kTile;

// Block (x, y, z): outputs [128 y, 128 y + 128) x [128 x, 128 x + 128) of d W | d b, summed over
// rows [z k_split, (z + 1) k_split) of the product d_gates^T [h_{k - B} | x_k | 1], in stages of
// 32 rows (wgmma3::tf32x3_sums): a warp loads 32 consecutive gate rows or columns of one k. One
// split writes d W and d b; more write partials[z] (3S x cols), which weight_grad_sum adds in
// split order.
__global__ void __launch_bounds__(kThreads, 1)
    weight_grad_sm90_kernel(WeightGradArgs<float> p, float* __restrict__ partials,
                            int64_t k_split) {
#if LLTM_EXT_SM90A
  // Static shared memory only in this body: weight_grad_sm90_loaded tells the image apart by it.
  __shared__ volatile int image_mark;
  cuda::pdl_wait_then_release();  // launched by launch_dependent
  extern __shared__ __align__(16) uint8_t wg_raw[];
  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) {
    image_mark = 0;
  }
  const int64_t width = 3 * p.state, k_cols = p.state + p.features;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t k_begin = static_cast<int64_t>(blockIdx.z) * k_split;
  const int64_t k_end = std::min(p.rows, k_begin + k_split);
  const int64_t stages =
      (std::max<int64_t>(0, k_end - k_begin) + wgmma3::kDepth - 1) / wgmma3::kDepth;

  // This thread's share of a stage: gate row m0 + c of A and column n0 + c of B, at the k of
  // chunks q0, q0 + 2, q0 + 4, q0 + 6 (four k each). B's column is h's (output's rows, h0's
  // before row B), x's, the bias's ones, or past them (zeros).
  const int c = tid % kTile, q0 = tid / kTile;
  const int64_t m_ld = m0 + c, n_ld = n0 + c;
  const bool a_in = m_ld < width, h_column = n_ld < p.state;
  const bool ones = n_ld == k_cols && n_ld < p.cols, b_in = n_ld < k_cols;
  const float* const a_base = p.d_gates + m_ld;
  const float* const b_base =
      h_column ? p.output + (n_ld - p.batch * p.state) : p.input + (n_ld - p.state);
  const int64_t b_stride = h_column ? p.state : p.features;
  // Past h0's rows, B's column is loaded from b_base (h's or x's), the bias's ones, or zeros.
  const bool b_loaded = b_in && !ones;
  const auto load = [&](int64_t s, wgmma3::Chunks& ra, wgmma3::Chunks& rb) {
    const int64_t k0 = k_begin + s * wgmma3::kDepth;
    if (k0 + wgmma3::kDepth <= k_end && (!h_column || k0 >= p.batch)) {
      // A whole stage past h0's rows (all but the first stages and the split's last): this
      // thread's rows 4 q0 + 8 i + e, pointers stepped from row to row.
      const float* a = a_base + (k0 + 4 * q0) * width;
      const float* bp = b_base + (k0 + 4 * q0) * b_stride;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          ra[i][e] = a_in ? a[e * width] : 0.0f;
          rb[i][e] = b_loaded ? bp[e * b_stride] : (ones ? 1.0f : 0.0f);
        }
        a += 8 * width;
        bp += 8 * b_stride;
      }
      return;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t k = k0 + 4 * (q0 + 2 * i) + e;
        const bool row = k < k_end;
        ra[i][e] = row && a_in ? a_base[k * width] : 0.0f;
        float v = 0.0f;
        if (row && ones) {
          v = 1.0f;
        } else if (row && b_in) {
          if (h_column && k < p.batch) {
            v = p.h0 != nullptr ? p.h0[k * p.state + n_ld] : 0.0f;
          } else {
            v = b_base[k * b_stride];
          }
        }
        rb[i][e] = v;
      }
    }
  };
  float acc[64];
  wgmma3::tf32x3_sums(wg_raw, stages, load, acc);
  wgmma3::for_each_output(acc, [&](int r, int col, float v) {
    const int64_t m = m0 + r, n = n0 + col;
    if (m < width && n < p.cols) {
      if (gridDim.z > 1) {
        partials[(static_cast<int64_t>(blockIdx.z) * width + m) * p.cols + n] = v;
      } else if (n < k_cols) {
        p.d_weights[m * k_cols + n] = v;
      } else {
        p.d_bias[m] = v;
      }
    }
  });
#else
  (void)p, (void)partials, (void)k_split;
#endif
}

}  // namespace

int64_t weight_grad_sm90_blocks(int64_t state, int64_t cols) {
  return (cols + kTile - 1) / kTile * ((3 * state + kTile - 1) / kTile);
}

int weight_grad_sm90_smem_bytes() {
  return kSmemBytes;
}

cudaError_t weight_grad_sm90_loaded(bool* loaded) {
  return cuda::image_with_static_smem(weight_grad_sm90_kernel, loaded);  // the sm_90a body's mark
}

cudaError_t launch_weight_grad_sm90(const WeightGradArgs<float>& p, float* partials, int splits,
                                    int64_t k_split, int sm_count, cudaStream_t stream) {
  if (p.state == 0 || p.cols == 0) {
    return cudaSuccess;
  }
  // The dynamic shared memory allowed at every launch (the attribute is the current device's; the
  // caller checked that it has that much: weight_grad_sm90_smem_bytes).
  cudaError_t err = cudaFuncSetAttribute(weight_grad_sm90_kernel,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  if (err != cudaSuccess) {
    return err;
  }
  const dim3 grid(static_cast<unsigned int>((p.cols + kTile - 1) / kTile),
                  static_cast<unsigned int>((3 * p.state + kTile - 1) / kTile),
                  static_cast<unsigned int>(splits));
  err = cuda::launch_dependent(weight_grad_sm90_kernel, grid, dim3(kThreads), kSmemBytes, stream, p,
                               partials, k_split);
  if (err != cudaSuccess || splits == 1) {
    return err;
  }
  return launch_weight_grad_sum(p, partials, splits, sm_count, stream);
}

}  // namespace lltm_ext::lltm
