// The sequence's time steps for wide states (256 < S <= kWideMaxState, where a whole W_h fits in
// no SM's shared memory but fits in all of them together), device code: a persistent kernel over
// the GPU, each block keeping its slice of W_h on chip for all T steps, one barrier per step over
// each row of blocks; and the shared-memory layouts the host side sizes. wide/wide.cu
// plans and launches them.
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/cuda_kernel.cuh"
#include "lltm_sequence/sequence_launchers.h"
#include "lltm_sequence/sequence_loads.cuh"
#include "lltm_sequence/sequence_mma.cuh"
#include "lltm_sequence/sequence_row_barrier.cuh"
#include "lltm_sequence/sequence_step.cuh"

namespace lltm_ext::lltm {
namespace {  // included by one file only (wide/wide.cu)

// A block owns kWideRows batch rows x C state columns (C = 4, 8 or 16, the fewest whose grid runs
// at once on the GPU: one cooperative launch for all T steps). Its slice of W_h stays in shared
// memory: forward the 3C rows of its columns' three gates (K = S), backward the C columns
// W_h[:, cols] (K = 3S). A step's product out[r][o] = sum_k x[r][k] w[k][o] (x: h_{t-1} forward,
// d_gates[t+1] backward, both rows written in the step before by every block of this row of blocks,
// and read straight from L2) splits K into kWideParts parts of whole groups of four k: thread (row,
// part) reads its part of its row's x (16-byte loads through L2, all of them before its first
// multiply-add), sums its part for all NOUT outputs (3C forward, C backward; w in 16-byte shared
// loads), and the parts, 16 lanes of one warp, are added with shuffles (add_parts). A warp holds
// two rows, lane = 2 part + row % 2: the two threads of a part, which read the same weights, are
// adjacent lanes, and a 16-byte shared load whose adjacent lanes share their addresses takes two
// wavefronts instead of four (shared memory returns their data packed; rows 16 lanes apart, the
// first layout, got no such packing). One thread per (row, column) then does the gate math with its
// own operands, read before the step's barrier.
//
// With the product on the tensor cores (kMma: the half types, and float32 in one TF32 pass or
// three, Product; sequence_mma.cuh) the slice is stored [output][k] as product_operand values, and
// a step stages its x rows in shared memory kWideChunk k at a time (16-byte loads through L2, as
// product_operand values), each warp summing
// every eighth k step of eight for all outputs; the gate math adds the warps' parts. A block then
// reads its slice once per step instead of once per batch row.
//
// Against the cuBLAS path (a GEMM and a gate kernel per step, host-bound at small batches) a step
// here is short: the product's FLOPs are spread over every SM and no step leaves the GPU (figures:
// docs/decisions_sequence.md#wide-vs-cublas).
constexpr int kWideParts = 16,
              kWideThreads = kWideRows * kWideParts;  // kWideRows: sequence_launchers.h
static_assert(kWideParts * 2 == 32, "a warp holds two rows of parts");
// Groups of four k in flight per thread at once (all of a part's, mostly), as registers allow
// beside NOUT accumulators.
template <int NOUT>
constexpr int wide_loads() {
  return NOUT <= 16 ? 24 : 8;
}

// Groups of four k that each part owns: ceil(K / 4 / parts).
LLTM_EXT_HD int wide_groups(int k) {
  return ((k + 3) / 4 + kWideParts - 1) / kWideParts;
}

// Stride of a part's region of the weight slice, in acc_t: its groups x 4 k x nout, plus four so
// that the 16-byte loads of eight consecutive parts (a half-warp) fall in distinct banks (groups *
// nout is a multiple of four: the stride in 16-byte units is odd).
LLTM_EXT_HD int wide_part_stride(int k, int nout) {
  return wide_groups(k) * 4 * nout + 4;
}

// Shared memory of a kernel, in acc_t: the weight slice (parts x part stride), and the summed
// products (kWideRows x nout).
LLTM_EXT_HD int64_t wide_smem(int k, int nout) {
  return static_cast<int64_t>(kWideParts) * wide_part_stride(k, nout) + kWideRows * nout;
}

// The tensor-core layout (kMma), in floats: the slice [n_out][wide_mma_ws(k)] (k-contiguous, zeros
// from k on), the stage of x [kMmaRows][kWideChunk + 4] and the warps' partial sums
// [kMmaWarps][kMmaRows][mma_sums_stride(n_out)].
constexpr int kWideChunk = 512;
static_assert(kWideThreads == 32 * kMmaWarps && kWideRows == kMmaRows,
              "the tensor-core product takes the block's rows and warps");
LLTM_EXT_HD int wide_mma_ws(int k) {
  return (k + 3) / 4 * 4 + 4;
}
LLTM_EXT_HD int64_t wide_mma_smem(int k, int n_out) {
  return static_cast<int64_t>(n_out) * wide_mma_ws(k) + kMmaRows * (kWideChunk + 4) +
         static_cast<int64_t>(kMmaWarps) * kMmaRows * mma_sums_stride(n_out);
}

// The tensor-core product of a step: each warp's partial sums of out[r][o] = sum_k x[r][k] w[o][k]
// for the block's rows r (x: rows x_row0 + r < batch of a (batch, K) tensor that other blocks
// wrote, read through L2; vec: four elements at a time, which needs K % 4 == 0 and x aligned) and
// the n_out outputs of the slice w (stride ws, product_operand<P> values), stored by mma_store
// into sums (stride ps). x goes through `stage` in chunks of kWideChunk k, each as
// product_operand<P> values followed by zeros up to the next multiple of four and four more (the
// last k step of eight may pass K by up to seven); every load of a chunk is issued before the
// first store.
template <int TILES, Product P, typename scalar_t>
__device__ __forceinline__ void wide_mma_product(const scalar_t* x, int64_t x_row0, int64_t batch,
                                                 int K, bool vec, const float* w, int ws, int n_out,
                                                 float* stage, float* sums, int ps) {
  constexpr int xs = kWideChunk + 4;
  constexpr int kItems = (kMmaRows * (kWideChunk / 4 + 1) + kWideThreads - 1) / kWideThreads;
  const int rows = static_cast<int>(batch - x_row0 < kMmaRows ? batch - x_row0 : kMmaRows);
  float acc[TILES][4] = {};
  for (int c0 = 0; c0 < K; c0 += kWideChunk) {
    const int len = K - c0 < kWideChunk ? K - c0 : kWideChunk;
    const int quads = (len + 3) / 4;  // the last one partly past K where K % 4 != 0
    float v[kItems][4];
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int e = static_cast<int>(threadIdx.x) + i * kWideThreads, r = e / (quads + 1),
                q = e % (quads + 1);
      v[i][0] = v[i][1] = v[i][2] = v[i][3] = 0.0f;
      if (x != nullptr && r < rows && q < quads) {
        const scalar_t* p = x + (x_row0 + r) * K + c0 + 4 * q;
        if (vec) {
          load4_cg(p, v[i]);
        } else {
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            if (4 * q + u < len) {
              v[i][u] = static_cast<float>(load_cg(p + u));
            }
          }
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int e = static_cast<int>(threadIdx.x) + i * kWideThreads, r = e / (quads + 1),
                q = e % (quads + 1);
      if (r < rows) {
        *reinterpret_cast<float4*>(stage + r * xs + 4 * q) =
            make_float4(product_operand<P>(v[i][0]), product_operand<P>(v[i][1]),
                        product_operand<P>(v[i][2]), product_operand<P>(v[i][3]));
      }
    }
    __syncthreads();
    mma_accumulate<TILES, P>(acc, stage, xs, rows, w + c0, ws, 0, n_out, (4 * quads + 7) / 8);
    __syncthreads();  // the stage read before the next chunk's stores
  }
  mma_store<TILES>(acc, sums, ps, 0, n_out);
}

// This thread's part of out[row][0 .. NOUT): acc[o] = sum over its part's k of x[k] w[k][o].
// x: the row (global memory, written by other blocks: read through L2; null for a row past the
// batch), vec: x may be read four elements at a time (aligned); w: the part's region in shared
// memory ([k][NOUT], k from the part's first). k past K: w holds zeros there, x is not read.
template <int NOUT, typename acc_t, typename scalar_t>
__device__ __forceinline__ void part_product(const scalar_t* x, bool vec, int k_begin, int k_end,
                                             const acc_t* w, acc_t (&acc)[NOUT]) {
#pragma unroll
  for (int o = 0; o < NOUT; ++o) {
    acc[o] = acc_t(0);
  }
  if (x == nullptr) {
    return;
  }
  constexpr int kLoads = wide_loads<NOUT>();
  for (int k0 = k_begin; k0 < k_end; k0 += 4 * kLoads) {
    acc_t xv[kLoads][4];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {  // every load of the round before any math
      const int k = k0 + 4 * u;
      if (vec && k + 4 <= k_end) {
        load4_cg(x + k, xv[u]);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          xv[u][e] = k + e < k_end ? static_cast<acc_t>(load_cg(x + k + e)) : acc_t(0);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      if (k0 + 4 * u < k_end) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const acc_t* wk = w + (k0 - k_begin + 4 * u + e) * NOUT;
#pragma unroll
          for (int o = 0; o < NOUT; o += 4) {
            acc_t wv[4];
            load4(wk + o, wv);
            acc[o] += xv[u][e] * wv[0];
            acc[o + 1] += xv[u][e] * wv[1];
            acc[o + 2] += xv[u][e] * wv[2];
            acc[o + 3] += xv[u][e] * wv[3];
          }
        }
      }
    }
  }
}

// One level of add_parts at part distance D (lane distance 2 D): v holds this lane's partial sums
// of outputs base .. base + M - 1. For even M a lane keeps one half (the upper where its D bit is
// set), adds its partner's sums of that half, and sends the other half: M / 2 shuffles, and M
// halves at each level. For odd M both lanes add all M (a butterfly level; the lanes of the bits
// in DUP hold the same sums). At D = 0 the sums are complete: one lane of each duplicate set
// writes them.
template <int M, int D, int DUP, typename acc_t>
__device__ __forceinline__ void add_parts_level(const acc_t (&v)[M], int part, int base,
                                                acc_t* sums_row) {
  if constexpr (D == 0) {
    if ((part & DUP) == 0) {
#pragma unroll
      for (int i = 0; i < M; ++i) {
        sums_row[base + i] = v[i];
      }
    }
  } else if constexpr (M % 2 == 0) {
    constexpr int H = M / 2;
    const bool upper = (part & D) != 0;
    acc_t keep[H];
#pragma unroll
    for (int i = 0; i < H; ++i) {
      const acc_t send = upper ? v[i] : v[H + i];
      keep[i] = (upper ? v[H + i] : v[i]) + __shfl_xor_sync(0xffffffffu, send, 2 * D);
    }
    add_parts_level<H, D / 2, DUP>(keep, part, upper ? base + H : base, sums_row);
  } else {
    acc_t all[M];
#pragma unroll
    for (int i = 0; i < M; ++i) {
      all[i] = v[i] + __shfl_xor_sync(0xffffffffu, v[i], 2 * D);
    }
    add_parts_level<M, D / 2, DUP | D>(all, part, base, sums_row);
  }
}

// The parts' sums, added across the kWideParts lanes of a row (lanes 2 part + row % 2 of its warp),
// into sums[row][o] (shared memory), each output once: a reduce-scatter by halving, 45 shuffles
// for 48 outputs where a butterfly giving every lane every sum takes 192.
template <int NOUT, typename acc_t>
__device__ __forceinline__ void add_parts(const acc_t (&acc)[NOUT], int part, acc_t* sums_row) {
  static_assert(kWideParts == 16, "add_parts: four levels of part distances 8, 4, 2, 1");
  add_parts_level<NOUT, kWideParts / 2, 0>(acc, part, 0, sums_row);
}

// This thread's K range: part `part` of the groups of four k.
struct PartRange {
  int begin, end;
};
__device__ __forceinline__ PartRange part_range(int k, int part) {
  const int per = 4 * wide_groups(k);
  const int begin = part * per;
  return {begin < k ? begin : k, begin + per < k ? begin + per : k};
}

// A thread's two roles in a block of a wide kernel with C columns: (row, part) of the product
// (K = k), whose row of x is x_row (past the batch: none); and, for the first kWideRows * C
// threads, the gate math of element (row g_row, column g_col) of the block's slice, with that
// element's own operands (`carried`: the (B, S) tensor that holds its carried state's first value).
template <typename acc_t, int C>
struct WideThread {
  int part, row;
  PartRange range;
  int64_t x_row;
  int g_row, g_col;
  StepElement<acc_t> el;

  template <typename scalar_t>
  __device__ __forceinline__ WideThread(int k, int64_t batch, int state, const scalar_t* bias,
                                        const scalar_t* carried)
      : part(static_cast<int>(threadIdx.x) % 32 / 2),
        row(static_cast<int>(threadIdx.x) / 32 * 2 + static_cast<int>(threadIdx.x) % 2),
        range(part_range(k, part)),
        x_row(static_cast<int64_t>(blockIdx.y) * kWideRows + row),
        g_row(static_cast<int>(threadIdx.x) / C),
        g_col(static_cast<int>(threadIdx.x) % C) {
    const int64_t b = static_cast<int64_t>(blockIdx.y) * kWideRows + g_row;
    const int s = static_cast<int>(blockIdx.x) * C + g_col;
    el = step_element<acc_t>(b, s, threadIdx.x < kWideRows * C && s < state && b < batch, state,
                             bias, carried);
  }
};

// Steps 0 .. steps - 1 forward, as sequence_forward_kernel (steps/steps.cu) computes them:
// z = gates_t (the input projection) + h_{t-1} W_h^T, written back to gates_t (the saved
// pre-activations), then the gate math with the bias -> h_t (output[t]), c_t (cells[t]). w is
// (3S, ld), W_h its first S columns; h_{-1}, c_{-1} = h0, c0 (h0_vec: h0 is aligned to four
// elements). P: how the product runs (kMma: on the tensor cores).
template <typename scalar_t, int C, Product P>
__global__ void __launch_bounds__(kWideThreads)
    wide_forward_kernel(scalar_t* __restrict__ gates, const scalar_t* __restrict__ bias,
                        const scalar_t* __restrict__ h0, const scalar_t* __restrict__ c0,
                        const scalar_t* __restrict__ w, int64_t ld, scalar_t* __restrict__ output,
                        scalar_t* __restrict__ cells, unsigned int* __restrict__ flags,
                        int64_t batch, int state, int64_t steps, bool h0_vec) {
  using acc_t = cuda::opmath_t<scalar_t>;
  constexpr int NOUT = 3 * C;
  constexpr bool kMma = P != Product::kSimt;
  extern __shared__ unsigned char smem[];
  acc_t* sw = reinterpret_cast<acc_t*>(smem);
  const int stride = kMma ? wide_mma_ws(state) : wide_part_stride(state, NOUT);
  acc_t* sums = kMma ? sw + NOUT * stride + kMmaRows * (kWideChunk + 4)  // see wide_mma_smem
                     : sw + kWideParts * stride;                         // [kWideRows][NOUT]
  const int ps = mma_sums_stride(NOUT);  // kMma: the partial sums' row stride
  const int s0 = blockIdx.x * C;
  if constexpr (kMma) {  // the slice: row o = g C + c holds W_h[g S + s0 + c][k], k < S
    for (int e = threadIdx.x; e < NOUT * stride; e += kWideThreads) {
      const int o = e / stride, k = e % stride, g = o / C, c = o % C;
      sw[e] = k < state && s0 + c < state
                  ? product_operand<P>(
                        static_cast<acc_t>(w[(static_cast<int64_t>(g) * state + s0 + c) * ld + k]))
                  : acc_t(0);
    }
  } else {  // the slice: part p's region holds w[k][o] = W_h[g S + s0 + c][k] (o = g C + c)
    const int per = 4 * wide_groups(state);
    const int k_pad = kWideParts * per;
    for (int e = threadIdx.x; e < NOUT * k_pad; e += kWideThreads) {
      const int o = e / k_pad, k = e % k_pad, g = o / C, c = o % C;
      sw[(k / per) * stride + (k % per) * NOUT + o] =
          k < state && s0 + c < state
              ? static_cast<acc_t>(w[(static_cast<int64_t>(g) * state + s0 + c) * ld + k])
              : acc_t(0);
    }
  }
  WideThread<acc_t, C> my(state, batch, state, bias, c0);
  StepElement<acc_t>& el = my.el;
  const acc_t* my_w = sw + my.part * stride;
  const int64_t n = batch * state;
  // Rows of h aligned to four elements (h0's also need h0_vec): else read element by element.
  const bool rows_vec = state % 4 == 0;
  __syncthreads();  // the slice is in place
  for (int64_t t = 0; t < steps; ++t) {
    scalar_t* g = gates + t * 3 * n + el.b * 3 * state + el.s;
    acc_t projection[3] = {0, 0, 0};
    if (el.mine) {
      read_gates(g, state, projection);
    }
    if (t > 0) {
      row_wait(flags, static_cast<unsigned int>(t));  // h_{t-1} written by this row of blocks
    }
    const scalar_t* h_prev = t == 0 ? h0 : output + (t - 1) * n;
    const bool vec = rows_vec && (t > 0 || h0_vec);
    if constexpr (kMma) {
      wide_mma_product<(NOUT + 7) / 8, P>(h_prev, static_cast<int64_t>(blockIdx.y) * kWideRows,
                                          batch, state, vec, sw, stride, NOUT, sw + NOUT * stride,
                                          sums, ps);
    } else {
      acc_t acc[NOUT];
      part_product<NOUT>(
          my.x_row < batch && h_prev != nullptr ? h_prev + my.x_row * state : nullptr, vec,
          my.range.begin, my.range.end, my_w, acc);
      add_parts<NOUT>(acc, my.part, sums + my.row * NOUT);
    }
    __syncthreads();
    if (el.mine) {
      acc_t pre[3];
#pragma unroll
      for (int q = 0; q < 3; ++q) {
        const int o = q * C + my.g_col;
        if constexpr (kMma) {
          pre[q] = mma_sum(sums, ps, my.g_row, o) + projection[q];
        } else {
          pre[q] = sums[my.g_row * NOUT + o] + projection[q];
        }
      }
      const auto r = forward_step<scalar_t>(pre, el.bias, el.carried);
      output[t * n + el.j] = r.h;
      el.carried = static_cast<acc_t>(r.c);
      write_gates(g, state, r.saved);
      cells[t * n + el.j] = r.c;
    }
    // h_t written; sums is rewritten after the next step's wait, whose block barrier every thread
    // passes first.
    if (t + 1 < steps) {
      row_arrive(flags, static_cast<unsigned int>(t + 1));
    }
  }
}

// Steps steps - 1 down to 0 backward, as sequence_backward_kernel (steps/steps.cu) computes
// them: dL/dh_t = grad_output[t] + (grad_h_n at the last step, else d_gates[t + 1] W_h), dL/dc_t =
// grad_c_n at the last step, else from step t + 1; the gate math -> d_gates[t] and dL/dc_{t-1}
// (d_cell[t % 2]; d_cell[0] ends with d c0). P: how the product runs (kMma: on the tensor cores).
template <typename scalar_t, int C, Product P>
__global__ void __launch_bounds__(kWideThreads)
    wide_backward_kernel(scalar_t* __restrict__ d_gates, const scalar_t* __restrict__ w, int64_t ld,
                         const scalar_t* __restrict__ grad_output,
                         const scalar_t* __restrict__ grad_h_n,
                         const scalar_t* __restrict__ grad_c_n, const scalar_t* __restrict__ cells,
                         const scalar_t* __restrict__ gates, const scalar_t* __restrict__ bias,
                         scalar_t* __restrict__ d_cell, unsigned int* __restrict__ flags,
                         int64_t batch, int state, int64_t steps) {
  using acc_t = cuda::opmath_t<scalar_t>;
  constexpr int NOUT = C;
  constexpr bool kMma = P != Product::kSimt;
  extern __shared__ unsigned char smem[];
  const int width = 3 * state;
  acc_t* sw = reinterpret_cast<acc_t*>(smem);
  const int stride = kMma ? wide_mma_ws(width) : wide_part_stride(width, NOUT);
  acc_t* sums = kMma ? sw + NOUT * stride + kMmaRows * (kWideChunk + 4)  // see wide_mma_smem
                     : sw + kWideParts * stride;                         // [kWideRows][NOUT]
  const int ps = mma_sums_stride(NOUT);  // kMma: the partial sums' row stride
  const int s0 = blockIdx.x * C;
  if constexpr (kMma) {  // the slice: row c holds W_h[k][s0 + c], k < 3S
    for (int e = threadIdx.x; e < NOUT * stride; e += kWideThreads) {
      const int k = e / NOUT, c = e % NOUT;  // consecutive threads: consecutive columns of W_h
      sw[c * stride + k] =
          k < width && s0 + c < state
              ? product_operand<P>(static_cast<acc_t>(w[static_cast<int64_t>(k) * ld + s0 + c]))
              : acc_t(0);
    }
  } else {  // the slice: part p's region holds w[k][c] = W_h[k][s0 + c] for its k (k < 3S)
    const int per = 4 * wide_groups(width);
    const int k_pad = kWideParts * per;
    for (int e = threadIdx.x; e < NOUT * k_pad; e += kWideThreads) {
      const int k = e / NOUT, c = e % NOUT;
      sw[(k / per) * stride + (k % per) * NOUT + c] =
          k < width && s0 + c < state ? static_cast<acc_t>(w[static_cast<int64_t>(k) * ld + s0 + c])
                                      : acc_t(0);
    }
  }
  WideThread<acc_t, C> my(width, batch, state, bias, grad_c_n);
  StepElement<acc_t>& el = my.el;
  const acc_t* my_w = sw + my.part * stride;
  const int64_t n = batch * state, j = el.j, last = steps - 1;
  // Rows of d_gates aligned to four elements: else read element by element.
  const bool rows_vec = width % 4 == 0;
  __syncthreads();  // the slice is in place
  for (int64_t t = last; t >= 0; --t) {
    const bool first = t == last;  // the sequence's last step: no step after it
    BackwardOperands<acc_t> op = {};
    if (el.mine) {
      op = backward_operands(gates + t * 3 * n + el.b * width + el.s, state, el.bias,
                             grad_output + t * n + j, grad_h_n, j, first, cells + t * n + j);
    }
    if (!first) {
      // d_gates[t + 1] written by this row of blocks
      row_wait(flags, static_cast<unsigned int>(last - t));
      const scalar_t* dg_next = d_gates + (t + 1) * 3 * n;
      if constexpr (kMma) {
        wide_mma_product<(NOUT + 7) / 8, P>(dg_next, static_cast<int64_t>(blockIdx.y) * kWideRows,
                                            batch, width, rows_vec, sw, stride, NOUT,
                                            sw + NOUT * stride, sums, ps);
      } else {
        acc_t acc[NOUT];
        part_product<NOUT>(my.x_row < batch ? dg_next + my.x_row * width : nullptr, rows_vec,
                           my.range.begin, my.range.end, my_w, acc);
        add_parts<NOUT>(acc, my.part, sums + my.row * NOUT);
      }
      __syncthreads();
      if (el.mine) {
        if constexpr (kMma) {
          op.grad_h += mma_sum(sums, ps, my.g_row, my.g_col);
        } else {
          op.grad_h += sums[my.g_row * NOUT + my.g_col];
        }
      }
    }
    if (el.mine) {
      const auto r = backward_step<scalar_t>(op, el.carried);
      write_gates(d_gates + t * 3 * n + el.b * width + el.s, state, r.d_z);
      d_cell[(t % 2) * n + j] = r.d_cell;
      el.carried = static_cast<acc_t>(r.d_cell);
    }
    if (t > 0) {  // d_gates[t] written; sums is rewritten after the next step's wait
      row_arrive(flags, static_cast<unsigned int>(last - t + 1));
    }
  }
}

}  // namespace
}  // namespace lltm_ext::lltm
