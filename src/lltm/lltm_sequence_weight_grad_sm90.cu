// The sequence's float32 weight gradient on Hopper's tensor cores (sm_90a): d W and d b as
// lltm_sequence_weight_grad.cu defines them, in three TF32 passes of wgmma with float32 sums, for
// the long sequences' large products, where cuBLAS's exact float32 kernels run on the SIMT cores.
#include <algorithm>
#include <cstdint>

#include "common/cuda_kernel.cuh"
#include "gemm/tiles/sm90_ptx.cuh"
#include "lltm/lltm_launchers.h"
#include "lltm/sequence_mma.cuh"
#if LLTM_EXT_SM90A
#include "gemm/tiles/sm90_wgmma_tf32.cuh"
#endif

namespace lltm_ext::lltm {
namespace {

namespace sm90 = lltm_ext::gemm_tiles::sm90;

constexpr int kTile = 128;                      // a block's outputs: 128 gate rows x 128 columns
constexpr int kDepth = 32;                      // k per stage: one 128-byte row of float32
constexpr int kThreads = 256;                   // two warpgroups of 64 gate rows each
constexpr int kPartBytes = kTile * kDepth * 4;  // 16 KB: one operand's big or small part
constexpr int kStageBytes = 4 * kPartBytes;     // A big, A small, B big, B small
constexpr int kSmemBytes = 2 * kStageBytes + 1024;  // two stages, and room to align to 1024

// Block (x, y, z): outputs [128 y, 128 y + 128) x [128 x, 128 x + 128) of d W | d b, summed over
// rows [z k_split, (z + 1) k_split) of the product d_gates^T [h_{k - B} | x_k | 1]. A stage holds
// 32 rows of both operands K-major (a gate row's or column's 32 k in one 128-byte row, in the
// 128-byte swizzle that wgmma reads: 16-byte chunk q of row r at q ^ (r % 8)), each split into
// tf32 big and small parts (split_tf32_fast) as the block stores it: its threads read the next
// stage from global memory (a warp 32 consecutive gate rows or columns of one k) while the
// tensor cores run this one, then split and store it into the other buffer. Warpgroup w's 64 gate
// rows x 128 columns: each stage's small x big, big x small and big x big wgmma (m64n128k8, four k
// steps each) summed from zero, then added to the float32 sums on the SIMT cores: the tensor core
// truncates its sums, which chained over many k drift one way (cuBLAS's three TF32 passes over
// 132090 rows: 3e-4 of the largest output, against exact float32's 4e-6). One split writes d W
// and d b; more write partials[z] (3S x cols), which weight_grad_sum adds in split order.
__global__ void __launch_bounds__(kThreads, 1)
    weight_grad_sm90_kernel(WeightGradArgs<float> p, float* __restrict__ partials,
                            int64_t k_split) {
#if LLTM_EXT_SM90A
  // Static shared memory only in this body: weight_grad_sm90_loaded tells the image apart by it.
  __shared__ volatile int image_mark;
  cuda::pdl_wait_then_release();  // launched by launch_dependent
  extern __shared__ __align__(16) uint8_t wg_raw[];
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = (tid / 32) % 4;
  const int group = tid / 128;
  if (tid == 0) {
    image_mark = 0;
  }
  const uint32_t base = (sm90::smem_u32(wg_raw) + 1023) & ~1023u;
  uint8_t* const smem = wg_raw + (base - sm90::smem_u32(wg_raw));
  const int64_t width = 3 * p.state, k_cols = p.state + p.features;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t k_begin = static_cast<int64_t>(blockIdx.z) * k_split;
  const int64_t k_end = std::min(p.rows, k_begin + k_split);
  const int64_t stages = (std::max<int64_t>(0, k_end - k_begin) + kDepth - 1) / kDepth;

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
  float ra[4][4], rb[4][4];
  const auto load = [&](int64_t k0) {
    if (k0 + kDepth <= k_end && (!h_column || k0 >= p.batch)) {
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
  const auto store = [&](int buf) {
    uint8_t* const stage = smem + buf * kStageBytes;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int offset = c * 128 + (((q0 + 2 * i) ^ (c % 8)) << 4);
      uint4 a_big, a_small, b_big, b_small;
      split_tf32_fast(ra[i][0], a_big.x, a_small.x);
      split_tf32_fast(ra[i][1], a_big.y, a_small.y);
      split_tf32_fast(ra[i][2], a_big.z, a_small.z);
      split_tf32_fast(ra[i][3], a_big.w, a_small.w);
      split_tf32_fast(rb[i][0], b_big.x, b_small.x);
      split_tf32_fast(rb[i][1], b_big.y, b_small.y);
      split_tf32_fast(rb[i][2], b_big.z, b_small.z);
      split_tf32_fast(rb[i][3], b_big.w, b_small.w);
      *reinterpret_cast<uint4*>(stage + offset) = a_big;
      *reinterpret_cast<uint4*>(stage + kPartBytes + offset) = a_small;
      *reinterpret_cast<uint4*>(stage + 2 * kPartBytes + offset) = b_big;
      *reinterpret_cast<uint4*>(stage + 3 * kPartBytes + offset) = b_small;
    }
  };

  float acc[64] = {};
  float part[64];
  if (stages > 0) {
    load(k_begin);
    store(0);
  }
  sm90::fence_proxy_async_smem();  // the stores, before the tensor cores read them
  __syncthreads();
  for (int64_t s = 0; s < stages; ++s) {
    const int buf = static_cast<int>(s & 1);
    if (s + 1 < stages) {
      load(k_begin + (s + 1) * kDepth);
    }
    // This warpgroup's 64 rows of A start 64 rows (8 KB) into each part; B is all 128 rows.
    const uint32_t stage = base + buf * kStageBytes;
    const uint32_t a_big = stage + group * 64 * 128, a_small = a_big + kPartBytes;
    const uint32_t b_big = stage + 2 * kPartBytes, b_small = b_big + kPartBytes;
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      // The next 8 k are 32 bytes along the swizzled rows; 8 rows of 128 bytes an atom.
      const uint32_t step = 32 * kk;
      sm90::WgmmaTf32<128>::mma(part, sm90::desc_sw128(a_small + step, 16, 1024),
                                sm90::desc_sw128(b_big + step, 16, 1024), kk > 0 ? 1 : 0);
      sm90::WgmmaTf32<128>::mma(part, sm90::desc_sw128(a_big + step, 16, 1024),
                                sm90::desc_sw128(b_small + step, 16, 1024), 1);
      sm90::WgmmaTf32<128>::mma(part, sm90::desc_sw128(a_big + step, 16, 1024),
                                sm90::desc_sw128(b_big + step, 16, 1024), 1);
    }
    sm90::wgmma_commit();
    if (s + 1 < stages) {
      store(buf ^ 1);  // its readers, stage s - 1's wgmma, were waited for
      sm90::fence_proxy_async_smem();
    }
    sm90::wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < 64; ++i) {
      sm90::fence_operand(part[i]);
      acc[i] += part[i];
    }
    __syncthreads();  // everyone's stores of stage s + 1; everyone's wgmma of stage s done
  }

  // The m64n128 fragment: per 8 columns j, (row r, columns 2 t, 2 t + 1) and (row r + 8, the
  // same), r = 16 warp + lane / 4, t = lane % 4.
  const int64_t row0 = m0 + group * 64 + 16 * warp + lane / 4;
  const int64_t col0 = n0 + 2 * (lane % 4);
#pragma unroll
  for (int j = 0; j < 16; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t m = row0 + 8 * (e / 2), n = col0 + 8 * j + e % 2;
      if (m < width && n < p.cols) {
        const float v = acc[4 * j + e];
        if (gridDim.z > 1) {
          partials[(static_cast<int64_t>(blockIdx.z) * width + m) * p.cols + n] = v;
        } else if (n < k_cols) {
          p.d_weights[m * k_cols + n] = v;
        } else {
          p.d_bias[m] = v;
        }
      }
    }
  }
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
