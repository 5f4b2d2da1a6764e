// The GEMM's skinny kernel (bfloat16 / float16, sm_80 on): products with one side of at most 32
// (a linear layer over a few tokens, x @ W.T), both operands K-contiguous with 16-byte rows. The
// product is bound by reading the large operand once, so the kernel is built around those reads.
//
// In the large operand's terms: out[l, s] = sum over k of X[l, k] Y[s, k], l < L (the large side),
// s < S <= 8 ST (the small side), X and Y K-contiguous. The tensor cores compute it transposed,
// with X as mma's A (16 rows of l) and Y as its B (8 columns of s). Lane 4 g + t reads 16-byte
// runs of 8 consecutive k (8 t + 32 u .. + 7) of X's rows g and g + 8 and Y's row g, and the mma's
// k slots are those runs permuted: a run's first four k feed one m16n8k16 and its last four the
// next, as the fragment's slots (2t, 2t + 1, 2t + 8, 2t + 9). A and B follow the same permutation,
// so every k meets its own partner, and no fragment needs a shuffle or ldmatrix.
//
// A block is RT x 16 rows of X; its warps take turns of 64 k over the block's K range, each warp
// streaming its own turns through a ring of shared-memory slots (skinny_kernel, below), and their
// float sums are added in warp order through shared memory (deterministic). With gridDim.y > 1
// each block row takes one K split and writes its float partials to its slice of `partial` (the
// host sums them in split order), else the result to out. Rows past L read row L - 1, never
// stored; Y rows past S and k past K read nothing (zeros).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/cp_async.cuh"
#include "common/mma_sync.cuh"
#include "gemm/gemm_launchers.h"     // SkinnyCall: what the kernel reads
#include "gemm/tiles/pack_half.cuh"  // pack1: the epilogue's rounding

namespace lltm_ext::gemm_tiles::skinny {

using lltm_ext::gemm::SkinnyCall;

constexpr int kRingStages = 4;  // the turns in flight per warp, plus the one read
constexpr int kMaxWarps = 8;

// A 16-byte shared load; "memory": kept after the cp.async wait that publishes the slot.
__device__ __forceinline__ uint4 load_shared(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// The kernel's shared memory per warp: kRingStages turns of 64 k (128 bytes) of its
// 16 RT rows of X and 8 ST rows of Y.
template <int ST, int RT>
constexpr int ring_bytes_per_warp() {
  return kRingStages * (16 * RT + 8 * ST) * 128;
}

// One turn's products: U runs of 32 k of the X rows (xv) and Y rows (yv) into acc, two
// m16n8k16 per run (its first four k, then its last four).
template <int DT, int ST, int RT, int U>
__device__ __forceinline__ void turn_mma(float (&acc)[RT][ST][4], const uint4 (&xv)[U][RT][2],
                                         const uint4 (&yv)[U][ST]) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      uint32_t bf[ST][2];
#pragma unroll
      for (int j = 0; j < ST; ++j) {
        bf[j][0] = word(yv[u][j], 2 * half);
        bf[j][1] = word(yv[u][j], 2 * half + 1);
      }
#pragma unroll
      for (int i = 0; i < RT; ++i) {
        // a = {A[g][2t..], A[g + 8][2t..], A[g][2t + 8..], A[g + 8][2t + 8..]}.
        const uint32_t af[4] = {word(xv[u][i][0], 2 * half), word(xv[u][i][1], 2 * half),
                                word(xv[u][i][0], 2 * half + 1), word(xv[u][i][1], 2 * half + 1)};
#pragma unroll
        for (int j = 0; j < ST; ++j) lltm_ext::cuda::mma_16816<DT>(acc[i][j], af, bf[j]);
      }
    }
  }
}

// The warps' sums in warp order, written: warps 1.. store theirs lane-major (conflict-free) at
// red(w), and warp 0 adds them to its own in that order, then writes out (or its split's
// partial slice). Ends the block's warps 1.. .
template <int DT, int ST, int RT, typename Red>
__device__ __forceinline__ void finish(const SkinnyCall& p, float (&acc)[RT][ST][4], Red red) {
  constexpr bool BF16 = DT == lltm_ext::cuda::kMmaBF16;
  const int warps = static_cast<int>(blockDim.x) / 32;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  if (warp > 0) {
    float* const mine = red(warp);
#pragma unroll
    for (int i = 0; i < RT; ++i) {
#pragma unroll
      for (int j = 0; j < ST; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) mine[((i * ST + j) * 4 + e) * 32 + lane] = acc[i][j][e];
      }
    }
  }
  __syncthreads();
  if (warp > 0) return;
  for (int w = 1; w < warps; ++w) {
    const float* const theirs = red(w);
#pragma unroll
    for (int i = 0; i < RT; ++i) {
#pragma unroll
      for (int j = 0; j < ST; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] += theirs[((i * ST + j) * 4 + e) * 32 + lane];
      }
    }
  }
  // d = {D[g][2t], D[g][2t + 1], D[g + 8][2t], D[g + 8][2t + 1]}: rows l, columns s.
  const int64_t l0 = static_cast<int64_t>(blockIdx.x) * 16 * RT;
#pragma unroll
  for (int i = 0; i < RT; ++i) {
#pragma unroll
    for (int j = 0; j < ST; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t l = l0 + i * 16 + g + 8 * (e >> 1);
        const int s = j * 8 + 2 * t + (e & 1);
        if (l >= p.L || s >= p.S) continue;
        const int64_t at = l * p.os_l + s * p.os_s;
        if (p.partial != nullptr) {
          static_cast<float*>(p.partial)[blockIdx.y * p.slice + at] = acc[i][j][e];
        } else {
          static_cast<uint16_t*>(p.out)[at] = pack1<BF16>(acc[i][j][e]);
        }
      }
    }
  }
}

template <int RT, int ST>
__device__ __forceinline__ void zero(float (&acc)[RT][ST][4]) {
#pragma unroll
  for (int i = 0; i < RT; ++i) {
#pragma unroll
    for (int j = 0; j < ST; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
    }
  }
}

// The kernel: each warp streams its turns (64 k of its block's 16 RT rows of X and 8 ST rows
// of Y) into a ring of kRingStages slots in shared memory by cp.async, 16-byte copies of whole
// 128-byte rows (8 lanes a row), kRingStages - 1 turns in flight, and reads its fragments from the
// slot that landed. No block-wide barrier in the loop: each warp's ring is its own. A row's
// 16-byte chunks sit XOR-swizzled by the row's parity, so that the fragment reads (rows g and
// g + 1 in each quarter of the warp) hit distinct banks. Rows past S read nothing (zero-filled).
template <int DT, int ST, int RT>
__global__ void __launch_bounds__(32 * kMaxWarps) skinny_kernel(const SkinnyCall p) {
  constexpr int kRows = 16 * RT + 8 * ST;  // a slot: X's rows, then Y's
  constexpr int kSlot = kRows * 128;       // bytes
  extern __shared__ __align__(16) unsigned char smem[];
  const int warps = static_cast<int>(blockDim.x) / 32;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t l0 = static_cast<int64_t>(blockIdx.x) * 16 * RT;
  const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * p.k_split;
  const int64_t k_end = min(p.K, k_begin + p.k_split);
  const uint16_t* const x = static_cast<const uint16_t*>(p.x);
  const uint16_t* const y = static_cast<const uint16_t*>(p.y);
  unsigned char* const ring = smem + warp * kRingStages * kSlot;
  const uint32_t ring_addr = lltm_ext::cuda::shared_address(ring);

  // The lane's copies: chunks lane + 32 q of a slot's kRows x 8 chunks, so row lane / 8 + 4 q,
  // chunk c = lane % 8, at position c ^ 4 (row & 1), the row's parity the lane's own.
  constexpr int kCopies = kRows * 8 / 32;
  const int c = lane % 8, r0 = lane / 8;
  const uint32_t dst0 = static_cast<uint32_t>(r0 * 128 + ((c ^ ((r0 & 1) << 2)) * 16));
  const int64_t turns = (k_end - k_begin + 63) / 64;
  const int64_t mine = warp < turns ? (turns - warp + warps - 1) / warps : 0;
  const uint64_t policy = p.stream_x ? lltm_ext::cuda::l2_evict_first_policy() : 0;
  auto issue = [&](int64_t idx) {  // the warp's turn idx into its slot, then a commit
    if (idx < mine) {
      const int64_t k = k_begin + (warp + idx * warps) * 64 + 8 * c;
      const bool kin = k < k_end;
      const uint32_t slot = ring_addr + static_cast<uint32_t>(idx % kRingStages) * kSlot + dst0;
#pragma unroll
      for (int q = 0; q < kCopies; ++q) {
        const int r = r0 + 4 * q;
        if (q < 4 * RT) {  // X's rows: r < 16 RT
          const int64_t l = min(l0 + r, p.L - 1);
          const uint16_t* const from = x + l * p.xs_l + (kin ? k : 0);
          if (p.stream_x) {
            lltm_ext::cuda::cp_async_16_hint(slot + q * 512, from, kin ? 16 : 0, policy);
          } else {
            lltm_ext::cuda::cp_async<16>(slot + q * 512, from, kin ? 16 : 0);
          }
        } else {
          const int sr = r - 16 * RT;
          const bool in = kin && sr < p.S;
          const uint16_t* const from = y + (sr < p.S ? sr : 0) * p.ys_s;
          lltm_ext::cuda::cp_async<16>(slot + q * 512, from + (in ? k : 0), in ? 16 : 0);
        }
      }
    }
    lltm_ext::cuda::cp_async_commit();
  };
#pragma unroll
  for (int s = 0; s < kRingStages - 1; ++s) issue(s);

  float acc[RT][ST][4];
  zero(acc);
  for (int64_t idx = 0; idx < mine; ++idx) {
    issue(idx + kRingStages - 1);
    lltm_ext::cuda::cp_async_wait<kRingStages - 1>();
    __syncwarp();
    const uint32_t slot = ring_addr + static_cast<uint32_t>(idx % kRingStages) * kSlot;
    uint4 xv[2][RT][2], yv[2][ST];
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int c = t + 4 * u;  // the lane's run: 8 t + 32 u of the turn's 64 k
#pragma unroll
      for (int i = 0; i < RT; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = i * 16 + g + 8 * h;
          xv[u][i][h] = load_shared(slot + r * 128 + ((c ^ ((r & 1) << 2)) * 16));
        }
      }
#pragma unroll
      for (int j = 0; j < ST; ++j) {
        const int r = 16 * RT + j * 8 + g;
        yv[u][j] = load_shared(slot + r * 128 + ((c ^ ((r & 1) << 2)) * 16));
      }
    }
    __syncwarp();  // the slot is read before the next turn's copies overwrite it
    turn_mma<DT, ST, RT, 2>(acc, xv, yv);
  }
  lltm_ext::cuda::cp_async_wait<0>();
  __syncwarp();
  // The warp-order sum in each warp's own ring (its copies are done, its reads too).
  finish<DT, ST, RT>(
      p, acc, [&](int w) { return reinterpret_cast<float*>(smem + w * kRingStages * kSlot); });
}

// The column kernel's turn: 32 k. Its block: CT tiles of 16 columns of X (CT = 4: 64 columns, a
// K row's 128 bytes; CT = 2: 32 columns, 64 bytes, twice the blocks where 64-column blocks leave
// SMs idle).
constexpr int kColsTurn = 32;

// Its shared memory per warp: kRingStages turns of X's 32 K rows of 32 CT bytes and Y's 8 ST rows
// of 32 k (64 bytes).
template <int ST, int CT>
constexpr int cols_ring_bytes_per_warp() {
  return kRingStages * (kColsTurn * 32 * CT + 8 * ST * kColsTurn * 2);
}

// A chunk's position in the column kernel's slots (16-byte chunks, `chunks` to a row): chunk c of
// row r at c ^ (r % 8) in 8-chunk rows, c ^ ((r / 2) % 4) in 4-chunk rows, so that the eight rows
// an ldmatrix phase reads (8 consecutive rows at one chunk) hit distinct banks either way.
template <int Chunks>
__device__ __forceinline__ int cols_swizzle(int r, int c) {
  static_assert(Chunks == 4 || Chunks == 8, "rows of 64 or 128 bytes");
  return Chunks == 8 ? c ^ (r & 7) : c ^ ((r >> 1) & 3);
}

// The kernel for X stored K-major (L-contiguous: W stored (K, N), x @ W, and the mirror a.T @ b):
// out[l, s] = sum over k of X[l, k] Y[s, k], X[l, k] at x + k xs_k + l, Y K-contiguous. The same
// turns and rings as skinny_kernel, but a block is 16 CT columns of X (a run of each K row) and a
// turn 32 k, copied whole: X as 32 K rows of 2 CT chunks, Y as 8 ST rows of 4 chunks, each at its
// cols_swizzle position. The fragments: A (16 l x 16 k) by ldmatrix.trans of four 8 x 8 blocks of
// the K-major slot, B by ldmatrix of Y's rows. Needs L and xs_k multiples of 8 (a chunk is whole
// inside a row or wholly past L: zero-filled).
template <int DT, int ST, int CT>
__global__ void __launch_bounds__(32 * kMaxWarps) skinny_cols_kernel(const SkinnyCall p) {
  static_assert(CT == 2 || CT == 4, "blocks of 32 or 64 columns");
  constexpr int kChunks = 2 * CT;  // 16-byte chunks of a K row of the block
  constexpr int kXRowBytes = 16 * kChunks, kXBytes = kColsTurn * kXRowBytes;
  constexpr int kYRowBytes = kColsTurn * 2;
  constexpr int kSlot = kXBytes + 8 * ST * kYRowBytes;
  extern __shared__ __align__(16) unsigned char smem[];
  const int warps = static_cast<int>(blockDim.x) / 32;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t l0 = static_cast<int64_t>(blockIdx.x) * 16 * CT;
  const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * p.k_split;
  const int64_t k_end = min(p.K, k_begin + p.k_split);
  const uint16_t* const x = static_cast<const uint16_t*>(p.x);
  const uint16_t* const y = static_cast<const uint16_t*>(p.y);
  unsigned char* const ring = smem + warp * kRingStages * kSlot;
  const uint32_t ring_addr = lltm_ext::cuda::shared_address(ring);

  // X's copies: row k = lane / kChunks + (32 / kChunks) q of the turn (q < kChunks), chunk
  // c = lane % kChunks (columns l0 + 8 c ..); Y's: row s = lane / 4 + 8 q (q < ST), chunk
  // cy = lane % 4.
  constexpr int kXRowsPerPass = 32 / kChunks;
  const int c = lane % kChunks, xr0 = lane / kChunks;
  const bool lin = l0 + 8 * c < p.L;
  const uint16_t* const xcol = x + (lin ? l0 + 8 * c : 0);
  const int cy = lane % 4, yr0 = lane / 4;
  const int64_t turns = (k_end - k_begin + kColsTurn - 1) / kColsTurn;
  const int64_t mine = warp < turns ? (turns - warp + warps - 1) / warps : 0;
  const uint64_t policy = p.stream_x ? lltm_ext::cuda::l2_evict_first_policy() : 0;
  auto issue = [&](int64_t idx) {  // the warp's turn idx into its slot, then a commit
    if (idx < mine) {
      const int64_t k0 = k_begin + (warp + idx * warps) * kColsTurn;
      const uint32_t slot = ring_addr + static_cast<uint32_t>(idx % kRingStages) * kSlot;
#pragma unroll
      for (int q = 0; q < kChunks; ++q) {
        const int r = xr0 + kXRowsPerPass * q;
        const bool in = lin && k0 + r < k_end;
        const uint32_t at =
            static_cast<uint32_t>(r * kXRowBytes + (cols_swizzle<kChunks>(r, c) << 4));
        if (p.stream_x) {
          lltm_ext::cuda::cp_async_16_hint(slot + at, in ? xcol + (k0 + r) * p.xs_k : x,
                                           in ? 16 : 0, policy);
        } else {
          lltm_ext::cuda::cp_async<16>(slot + at, in ? xcol + (k0 + r) * p.xs_k : x, in ? 16 : 0);
        }
      }
#pragma unroll
      for (int q = 0; q < ST; ++q) {
        const int s = yr0 + 8 * q;
        const int64_t k = k0 + 8 * cy;
        const bool in = s < p.S && k < k_end;
        const uint32_t at =
            static_cast<uint32_t>(kXBytes + s * kYRowBytes + (cols_swizzle<4>(s, cy) << 4));
        lltm_ext::cuda::cp_async<16>(slot + at, in ? y + s * p.ys_s + k : y, in ? 16 : 0);
      }
    }
    lltm_ext::cuda::cp_async_commit();
  };
#pragma unroll
  for (int s = 0; s < kRingStages - 1; ++s) issue(s);

  // ldmatrix's row addresses: lane = 8 m + j gives row j of matrix m. A (tile i, k step kk):
  // matrices (l 0-7, k 0-7), (l 8-15, k 0-7), (l 0-7, k 8-15), (l 8-15, k 8-15), each 8 K rows of
  // the slot: row k = 16 kk + 8 (m / 2) + j, chunk 2 i + m % 2. B (tile jt): Y's rows 8 jt + j,
  // chunk m (k 8 m .. 8 m + 7 of the turn: k steps 0 and 1, halves 0 and 1).
  const int m = lane / 8, j = lane % 8;
  float acc[CT][ST][4];
  zero(acc);
  for (int64_t idx = 0; idx < mine; ++idx) {
    issue(idx + kRingStages - 1);
    lltm_ext::cuda::cp_async_wait<kRingStages - 1>();
    __syncwarp();
    const uint32_t slot = ring_addr + static_cast<uint32_t>(idx % kRingStages) * kSlot;
    uint32_t bf[ST][4];  // {k step 0: b0, b1; k step 1: b0, b1}
#pragma unroll
    for (int jt = 0; jt < ST; ++jt) {
      const int s = 8 * jt + j;
      lltm_ext::cuda::ldmatrix_x4<false>(
          bf[jt], slot + kXBytes + s * kYRowBytes + (cols_swizzle<4>(s, m) << 4));
    }
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
#pragma unroll
      for (int i = 0; i < CT; ++i) {
        const int k = 16 * kk + 8 * (m >> 1) + j;
        uint32_t af[4];
        lltm_ext::cuda::ldmatrix_x4<true>(
            af, slot + k * kXRowBytes + (cols_swizzle<kChunks>(k, 2 * i + (m & 1)) << 4));
#pragma unroll
        for (int jt = 0; jt < ST; ++jt) {
          const uint32_t b[2] = {bf[jt][2 * kk], bf[jt][2 * kk + 1]};
          lltm_ext::cuda::mma_16816<DT>(acc[i][jt], af, b);
        }
      }
    }
    __syncwarp();  // the slot is read before the next turn's copies overwrite it
  }
  lltm_ext::cuda::cp_async_wait<0>();
  __syncwarp();
  finish<DT, ST, CT>(
      p, acc, [&](int w) { return reinterpret_cast<float*>(smem + w * kRingStages * kSlot); });
}

}  // namespace lltm_ext::gemm_tiles::skinny
