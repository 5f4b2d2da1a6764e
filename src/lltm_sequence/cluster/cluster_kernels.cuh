// The sequence's time steps on Hopper (sm_90), device code: thread-block clusters that exchange h
// (forward) or d_gates (backward) through distributed shared memory, all T steps in one launch.
// cluster/cluster.cu sizes, plans and launches them.
#pragma once

#include <cooperative_groups.h>

#include <algorithm>
#include <cstdint>

#include "common/cuda_kernel.cuh"
#include "lltm_sequence/sequence_launchers.h"
#include "lltm_sequence/sequence_loads.cuh"
#include "lltm_sequence/sequence_mma.cuh"
#include "lltm_sequence/sequence_step.cuh"

namespace lltm_ext::lltm {
namespace {  // included by one file only (cluster/cluster.cu)

// A cluster of cs.blocks blocks owns `rows` batch rows and the whole state: block j of the
// cluster owns state columns [j * cols, (j + 1) * cols) (cols = ceil(S / cs.blocks)), keeps
// the matching rows (forward: W_h's rows of its columns' three gates, K = S) or columns
// (backward: W_h[:, its columns], K = 3S) in shared memory for all steps, and after each step
// writes its new h columns (or its d_gates columns) into every block's copy of the exchanged
// rows: two buffers in turn, one cluster barrier per step, no grid barrier and no global memory
// read in the step's critical path. Clusters never wait on each other.
//
// In a block, the product out[r][o] = sum_k x[r][k] w[k][o] (x: the exchanged rows; o: a
// column's three gates forward, the column backward) runs one of two ways (ClusterShape::mma):
//   - on the SIMT cores, split into `units` (a column and kTileRows rows) x `parts` (k = p,
//     p + parts, ...): each thread sums its unit's kTileRows x G values over its part's k;
//   - on the tensor cores (mma.sync m16n8k8, tf32 operands, float32 sums, in one pass or three:
//     Product), the slice's rows as one 16-row tile (sequence_mma.cuh): warp w sums all outputs
//     over the k steps w, w + 8, ...
// Either way the parts are added in shared memory, then one thread per (row, column) does the
// gate math.
constexpr int kTileRows = 2;
static_assert(kClusterThreads == 32 * kMmaWarps, "the tensor-core product's warps are the block's");
constexpr int kMaxPairs = 2;  // (row, column) pairs a thread finishes: rows * cols <= 512

// Row stride in shared memory of a product's operands of length K: K rounded up to groups of
// four, plus four (16-byte rows; consecutive rows start in different banks).
LLTM_EXT_HD int padded_k(int k) {
  return (k + 3) / 4 * 4 + 4;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// Unit u's column c and row tile rg, of `tiles` row tiles. Units go to lanes in order. Where the
// tiles come in pairs, u = 2 (rg / 2 * cols + c) + rg % 2: adjacent lanes take the same column
// (their weight loads share addresses) and alternate two row tiles (so do their x loads), and a
// 16-byte shared load whose lanes Tn, Tn^1 (or Tn, Tn^2) share addresses takes two wavefronts
// instead of four (shared memory packs the return). Else u = rg * cols + c.
struct UnitPlace {
  int c, rg;
};
__device__ __forceinline__ UnitPlace unit_place(int u, int cols, int tiles) {
  if (tiles % 2 == 0) {
    const int v = u / 2;
    return {v % cols, v / cols * 2 + u % 2};
  }
  return {u % cols, u / cols};
}
__device__ __forceinline__ int unit_index(int c, int rg, int cols, int tiles) {
  return tiles % 2 == 0 ? (rg / 2 * cols + c) * 2 + rg % 2 : rg * cols + c;
}

// The cluster barrier in two halves: arrive (this thread's earlier writes, shared memory of other
// blocks too, released) and wait (acquire: the other threads' writes before their arrival seen).
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// The parts of K that the SIMT product uses, for operand rows of stride `ks` (K + padding): the
// threads' share (cs.parts), but no more than K's groups of four: a part past them would only add
// zeros, one more partial sum for the gate threads to add in turn (figures:
// docs/decisions_sequence.md#cluster-product-parts).
__device__ __forceinline__ int product_parts(const ClusterShape& cs, int ks) {
  return max(1, min(cs.parts, ks / 4 - 1));
}

// Partial products of one unit: acc[r][q] = sum over k in groups of four (group p, p + parts, ...
// < groups) of x[r * xs + k] * w[q * ws + k], r < kTileRows, q < G. x and w are k-contiguous and
// 16-byte aligned, zero past K: a thread reads 16 bytes per load (four multiply-adds per operand
// loaded; the scalar loads of a first version made shared memory's load issue the bound).
template <int G, typename acc_t>
__device__ __forceinline__ void unit_product(const acc_t* x, int xs, const acc_t* w, int ws,
                                             int groups, int p, int parts,
                                             acc_t (&acc)[kTileRows][G]) {
#pragma unroll
  for (int r = 0; r < kTileRows; ++r) {
#pragma unroll
    for (int q = 0; q < G; ++q) {
      acc[r][q] = acc_t(0);
    }
  }
#pragma unroll 2
  for (int gi = p; gi < groups; gi += parts) {
    acc_t xv[kTileRows][4], wv[G][4];
#pragma unroll
    for (int r = 0; r < kTileRows; ++r) {
      load4(x + r * xs + 4 * gi, xv[r]);
    }
#pragma unroll
    for (int q = 0; q < G; ++q) {
      load4(w + q * ws + 4 * gi, wv[q]);
    }
#pragma unroll
    for (int r = 0; r < kTileRows; ++r) {
#pragma unroll
      for (int q = 0; q < G; ++q) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          acc[r][q] += xv[r][e] * wv[q][e];
        }
      }
    }
  }
}

// The tensor-core product (ClusterShape::mma) into the warps' partial sums (mma_store): all n_out
// outputs, six tiles of eight at a time (to bound the accumulators), K in ksteps of eight.
template <Product P>
__device__ __forceinline__ void mma_product(const float* x, int xs, int rows, const float* w,
                                            int ws, int n_out, int ksteps, float* sums, int ps) {
  for (int j0 = 0; j0 < (n_out + 7) / 8; j0 += 6) {
    float acc[6][4] = {};
    mma_accumulate<6, P>(acc, x, xs, rows, w, ws, j0, n_out, ksteps);
    mma_store<6>(acc, sums, ps, j0, n_out);
  }
}

// How many partial sums per output the SIMT product leaves for the gate threads: `parts`, or where
// a unit's parts share a warp (units_pow2 < 32) one per warp.
__device__ __forceinline__ int simt_sums(const ClusterShape& cs, int parts) {
  const int lanes = cs.units_pow2 < 32 ? 32 / cs.units_pow2 : 1;
  return (parts + lanes - 1) / lanes;
}

// The SIMT product of a step into part_sums ([simt_sums][kTileRows * G][units]): thread (ui, p)
// sums unit u's kTileRows x G outputs over part p's groups of K (x: the exchanged rows, w: the
// block's W_h slice, rows of stride ks; ws: the distance between a unit's G weight rows). Where a
// unit's parts share a warp (lanes ui + k units_pow2 hold parts warp * lanes + k), the lanes add
// theirs with shuffles and one stores the warp's sum: the gate threads then add a few sums instead
// of up to 32 in turn (that loop had been a large part of the gate math's time; figures:
// docs/decisions_sequence.md#cluster-simt-shuffle).
template <int G, typename acc_t>
__device__ __forceinline__ void simt_product(const ClusterShape& cs, const acc_t* x, const acc_t* w,
                                             int ks, int ws, int ui, int p, int parts,
                                             acc_t* part_sums) {
  const int tiles = cs.units / cs.cols, groups = ks / 4 - 1;
  const auto store = [&](const acc_t(&acc)[kTileRows][G], int part, int u) {
#pragma unroll
    for (int r = 0; r < kTileRows; ++r) {
#pragma unroll
      for (int q = 0; q < G; ++q) {
        part_sums[(part * kTileRows * G + r * G + q) * cs.units + u] = acc[r][q];
      }
    }
  };
  acc_t acc[kTileRows][G];
  if (cs.units_pow2 >= 32) {
    for (int u = ui; u < cs.units && p < parts; u += cs.units_pow2) {
      const auto [c, rg] = unit_place(u, cs.cols, tiles);
      unit_product<G>(x + rg * kTileRows * ks, ks, w + c * ks, ws, groups, p, parts, acc);
      store(acc, p, u);
    }
    return;
  }
  const bool active = ui < cs.units && p < parts;
  if (active) {
    const auto [c, rg] = unit_place(ui, cs.cols, tiles);
    unit_product<G>(x + rg * kTileRows * ks, ks, w + c * ks, ws, groups, p, parts, acc);
  } else {
#pragma unroll
    for (int r = 0; r < kTileRows; ++r) {
#pragma unroll
      for (int q = 0; q < G; ++q) {
        acc[r][q] = acc_t(0);
      }
    }
  }
  for (int offset = cs.units_pow2; offset < 32; offset *= 2) {
#pragma unroll
    for (int r = 0; r < kTileRows; ++r) {
#pragma unroll
      for (int q = 0; q < G; ++q) {
        acc[r][q] += __shfl_xor_sync(0xffffffffu, acc[r][q], offset);
      }
    }
  }
  const int lanes = 32 / cs.units_pow2;
  if (active && p % lanes == 0) {
    store(acc, p / lanes, ui);
  }
}
#endif

// This block's place: its columns [c0, c0 + cols_here) and rows [b0, b0 + rows_here).
struct BlockPlace {
  int rank, c0, cols_here, rows_here;
  int64_t b0;
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ BlockPlace block_place(const ClusterShape& cs, int64_t batch) {
  BlockPlace bp;
  bp.rank = static_cast<int>(cooperative_groups::this_cluster().block_rank());
  bp.c0 = bp.rank * cs.cols;
  bp.cols_here = max(0, min(cs.cols, cs.state - bp.c0));
  bp.b0 = static_cast<int64_t>(blockIdx.x / cs.blocks) * cs.rows;
  bp.rows_here = static_cast<int>(batch - bp.b0 < cs.rows ? batch - bp.b0 : cs.rows);
  return bp;
}

// A thread's (row, column) pairs of its block's rows x cols slice: pair i is the slice's element
// tid + i * kClusterThreads in row order, valid when it lies in the block's rows and columns; with
// the column's gate biases and the carried state (c0 forward, grad_c_n backward; nullptr: zeros)
// read at each valid pair (zeros elsewhere).
template <typename acc_t>
struct ThreadPairs {
  int r[kMaxPairs], c[kMaxPairs];
  bool valid[kMaxPairs];
  acc_t bias[kMaxPairs][3], carried[kMaxPairs];
};

template <typename acc_t, typename scalar_t>
__device__ __forceinline__ ThreadPairs<acc_t> thread_pairs(const BlockPlace& bp, int rows, int cols,
                                                           int S, const scalar_t* bias,
                                                           const scalar_t* carried) {
  ThreadPairs<acc_t> my;
#pragma unroll
  for (int i = 0; i < kMaxPairs; ++i) {
    const int e = static_cast<int>(threadIdx.x) + i * kClusterThreads;
    my.r[i] = e / max(cols, 1);
    my.c[i] = e % max(cols, 1);
    my.valid[i] = e < rows * cols && my.r[i] < bp.rows_here && my.c[i] < bp.cols_here;
    gate_bias(my.valid[i] ? bias : nullptr, S, bp.c0 + my.c[i], my.bias[i]);
    my.carried[i] = my.valid[i] && carried != nullptr
                        ? static_cast<acc_t>(carried[(bp.b0 + my.r[i]) * S + bp.c0 + my.c[i]])
                        : acc_t(0);
  }
  return my;
}

#endif

// Steps 0 .. steps - 1 forward, as sequence_forward_kernel (steps/steps.cu) computes them:
// z = gates_t + h_{t-1} W_h^T written back to gates_t, the gate math with the bias -> output[t],
// cells[t], and the last step's also to h_n, c_n where given. Shared memory (acc_t): W_h's rows of
// this block's columns [3 cols][hs] (row q * cols + c), h rows [2][rows][hs] (hs = padded_k(S)),
// partial sums (SIMT: [simt_sums][kTileRows * 3][units]; kMma:
// [kMmaWarps][kMmaRows][mma_sums_stride(3 cols)]). P: how the product runs (kMma: on the tensor
// cores, float32 and the half types); W_h and h held as product_operand<P> values.
template <typename scalar_t, Product P>
__global__ void __launch_bounds__(kClusterThreads)
    cluster_forward_kernel(scalar_t* __restrict__ gates, const scalar_t* __restrict__ bias,
                           const scalar_t* __restrict__ h0, const scalar_t* __restrict__ c0,
                           const scalar_t* __restrict__ w, int64_t ld,
                           scalar_t* __restrict__ output, scalar_t* __restrict__ cells,
                           scalar_t* __restrict__ h_n, scalar_t* __restrict__ c_n, int64_t batch,
                           int64_t steps, ClusterShape cs) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // A programmatic dependent launch (launch_cluster_forward); released at the last step.
  cuda::pdl_wait();
  using acc_t = cuda::opmath_t<scalar_t>;
  constexpr int G = 3;
  constexpr bool kMma = P != Product::kSimt;
  auto cluster = cooperative_groups::this_cluster();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int S = cs.state, cols = cs.cols, nc = 3 * cols, rows = cs.rows, hs = padded_k(S);
  acc_t* sw = reinterpret_cast<acc_t*>(smem_raw);  // [3 cols][hs]: W_h's rows
  acc_t* sh = sw + nc * hs;                        // [2][rows][hs]: h rows
  acc_t* part_sums = sh + 2 * rows * hs;
  const BlockPlace bp = block_place(cs, batch);
  const int tid = threadIdx.x;
  for (int e = tid; e < nc * hs; e += kClusterThreads) {
    const int o = e / hs, k = e % hs, q = o / cols, c = o % cols;
    sw[e] = c < bp.cols_here && k < S ? product_operand<P>(static_cast<acc_t>(
                                            w[static_cast<int64_t>(q * S + bp.c0 + c) * ld + k]))
                                      : acc_t(0);
  }
  for (int e = tid; e < 2 * rows * hs; e += kClusterThreads) {  // h_{-1} = h0 in buffer 0
    const int r = e / hs % rows, k = e % hs;
    sh[e] = e < rows * hs && r < bp.rows_here && k < S && h0 != nullptr
                ? product_operand<P>(static_cast<acc_t>(h0[(bp.b0 + r) * S + k]))
                : acc_t(0);
  }
  const int64_t n = batch * S;
  // This thread's (row, column) pairs and their own operands: bias, c_{t-1} carried.
  ThreadPairs<acc_t> my = thread_pairs<acc_t>(bp, rows, cols, S, bias, c0);
  const auto &pr = my.r, &pc = my.c;
  const auto& pv = my.valid;
  const auto& bias_v = my.bias;
  auto& c_prev = my.carried;
  // Step t's input projections, read a step ahead (their loads' latency off the step's path).
  const auto read_proj = [&](int64_t t, acc_t(&proj)[kMaxPairs][G]) {
#pragma unroll
    for (int i = 0; i < kMaxPairs; ++i) {
#pragma unroll
      for (int q = 0; q < G; ++q) {
        proj[i][q] = pv[i] && t < steps
                         ? static_cast<acc_t>(
                               gates[t * 3 * n + (bp.b0 + pr[i]) * 3 * S + q * S + bp.c0 + pc[i]])
                         : acc_t(0);
      }
    }
  };
  acc_t proj[kMaxPairs][G];
  read_proj(0, proj);
  cluster.sync();  // every block runs (its shared memory may be written) and holds h0
  const int ui = tid % cs.units_pow2, p = tid / cs.units_pow2;
  const int parts = product_parts(cs, hs), sums = simt_sums(cs, parts);
  const int ps = mma_sums_stride(nc);  // kMma: the partial sums' row stride
  for (int64_t t = 0; t < steps; ++t) {
    const int cur = static_cast<int>(t & 1);
    if (t == steps - 1) {
      cuda::pdl_release();  // the next kernel's blocks come in beside the last step
    }
    acc_t proj_next[kMaxPairs][G];
    read_proj(t + 1, proj_next);
    if (t > 0) {
      cluster_wait();  // h_{t-1} from every block of the cluster is in buffer cur
    }
    const acc_t* x = sh + cur * rows * hs;
    if constexpr (kMma) {
      mma_product<P>(x, hs, rows, sw, hs, nc, (S + 7) / 8, part_sums, ps);
    } else {
      simt_product<G>(cs, x, sw, hs, cols * hs, ui, p, parts, part_sums);
    }
    __syncthreads();
    // The gate math; h_t to the other blocks first, then the barrier's arrival, and only then
    // this step's global writes (nothing in the cluster reads them): off the critical path.
    acc_t* next = sh + (cur ^ 1) * rows * hs;
    ForwardStep<scalar_t> out[kMaxPairs];
#pragma unroll
    for (int i = 0; i < kMaxPairs; ++i) {
      if (pv[i]) {
        acc_t pre[G];
        if constexpr (kMma) {
#pragma unroll
          for (int q = 0; q < G; ++q) {
            pre[q] = proj[i][q] + mma_sum(part_sums, ps, pr[i], q * cols + pc[i]);
          }
        } else {
          const int u = unit_index(pc[i], pr[i] / kTileRows, cols, cs.units / cols);
          const int a = pr[i] % kTileRows * G;
#pragma unroll
          for (int q = 0; q < G; ++q) {
            pre[q] = proj[i][q];
            for (int pp = 0; pp < sums; ++pp) {
              pre[q] += part_sums[(pp * kTileRows * G + a + q) * cs.units + u];
            }
          }
        }
        out[i] = forward_step<scalar_t>(pre, bias_v[i], c_prev[i]);
        c_prev[i] = static_cast<acc_t>(out[i].c);  // as stored
        if (t + 1 < steps) {  // h_t, as stored, into every block's buffer cur ^ 1
          const acc_t hv = product_operand<P>(static_cast<acc_t>(out[i].h));
          for (int b = 0; b < cs.blocks; ++b) {
            cluster.map_shared_rank(next, b)[pr[i] * hs + bp.c0 + pc[i]] = hv;
          }
        }
      }
    }
    if (t + 1 < steps) {
      cluster_arrive();  // this block's h_t written; its buffer cur and sums read
    }
#pragma unroll
    for (int i = 0; i < kMaxPairs; ++i) {
      if (pv[i]) {
        const int64_t j = (bp.b0 + pr[i]) * S + bp.c0 + pc[i];
        write_gates(gates + t * 3 * n + (bp.b0 + pr[i]) * 3 * S + bp.c0 + pc[i], S, out[i].saved);
        output[t * n + j] = out[i].h;
        cells[t * n + j] = out[i].c;
        if (t == steps - 1 && h_n != nullptr) {  // the final state as well
          h_n[j] = out[i].h;
          c_n[j] = out[i].c;
        }
      }
#pragma unroll
      for (int q = 0; q < G; ++q) {
        proj[i][q] = proj_next[i][q];
      }
    }
  }
#else
  __trap();  // launched only where the sm_90 image runs (cluster_image_loaded)
#endif
}

// Steps steps - 1 down to 0 backward, as sequence_backward_kernel (steps/steps.cu) computes
// them: dL/dh_t = grad_output[t] + (grad_h_n at the last step, else d_gates[t + 1] W_h), dL/dc_t
// carried, the gate math -> d_gates[t]; d_cell (B, S) gets dL/dc_{-1}. Shared memory (acc_t): W_h's
// columns [cols][ds], d_gates rows [2][rows][ds] (ds = padded_k(3S)), partial sums (SIMT:
// [simt_sums][kTileRows][units]; kMma: [kMmaWarps][kMmaRows][mma_sums_stride(cols)]). P: as
// forward.
template <typename scalar_t, Product P>
__global__ void __launch_bounds__(kClusterThreads)
    cluster_backward_kernel(scalar_t* __restrict__ d_gates, const scalar_t* __restrict__ w,
                            int64_t ld, const scalar_t* __restrict__ grad_output,
                            const scalar_t* __restrict__ grad_h_n,
                            const scalar_t* __restrict__ grad_c_n,
                            const scalar_t* __restrict__ cells, const scalar_t* __restrict__ gates,
                            const scalar_t* __restrict__ bias, scalar_t* __restrict__ d_cell,
                            int64_t batch, int64_t steps, ClusterShape cs) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cuda::pdl_wait();  // as the forward kernel
  using acc_t = cuda::opmath_t<scalar_t>;
  constexpr int G = 3;
  constexpr bool kMma = P != Product::kSimt;
  auto cluster = cooperative_groups::this_cluster();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int S = cs.state, cols = cs.cols, rows = cs.rows, width = 3 * S, ds = padded_k(width);
  acc_t* sw = reinterpret_cast<acc_t*>(smem_raw);  // [cols][ds]: W_h's columns
  acc_t* sd = sw + cols * ds;                      // [2][rows][ds]: d_gates rows
  acc_t* part_sums = sd + 2 * rows * ds;
  const BlockPlace bp = block_place(cs, batch);
  const int tid = threadIdx.x;
  for (int e = tid; e < cols * ds; e += kClusterThreads) {
    const int c = e / ds, m = e % ds;
    sw[e] =
        c < bp.cols_here && m < width
            ? product_operand<P>(static_cast<acc_t>(w[static_cast<int64_t>(m) * ld + bp.c0 + c]))
            : acc_t(0);
  }
  for (int e = tid; e < 2 * rows * ds; e += kClusterThreads) {
    sd[e] = acc_t(0);  // rows past the batch stay zero
  }
  const int64_t n = batch * S;
  // This thread's (row, column) pairs and their own operands: bias, dL/dc_t carried.
  ThreadPairs<acc_t> my = thread_pairs<acc_t>(bp, rows, cols, S, bias, grad_c_n);
  const auto &pr = my.r, &pc = my.c;
  const auto& pv = my.valid;
  const auto& bias_v = my.bias;
  auto& grad_c = my.carried;
  // The operands of the step `step` (t = steps - 1 - step), read a step ahead (their loads'
  // latency off the step's path).
  const auto read_operands = [&](int64_t step, BackwardOperands<acc_t>(&op)[kMaxPairs]) {
    const int64_t t = steps - 1 - step;
#pragma unroll
    for (int i = 0; i < kMaxPairs; ++i) {
      if (pv[i] && step < steps) {
        const int64_t j = (bp.b0 + pr[i]) * S + bp.c0 + pc[i];
        op[i] = backward_operands(gates + t * 3 * n + (bp.b0 + pr[i]) * width + bp.c0 + pc[i], S,
                                  bias_v[i], grad_output + t * n + j, grad_h_n, j, step == 0,
                                  cells + t * n + j);
      } else {
        op[i] = {};
      }
    }
  };
  BackwardOperands<acc_t> op[kMaxPairs];
  read_operands(0, op);
  cluster.sync();  // every block runs: its shared memory may be written
  const int ui = tid % cs.units_pow2, p = tid / cs.units_pow2;
  const int parts = product_parts(cs, ds), sums = simt_sums(cs, parts);
  const int ps = mma_sums_stride(cols);  // kMma: the partial sums' row stride
  for (int64_t step = 0; step < steps; ++step) {
    const int64_t t = steps - 1 - step;
    const int cur = static_cast<int>(step & 1);
    if (t == 0) {
      cuda::pdl_release();  // as the forward kernel
    }
    BackwardOperands<acc_t> op_next[kMaxPairs];
    read_operands(step + 1, op_next);
    if (step > 0) {
      cluster_wait();  // d_gates[t + 1] from every block of the cluster is in buffer cur
      const acc_t* x = sd + cur * rows * ds;
      if constexpr (kMma) {
        mma_product<P>(x, ds, rows, sw, ds, cols, (width + 7) / 8, part_sums, ps);
      } else {
        simt_product<1>(cs, x, sw, ds, 0, ui, p, parts, part_sums);
      }
      __syncthreads();
    }
    // As forward: d_gates[t] to the other blocks, the arrival, then the global writes.
    acc_t* next = sd + (cur ^ 1) * rows * ds;
    BackwardStep<scalar_t> out[kMaxPairs];
#pragma unroll
    for (int i = 0; i < kMaxPairs; ++i) {
      if (pv[i]) {
        if (step > 0) {
          if constexpr (kMma) {
            op[i].grad_h += mma_sum(part_sums, ps, pr[i], pc[i]);
          } else {
            const int u = unit_index(pc[i], pr[i] / kTileRows, cols, cs.units / cols);
            const int a = pr[i] % kTileRows;
            for (int pp = 0; pp < sums; ++pp) {
              op[i].grad_h += part_sums[(pp * kTileRows + a) * cs.units + u];
            }
          }
        }
        out[i] = backward_step<scalar_t>(op[i], grad_c[i]);
        grad_c[i] = static_cast<acc_t>(out[i].d_cell);  // as stored
        if (step + 1 < steps) {  // d_gates[t], as stored, into every block's buffer cur ^ 1
          for (int b = 0; b < cs.blocks; ++b) {
            acc_t* dst = cluster.map_shared_rank(next, b) + pr[i] * ds + bp.c0 + pc[i];
#pragma unroll
            for (int q = 0; q < G; ++q) {
              dst[q * S] = product_operand<P>(static_cast<acc_t>(out[i].d_z[q]));
            }
          }
        }
      }
    }
    if (step + 1 < steps) {
      cluster_arrive();  // this block's d_gates[t] written; its buffer cur and sums read
    }
#pragma unroll
    for (int i = 0; i < kMaxPairs; ++i) {
      if (pv[i]) {
        const int64_t row = bp.b0 + pr[i];
        const int s = bp.c0 + pc[i];
        write_gates(d_gates + t * 3 * n + row * width + s, S, out[i].d_z);
        if (t == 0) {
          d_cell[row * S + s] = out[i].d_cell;
        }
      }
      op[i] = op_next[i];
    }
  }
#else
  __trap();
#endif
}

}  // namespace
}  // namespace lltm_ext::lltm
