// The sequence's per-step recurrent product in float32 on Hopper's tensor cores (sm_90a), for the
// large batches where cuBLAS's exact float32 kernels run on the SIMT cores: C (M x N) = A (M x K)
// W^T (W: N x K), three TF32 passes of wgmma with float32 sums, K split over the blocks as
// launch_step_gemm's kernels split it.
#include <algorithm>
#include <cstdint>

#include "common/cuda_kernel.cuh"
#include "common/cp_async.cuh"
#include "lltm_sequence/sequence_launchers.h"
#include "lltm_sequence/sequence_wgmma.cuh"

namespace lltm_ext::lltm {
namespace {

using wgmma3::kPartBytes;
using wgmma3::kStageBytes;
using wgmma3::kThreads;
using wgmma3::kTile;
// The operands as read, float32, in a ring of kRaw stages of cp.async copies (A's 128 rows x 32 k,
// then W's), ahead of the two split stages that the tensor cores read.
constexpr int kRaw = 3;
constexpr int kRawBytes = 2 * kPartBytes;
constexpr int kSmemBytes = 2 * kStageBytes + kRaw * kRawBytes + 1024;  // 225 KB, aligned to 1024

#if LLTM_EXT_SM90A
// cp.async of this thread's 16 bytes of a row from k (dst, shared): at once where `vec` (the row's
// 16-byte pieces aligned), else a float at a time; zeros past k_end and where !in (row: then the
// operand's base, an address that is read nowhere). `whole`: the stage lies before k_end.
__device__ __forceinline__ void copy_chunk(uint32_t dst, const float* row, int64_t k, int64_t k_end,
                                           bool in, bool vec, bool whole) {
  if (vec && whole) {
    cuda::cp_async<16>(dst, row + (in ? k : 0), in ? 16 : 0);
    return;
  }
  if (vec) {
    const int64_t bytes = in ? std::clamp<int64_t>((k_end - k) * 4, 0, 16) : 0;
    cuda::cp_async<16>(dst, bytes > 0 ? row + k : row, static_cast<int>(bytes));
    return;
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const bool valid = in && k + e < k_end;
    cuda::cp_async<4>(dst + 4 * e, valid ? row + k + e : row, valid ? 4 : 0);
  }
}
#endif

// Block (x, y, z): C's rows [128 y, 128 y + 128) x columns [128 x, 128 x + 128), over k's split
// [z k_split, (z + 1) k_split). A's rows and W's rows (C's columns) are both K-contiguous. A stage
// is 32 k: each thread copies four 16-byte chunks of A and of W into the raw ring (a warp's copy
// four whole rows, a quarter warp's one row: in wgmma's 128-byte swizzle there too, no bank
// twice), three stages ahead, then reads back its own chunks, splits them into tf32 big and small
// parts and stores them where the tensor cores read (wgmma3::store_chunks), one stage ahead of
// their wgmma (wgmma3::mma_stage, add_stage). One split: C = the product (+ C where accumulate);
// more: partials[z] (M x N).
__global__ void __launch_bounds__(kThreads, 1)
    step_gemm_sm90_kernel(const float* __restrict__ a, int64_t lda, const float* __restrict__ w,
                          int64_t ldw, float* c, int64_t ldc, bool accumulate,
                          float* __restrict__ partials, int64_t m, int64_t n, int64_t k,
                          int64_t k_split, bool vec_a, bool vec_w, bool w_early) {
#if LLTM_EXT_SM90A
  namespace sm90 = cuda::sm90;
  // Static shared memory only in this body: step_gemm_sm90_loaded tells the image apart by it.
  __shared__ volatile int image_mark;
  extern __shared__ __align__(16) uint8_t sg_raw[];
  const int tid = static_cast<int>(threadIdx.x), group = tid / 128;
  if (tid == 0) {
    image_mark = 0;
  }
  const uint32_t base = (sm90::smem_u32(sg_raw) + 1023) & ~1023u;
  uint8_t* const smem = sg_raw + (base - sm90::smem_u32(sg_raw));
  const uint32_t ring = base + 2 * kStageBytes;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t k_begin = static_cast<int64_t>(blockIdx.z) * k_split;
  const int64_t k_end = std::min(k, k_begin + k_split);
  const int64_t stages =
      (std::max<int64_t>(0, k_end - k_begin) + wgmma3::kDepth - 1) / wgmma3::kDepth;
  // This thread's chunks of a stage: chunk q = tid % 8 (k 4 q to 4 q + 3) of rows r0 + 32 i (i <
  // 4), r0 = tid / 8, of A and of W; a warp's copy reads 4 whole 128-byte rows of each.
  const int q = tid % 8, r0 = tid / 8;
  const int64_t a_left = m - m0 - r0, w_left = n - n0 - r0;  // rows r0 + 32 i < these are in
  const float* const a_row = a + (m0 + r0) * lda;
  const float* const w_row = w + (n0 + r0) * ldw;
  // Chunk i's place in every part and ring slot ((r0 + 32 i) % 8 == r0 % 8).
  const auto offset = [q, r0](int i) { return (r0 + 32 * i) * 128 + ((q ^ (r0 % 8)) << 4); };
  // Stage s's A (with_a) and W (with_w) into ring slot s % kRaw.
  const auto copy = [&](int64_t s, bool with_a, bool with_w) {
    const uint32_t slot = ring + static_cast<uint32_t>(s % kRaw) * kRawBytes;
    const int64_t k0 = k_begin + s * wgmma3::kDepth;
    const int64_t k = k0 + 4 * q;
    const bool whole = k0 + wgmma3::kDepth <= k_end;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (with_a) {
        const bool in = 32 * i < a_left;
        copy_chunk(slot + offset(i), in ? a_row + 32 * i * lda : a, k, k_end, in, vec_a, whole);
      }
      if (with_w) {
        const bool in = 32 * i < w_left;
        copy_chunk(slot + kPartBytes + offset(i), in ? w_row + 32 * i * ldw : w, k, k_end, in,
                   vec_w, whole);
      }
    }
  };
  const auto split =
      [&](int64_t s) {  // this thread's chunks of ring slot s % kRaw, into buffer s % 2
        const uint8_t* const slot = smem + 2 * kStageBytes + (s % kRaw) * kRawBytes;
        wgmma3::Chunks ra, rb;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float4 va = *reinterpret_cast<const float4*>(slot + offset(i));
          const float4 vw = *reinterpret_cast<const float4*>(slot + kPartBytes + offset(i));
          ra[i][0] = va.x, ra[i][1] = va.y, ra[i][2] = va.z, ra[i][3] = va.w;
          rb[i][0] = vw.x, rb[i][1] = vw.y, rb[i][2] = vw.z, rb[i][3] = vw.w;
        }
        wgmma3::store_chunks(smem + (s % 2) * kStageBytes, offset, ra, rb);
      };

  float acc[64] = {};
  float part[64];
  // Where w_early, W's first stages are copied while the kernel before this one still runs (in
  // the first commit group, so stage 0's wait covers them); A, that kernel's output, after it.
  if (w_early) {
#pragma unroll
    for (int s = 0; s < kRaw; ++s) {
      if (s < stages) {
        copy(s, false, true);
      }
    }
  }
  cuda::pdl_wait_then_release();  // launched by launch_dependent
#pragma unroll
  for (int s = 0; s < kRaw; ++s) {
    if (s < stages) {
      copy(s, true, !w_early);
    }
    cuda::cp_async_commit();  // one group a stage, empty past the last
  }
  if (stages > 0) {
    cuda::cp_async_wait<kRaw - 1>();  // this thread's copies of stage 0
    split(0);
  }
  sm90::fence_proxy_async_smem();  // the stores, before the tensor cores read them
  __syncthreads();
  for (int64_t s = 0; s < stages; ++s) {
    wgmma3::mma_stage(part, base + static_cast<uint32_t>(s % 2) * kStageBytes, group);
    // Ring slot s % kRaw was last read by this thread's split of stage s (its own chunks only).
    if (s + kRaw < stages) {
      copy(s + kRaw, true, true);
    }
    cuda::cp_async_commit();
    if (s + 1 < stages) {
      cuda::cp_async_wait<kRaw - 1>();  // this thread's copies of stage s + 1
      split(s + 1);  // into the buffer of stage s - 1, whose wgmma everyone waited for
      sm90::fence_proxy_async_smem();
    }
    wgmma3::add_stage(acc, part);
    __syncthreads();  // everyone's stores of stage s + 1; everyone's wgmma of stage s done
  }

  float* const dst = gridDim.z > 1 ? partials + static_cast<int64_t>(blockIdx.z) * m * n : c;
  const int64_t ld = gridDim.z > 1 ? n : ldc;
  const bool sum = gridDim.z == 1 && accumulate;
  if (n % 4 == 0 && ld % 4 == 0 && reinterpret_cast<uintptr_t>(dst) % 16 == 0) {
    // Rows 16-byte aligned: the outputs through shared memory (the split stages', unread since the
    // last wgmma was waited for and the barrier after it), then a warp a row, each lane 16 bytes:
    // whole 128-byte lines a store. Rows kRowLd floats apart: a half warp's 8-byte stores of a
    // fragment (4 rows x 4 pairs) meet no bank twice.
    constexpr int kRowLd = kTile + 8;
    static_assert(kTile * kRowLd * 4 <= 2 * kStageBytes);
    float* const tile = reinterpret_cast<float*>(smem);
    wgmma3::for_each_output_pair(acc, [&](int r, int col, float v0, float v1) {
      *reinterpret_cast<float2*>(tile + r * kRowLd + col) = make_float2(v0, v1);
    });
    __syncthreads();
    const int lane = tid % 32, rows = static_cast<int>(std::min<int64_t>(kTile, m - m0));
    const int64_t j = n0 + 4 * lane;
    if (j < n) {  // n - n0 is a multiple of 4
      for (int r = tid / 32; r < rows; r += kThreads / 32) {
        float4 v = *reinterpret_cast<const float4*>(tile + r * kRowLd + 4 * lane);
        float4* const out = reinterpret_cast<float4*>(dst + (m0 + r) * ld + j);
        if (sum) {
          const float4 o = *out;
          v.x += o.x, v.y += o.y, v.z += o.z, v.w += o.w;
        }
        *out = v;
      }
    }
    return;
  }
  // Else two columns (8 bytes) a store where the rows allow it (n and ld even, dst 8-byte
  // aligned): a warp's store then fills whole 32-byte sectors, which 4-byte stores half-filled.
  const bool pairs = n % 2 == 0 && ld % 2 == 0 && reinterpret_cast<uintptr_t>(dst) % 8 == 0;
  wgmma3::for_each_output_pair(acc, [&](int r, int col, float v0, float v1) {
    const int64_t i = m0 + r, j = n0 + col;
    if (i < m && j < n) {
      float* const out = dst + i * ld + j;
      if (pairs) {
        float2 v = make_float2(v0, v1);
        if (sum) {
          const float2 o = *reinterpret_cast<const float2*>(out);
          v.x += o.x, v.y += o.y;
        }
        *reinterpret_cast<float2*>(out) = v;
      } else {
        out[0] = sum ? out[0] + v0 : v0;
        if (j + 1 < n) {
          out[1] = sum ? out[1] + v1 : v1;
        }
      }
    }
  });
#else
  (void)a, (void)lda, (void)w, (void)ldw, (void)c, (void)ldc, (void)accumulate, (void)partials;
  (void)m, (void)n, (void)k, (void)k_split, (void)vec_a, (void)vec_w, (void)w_early;
#endif
}

bool rows_aligned(const float* p, int64_t ld) {
  return ld % 4 == 0 && reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace

int step_gemm_sm90_smem_bytes() {
  return kSmemBytes;
}

cudaError_t step_gemm_sm90_loaded(bool* loaded) {
  return cuda::image_with_static_smem(step_gemm_sm90_kernel, loaded);  // the sm_90a body's mark
}

cudaError_t launch_step_gemm_sm90(const float* a, int64_t lda, const float* w, int64_t ldw,
                                  float* c, int64_t ldc, bool accumulate, float* partials,
                                  int64_t m, int64_t n, int64_t k, int splits, int64_t k_split,
                                  bool w_early, cudaStream_t stream) {
  if (m == 0 || n == 0) {
    return cudaSuccess;
  }
  if ((m + kTile - 1) / kTile > 65535 || splits > 65535) {
    return cudaErrorInvalidValue;
  }
  // The dynamic shared memory allowed at every launch (the attribute is the current device's; the
  // caller checked that it has that much: step_gemm_sm90_smem_bytes).
  const cudaError_t err = cudaFuncSetAttribute(
      step_gemm_sm90_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  if (err != cudaSuccess) {
    return err;
  }
  const dim3 grid(static_cast<unsigned int>((n + kTile - 1) / kTile),
                  static_cast<unsigned int>((m + kTile - 1) / kTile),
                  static_cast<unsigned int>(splits));
  return cuda::launch_dependent(step_gemm_sm90_kernel, grid, dim3(kThreads), kSmemBytes, stream, a,
                                lda, w, ldw, c, ldc, accumulate, partials, m, n, k, k_split,
                                rows_aligned(a, lda), rows_aligned(w, ldw), w_early);
}

}  // namespace lltm_ext::lltm
