// The sequence's time steps on tiles of many batch rows (device code; tiled/tiled.cu plans
// and launches them): a persistent kernel over the GPU, each block keeping its slice of W_h in
// shared memory for all T steps and computing a tile of 16 mt batch rows x `cols` state columns
// per step on the tensor cores, x streamed from L2 through a cp.async ring; one barrier per step
// over each row of blocks. For the states and batches that the wide-state kernels' 16-row blocks
// cannot cover at once: states past 1024, and large batches of mid-size states.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/cuda_kernel.cuh"
#include "common/mma_sync.cuh"
#include "lltm_sequence/sequence_launchers.h"
#include "lltm_sequence/sequence_mma.cuh"
#include "lltm_sequence/sequence_row_barrier.cuh"
#include "lltm_sequence/sequence_step.cuh"

namespace lltm_ext::lltm {
namespace {  // included by one file only (tiled/tiled.cu)

// A block: kTiledThreads threads, 16 mt batch rows (mt = 1, 2, 4 or 8 m-tiles) x `cols` state
// columns (kTiledMinCols .. kTiledMaxCols). Its slice of W_h stays in shared memory, [output][k]
// (k-contiguous, zeros from K to the row's end): forward the 3 cols rows of its columns' three
// gates (K = S), backward the cols columns W_h[:, cols] (K = 3S). A step's product out[r][o] =
// sum_k x[r][k] w[o][k] runs as mma.sync m16n8k8 tiles (sequence_mma.cuh's fragments): warp w owns
// m-tile w % mt and the k-part w / mt of 8 / mt parts, all the slice's n-tiles of 8 outputs; the
// parts' sums meet in shared memory, where one thread per (row, column) of the tile adds them for
// its gate math. x (h_{t-1} forward, d_gates[t+1] backward, written the step before by the blocks
// of this row) is read from `xbuf`, float rows of a stride that keeps 16-byte copies aligned, which
// the gate math of the step before wrote: kTiledChunk / mt k of the block's rows a stage, copied
// by cp.async.cg (L2 only: L1 is not coherent across SMs) `stages` - 1 chunks ahead of the mma.
constexpr int kTiledThreads = 256, kTiledWarps = 8;
constexpr int kTiledChunk = 256;  // k per stage x m-tiles: each warp's part of a stage is 4 k steps
static_assert(kTiledChunk / kTiledWarps / 8 == kMmaChains,
              "a warp's part of a stage is one k step per chain of mma_chains");
constexpr int kTiledMinCols = 4, kTiledMaxCols = 24;
// n-tiles of eight outputs at most: forward 3 cols, backward cols.
constexpr int kTiledForwardTiles = (3 * kTiledMaxCols + 7) / 8;
constexpr int kTiledBackwardTiles = (kTiledMaxCols + 7) / 8;
// Gate-math elements per thread at most: a tile's 16 mt x cols <= kTiledElements x kTiledThreads
// (each element's operands are read into registers a step ahead).
constexpr int kTiledElements = 8;

// Row stride, in floats, of the slice: K rounded up to 32, plus 4 (rows 4 banks apart: the B
// fragments' lanes 4 g + t hit 32 banks).
LLTM_EXT_HD int tiled_ws(int k) {
  return (k + 31) / 32 * 32 + 4;
}

// A stage of the ring: 16 mt rows of kTiledChunk / mt k, plus four (the A fragments' lanes hit 32
// banks; rows stay 16-byte aligned).
LLTM_EXT_HD int tiled_stage_floats(int mt) {
  return 16 * mt * (kTiledChunk / mt + 4);
}

// The ring, which after the product holds the parts' sums [8 / mt parts][16 mt rows][ps]
// (mma_sums_stride(n_out)): the larger of the two.
LLTM_EXT_HD int tiled_region_floats(int mt, int stages, int n_out) {
  const int ring = stages * tiled_stage_floats(mt);
  const int sums = kTiledWarps * 16 * mma_sums_stride(n_out);
  return ring > sums ? ring : sums;
}

LLTM_EXT_HD int64_t tiled_smem_floats(int k, int n_out, int mt, int stages) {
  return static_cast<int64_t>(n_out) * tiled_ws(k) + tiled_region_floats(mt, stages, n_out);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900

__device__ __forceinline__ uint32_t tiled_shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes from global src (read through L2 only) to shared dst, of which the first src_bytes
// (16 or 0) are read and the rest zero-filled.
__device__ __forceinline__ void tiled_copy16(uint32_t dst, const float* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}

__device__ __forceinline__ void tiled_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}

template <int N>
__device__ __forceinline__ void tiled_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Until at most `pending` (0 .. kTiledMaxStages - 2) of this thread's copy groups are still in
// flight.
__device__ __forceinline__ void tiled_wait(int pending) {
  static_assert(kTiledMaxStages == 8, "a case per pending count");
  switch (pending) {
    case 6:
      tiled_wait_group<6>();
      break;
    case 5:
      tiled_wait_group<5>();
      break;
    case 4:
      tiled_wait_group<4>();
      break;
    case 3:
      tiled_wait_group<3>();
      break;
    case 2:
      tiled_wait_group<2>();
      break;
    case 1:
      tiled_wait_group<1>();
      break;
    default:
      tiled_wait_group<0>();
      break;
  }
}

// log2 of the tile's m-tiles (1, 2, 4 or 8): their multiples and quotients as shifts.
__device__ __forceinline__ int tiled_mt_log(int mt) {
  return mt == 8 ? 3 : mt == 4 ? 2 : mt == 2 ? 1 : 0;
}

// A step's product for this block: the parts' sums of out[r][o] = sum_k x[r][k] w[o][k] into
// `sums` ([8 / mt][16 mt][ps], over the ring `region`) for rows r < rows of x (xbuf rows of stride
// xld, zeros past K; rows past `rows` read as zeros) and the slice's n_out outputs (w: stride ws,
// product_operand<P> values, zeros from K on). P: one TF32 pass (x rounded to tf32 as its
// fragments are read) or three (3xTF32, sequence_mma.cuh: each k step's passes summed from zero,
// then added on the SIMT cores). Ends with the sums in place for every thread.
template <int NT, Product P>
__device__ __forceinline__ void tiled_product(const float* x, int64_t xld, int rows, int K, int mt,
                                              const float* w, int ws, int n_out, float* region,
                                              int stages, int ps) {
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  // mt is a power of two: so are the chunk and its pieces per row (shifts, not divisions)
  const int mt_log = tiled_mt_log(mt);
  const int kc_log = 8 - mt_log, kc = 1 << kc_log, xs = kc + 4, stage = 16 * mt * xs;
  static_assert(kTiledChunk == 1 << 8, "kc = kTiledChunk / mt = 2^kc_log");
  const int quads_log = kc_log - 2;  // kc / 4 pieces of four k a row
  const int mw = warp & (mt - 1), kp = warp >> mt_log, n_tiles = (n_out + 7) / 8;
  const int chunks = (K + kc - 1) >> kc_log;
  const uint32_t ring = tiled_shared_address(region);
  // Chunk c into `slot` (c % stages, counted along, not divided): 16 mt rows x kc / 4 pieces of 16
  // bytes, 1024 in all, four a thread: piece q of rows r0, r0 + 4 mt, r0 + 8 mt and r0 + 12 mt
  // (tid + i kTiledThreads, kTiledThreads a multiple of kc / 4); pieces past the rows or the row
  // stride (K rounded up to 4) are zero-filled.
  static_assert(kTiledThreads % (kTiledChunk / 4) == 0, "a thread's pieces share their column");
  const auto issue = [&](int c, int slot) {
    if (c < chunks) {
      const int q = tid & ((1 << quads_log) - 1), r0 = tid >> quads_log, r_step = 4 * mt;
      const float* x_piece = x + r0 * xld + 4 * q;
      const int64_t x_step = r_step * xld;
      const uint32_t ring_piece = ring + 4 * (r0 * xs + 4 * q), ring_step = 4 * r_step * xs;
      const int64_t k = static_cast<int64_t>(c) * kc;
      const bool k_in = k + 4 * q < xld;
      const uint32_t dst = ring_piece + 4 * slot * stage;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const bool in = k_in && r0 + i * r_step < rows;
        tiled_copy16(dst + i * ring_step, in ? x_piece + i * x_step + k : x, in ? 16 : 0);
      }
    }
    tiled_commit();  // an empty group past the last chunk: the waits below count groups
  };
  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  }
  const int a_off = (mw * 16 + g) * xs + t;
  for (int c = 0; c < stages - 1; ++c) {
    issue(c, c);
  }
  // chunk c's slot, and the slot that chunk c - 1 was read from (chunk c + stages - 1's)
  int slot = 0, freed = stages - 1;
  for (int c = 0; c < chunks; ++c) {
    tiled_wait(stages - 2);  // chunk c has landed (this thread's copies) ...
    __syncthreads();         // ... everyone's; and slot `freed` is read by all
    issue(c + stages - 1, freed);
    // This warp's four k steps of the chunk: their A fragments first (zeros past K), then, n-tile
    // by n-tile, four independent chains of mma (each k step's sums from zero), added to acc on
    // the SIMT cores: the four chains hide each other's latency (an n-tile's chains behind a
    // run-time bound cannot interleave with the next n-tile's).
    const float* st = region + slot * stage + a_off;
    freed = slot;
    slot = slot + 1 == stages ? 0 : slot + 1;
    const int k0 = c * kc + kp * 32;
    uint32_t a_big[kMmaChains][4], a_small[kMmaChains][4];
#pragma unroll
    for (int i = 0; i < kMmaChains; ++i) {
      const int kl = kp * 32 + 8 * i;
      const bool in = k0 + 8 * i < K;  // warp-uniform
      const float av[4] = {in ? st[kl] : 0.0f, in ? st[kl + 8 * xs] : 0.0f, in ? st[kl + 4] : 0.0f,
                           in ? st[kl + 8 * xs + 4] : 0.0f};
      mma_split_a<P>(av, a_big[i], a_small[i]);
    }
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      if (j < n_tiles) {  // warp-uniform
        // outputs past n_out repeat the last (their sums are never read)
        const float* wr = w + min(j * 8 + g, n_out - 1) * ws + t;
        float b0[kMmaChains], b1[kMmaChains];
#pragma unroll
        for (int i = 0; i < kMmaChains; ++i) {
          const int k = k0 + 8 * i;
          const bool in = k < K;  // past K the slice may end: its zeros are not read
          b0[i] = in ? wr[k] : 0.0f;
          b1[i] = in ? wr[k + 4] : 0.0f;
        }
        mma_chains<P>(acc[j], a_big, a_small, b0, b1);
      }
    }
  }
  tiled_wait(0);
  __syncthreads();  // every warp done with the ring: it takes the sums
  float* out = region + (kp * 16 * mt + mw * 16 + g) * ps + 2 * t;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    if (j < n_tiles) {
      *reinterpret_cast<float2*>(out + j * 8) = make_float2(acc[j][0], acc[j][1]);
      *reinterpret_cast<float2*>(out + 8 * ps + j * 8) = make_float2(acc[j][2], acc[j][3]);
    }
  }
  __syncthreads();
}

// Output o of tile row r: the sum of the 8 / mt parts (region as tiled_product left it); mt =
// 2^mt_log (shifts: no division a step).
__device__ __forceinline__ float tiled_sum(const float* sums, int ps, int mt_log, int r, int o) {
  const float* p = sums + r * ps + o;
  float s = 0.0f;
  for (int part = 0; part < kTiledWarps >> mt_log; ++part) {
    s += p[(part * 16 * ps) << mt_log];
  }
  return s;
}

// A block's place and layout: its tile (m-tiles, columns), rows [row0, row0 + rows) of the batch
// and columns [s0, s0 + cols) of the state; its slice (n_out rows of stride ws) at the start of
// shared memory, then the ring (the partial sums after each product, row stride ps); x's rows (K
// each, xld apart) in xbuf.
struct TiledBlock {
  int mt, cols, n_out, ws, ps, s0, rows;
  int64_t xld, n, row0;
  float *slice, *region;
};
__device__ __forceinline__ TiledBlock tiled_block(const TiledShape& shape, int k, int n_out,
                                                  int64_t batch, int state) {
  extern __shared__ float4 tiled_smem[];
  TiledBlock tb;
  tb.mt = shape.mt;
  tb.cols = shape.cols;
  tb.n_out = n_out;
  tb.ws = tiled_ws(k);
  tb.ps = mma_sums_stride(n_out);
  tb.s0 = static_cast<int>(blockIdx.x) * shape.cols;
  tb.xld = (k + 3) / 4 * 4;
  tb.n = batch * state;
  tb.row0 = blockIdx.y * 16LL * shape.mt;
  tb.rows = static_cast<int>(batch - tb.row0 < 16 * tb.mt ? batch - tb.row0 : 16 * tb.mt);
  tb.slice = reinterpret_cast<float*>(tiled_smem);
  tb.region = tb.slice + n_out * tb.ws;
  return tb;
}

// This thread's share of the tile (16 mt rows x cols, row-major; element i is tid + i x
// kTiledThreads): each element's row and column in the tile, packed as row x 256 + column, and a
// bit per element that lies inside the tile, the batch and the state. Made once a launch (the
// divisions by cols), so that a step spends no instructions on finding its elements.
struct TiledShare {
  int rc[kTiledElements];
  unsigned int mine;
};
__device__ __forceinline__ TiledShare tiled_share(int cols, int mt, int64_t row0, int s0,
                                                  int64_t batch, int state) {
  static_assert(kTiledMaxCols < 256 && kTiledElements <= 32, "a column fits in 8 bits");
  TiledShare share;
  share.mine = 0;
#pragma unroll
  for (int i = 0; i < kTiledElements; ++i) {
    const int e = static_cast<int>(threadIdx.x) + i * kTiledThreads, r = e / cols, c = e % cols;
    share.rc[i] = r * 256 + c;
    if (r < 16 * mt && row0 + r < batch && s0 + c < state) {
      share.mine |= 1u << i;
    }
  }
  return share;
}

// Element i of this thread's share: its place, and whether it exists.
struct TiledElement {
  bool mine;
  int r, c;
  int64_t b;
  int s;
};
__device__ __forceinline__ TiledElement tiled_element(const TiledShare& share, int i, int64_t row0,
                                                      int s0) {
  TiledElement el;
  el.mine = (share.mine >> i) & 1u;
  el.r = share.rc[i] >> 8;
  el.c = share.rc[i] & 255;
  el.b = row0 + el.r;
  el.s = s0 + el.c;
  return el;
}

#endif  // __CUDA_ARCH__ == 900

// Steps 0 .. steps - 1 forward, as wide_forward_kernel (wide/wide_kernels.cuh) computes them;
// h_{t-1} from xbuf[t % 2] ((2, batch, xld) floats: h0 there before the launch, zeros past S),
// h_t into xbuf[(t + 1) % 2] as the gate math writes it (the value stored in output, as float).
template <typename scalar_t, Product P>
__global__ void __launch_bounds__(kTiledThreads, 1)
    tiled_forward_kernel(scalar_t* __restrict__ gates, const scalar_t* __restrict__ bias,
                         const scalar_t* __restrict__ c0, const scalar_t* __restrict__ w,
                         int64_t ld, scalar_t* __restrict__ output, scalar_t* __restrict__ cells,
                         float* __restrict__ xbuf, unsigned int* __restrict__ flags, int64_t batch,
                         int state, int64_t steps, TiledShape shape) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900
  const TiledBlock tb = tiled_block(shape, state, 3 * shape.cols, batch, state);
  const int mt = tb.mt, C = tb.cols, n_out = tb.n_out, ws = tb.ws, ps = tb.ps, s0 = tb.s0;
  const int64_t xld = tb.xld, n = tb.n, row0 = tb.row0;
  float *sw = tb.slice, *region = tb.region;
  // The slice: row o = q C + c holds W_h[q S + s0 + c][k], k < S.
  for (int e = threadIdx.x; e < n_out * ws; e += kTiledThreads) {
    const int o = e / ws, k = e % ws, q = o / C, c = o % C;
    sw[e] = k < state && s0 + c < state
                ? product_operand<P>(
                      static_cast<float>(w[(static_cast<int64_t>(q) * state + s0 + c) * ld + k]))
                : 0.0f;
  }
  const TiledShare share = tiled_share(C, mt, row0, s0, batch, state);
  const int mt_log = tiled_mt_log(mt);
  float carried[kTiledElements];  // c_{t-1} of each element
#pragma unroll
  for (int i = 0; i < kTiledElements; ++i) {
    const TiledElement el = tiled_element(share, i, row0, s0);
    carried[i] = el.mine && c0 != nullptr ? static_cast<float>(c0[el.b * state + el.s]) : 0.0f;
  }
  __syncthreads();  // the slice is in place
  for (int64_t t = 0; t < steps; ++t) {
    float projection[kTiledElements][3];  // read before the wait: in flight during the product
#pragma unroll
    for (int i = 0; i < kTiledElements; ++i) {
      const TiledElement el = tiled_element(share, i, row0, s0);
      projection[i][0] = projection[i][1] = projection[i][2] = 0.0f;
      if (el.mine) {
        read_gates(gates + t * 3 * n + el.b * 3 * state + el.s, state, projection[i]);
      }
    }
    if (t > 0) {
      row_wait(flags, static_cast<unsigned int>(t));  // h_{t-1} written by this row of blocks
    }
    tiled_product<kTiledForwardTiles, P>(xbuf + ((t % 2) * batch + row0) * xld, xld, tb.rows, state,
                                         mt, sw, ws, n_out, region, shape.stages, ps);
    float* h_next = xbuf + ((t + 1) % 2) * batch * xld;
#pragma unroll
    for (int i = 0; i < kTiledElements; ++i) {
      const TiledElement el = tiled_element(share, i, row0, s0);
      if (el.mine) {
        float pre[3], b3[3];
        gate_bias(bias, state, el.s, b3);
#pragma unroll
        for (int q = 0; q < 3; ++q) {
          pre[q] = tiled_sum(region, ps, mt_log, el.r, q * C + el.c) + projection[i][q];
        }
        const auto r = forward_step<scalar_t>(pre, b3, carried[i]);
        const int64_t j = el.b * state + el.s;
        output[t * n + j] = r.h;
        cells[t * n + j] = r.c;
        write_gates(gates + t * 3 * n + el.b * 3 * state + el.s, state, r.saved);
        h_next[el.b * xld + el.s] = static_cast<float>(r.h);
        carried[i] = static_cast<float>(r.c);
      }
    }
    // h_t written; the region is rewritten after the next step's wait, whose block barrier every
    // thread passes first.
    if (t + 1 < steps) {
      row_arrive(flags, static_cast<unsigned int>(t + 1));
    }
  }
#else
  __trap();
#endif
}

// Steps steps - 1 down to 0 backward, as wide_backward_kernel computes them; d_gates[t + 1] from
// xbuf[(t + 1) % 2] ((2, batch, xld) floats, zeros past 3S), d_gates[t] into xbuf[t % 2] as the
// gate math writes it. d_cell (B, S) gets dL/dc_0.
template <typename scalar_t, Product P>
__global__ void __launch_bounds__(kTiledThreads, 1)
    tiled_backward_kernel(scalar_t* __restrict__ d_gates, const scalar_t* __restrict__ w,
                          int64_t ld, const scalar_t* __restrict__ grad_output,
                          const scalar_t* __restrict__ grad_h_n,
                          const scalar_t* __restrict__ grad_c_n, const scalar_t* __restrict__ cells,
                          const scalar_t* __restrict__ gates, const scalar_t* __restrict__ bias,
                          scalar_t* __restrict__ d_cell, float* __restrict__ xbuf,
                          unsigned int* __restrict__ flags, int64_t batch, int state, int64_t steps,
                          TiledShape shape) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900
  const int width = 3 * state;
  const TiledBlock tb = tiled_block(shape, width, shape.cols, batch, state);
  const int mt = tb.mt, C = tb.cols, n_out = tb.n_out, ws = tb.ws, ps = tb.ps, s0 = tb.s0;
  const int64_t xld = tb.xld, n = tb.n, row0 = tb.row0;
  float *sw = tb.slice, *region = tb.region;
  // The slice: row c holds W_h[k][s0 + c], k < 3S (consecutive threads: consecutive columns).
  for (int e = threadIdx.x; e < n_out * ws; e += kTiledThreads) {
    const int k = e / C, c = e % C;
    sw[c * ws + k] =
        k < width && s0 + c < state
            ? product_operand<P>(static_cast<float>(w[static_cast<int64_t>(k) * ld + s0 + c]))
            : 0.0f;
  }
  const TiledShare share = tiled_share(C, mt, row0, s0, batch, state);
  const int mt_log = tiled_mt_log(mt);
  float carried[kTiledElements];  // dL/dc_t of each element
#pragma unroll
  for (int i = 0; i < kTiledElements; ++i) {
    const TiledElement el = tiled_element(share, i, row0, s0);
    carried[i] =
        el.mine && grad_c_n != nullptr ? static_cast<float>(grad_c_n[el.b * state + el.s]) : 0.0f;
  }
  __syncthreads();  // the slice is in place
  const int64_t last = steps - 1;
  for (int64_t t = last; t >= 0; --t) {
    const bool first = t == last;                // the sequence's last step: no step after it
    BackwardOperands<float> op[kTiledElements];  // read before the wait
#pragma unroll
    for (int i = 0; i < kTiledElements; ++i) {
      const TiledElement el = tiled_element(share, i, row0, s0);
      op[i] = {};
      if (el.mine) {
        float b3[3];
        gate_bias(bias, state, el.s, b3);
        const int64_t j = el.b * state + el.s;
        op[i] = backward_operands(gates + t * 3 * n + el.b * width + el.s, state, b3,
                                  grad_output + t * n + j, grad_h_n, j, first, cells + t * n + j);
      }
    }
    if (!first) {
      // d_gates[t + 1] written by this row of blocks
      row_wait(flags, static_cast<unsigned int>(last - t));
      tiled_product<kTiledBackwardTiles, P>(xbuf + (((t + 1) % 2) * batch + row0) * xld, xld,
                                            tb.rows, width, mt, sw, ws, n_out, region, shape.stages,
                                            ps);
    }
    float* dg_here = xbuf + (t % 2) * batch * xld;
#pragma unroll
    for (int i = 0; i < kTiledElements; ++i) {
      const TiledElement el = tiled_element(share, i, row0, s0);
      if (el.mine) {
        if (!first) {
          op[i].grad_h += tiled_sum(region, ps, mt_log, el.r, el.c);
        }
        const auto r = backward_step<scalar_t>(op[i], carried[i]);
        write_gates(d_gates + t * 3 * n + el.b * width + el.s, state, r.d_z);
#pragma unroll
        for (int q = 0; q < 3; ++q) {
          dg_here[el.b * xld + q * state + el.s] = static_cast<float>(r.d_z[q]);
        }
        if (t == 0) {
          d_cell[el.b * state + el.s] = r.d_cell;
        }
        carried[i] = static_cast<float>(r.d_cell);
      }
    }
    if (t > 0) {  // d_gates[t] written; the region is rewritten after the next step's wait
      row_arrive(flags, static_cast<unsigned int>(last - t + 1));
    }
  }
#else
  __trap();
#endif
}

}  // namespace
}  // namespace lltm_ext::lltm
