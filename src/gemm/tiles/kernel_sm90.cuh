// The Hopper tensor-core GEMM kernel for bfloat16 / float16, float32 as TF32, and float32 at full
// precision in three TF32 passes (float32 accumulation): TMA loads into a shared-memory ring, one
// producer warpgroup and two consumer warpgroups synchronized by mbarriers, wgmma on 128 x BN block
// tiles (or 256 x BN), persistent over the tiles. sm_90a only (an empty body elsewhere).
//
// Design:
//   - block tile BM x BN = 128 x BN (BN 256, 192, 168, 144, 128 or 64; 168 and 144, not whole
//     64-column atoms, for a K-major B only), or 256 x 152 (16-bit, B K-major: each consumer sums
//     two 64-row slabs, two wgmmas on the same B a K step, 152 accumulators a thread), K steps of
//     128 bytes (one 128-byte swizzle row: BK = 64 16-bit elements, 32 for tf32); STAGES stages of
//     A and B tiles in dynamic shared memory;
//   - warpgroup 0 is the producer: after giving registers back (setmaxnreg), one thread waits for
//     a free stage (`empty` barrier), announces its bytes on the stage's `full` barrier and issues
//     the TMA loads; out-of-bounds rows / columns (M, N, K tails) arrive as zeros;
//   - warpgroups 1 and 2 are consumers, each owning 64 rows of the block tile (64 x BN float32
//     accumulators, BN / 2 registers per thread): per stage, four wgmma m64nBNk16 (k8 for tf32)
//     straight from shared memory (descriptors and barrier addresses taken once, before the K
//     loop, which adds offsets to them), then a release of the stage (one arrival per warp) once
//     they are done: with p.overlap, a step later, one group left in flight meanwhile; where
//     M <= 64, or in block tiles of 64 rows (p.a_rows 64), stages hold 64 rows of A, and the
//     second consumer's math reads rows that no load wrote and stores none of its results (a
//     branch around its math instead would serialize every consumer's wgmmas: ptxas C7518);
//   - operands of either major-ness for 16-bit types: a K-major operand is one box of 128 bytes
//     of K x rows; an M- / N-major one is boxes of (64 M or N) x (64 K), each a 128-byte-swizzled
//     atom column, read by wgmma with its transpose bit set (tf32: K-major only);
//   - persistent: gridDim.x <= the SM count, each block walks work items (tiles, or with K splits
//     the tiles of each split) blockIdx.x, + gridDim.x, ... in groups of p.group tile rows
//     (neighbours share A and B panels in L2); the producer runs ahead into the next item while
//     the consumers store the last one;
//   - clusters of two (p.cluster_m 2): the blocks of a cluster take neighbouring tile rows of one
//     tile column together; each producer loads its half of the stage's B tile into both blocks
//     (TMA multicast), so B crosses from L2 once for the pair; a stage is free again once the
//     consumers of both blocks release it (remote mbarrier arrivals);
//   - split-K (p.splits > 1, for grids of fewer tiles than SMs): the work items are the tiles of
//     each K split in turn (split-major: the blocks running together read the same K range), a
//     split k_tiles_split K steps; each item writes its float32 partial tile to its split's slice
//     of p.partial (row-major M x N) by direct stores, which the split-K reduction sums into C;
//   - epilogue: accumulators converted to the output type, written to a shared staging buffer in
//     TMA's swizzled layout and stored by TMA, asynchronously (the next tile's main loop overlaps
//     the writes of C; at BN 168 and 144 its whole 64-column passes so, the rest directly);
//     a 16-bit C stored transposed (p.c_trans: the caller swapped the operands, C^T = b^T a^T)
//     the same way, the staged boxes' rows then C's columns; where C's base or stride does not
//     suit TMA, stored by each thread directly (two elements at a time where alignment allows),
//     predicated on M and N;
//   - float32 at full precision (DT kSm90F32X3; tiles 64 and 128 wide, no clusters): each operand
//     is copied beforehand K-major into a tf32 "big" part and a "small" part (the rounded
//     remainder; gemm/tiles/split_tf32.cuh), a stage holds both parts of A and B, and the
//     consumers run each stage's three passes (small x big, big x small, big x big) into sums of
//     their own, started from zero, which they then add to the float32 accumulators: the tensor
//     core's truncated sums never chain over more than one stage. Outputs that come out
//     non-finite (an Inf or NaN among their operands, or an operand that rounds to Inf) are
//     recomputed exactly from the operands as given, so that they are what float32 gives;
//   - Stream-K over a last, partial round (the SK instantiation, a kernel of its own: both walks
//     in one kernel made ptxas serialize every wgmma, C7518): where the tiles fill the last round
//     of the persistent grid only partly, this kernel runs the whole rounds (p.items_run items)
//     and a second launch, SK, the rest: their K steps, tile after tile, cut into one equal range
//     a block, each range run a tile's part at a time from its end back. A part without its
//     tile's last step (a block's first part) leaves its float32 sums in the block's slice of
//     p.sk_partial and counts its consumers on p.sk_flags[block]; the part holding the last step
//     adds the earlier parts' sums (lower blocks', their first parts) and stores C. The flags are
//     zeroed by the first kernel's block 0, and SK waits for that kernel's end (pdl_wait) only
//     before its first flag: its blocks start on the SMs the first kernel's blocks leave;
//   - launched as a programmatic dependent launch: the barriers' set-up overlaps the end of the
//     kernel before it, and the split-K reduction after it is scheduled once every load is issued.
#pragma once

#include <cuda.h>  // CUtensorMap (a type only: no driver call is made from this file)
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "common/cp_async.cuh"       // l2_evict_first_policy
#include "common/cuda_kernel.cuh"    // pdl_wait, pdl_release
#include "gemm/tiles/pack_half.cuh"  // pack2 / pack1: the 16-bit epilogue
#include "common/sm90_ptx.cuh"
#include "gemm/gemm_tc_plan.h"  // kWgmmaGroup
#if LLTM_EXT_SM90A
#include "gemm/tiles/sm90_wgmma.cuh"
#include "common/sm90_wgmma_tf32.cuh"
#endif

namespace lltm_ext::gemm_tiles::sm90 {

// The PTX helpers shared with other ops (common/sm90_ptx.cuh, common/sm90_wgmma_tf32.cuh).
using namespace ::lltm_ext::cuda::sm90;  // NOLINT(google-build-using-namespace)

// The element types: the kernel's DT template argument (operands and C of one type).
inline constexpr int kSm90F16 = 0, kSm90BF16 = 1, kSm90TF32 = 2;  // TF32: float32 data
// Float32 at full precision, in three TF32 passes over split operands (see the design above).
inline constexpr int kSm90F32X3 = 3;

// The shape and shared memory of the BM_ x BN_ block tile for element type DT_ (kSm90*). A stage
// holds 128 bytes of K per row (64 16-bit or 32 float32 elements), so the stages' byte geometry is
// the same for every element type; C's staging is not (C_BOXES).
template <int BN_, int DT_, int BM_ = 128>
struct Sm90Tile {
  static constexpr int BM = BM_, BN = BN_, BK = 64;  // BK: in 16-bit elements (32 for TF32)
  static constexpr int CONSUMERS = 2;                // consumer warpgroups, BM / 2 rows each
  // The m64 slabs of a consumer's rows: one (128-row tiles) or two (256-row tiles, the consumer's
  // accumulators two 64 x BN fragments, each K step's wgmmas two, one a slab, on the same B).
  static constexpr int SLABS = BM / 128;
  static constexpr int THREADS = 128 * (CONSUMERS + 1);
  static constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2;
  // kSm90F32X3: a stage holds A's and B's big parts, then their small parts.
  static constexpr int PARTS = DT_ == kSm90F32X3 ? 2 : 1;
  static constexpr int STAGE_BYTES = PARTS * (A_BYTES + B_BYTES);
  // Clusters of two, B K-major: each block loads B_HALF of a stage's BN rows of B for both, rows
  // 0 .. B_HALF - 1 and BN - B_HALF .. BN - 1: whole 8-row swizzle groups, so that each half
  // starts 1024 bytes into the stage part as the 128-byte swizzle needs; where BN / 2 is not a
  // multiple of 8 (152: 80 rows a half) the middle rows arrive from both blocks, the same bytes.
  static constexpr int B_HALF = (BN / 2 + 7) / 8 * 8;
  static constexpr int ATOM_BYTES = 64 * 128;  // one (64 MN) x (64 K) swizzle-atom column
  // C staging for the TMA-store epilogue: per consumer, C_BOXES boxes of 64 rows x 128 bytes, one
  // store pass's columns. Two boxes (a pass of 128 bytes x 2) unless one buys another stage for a
  // 16-bit C, as at BN 192 (passes of one box, 64 columns: that width's passes anyway). A TF32 C
  // keeps two: one would double its store passes, which cost more than the stage gains
  // (docs/decisions.md#wgmma-stages). The narrow tile stores C directly.
  static constexpr bool C_STAGED = BN >= 64;  // whole 64-column passes; the rest stored directly
  static constexpr int C_BOX_BYTES = 64 * 128;
  static constexpr int fit(int boxes) {
    return (227 * 1024 - (C_STAGED ? CONSUMERS * boxes * C_BOX_BYTES : 0) - 1024 - 256) /
           STAGE_BYTES;
  }
  static constexpr int C_BOXES = DT_ < kSm90TF32 && fit(1) > fit(2) ? 1 : 2;
  static constexpr int C_BYTES = C_STAGED ? CONSUMERS * C_BOXES * C_BOX_BYTES : 0;
  // As many stages as fit in the 227 KB a block may have, beside C, the 1024-byte alignment and
  // the barriers, up to 12: 4 at BN 256, 5 at 192 (4 for TF32) and 168, 6 at 144 (5 for TF32)
  // and 128, 8 at 64, 11 at 32, 12 at 16; float32 in three passes 3 at 128, 4 at 64.
  static constexpr int STAGES_FIT = fit(C_BOXES);
  static constexpr int STAGES = STAGES_FIT < 12 ? STAGES_FIT : 12;
  static constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + C_BYTES + 1024;  // + align to 1024
  static_assert(BN == 16 || BN == 32 || (BN % 8 == 0 && BN >= 64 && BN <= 256),
                "wgmma tiles are 16 or 32 wide (the narrow tiles), or 64-256 in steps of 8");
  static_assert(STAGES >= (PARTS == 2 ? 3 : 4), "at least four stages (three of two parts)");
  static_assert(
      DT_ != kSm90F32X3 || BN == 64 || BN == 128,
      "float32 in three passes: tiles 64 or 128 wide (its sums take twice the registers)");
  static_assert(BM == 128 || (BM == 256 && DT_ < kSm90TF32 && BN >= 64 && BN <= 152),
                "256-row tiles: 16-bit types, 64 to 152 wide (BN accumulators a consumer thread)");
};

// Sm90Tile<BN, dt>::SMEM_BYTES for a runtime dt (float16 and bfloat16 alike).
template <int BN, int BM = 128>
constexpr int sm90_smem_bytes(int dt) {
  if constexpr (BM != 128) return Sm90Tile<BN, kSm90BF16, BM>::SMEM_BYTES;  // 16-bit only
  if constexpr (BN == 64 || BN == 128) {
    if (dt == kSm90F32X3) return Sm90Tile<BN, kSm90F32X3>::SMEM_BYTES;
  }
  return dt == kSm90TF32 ? Sm90Tile<BN, kSm90TF32>::SMEM_BYTES
                         : Sm90Tile<BN, kSm90BF16>::SMEM_BYTES;
}

// What the kernel needs besides the two tensor maps. C is row-major with leading dimension ldc.
struct Sm90Params {
  void* c;
  int M, N, K;
  int64_t ldc;
  int tiles_m, tiles_n;
  bool tma_store;  // C through shared memory and map_c (16-byte aligned base and rows)
  bool pairs;      // else direct stores; C's base 2-element aligned and ldc even: two per store
  // Split-K: splits K ranges of k_tiles_split K steps (splits = ceil(K steps / k_tiles_split)),
  // each into its M x N slice of `partial` (float32, row-major) instead of C; 1: C written.
  int splits = 1, k_tiles_split = 0;
  float* partial = nullptr;
  // The consumers keep one wgmma group in flight across K steps (its stage released a step
  // later), else wait for each step's group before the next.
  bool overlap = true;
  // Tiles are walked column by column within groups of this many tile rows (pairs of rows in
  // clusters of two), so that the blocks running at once share panels of A and B in L2.
  int group = lltm_ext::gemm::kWgmmaGroup;
  // Rows of A a stage holds and of a block tile: BM (128, or 256 for the 256-row tiles), or 64
  // (128-row tiles where M <= 64, as TMA boxes
  // reaching past M cost load time for the rows they fill with zeros; or tiles of 64 rows, twice
  // the tiles): map_a's boxes then 64 rows deep, and the second consumer stores nothing of what
  // it computes from the stage's unloaded rows.
  int a_rows = 128;
  // C stored transposed: the kernel's element (r, col) at c[col * ldc + r], its partials at
  // slice[col * M + r] (the narrow tile's swapped operands, C^T = B^T A^T: the caller's C is the
  // kernel's N x M); direct stores only.
  bool c_trans = false;
  // Blocks a cluster, 1 or 2 (the launch's cluster shape): the two blocks of a cluster take tile
  // rows 2 i and 2 i + 1 of one tile column and K range at once, each loading half of the stage's
  // B tile and multicasting it to both (map_b's K-major boxes then BN / 2 rows deep), so that B
  // is read from L2 once for the two. The second block of a last, odd row loads no A and stores
  // nothing.
  int cluster_m = 1;
  // kSm90F32X3: the rows of map_a / map_b where the small parts start (A's big parts are rows
  // 0 .. M - 1, its small parts rows a_small .. a_small + M - 1; B's the same with N), and the
  // operands as given, from which outputs that come out non-finite are recomputed: A (r, k) at
  // a[r * a_rs + k * a_ks], B (k, c) at b[k * b_ks + c * b_cs].
  int a_small = 0, b_small = 0;
  const float* a = nullptr;
  const float* b = nullptr;
  int64_t a_rs = 0, a_ks = 0, b_ks = 0, b_cs = 0;
  // A (B) loaded under L2's evict-first policy (cuda::l2_evict_first_policy): an operand that few
  // blocks read, close together (one tile column of A; a few tile rows of B), whose lines need not
  // stay in L2.
  bool stream_a = false, stream_b = false;
  // Stream-K (see the design above; cluster_m 1, splits 1, a_rows 128): the whole-tile kernel runs
  // work items [0, items_run) (0: all of them) and, where sk_flags is set, its block 0 first zeroes
  // sk_flags[0 .. sk_blocks); the SK kernel runs tiles sk_first .. tiles - 1 over gridDim.x
  // (= sk_blocks) ranges, block b's slice of partial sums at sk_partial + b BM BN (float32,
  // [element][consumer thread]).
  int items_run = 0;
  int sk_first = 0, sk_blocks = 0;
  float* sk_partial = nullptr;
  int* sk_flags = nullptr;
};

// A block's walk over its work items: whole tiles, items next, next + step, ... below end;
// Stream-K, the parts of its range of K steps [end, next) from next back.
struct Sm90Walk {
  int next, end, step;
};

// Stream-K over `total` K steps (< 2^31) in `blocks` ranges, the first total % blocks of them one
// step longer: the first step of range b, and the range that holds step i.
__device__ __forceinline__ int sk_range_start(int b, int total, int blocks) {
  const int per = total / blocks, rem = total % blocks;
  return b * per + min(b, rem);
}
__device__ __forceinline__ int sk_range_of(int i, int total, int blocks) {
  const int per = total / blocks, rem = total % blocks;
  const int long_steps = rem * (per + 1);
  return i < long_steps ? i / (per + 1) : rem + (i - long_steps) / per;
}

// The float32 sum over k in [k0, k1) of a[k * a_ks] b[k * b_ks], one fused multiply-add a k: an
// output of the operands as given, as exact float32 gives it, where the three passes came out
// non-finite. Not inlined: the kernel's unrolled epilogue calls it once per accumulator.
static __device__ __noinline__ float sm90_exact_dot(const float* a, const float* b, int64_t a_ks,
                                                    int64_t b_ks, int k0, int k1) {
  float s = 0.f;
  for (int k = k0; k < k1; ++k) s = fmaf(a[k * a_ks], b[k * b_ks], s);
  return s;
}

// Work item u's tile and K steps [kt_begin, kt_end): the tiles of split 0, then of split 1, ...
// (with clusters of two, `tiles` counts the pairs of tile rows' tiles).
__device__ __forceinline__ void sm90_work(const Sm90Params& p, int u, int tiles, int k_tiles,
                                          int& t, int& kt_begin, int& kt_end) {
  if (p.splits <= 1) {
    t = u;
    kt_begin = 0;
    kt_end = k_tiles;
    return;
  }
  const int split = u / tiles;
  t = u - split * tiles;
  kt_begin = split * p.k_tiles_split;
  kt_end = min(k_tiles, kt_begin + p.k_tiles_split);
}

// The block's next work item (tile t, K steps [kt_begin, kt_end)), or false where it has none
// left. SK: the Stream-K walk (tiles p.sk_first ..), else sm90_work's.
template <bool SK>
__device__ __forceinline__ bool sm90_next(const Sm90Params& p, Sm90Walk& walk, int tiles,
                                          int k_tiles, int& t, int& kt_begin, int& kt_end) {
  if constexpr (!SK) {
    if (walk.next >= walk.end) return false;
    sm90_work(p, walk.next, tiles, k_tiles, t, kt_begin, kt_end);
    walk.next += walk.step;
    return true;
  } else {
    if (walk.next <= walk.end) return false;
    const int first = (walk.next - 1) / k_tiles * k_tiles;  // the tile's first step
    const int lo = max(walk.end, first);
    t = p.sk_first + first / k_tiles;
    kt_begin = lo - first;
    kt_end = walk.next - first;
    walk.next = lo;
    return true;
  }
}

// Tile t's (row, column) of tiles: column-major within groups of `group` tile rows.
__device__ __forceinline__ void sm90_tile_coords(int t, int tiles_m, int tiles_n, int group,
                                                 int& tm, int& tn) {
  const int per_group = group * tiles_n;
  const int g = t / per_group;
  const int first = g * group;
  const int rows = min(tiles_m - first, group);
  const int r = t - g * per_group;
  tm = first + r % rows;
  tn = r / rows;
}

// wgmma's operand fence on every accumulator of a consumer's slabs.
template <int S, int N>
__device__ __forceinline__ void fence_all(float (&acc)[S][N]) {
#pragma unroll
  for (int s = 0; s < S; ++s) {
#pragma unroll
    for (int i = 0; i < N; ++i) fence_operand(acc[s][i]);
  }
}

// (v0, v1) to C's elements idx and idx + 1 (the second only when `second`), in C's type: one
// store when `pair` (aligned, both in range).
template <int DT>
__device__ __forceinline__ void store_two(void* c, int64_t idx, float v0, float v1, bool pair,
                                          bool second) {
  if constexpr (DT >= kSm90TF32) {
    float* const dst = static_cast<float*>(c) + idx;
    if (pair) {
      *reinterpret_cast<float2*>(dst) = make_float2(v0, v1);
    } else {
      dst[0] = v0;
      if (second) dst[1] = v1;
    }
  } else {
    uint16_t* const dst = static_cast<uint16_t*>(c) + idx;
    if (pair) {
      *reinterpret_cast<uint32_t*>(dst) = pack2<DT == kSm90BF16>(v0, v1);
    } else {
      dst[0] = pack1<DT == kSm90BF16>(v0);
      if (second) dst[1] = pack1<DT == kSm90BF16>(v1);
    }
  }
}

// C = A B for A (M x K) and B (K x N) of type DT described by map_a / map_b (A_K: A is K-major,
// its map's dims (K, M), else (M, K); B_K: B is K-major, dims (K, N), else (N, K); TF32: both
// K-major, as wgmma's tf32 form requires); C in the same type. 384 threads,
// Sm90Tile<BN, DT>::SMEM_BYTES of dynamic shared memory, gridDim.x <= tiles x splits. The narrow
// tile (BN 16: a side of at most 16 streamed past the other operand's 128-row tiles) needs B
// K-major and stores C directly. SK: the Stream-K kernel of a last, partial round (16-bit or
// TF32, blocks alone, no K splits, 128-row tiles). CT: C stored transposed through TMA (16-bit,
// p.c_trans and p.tma_store); a template argument, so that the other kernels' epilogue carries no
// branch for it (a runtime test there slowed them all: docs/decisions.md#wgmma-swap).
template <int BN, int DT, bool A_K, bool B_K, bool SK = false, int BM = 128, bool CT = false>
__global__ void __launch_bounds__(384, 1)
    gemm_sm90_kernel(const __grid_constant__ CUtensorMap map_a,
                     const __grid_constant__ CUtensorMap map_b,
                     const __grid_constant__ CUtensorMap map_c, const Sm90Params p) {
#if LLTM_EXT_SM90A
  using Tile = Sm90Tile<BN, DT, BM>;
  constexpr int SLABS = Tile::SLABS;
  static_assert(DT < kSm90TF32 || (A_K && B_K), "tf32 wgmma reads K-major operands only");
  static_assert(BN >= 64 || (B_K && DT < kSm90TF32), "the narrow tile: 16-bit, B K-major");
  static_assert(BN % 64 == 0 || B_K, "an N-major B in whole 64-column atoms");
  static_assert(!SK || (BN >= 64 && DT != kSm90F32X3), "Stream-K: 16-bit or TF32, 64 wide or more");
  static_assert(BM == 128 || !SK, "256-row tiles: no Stream-K kernel");
  static_assert(!CT || (DT < kSm90TF32 && !SK && BN >= 64), "a transposed TMA store: 16-bit");
  constexpr bool F32 = DT >= kSm90TF32, X3 = DT == kSm90F32X3;
  constexpr int ELEM = F32 ? 4 : 2;
  constexpr int BK = 128 / ELEM, STAGES = Tile::STAGES;
  // Static shared memory: only this (sm_90a) body has it, which is how the host tells the loaded
  // image from the other architectures' empty stubs (gemm_kernels_sm90.cu, sm90_image_loaded).
  __shared__ uint64_t full[STAGES], empty[STAGES];
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw_addr = smem_u32(smem_raw);
  uint8_t* const smem = smem_raw + ((1024 - (raw_addr & 1023)) & 1023);  // 1024-aligned stages

  const int warpgroup = threadIdx.x / 128;
  const int tid = threadIdx.x % 128;
  // Clusters of two (p.cluster_m): a stage's B arrives half from each block, so a stage is free
  // once both blocks' consumers are done with it (their arrivals on each other's `empty`).
  const int cm = p.cluster_m;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], Tile::CONSUMERS * 4 * cm);
    }
    mbar_init_fence();
  }
  // The other block's barriers are initialized before anything reaches them.
  if (cm > 1) {
    cluster_sync_threads();
  } else {
    __syncthreads();
  }
  // A programmatic dependent launch (gemm_kernels_sm90.cu): the set-up above overlaps the end of
  // the kernel before it, whose writes this waits for before any global memory is touched. SK
  // follows the whole-tile kernel, which reads and writes nothing it touches but the flags (it
  // began after that kernel's blocks had waited for theirs): it waits before its first flag.
  if constexpr (!SK) {
    cuda::pdl_wait();
    if (p.sk_flags != nullptr && blockIdx.x == 0) {
      for (int i = threadIdx.x; i < p.sk_blocks; i += blockDim.x) p.sk_flags[i] = 0;
    }
  }

  // A cluster walks the work items of its tile-row pairs (`tiles` of them a split); block `rank`
  // of it takes the pair's row rank.
  const int rank = cm > 1 ? static_cast<int>(cluster_rank()) : 0;
  const int tiles_mc = (p.tiles_m + cm - 1) / cm;
  const int tiles = tiles_mc * p.tiles_n;
  const int group = max(p.group / cm, 1);  // in units of the cluster's rows
  const int k_tiles = (p.K + BK - 1) / BK;
  const int items = p.items_run > 0 ? p.items_run : tiles * max(p.splits, 1);
  // The walk's start: whole tiles from this block's (cluster's) first; Stream-K, its range.
  Sm90Walk start{static_cast<int>(blockIdx.x) / cm, items, static_cast<int>(gridDim.x) / cm};
  const int sk_total = SK ? (tiles - p.sk_first) * k_tiles : 0;
  if constexpr (SK) {
    start.next = sk_range_start(blockIdx.x + 1, sk_total, gridDim.x);
    start.end = sk_range_start(blockIdx.x, sk_total, gridDim.x);
  }

  if (warpgroup == 0) {  // producer
    setmaxnreg_dec<40>();
    if (tid == 0) {
      prefetch_tensor_map(&map_a);
      prefetch_tensor_map(&map_b);
      int stage = 0;
      uint32_t phase = 0;
      const uint64_t policy = p.stream_a || p.stream_b ? cuda::l2_evict_first_policy() : 0;
      const auto load_a = [&](void* dst, int c0, int c1) {
        if (p.stream_a) {
          tma_load_2d(dst, &map_a, &full[stage], c0, c1, policy);
        } else {
          tma_load_2d(dst, &map_a, &full[stage], c0, c1);
        }
      };
      const auto load_b = [&](void* dst, int c0, int c1) {
        if (p.stream_b) {
          tma_load_2d(dst, &map_b, &full[stage], c0, c1, policy);
        } else {
          tma_load_2d(dst, &map_b, &full[stage], c0, c1);
        }
      };
      const int b_bytes = cm > 1 && B_K ? 2 * Tile::B_HALF * 128 : Tile::B_BYTES;
      Sm90Walk walk = start;
      int t, kt_begin, kt_end;
      while (sm90_next<SK>(p, walk, tiles, k_tiles, t, kt_begin, kt_end)) {
        int tm, tn;
        sm90_tile_coords(t, tiles_mc, p.tiles_n, group, tm, tn);
        tm = tm * cm + rank;
        const int m0 = tm * p.a_rows, n0 = tn * BN;
        const bool a_live = m0 < p.M;  // else the second block of a last, odd row of a pair
        for (int kt = kt_begin; kt < kt_end; ++kt) {
          mbar_wait(&empty[stage], phase ^ 1);
          uint8_t* const sa = smem + stage * Tile::STAGE_BYTES;
          uint8_t* const sb = sa + Tile::A_BYTES;
          // B's bytes arrive in full either way: with clusters, half from the other block (a
          // K-major B's two halves of B_HALF rows, which may overlap).
          mbar_arrive_expect_tx(&full[stage],
                                Tile::PARTS * ((a_live ? p.a_rows * 128 : 0) + b_bytes));
          const int k0 = kt * BK;
          if constexpr (X3) {
            // Both operands K-major, no clusters: the big parts, then the small ones.
            uint8_t* const small = sb + Tile::B_BYTES;
            tma_load_2d(sa, &map_a, &full[stage], k0, m0);
            tma_load_2d(sb, &map_b, &full[stage], k0, n0);
            tma_load_2d(small, &map_a, &full[stage], k0, p.a_small + m0);
            tma_load_2d(small + Tile::A_BYTES, &map_b, &full[stage], k0, p.b_small + n0);
          } else if (a_live) {
            if constexpr (A_K) {
              load_a(sa, k0, m0);  // a box of p.a_rows rows
            } else {
              for (int j = 0; j < p.a_rows / 64; ++j) {
                load_a(sa + j * Tile::ATOM_BYTES, m0 + 64 * j, k0);
              }
            }
          }
          if constexpr (X3) {
            // B's parts loaded above.
          } else if (cm > 1) {
            // This block's half of B, to both blocks: K-major, B_HALF rows from row
            // rank (BN - B_HALF); MN-major, the atom columns j = rank, rank + 2, ...
            if constexpr (B_K) {
              const int row = rank * (BN - Tile::B_HALF);
              tma_load_2d_multicast(sb + row * 128, &map_b, &full[stage], k0, n0 + row, 3);
            } else {
#pragma unroll
              for (int j = 0; j < BN / 64; ++j) {
                if (j % 2 != rank) continue;
                tma_load_2d_multicast(sb + j * Tile::ATOM_BYTES, &map_b, &full[stage], n0 + 64 * j,
                                      k0, 3);
              }
            }
          } else if constexpr (B_K) {
            load_b(sb, k0, n0);
          } else {
#pragma unroll
            for (int j = 0; j < BN / 64; ++j) {
              load_b(sb + j * Tile::ATOM_BYTES, n0 + 64 * j, k0);
            }
          }
          if (++stage == STAGES) {
            stage = 0;
            phase ^= 1;
          }
        }
      }
      // Every load issued: the kernel after this one (the split-K reduction, a dependent launch)
      // may be scheduled as blocks end; it waits for this grid's writes itself.
      cuda::pdl_release();
    }
  } else {  // consumers
    setmaxnreg_inc<232>();
    const int w = warpgroup - 1;  // rows BM / 2 w .. BM / 2 (w + 1) - 1 of the block tile
    const int warp = tid / 32, lane = tid % 32;
    float acc[SLABS][BN / 2];  // slab s: the consumer's rows 64 s .. 64 s + 63
#pragma unroll
    for (int s = 0; s < SLABS; ++s) {
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) acc[s][i] = 0.f;
    }
    // kSm90F32X3: one stage's sums (unused otherwise).
    float part[X3 ? BN / 2 : 1];
    int stage = 0;
    uint32_t phase = 0;
    // Shared-memory addresses taken once, outside the K loop, which only adds to them: the
    // barriers' (8 bytes a stage), and the low words of stage 0's wgmma descriptors (a
    // descriptor's address field counts 16 bytes and stays below 2^14 in a block's shared memory,
    // so a stage, a K step or a slab further is an add to it; the high word is the same for all).
    // A: each 64 rows of a consumer's slab are 64 K-major rows of 128 bytes, or one atom column:
    // both start ATOM_BYTES (SLABS w + s) into the stage. B: the whole stage part.
    const uint32_t full_addr = opaque_u32(smem_u32(full));
    const uint32_t empty_addr = opaque_u32(smem_u32(empty));
    const uint32_t stage0 = smem_u32(smem);
    // LBO (MN-major): the next atom column; SBO: 8 rows.
    const uint64_t desc_a0 =
        desc_sw128(stage0 + SLABS * w * Tile::ATOM_BYTES, A_K ? 16 : Tile::ATOM_BYTES, 1024);
    const uint64_t desc_b0 = desc_sw128(stage0 + Tile::A_BYTES, B_K ? 16 : Tile::ATOM_BYTES, 1024);
    const uint32_t desc_a_lo = opaque_u32(static_cast<uint32_t>(desc_a0));
    const uint32_t desc_b_lo = opaque_u32(static_cast<uint32_t>(desc_b0));
    const uint64_t desc_a_hi = desc_a0 >> 32 << 32, desc_b_hi = desc_b0 >> 32 << 32;
    // A K step: K-major, the next 16 K (8 for tf32) are 32 bytes along the (swizzled) row;
    // MN-major, 16 rows of 128 bytes further.
    constexpr uint32_t kStageDesc = Tile::STAGE_BYTES / 16;
    constexpr uint32_t kStepA = (A_K ? 32 : 2048) / 16, kStepB = (B_K ? 32 : 2048) / 16;
    constexpr uint32_t kSlabA = Tile::ATOM_BYTES / 16;
    // A stage goes back to the producer(s): one arrival per warp, on both blocks' `empty` in a
    // cluster of two.
    auto release = [&](int s) {
      if (lane != 0) return;
      mbar_arrive(empty_addr + 8 * s);
      if (cm > 1) mbar_arrive_cluster(empty_addr + 8 * s, rank ^ 1);
    };
    Sm90Walk walk = start;
    int t, kt_begin, kt_end;
    while (sm90_next<SK>(p, walk, tiles, k_tiles, t, kt_begin, kt_end)) {
      int tm, tn;
      sm90_tile_coords(t, tiles_mc, p.tiles_n, group, tm, tn);
      tm = tm * cm + rank;
      const int m0 = tm * p.a_rows, n0 = tn * BN;
      int held = -1;  // p.overlap: the stage the group still in flight may be reading
      for (int kt = kt_begin; kt < kt_end; ++kt) {
        mbar_wait(full_addr + 8 * stage, phase);
        if constexpr (X3) {
          // A: the consumer's 64 rows are 64 K-major rows of 128 bytes, starting ATOM_BYTES * w
          // into the stage. B: the whole stage part.
          const uint32_t a_addr = stage0 + stage * Tile::STAGE_BYTES + w * Tile::ATOM_BYTES;
          const uint32_t b_addr = stage0 + stage * Tile::STAGE_BYTES + Tile::A_BYTES;
          // The stage's three passes into sums of its own, from zero (smaller terms first), then
          // added to the float32 sums once they are done; the stage goes back meanwhile.
          constexpr uint32_t kSmall = Tile::A_BYTES + Tile::B_BYTES;
          wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < 4; ++kk) {
            const uint64_t da = desc_sw128(a_addr + 32 * kk, 16, 1024);
            const uint64_t db = desc_sw128(b_addr + 32 * kk, 16, 1024);
            const uint64_t da2 = desc_sw128(a_addr + kSmall + 32 * kk, 16, 1024);
            const uint64_t db2 = desc_sw128(b_addr + kSmall + 32 * kk, 16, 1024);
            WgmmaTf32<BN>::mma(part, da2, db, kk > 0 ? 1 : 0);
            WgmmaTf32<BN>::mma(part, da, db2, 1);
            WgmmaTf32<BN>::mma(part, da, db, 1);
          }
          wgmma_commit();
          wgmma_wait<0>();
#pragma unroll
          for (int i = 0; i < BN / 2; ++i) fence_operand(part[i]);
          release(stage);
          if (kt == kt_begin) {
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) acc[0][i] = part[i];
          } else {
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) acc[0][i] += part[i];
          }
          if (++stage == STAGES) {
            stage = 0;
            phase ^= 1;
          }
          continue;
        }
        wgmma_fence();
        const uint32_t stage_desc = static_cast<uint32_t>(stage) * kStageDesc;
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          const uint64_t db = desc_b_hi | (desc_b_lo + stage_desc + kk * kStepB);
          const int scale_d = (kt > kt_begin || kk > 0) ? 1 : 0;
#pragma unroll
          for (int s = 0; s < SLABS; ++s) {
            const uint64_t da = desc_a_hi | (desc_a_lo + stage_desc + kk * kStepA + s * kSlabA);
            if constexpr (F32) {
              WgmmaTf32<BN>::mma(acc[s], da, db, scale_d);
            } else {
              Wgmma<BN, DT == kSm90BF16>::template mma<A_K ? 0 : 1, B_K ? 0 : 1>(acc[s], da, db,
                                                                                 scale_d);
            }
          }
        }
        wgmma_commit();
        if (p.overlap) {
          // This step's group runs on while the last one's stage goes back to the producer (the
          // groups on one accumulator keep their order).
          wgmma_wait<1>();
          fence_all(acc);
          if (held >= 0) release(held);
          held = stage;
        } else {
          wgmma_wait<0>();
          fence_all(acc);
          release(stage);
        }
        if (++stage == STAGES) {
          stage = 0;
          phase ^= 1;
        }
      }
      if (p.overlap && !X3) {
        wgmma_wait<0>();
        fence_all(acc);
        if (held >= 0) release(held);
      }
      if (m0 >= p.M) continue;  // the second block of a last, odd row of a cluster's pair
      // The rows this consumer stores lie below m_lim: in 64-row tiles the second one stores none
      // (its rows lie past M, or are the next tile's; its sums come from rows no load wrote). A
      // limit, not a branch: a branch on the consumer here made ptxas serialize every wgmma
      // (C7518).
      const int m_lim = p.a_rows == 64 && w == 1 ? 0 : p.M;
      if constexpr (SK) {
        // Each consumer thread's sums at [element][thread] of a slice: coalesced.
        constexpr int CT = Tile::CONSUMERS * 128;
        const int slot = w * 128 + tid;
        if (kt_end < k_tiles) {
          // A part without the tile's last step (the block's first part): its sums to the block's
          // slice, then one count a consumer on its flag once all its threads have written.
          cuda::pdl_wait();  // the flags zeroed by the whole-tile kernel
          float* const mine = p.sk_partial + static_cast<int64_t>(blockIdx.x) * Tile::BM * BN;
#pragma unroll
          for (int i = 0; i < BN / 2; ++i) mine[i * CT + slot] = acc[0][i];
          named_barrier_sync(1 + w, 128);
          if (tid == 0) {
            __threadfence();
            atomicAdd(p.sk_flags + blockIdx.x, 1);
          }
          continue;
        }
        if (kt_begin > 0) {
          // The tile's last part, its range's first: the earlier parts are the first parts of the
          // blocks below, which they ran first; their sums added from the nearest back.
          cuda::pdl_wait();
          const int b0 = sk_range_of((t - p.sk_first) * k_tiles, sk_total, gridDim.x);
          for (int b = static_cast<int>(blockIdx.x) - 1; b >= b0; --b) {
            if (tid == 0) {
              while (ld_acquire_gpu(p.sk_flags + b) < Tile::CONSUMERS) {
              }
            }
            named_barrier_sync(1 + w, 128);
            const float* const part = p.sk_partial + static_cast<int64_t>(b) * Tile::BM * BN;
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) acc[0][i] += __ldcg(part + i * CT + slot);
          }
        }
      }
      if constexpr (X3) {
        // Outputs that came out non-finite, recomputed from the operands as given over this
        // item's K range (a warp's lanes go in only where one of them holds such an output).
        bool bad = false;
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) bad |= !isfinite(acc[0][i]);
        if (__any_sync(0xffffffffu, bad)) {
          const int k0 = kt_begin * BK, k1 = min(kt_end * BK, p.K);
          const int row = m0 + 64 * w + 16 * warp + lane / 4;
#pragma unroll
          for (int i = 0; i < BN / 2; ++i) {
            const int r = row + 8 * ((i / 2) % 2), col = n0 + 8 * (i / 4) + 2 * (lane % 4) + i % 2;
            if (!isfinite(acc[0][i]) && r < m_lim && col < p.N)
              acc[0][i] =
                  sm90_exact_dot(p.a + static_cast<int64_t>(r) * p.a_rs,
                                 p.b + static_cast<int64_t>(col) * p.b_cs, p.a_ks, p.b_ks, k0, k1);
          }
        }
      }
      // Epilogue: each slab's m64nBN accumulator fragment: per 8 columns j, a thread holds (row
      // r, columns c, c + 1) and (row r + 8, the same columns), r = 16 warp + lane / 4 (within
      // the slab's 64 rows), c = 8 j + 2 (lane % 4). each_pair(store): store(r, c, v0, v1) for
      // each such pair of the tile's elements whose row and first column lie inside M x N.
      auto each_pair = [&](auto&& store, auto j0) {
        const int col0 = n0 + 2 * (lane % 4);
#pragma unroll
        for (int s = 0; s < SLABS; ++s) {
          const int row = m0 + 64 * (SLABS * w + s) + 16 * warp + lane / 4;
#pragma unroll
          for (int j = decltype(j0)::value; j < BN / 8; ++j) {
            const int col = col0 + 8 * j;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int r = row + 8 * h;
              if (r < m_lim && col < p.N) {
                store(r, col, acc[s][4 * j + 2 * h], acc[s][4 * j + 2 * h + 1]);
              }
            }
          }
        }
      };
      // C's elements stored by each thread directly.
      auto direct = [&](int r, int col, float v0, float v1) {
        const bool second = col + 1 < p.N;
        if (p.c_trans) {
          const int64_t at = static_cast<int64_t>(col) * p.ldc + r;
          store_two<DT>(p.c, at, v0, 0.f, false, false);
          if (second) store_two<DT>(p.c, at + p.ldc, v1, 0.f, false, false);
          return;
        }
        store_two<DT>(p.c, static_cast<int64_t>(r) * p.ldc + col, v0, v1, p.pairs && second,
                      second);
      };
      if (p.splits > 1) {
        // A K split's partial tile: float32, to its slice, by direct stores (pairs where N is
        // even: every column this thread writes first is even).
        float* const slice =
            p.partial + static_cast<int64_t>(kt_begin / p.k_tiles_split) * p.M * p.N;
        each_pair(
            [&](int r, int col, float v0, float v1) {
              if (p.c_trans) {
                float* const dst = slice + static_cast<int64_t>(col) * p.M + r;
                dst[0] = v0;
                if (col + 1 < p.N) dst[p.M] = v1;
                return;
              }
              float* const dst = slice + static_cast<int64_t>(r) * p.N + col;
              if (p.N % 2 == 0) {
                *reinterpret_cast<float2*>(dst) = make_float2(v0, v1);
              } else {
                dst[0] = v0;
                if (col + 1 < p.N) dst[1] = v1;
              }
            },
            std::integral_constant<int, 0>{});
      } else if (Tile::C_STAGED && p.tma_store) {
        // Through shared memory, PASS_COLS columns at a time: 64-row boxes of 128-byte rows (CB
        // columns) in TMA's 128-byte swizzle (16-byte chunk index ^ row % 8: conflict-free for
        // this fragment), then one thread stores them with TMA (clipped at M and N) and the
        // warpgroup moves on to the next tile while the copy engine writes C.
        constexpr int CB = 128 / ELEM;
        constexpr int PASS_COLS = Tile::C_BOXES == 1 || BN % (2 * CB) != 0 ? CB
                                  : BN < 2 * CB                            ? BN
                                                                           : 2 * CB;
        constexpr int BOXES = PASS_COLS / CB, PASSES = BN / PASS_COLS;
        static_assert(BOXES <= Tile::C_BOXES, "a pass's boxes fit the staging buffer");
        uint8_t* const cs =
            smem + STAGES * Tile::STAGE_BYTES + w * Tile::C_BOXES * Tile::C_BOX_BYTES;
        const uint32_t cs_addr = smem_u32(cs);
        // Slab after slab (rows m_slab ..), each through the staging buffer in passes.
#pragma unroll
        for (int sp = 0; sp < SLABS * PASSES; ++sp) {
          const int s = sp / PASSES, pass = sp % PASSES;
          const int m_slab = m0 + 64 * (SLABS * w + s);
          if (tid == 0) bulk_wait_read<0>();  // the last store has read the staging buffer
          named_barrier_sync(1 + w, 128);
#pragma unroll
          for (int jj = 0; jj < PASS_COLS / 8; ++jj) {
            const int j = pass * (PASS_COLS / 8) + jj;
            const uint32_t col = 8 * jj + 2 * (lane % 4);           // within the pass
            const uint32_t box = col / CB, cb = (col % CB) * ELEM;  // byte within the box row
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const uint32_t r = 16 * warp + lane / 4 + 8 * h;
              const float v0 = acc[s][4 * j + 2 * h], v1 = acc[s][4 * j + 2 * h + 1];
              if constexpr (CT) {
                // C transposed (16-bit): the box's rows are the pass's columns, each 64 rows r of
                // 2 bytes (conflict-free: a warp's 8 rows r share a 16-byte chunk, its 4 columns
                // land on 4 chunks).
                const uint32_t rb = 2 * r, c_row = col % CB;
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                  const uint32_t row = c_row + e;
                  st_shared_u16(cs_addr + box * Tile::C_BOX_BYTES + row * 128 +
                                    (((rb >> 4) ^ (row & 7)) << 4) + (rb & 15),
                                pack1<DT == kSm90BF16>(e == 0 ? v0 : v1));
                }
                continue;
              }
              const uint32_t addr = cs_addr + box * Tile::C_BOX_BYTES + r * 128 +
                                    (((cb >> 4) ^ (r & 7)) << 4) + (cb & 15);
              if constexpr (F32) {
                st_shared_v2_f32(addr, v0, v1);
              } else {
                st_shared_u32(addr, pack2<DT == kSm90BF16>(v0, v1));
              }
            }
          }
          fence_proxy_async_smem();
          named_barrier_sync(1 + w, 128);
          if (tid == 0 && m_slab < m_lim) {
#pragma unroll
            for (int box = 0; box < BOXES; ++box) {
              const int col = n0 + PASS_COLS * pass + CB * box;
              if constexpr (CT) {  // map_c: C^T, rows of M (the kernel's N x M, row-major)
                tma_store_2d(&map_c, cs + box * Tile::C_BOX_BYTES, m_slab, col);
              } else {
                tma_store_2d(&map_c, cs + box * Tile::C_BOX_BYTES, col, m_slab);
              }
            }
            bulk_commit();
          }
        }
        // Columns past the last whole pass (BN not a multiple of it): stored directly.
        if constexpr (BN % PASS_COLS != 0) {
          each_pair(direct, std::integral_constant<int, PASSES * PASS_COLS / 8>{});
        }
      } else {
        each_pair(direct, std::integral_constant<int, 0>{});
      }
    }
    if (p.tma_store && tid == 0) bulk_wait<0>();  // C written before the block exits
  }
  // No block of a cluster leaves while the other may still arrive on its barriers or load into
  // its shared memory.
  if (cm > 1) cluster_sync_threads();
  // SK ends after the whole-tile kernel, whose stores of C the next kernel may read.
  if constexpr (SK) cuda::pdl_wait();
#endif  // LLTM_EXT_SM90A
}

// gemm_sm90_kernel's signature, and the kernel of a width of kWgmmaWideTiles (gemm_tc_plan.h) for
// DT and the operands' major-ness (gemm_kernels_sm90_wide.cu): nullptr for another width, or for
// tf32 with an operand that is not K-major; *smem gets its dynamic shared memory.
using Sm90KernelFn = void (*)(CUtensorMap, CUtensorMap, CUtensorMap, Sm90Params);
Sm90KernelFn wide_kernel(int bn, int dt, bool a_k, bool b_k, int* smem);

// The kernel of a 256-row tile of width bn (one of kWgmmaTallTiles) for DT (16-bit) and the
// operands' major-ness (gemm_kernels_sm90_tall.cu): nullptr for another width or type, or for 160
// with an N-major B; *smem gets its dynamic shared memory.
Sm90KernelFn tall_kernel(int bn, int dt, bool a_k, bool b_k, int* smem);

// The kernel that stores a 16-bit C transposed through TMA (CT) at a width of 64, 128, 192 or
// 256 for DT and A K-major, B N-major (the swapped operands of a.T @ b.T;
// gemm_kernels_sm90_trans.cu): nullptr for another width, type or layout; *smem gets its dynamic
// shared memory.
Sm90KernelFn trans_kernel(int bn, int dt, bool a_k, bool b_k, int* smem);

// The Stream-K kernel (SK) of the 256-wide tile for DT (16-bit or TF32) and the operands'
// major-ness (gemm_kernels_sm90_stream_k.cu): nullptr for tf32 with an operand not K-major.
Sm90KernelFn stream_k_kernel(int dt, bool a_k, bool b_k);

}  // namespace lltm_ext::gemm_tiles::sm90
