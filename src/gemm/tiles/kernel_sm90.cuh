// The Hopper tensor-core GEMM kernel for bfloat16 / float16 (float32 accumulation): TMA loads into
// a shared-memory ring, one producer warpgroup and two consumer warpgroups synchronized by
// mbarriers, wgmma on 128 x BN x 64 block tiles, persistent over the tiles. sm_90a only (an empty
// body elsewhere).
//
// Design:
//   - block tile BM x BN = 128 x BN (BN 256, 128 or 64), K steps of BK = 64 (128 bytes of 16-bit
//     elements: one 128-byte swizzle row); STAGES stages of A and B tiles in dynamic shared memory;
//   - warpgroup 0 is the producer: after giving registers back (setmaxnreg), one thread waits for
//     a free stage (`empty` barrier), announces its bytes on the stage's `full` barrier and issues
//     the TMA loads; out-of-bounds rows / columns (M, N, K tails) arrive as zeros;
//   - warpgroups 1 and 2 are consumers, each owning 64 rows of the block tile (64 x BN float32
//     accumulators, BN / 2 registers per thread): per stage, four wgmma m64nBNk16 straight from
//     shared memory, then a release of the stage (one arrival per warp);
//   - operands of either major-ness: a K-major operand is one box of (64 K) x rows; an M- / N-major
//     one is boxes of (64 M or N) x (64 K), each a 128-byte-swizzled atom column, read by wgmma
//     with its transpose bit set (16-bit types allow both);
//   - persistent: gridDim.x <= the SM count, each block walks tiles blockIdx.x, + gridDim.x, ...
//     in groups of GROUP_M tile rows (neighbours share A and B panels in L2); the producer runs
//     ahead into the next tile while the consumers store the last one;
//   - epilogue: accumulators converted to the output type, written to a shared staging buffer in
//     TMA's swizzled layout and stored by TMA, asynchronously (the next tile's main loop overlaps
//     the writes of C); where C's base or stride does not suit TMA, stored by each thread
//     directly (two elements, 4 bytes, where alignment allows), predicated on M and N.
#pragma once

#include <cuda.h>  // CUtensorMap (a type only: no driver call is made from this file)
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "gemm/tiles/sm90_ptx.cuh"
#if LLTM_EXT_SM90A
#include "gemm/tiles/sm90_wgmma.cuh"
#endif

namespace lltm_ext::gemm_tiles::sm90 {

// The shape and shared memory of the BN-wide block tile.
template <int BN_>
struct Sm90Tile {
  static constexpr int BM = 128, BN = BN_, BK = 64;
  static constexpr int CONSUMERS = 2;  // consumer warpgroups, 64 rows each
  static constexpr int THREADS = 128 * (CONSUMERS + 1);
  static constexpr int STAGES = BN == 256 ? 4 : BN == 128 ? 6 : 8;  // 192 KB
  static constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2;
  static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
  static constexpr int ATOM_BYTES = 64 * 128;  // one (64 MN) x (64 K) swizzle-atom column
  // C staging for the TMA-store epilogue: per consumer, 64 rows x 128 columns (two 64 x 64 boxes).
  static constexpr int C_BOX_BYTES = 64 * 128, C_BYTES = CONSUMERS * 2 * C_BOX_BYTES;
  static constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + C_BYTES + 1024;  // + align to 1024
  static constexpr int GROUP_M = 8;
  static_assert(BN == 64 || BN == 128 || BN == 256, "wgmma tiles are 64, 128 or 256 wide");
};

// What the kernel needs besides the two tensor maps. C is row-major with leading dimension ldc.
struct Sm90Params {
  void* c;
  int M, N, K;
  int64_t ldc;
  int tiles_m, tiles_n;
  bool tma_store;  // C through shared memory and map_c (base 16-byte aligned, ldc % 8 == 0)
  bool pairs;      // else direct stores; C's base 4-byte aligned and ldc even: two per store
};

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

template <bool BF16>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (BF16) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

template <bool BF16>
__device__ __forceinline__ uint16_t pack1(float x) {
  if constexpr (BF16) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  } else {
    return __half_as_ushort(__float2half_rn(x));
  }
}

// C = A B for 16-bit A (M x K) and B (K x N) described by map_a / map_b (A_K: A is K-major, its
// map's dims (K, M), else (M, K); B_K: B is K-major, dims (K, N), else (N, K)); C in the same
// type. 384 threads, Sm90Tile<BN>::SMEM_BYTES of dynamic shared memory, gridDim.x <= tiles.
template <int BN, bool BF16, bool A_K, bool B_K>
__global__ void __launch_bounds__(384, 1)
    gemm_sm90_kernel(const __grid_constant__ CUtensorMap map_a,
                     const __grid_constant__ CUtensorMap map_b,
                     const __grid_constant__ CUtensorMap map_c, const Sm90Params p) {
#if LLTM_EXT_SM90A
  using Tile = Sm90Tile<BN>;
  constexpr int BM = Tile::BM, BK = Tile::BK, STAGES = Tile::STAGES;
  // Static shared memory: only this (sm_90a) body has it, which is how the host tells the loaded
  // image from the other architectures' empty stubs (gemm_kernels_sm90.cu, sm90_image_loaded).
  __shared__ uint64_t full[STAGES], empty[STAGES];
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw_addr = smem_u32(smem_raw);
  uint8_t* const smem = smem_raw + ((1024 - (raw_addr & 1023)) & 1023);  // 1024-aligned stages

  const int warpgroup = threadIdx.x / 128;
  const int tid = threadIdx.x % 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], Tile::CONSUMERS * 4);
    }
    mbar_init_fence();
  }
  __syncthreads();

  const int tiles = p.tiles_m * p.tiles_n;
  const int k_tiles = (p.K + BK - 1) / BK;

  if (warpgroup == 0) {  // producer
    setmaxnreg_dec<40>();
    if (tid == 0) {
      prefetch_tensor_map(&map_a);
      prefetch_tensor_map(&map_b);
      int stage = 0;
      uint32_t phase = 0;
      for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        int tm, tn;
        sm90_tile_coords(t, p.tiles_m, p.tiles_n, Tile::GROUP_M, tm, tn);
        const int m0 = tm * BM, n0 = tn * BN;
        for (int kt = 0; kt < k_tiles; ++kt) {
          mbar_wait(&empty[stage], phase ^ 1);
          uint8_t* const sa = smem + stage * Tile::STAGE_BYTES;
          uint8_t* const sb = sa + Tile::A_BYTES;
          mbar_arrive_expect_tx(&full[stage], Tile::STAGE_BYTES);
          const int k0 = kt * BK;
          if constexpr (A_K) {
            tma_load_2d(sa, &map_a, &full[stage], k0, m0);
          } else {
#pragma unroll
            for (int j = 0; j < BM / 64; ++j) {
              tma_load_2d(sa + j * Tile::ATOM_BYTES, &map_a, &full[stage], m0 + 64 * j, k0);
            }
          }
          if constexpr (B_K) {
            tma_load_2d(sb, &map_b, &full[stage], k0, n0);
          } else {
#pragma unroll
            for (int j = 0; j < BN / 64; ++j) {
              tma_load_2d(sb + j * Tile::ATOM_BYTES, &map_b, &full[stage], n0 + 64 * j, k0);
            }
          }
          if (++stage == STAGES) {
            stage = 0;
            phase ^= 1;
          }
        }
      }
    }
  } else {  // consumers
    setmaxnreg_inc<232>();
    const int w = warpgroup - 1;  // rows 64 w .. 64 w + 63 of the block tile
    const int warp = tid / 32, lane = tid % 32;
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;
    int stage = 0;
    uint32_t phase = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
      int tm, tn;
      sm90_tile_coords(t, p.tiles_m, p.tiles_n, Tile::GROUP_M, tm, tn);
      const int m0 = tm * BM, n0 = tn * BN;
      for (int kt = 0; kt < k_tiles; ++kt) {
        mbar_wait(&full[stage], phase);
        // A: the consumer's 64 rows are 64 K-major rows of 128 bytes, or one atom column: both
        // start ATOM_BYTES * w into the stage. B: the whole stage part.
        const uint32_t a_addr = smem_u32(smem + stage * Tile::STAGE_BYTES) + w * Tile::ATOM_BYTES;
        const uint32_t b_addr = smem_u32(smem + stage * Tile::STAGE_BYTES + Tile::A_BYTES);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
          // K-major: the next 16 K are 32 bytes along the (swizzled) row; MN-major: 16 rows of
          // 128 bytes further. LBO (MN-major): the next atom column; SBO: the next 8 rows.
          const uint64_t da =
              desc_sw128(a_addr + (A_K ? 32 * kk : 2048 * kk), A_K ? 16 : Tile::ATOM_BYTES, 1024);
          const uint64_t db =
              desc_sw128(b_addr + (B_K ? 32 * kk : 2048 * kk), B_K ? 16 : Tile::ATOM_BYTES, 1024);
          Wgmma<BN, BF16>::template mma<A_K ? 0 : 1, B_K ? 0 : 1>(acc, da, db,
                                                                  (kt > 0 || kk > 0) ? 1 : 0);
        }
        wgmma_commit();
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) fence_operand(acc[i]);
        if (lane == 0) mbar_arrive(&empty[stage]);
        if (++stage == STAGES) {
          stage = 0;
          phase ^= 1;
        }
      }
      // Epilogue: the m64nBN accumulator fragment: per 8 columns j, a thread holds (row r,
      // columns c, c + 1) and (row r + 8, the same columns), r = 16 warp + lane / 4,
      // c = 8 j + 2 (lane % 4).
      if (p.tma_store) {
        // Through shared memory, 128 columns at a time: two 64 x 64 boxes in TMA's 128-byte
        // swizzle (16-byte chunk index ^ row % 8: conflict-free for this fragment), then one
        // thread stores them with TMA (clipped at M and N) and the warpgroup moves on to the
        // next tile while the copy engine writes C.
        constexpr int BOXES = BN == 64 ? 1 : 2, HALVES = BN == 256 ? 2 : 1;
        uint8_t* const cs = smem + STAGES * Tile::STAGE_BYTES + w * 2 * Tile::C_BOX_BYTES;
        const uint32_t cs_addr = smem_u32(cs);
#pragma unroll
        for (int half = 0; half < HALVES; ++half) {
          if (tid == 0) bulk_wait_read<0>();  // the last store has read the staging buffer
          named_barrier_sync(1 + w, 128);
#pragma unroll
          for (int jj = 0; jj < BOXES * 8; ++jj) {
            const int j = half * 16 + jj;
            const uint32_t box = jj / 8, cb = ((jj % 8) * 8 + 2 * (lane % 4)) * 2;  // row byte
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const uint32_t r = 16 * warp + lane / 4 + 8 * h;
              const uint32_t off =
                  box * Tile::C_BOX_BYTES + r * 128 + (((cb >> 4) ^ (r & 7)) << 4) + (cb & 15);
              st_shared_u32(cs_addr + off, pack2<BF16>(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]));
            }
          }
          fence_proxy_async_smem();
          named_barrier_sync(1 + w, 128);
          if (tid == 0) {
#pragma unroll
            for (int box = 0; box < BOXES; ++box) {
              tma_store_2d(&map_c, cs + box * Tile::C_BOX_BYTES, n0 + 128 * half + 64 * box,
                           m0 + 64 * w);
            }
            bulk_commit();
          }
        }
      } else {
        uint16_t* const c = static_cast<uint16_t*>(p.c);
        const int row = m0 + 64 * w + 16 * warp + lane / 4;
        const int col0 = n0 + 2 * (lane % 4);
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
          const int col = col0 + 8 * j;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = row + 8 * h;
            const float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
            if (r < p.M && col < p.N) {
              uint16_t* const dst = c + static_cast<int64_t>(r) * p.ldc + col;
              if (p.pairs && col + 1 < p.N) {
                *reinterpret_cast<uint32_t*>(dst) = pack2<BF16>(v0, v1);
              } else {
                dst[0] = pack1<BF16>(v0);
                if (col + 1 < p.N) dst[1] = pack1<BF16>(v1);
              }
            }
          }
        }
      }
    }
    if (p.tma_store && tid == 0) bulk_wait<0>();  // C written before the block exits
  }
#endif  // LLTM_EXT_SM90A
}

}  // namespace lltm_ext::gemm_tiles::sm90
