// The float32 products on Hopper's tensor cores that the sequence shares (sm_90a): a block's 128 x
// 128 outputs over a range of k, in three TF32 passes of wgmma with float32 sums.
#pragma once

#include <cstdint>

#include "common/sm90_ptx.cuh"
#include "lltm_sequence/sequence_mma.cuh"
#if LLTM_EXT_SM90A
#include "common/sm90_wgmma_tf32.cuh"
#endif

namespace lltm_ext::lltm::wgmma3 {

constexpr int kTile = 128;                      // a block's outputs: 128 rows x 128 columns
constexpr int kDepth = 32;                      // k per stage: one 128-byte row of float32
constexpr int kThreads = 256;                   // two warpgroups of 64 rows each
constexpr int kPartBytes = kTile * kDepth * 4;  // 16 KB: one operand's big or small part
constexpr int kStageBytes = 4 * kPartBytes;     // A big, A small, B big, B small

constexpr int kSmemBytes = 2 * kStageBytes + 1024;  // two stages, and room to align to 1024

// A thread's share of a stage: row c = tid % 128 of each operand (A's row of the output, B's
// column), at the k of chunks q0 + 2 i (i < 4, four k each), q0 = tid / 128. A loader fills
// a[i][e] and b[i][e] with k = 4 (q0 + 2 i) + e of the stage, zeros past the operands.
using Chunks = float[4][4];

#if LLTM_EXT_SM90A

// Stores a thread's four chunks of a stage, each element split into tf32 big and small parts
// (split_tf32_fast): chunk i of A and of B at offset(i) bytes into each of their parts, K-major (a
// row's 32 k in one 128-byte row, in the 128-byte swizzle that wgmma reads: 16-byte chunk q of row
// r at q ^ (r % 8)).
template <typename Offset>
__device__ __forceinline__ void store_chunks(uint8_t* stage, Offset&& offset, const Chunks& a,
                                             const Chunks& b) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int at = offset(i);
    uint4 a_big, a_small, b_big, b_small;
    split_tf32_fast(a[i][0], a_big.x, a_small.x);
    split_tf32_fast(a[i][1], a_big.y, a_small.y);
    split_tf32_fast(a[i][2], a_big.z, a_small.z);
    split_tf32_fast(a[i][3], a_big.w, a_small.w);
    split_tf32_fast(b[i][0], b_big.x, b_small.x);
    split_tf32_fast(b[i][1], b_big.y, b_small.y);
    split_tf32_fast(b[i][2], b_big.z, b_small.z);
    split_tf32_fast(b[i][3], b_big.w, b_small.w);
    *reinterpret_cast<uint4*>(stage + at) = a_big;
    *reinterpret_cast<uint4*>(stage + kPartBytes + at) = a_small;
    *reinterpret_cast<uint4*>(stage + 2 * kPartBytes + at) = b_big;
    *reinterpret_cast<uint4*>(stage + 3 * kPartBytes + at) = b_small;
  }
}

// store_chunks for the Chunks layout above: row c, chunks q0 + 2 i.
__device__ __forceinline__ void store_stage(uint8_t* stage, int c, int q0, const Chunks& a,
                                            const Chunks& b) {
  store_chunks(stage, [c, q0](int i) { return c * 128 + (((q0 + 2 * i) ^ (c % 8)) << 4); }, a, b);
}

// This warpgroup's wgmma of the stage at `stage` (A's 64 rows of the warpgroup start 64 rows, 8 KB,
// into each part; B is all 128 rows): small x big, big x small and big x big (m64n128k8, four k
// steps) into part, summed from zero; committed, not waited for.
__device__ __forceinline__ void mma_stage(float (&part)[64], uint32_t stage, int group) {
  namespace sm90 = cuda::sm90;
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
}

// Waits for this warpgroup's wgmma and adds part to the float32 sums on the SIMT cores: the tensor
// core truncates its sums, which chained over many k drift one way (cuBLAS's three TF32 passes
// over 132090 rows: 3e-4 of the largest output, against exact float32's 4e-6).
__device__ __forceinline__ void add_stage(float (&acc)[64], float (&part)[64]) {
  cuda::sm90::wgmma_wait<0>();
#pragma unroll
  for (int i = 0; i < 64; ++i) {
    cuda::sm90::fence_operand(part[i]);
    acc[i] += part[i];
  }
}

// The block's sums over `stages` stages, the operands staged through registers: load(s, a, b)
// fills this thread's share of stage s. Its threads load the next stage from global memory while
// the tensor cores run this one, then split and store it into the other buffer (two of
// kStageBytes from raw, aligned to 1024 bytes here). Each stage's wgmma (mma_stage) are summed
// from zero, then added to acc (add_stage), whose layout for_each_output gives.
template <typename Load>
__device__ __forceinline__ void tf32x3_sums(uint8_t* raw, int64_t stages, Load&& load,
                                            float (&acc)[64]) {
  namespace sm90 = cuda::sm90;
  const int tid = static_cast<int>(threadIdx.x), group = tid / 128;
  const int c = tid % kTile, q0 = tid / kTile;
  const uint32_t base = (sm90::smem_u32(raw) + 1023) & ~1023u;
  uint8_t* const smem = raw + (base - sm90::smem_u32(raw));
  Chunks a, b;
  float part[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) {
    acc[i] = 0.0f;
  }
  if (stages > 0) {
    load(int64_t{0}, a, b);
    store_stage(smem, c, q0, a, b);
  }
  sm90::fence_proxy_async_smem();  // the stores, before the tensor cores read them
  __syncthreads();
  for (int64_t s = 0; s < stages; ++s) {
    const int buf = static_cast<int>(s & 1);
    if (s + 1 < stages) {
      load(s + 1, a, b);
    }
    mma_stage(part, base + buf * kStageBytes, group);
    if (s + 1 < stages) {
      store_stage(smem + (buf ^ 1) * kStageBytes, c, q0, a, b);  // its readers, stage s - 1's
                                                                 // wgmma, were waited for
      sm90::fence_proxy_async_smem();
    }
    add_stage(acc, part);
    __syncthreads();  // everyone's stores of stage s + 1; everyone's wgmma of stage s done
  }
}

// This thread's first output in the block's 128 x 128: the m64n128 fragment holds, per 8 columns
// j, (row r, columns 2 t, 2 t + 1) and (row r + 8, the same), r = 64 warpgroup + 16 warp + lane /
// 4, t = lane % 4; row0 = r, col0 = 2 t.
__device__ __forceinline__ void output_origin(int& row0, int& col0) {
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32;
  row0 = (tid / 128) * 64 + 16 * ((tid / 32) % 4) + lane / 4;
  col0 = 2 * (lane % 4);
}

// Calls f(row, col, acc[i]) for this thread's outputs (output_origin's layout).
template <typename F>
__device__ __forceinline__ void for_each_output(const float (&acc)[64], F&& f) {
  int row0, col0;
  output_origin(row0, col0);
#pragma unroll
  for (int j = 0; j < 16; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      f(row0 + 8 * (e / 2), col0 + 8 * j + e % 2, acc[4 * j + e]);
    }
  }
}

// As for_each_output, two columns at a time: f(row, col, acc[i], acc[i + 1]) for the outputs at
// (row, col) and (row, col + 1), col even.
template <typename F>
__device__ __forceinline__ void for_each_output_pair(const float (&acc)[64], F&& f) {
  int row0, col0;
  output_origin(row0, col0);
#pragma unroll
  for (int j = 0; j < 16; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      f(row0 + 8 * h, col0 + 8 * j, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
    }
  }
}

#endif  // LLTM_EXT_SM90A

}  // namespace lltm_ext::lltm::wgmma3
