// The GEMM's tensor-core short-K kernel, for bfloat16 / float16 products whose K (at most 64) is
// short beside a large output: the time there is C's writes and each tile's set-up, so one block
// stages all of K once, runs mma.sync over it, and writes its tile of C through shared memory in
// 16-byte stores cut at each row's own 16-byte boundaries (any ldc, any alignment).
//
// 256 threads (8 warps, 4 x 2), a 128 x 128 tile of C, warp tiles of 32 x 64 (2 x 8 mma tiles of
// 16 x 8 x 16, float32 accumulators).
//   - loads: A's 128 rows and B's 128 columns of K (padded with zeros to KS * 16) staged in shared
//     memory K-contiguous ([row][k], rows of KS * 16 + 8 elements: the 8 rows of a fragment load
//     start 4 words apart mod 32, so its 32 words hit 32 banks). Each thread copies one element
//     per load at any stride and alignment (OperandShare), all of its loads issued before its
//     shared-memory stores, one pointer step and one compare per element;
//   - fragments read with 32-bit shared loads (the pairs of k that m16n8k16 takes per register);
//   - epilogue: the accumulators rounded to nearest even into a 128 x 136 staging tile, which
//     aliases the operands' buffers (read by then), each row shifted by its address's offset in
//     16-byte units (0-7 elements), so that 8-element chunks of the staging row fall on C's
//     16-byte boundaries; a half-warp stores a row, whole 16-byte chunks inside the tile's columns
//     and the row's two ends (8 elements together) one element per lane.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/mma_sync.cuh"
#include "gemm/gemm_launchers.h"     // ShortKCall: what the kernel reads
#include "gemm/tiles/pack_half.cuh"  // pack1 / pack2: the epilogue's rounding

namespace lltm_ext::gemm_tiles::short_k_mma {

using lltm_ext::gemm::ShortKCall;

constexpr int kThreads = 256;
constexpr int kBM = 128, kBN = 128;
constexpr int kWarpsN = 2;              // warps along N (4 along M)
constexpr int kWM = 32, kWN = 64;       // the warp tile
constexpr int kMI = kWM / 16;           // its 16-row mma tiles
constexpr int kNI = kWN / 8;            // its 8-column mma tiles
constexpr int kMaxK = 64;               // KS at most 4
constexpr int kChunks = kBN / 8 + 1;    // 16-byte chunks a shifted row of the tile spans
constexpr int kStageRow = kChunks * 8;  // 136 elements: 68 words, 4 mod 32

// Staged operand row (elements): KS * 16 of K and 8 of padding.
template <int KS>
constexpr int row_elems() {
  return KS * 16 + 8;
}

template <int KS>
constexpr int smem_elems() {
  const int operands = (kBM + kBN) * row_elems<KS>();
  const int stage = kBM * kStageRow;
  return operands > stage ? operands : stage;
}

__device__ __forceinline__ uint32_t lds32(const uint16_t* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// One operand's share of a thread: 128 rows x KS * 16 of K, KS * 8 elements a thread (zeros past
// `rows` and `K`), loaded into registers (load) and then stored into s ([row][k], row_elems<KS>()
// apart; store), so that all of a thread's loads are in flight together. base: the operand's
// element (row 0 of the tile, k 0); rs / ks: its strides along rows and K; kcontig: ks is the
// unit stride (else rs is).
//   K-contiguous: a fixed k per thread (tid % W), rows 256 / W apart: a warp reads runs of K;
//   row-contiguous: fixed rows per thread (8 consecutive ones per warp, and 64 further), k 4
//     apart: a warp reads 8-element runs of 4 k, and its shared stores hit 16 distinct words.
template <int KS>
struct OperandShare {
  static constexpr int W = KS * 16;
  static constexpr int PER = kBM * W / kThreads;  // elements per thread (kBM == kBN)
  uint16_t v[PER];

  __device__ __forceinline__ void load(const uint16_t* base, int64_t rs, int64_t ks, int64_t rows,
                                       int64_t K, bool kcontig) {
    const int tid = static_cast<int>(threadIdx.x);
    const int row_lim = static_cast<int>(rows < kBM ? rows : kBM);
    const int k_lim = static_cast<int>(K);  // K <= 64
    if (kcontig) {
      constexpr int STEP = kThreads / W;
      const int k = tid % W, r0 = tid / W;
      const uint16_t* p = base + k * ks + r0 * rs;
      const int64_t step = STEP * rs;
      const bool k_in = k < k_lim;
#pragma unroll
      for (int i = 0; i < PER; ++i, p += step) {
        v[i] = k_in && r0 + i * STEP < row_lim ? *p : uint16_t{0};
      }
    } else {
      const int r = (tid & 7) | ((tid >> 5) << 3), k0 = (tid >> 3) & 3;
      const uint16_t* p0 = base + r * rs + k0 * ks;
      const uint16_t* p1 = p0 + 64 * rs;
      const int64_t step = 4 * ks;
      const bool in0 = r < row_lim, in1 = r + 64 < row_lim;
#pragma unroll
      for (int i = 0; i < PER / 2; ++i, p0 += step, p1 += step) {
        const bool k_in = k0 + 4 * i < k_lim;
        v[2 * i] = in0 && k_in ? *p0 : uint16_t{0};
        v[2 * i + 1] = in1 && k_in ? *p1 : uint16_t{0};
      }
    }
  }

  __device__ __forceinline__ void store(uint16_t* s, bool kcontig) const {
    constexpr int RE = row_elems<KS>();
    const int tid = static_cast<int>(threadIdx.x);
    if (kcontig) {
      constexpr int STEP = kThreads / W;
      uint16_t* const q = s + (tid / W) * RE + tid % W;
#pragma unroll
      for (int i = 0; i < PER; ++i) q[i * STEP * RE] = v[i];
    } else {
      const int r = (tid & 7) | ((tid >> 5) << 3), k0 = (tid >> 3) & 3;
      uint16_t* const q = s + r * RE + k0;
#pragma unroll
      for (int i = 0; i < PER / 2; ++i) {
        q[4 * i] = v[2 * i];
        q[64 * RE + 4 * i] = v[2 * i + 1];
      }
    }
  }
};

// C = A B for K <= KS * 16, DT kMmaBF16 or kMmaF16 (operands and C of that type, as raw 16 bits).
template <int DT, int KS>
__global__ void __launch_bounds__(kThreads, 2) short_k_mma_kernel(const ShortKCall p) {
  static_assert(KS == 1 || KS == 2 || KS == 4, "KS * 16 divides the block's 256 threads");
  constexpr int RE = row_elems<KS>();
  constexpr bool BF16 = DT == lltm_ext::cuda::kMmaBF16;
  __shared__ __align__(16) uint16_t smem[smem_elems<KS>()];
  uint16_t* const sa = smem;             // [kBM][RE]
  uint16_t* const sb = smem + kBM * RE;  // [kBN][RE]
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int wm = warp / kWarpsN, wn = warp % kWarpsN;
  const int64_t tiles_n = (p.N + kBN - 1) / kBN;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) / tiles_n * kBM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) % tiles_n * kBN;
  const uint16_t* const a = static_cast<const uint16_t*>(p.a);
  const uint16_t* const b = static_cast<const uint16_t*>(p.b);

  {
    OperandShare<KS> sha, shb;
    sha.load(a + m0 * p.as_m, p.as_m, p.as_k, p.M - m0, p.K, p.a_kcontig);
    shb.load(b + n0 * p.bs_n, p.bs_n, p.bs_k, p.N - n0, p.K, p.b_kcontig);
    sha.store(sa, p.a_kcontig);
    shb.store(sb, p.b_kcontig);
  }
  __syncthreads();

  float acc[kMI][kNI][4];
#pragma unroll
  for (int i = 0; i < kMI; ++i) {
#pragma unroll
    for (int j = 0; j < kNI; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
    }
  }
#pragma unroll
  for (int ks = 0; ks < KS; ++ks) {
    const int k = ks * 16 + 2 * t;
    uint32_t af[kMI][4];
#pragma unroll
    for (int i = 0; i < kMI; ++i) {
      const uint16_t* const r = sa + (wm * kWM + i * 16 + g) * RE + k;
      af[i][0] = lds32(r);
      af[i][1] = lds32(r + 8 * RE);
      af[i][2] = lds32(r + 8);
      af[i][3] = lds32(r + 8 * RE + 8);
    }
#pragma unroll
    for (int j = 0; j < kNI; ++j) {
      const uint16_t* const c = sb + (wn * kWN + j * 8 + g) * RE + k;
      const uint32_t bf[2] = {lds32(c), lds32(c + 8)};
#pragma unroll
      for (int i = 0; i < kMI; ++i) lltm_ext::cuda::mma_16816<DT>(acc[i][j], af[i], bf);
    }
  }

  // Epilogue: staging rows shifted by C's alignment (the operands are read: sync first).
  uint16_t* const c = static_cast<uint16_t*>(p.c);
  __syncthreads();
  uint16_t* const stage = smem;  // [kBM][kStageRow]
#pragma unroll
  for (int i = 0; i < kMI; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = wm * kWM + i * 16 + g + 8 * h;
      const int s =
          static_cast<int>((reinterpret_cast<uintptr_t>(c + (m0 + row) * p.ldc + n0) >> 1) & 7);
      uint16_t* const srow = stage + row * kStageRow + s + wn * kWN + 2 * t;
#pragma unroll
      for (int j = 0; j < kNI; ++j) {
        const float lo = acc[i][j][2 * h], hi = acc[i][j][2 * h + 1];
        if ((s & 1) == 0) {
          *reinterpret_cast<uint32_t*>(srow + j * 8) = pack2<BF16>(lo, hi);
        } else {
          srow[j * 8] = pack1<BF16>(lo);
          srow[j * 8 + 1] = pack1<BF16>(hi);
        }
      }
    }
  }
  __syncthreads();
  // Each half-warp stores a row: lane j its chunk j (0-15) when whole; with the full tile's 128
  // columns and a row shifted by s > 0, chunks 0 and 16 hold the row's first 8 - s and last s
  // elements, which lanes 0-7 store one each; an edge tile's partial chunks go element by element.
  const int64_t n_left = p.N - n0;
  const int ncols = static_cast<int>(n_left < kBN ? n_left : kBN);
  const bool full = ncols == kBN;
  const int half = lane / 16, j = lane % 16;
#pragma unroll 2
  for (int it = 0; it < kBM / 16; ++it) {
    const int row = warp * (kBM / 8) + 2 * it + half;
    const int64_t m = m0 + row;
    if (m >= p.M) break;  // rows only grow
    uint16_t* const crow = c + m * p.ldc + n0;
    const int s = static_cast<int>((reinterpret_cast<uintptr_t>(crow) >> 1) & 7);
    const uint16_t* const srow = stage + row * kStageRow + s;  // srow[col]: column col
    const int lo = 8 * j - s;
    if (lo >= 0 && lo + 8 <= ncols) {
      *reinterpret_cast<uint4*>(crow + lo) = *reinterpret_cast<const uint4*>(srow + lo);
    } else if (!full) {
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        if (lo + e >= 0 && lo + e < ncols) crow[lo + e] = srow[lo + e];
      }
    }
    if (full && s > 0 && j < 8) {
      const int col = j < 8 - s ? j : kBN - 8 + j;
      crow[col] = srow[col];
    } else if (!full && j == 0) {  // chunk 16
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        if (kBN - s + e < ncols) crow[kBN - s + e] = srow[kBN - s + e];
      }
    }
  }
}

}  // namespace lltm_ext::gemm_tiles::short_k_mma
