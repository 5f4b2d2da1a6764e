// The sequence's small-state kernels (any GPU, S <= small_max_state, float32 and the half types):
// each block owns 1, 2 or 4 batch rows and the whole state, W_h in its threads' registers, all T
// steps in one launch with one block barrier per step; their launchers.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "common/cuda_kernel.cuh"
#include "lltm_sequence/sequence_launchers.h"
#include "lltm_sequence/sequence_step.cuh"

namespace lltm_ext::lltm {
namespace {

// A step of a small state is a chain of dependent latencies, not work: at T = 1000, B = 2, S = 37
// the cluster kernels spent their steps, far slower than cuDNN's LSTM's (figures:
// docs/decisions_sequence.md#small-state-kernels), in shared-memory loads of W_h, partial sums
// through shared memory, a barrier, one thread's sums of them and the exchange between blocks. Here
// batch rows never meet (a block owns `rows` of them, at most kSmallMaxRows, and every column), so
// blocks never wait on each other; in a block, column s takes L adjacent lanes (2, 4 or 8:
// small_forward_lanes, small_backward_lanes), lane k holding its share of W_h's elements (small_k:
// pairs of adjacent k for float32) of the column's three gate rows (forward) or of its column
// (backward, K = 3S) in registers for all steps. A step: each lane's partial products over its k in
// four or more independent chains (the exchanged rows from shared memory, lanes of a group reading
// consecutive words: no bank conflicts, the groups the same words: broadcasts), summed across the
// group by log2(L) shuffles; lane k < rows then runs row k's gate math (its own operands, the input
// projection forward, from shared memory, where the block's last warp loaded them during the step
// before; backward computes the gate factors that need no gradient before the product) and writes
// its value into the other buffer; one barrier. W is the columns a kernel covers (S rounded up to a
// few sizes, the rows padded with zeros), KS = W / L (forward) and KB = 3 W / L (backward) the k
// per lane, R the rows per block. Fewer rows per block, more blocks: each SM's share of a step's
// product and shuffles shrinks (the planner takes the fewest rows whose grid runs at once).
constexpr int kSmallMaxRows = 4;

// Lanes per column: 8 for the half types; 4 or 2 for float32. Fewer lanes, fewer warps: each
// lane's chains of multiply-adds grow, the shuffles and the gate math (one lane of a group, so
// issued once a warp) shrink. The rows a block owns are lanes k < R of a group: 2 lanes take R
// <= 2. At short sequences the backward kernel's 3S / L elements of W_h a lane, loaded at its
// start, cost more than the steps gain. So: forward 2 lanes but at 65-88 columns; backward 2 lanes
// up to 48 columns, and past 64 from kSmallLongSteps steps. float32 had gone from 8 lanes to 4
// before (at 8 lanes the gate math took most of the issue slots' use (Nsight Compute); 736
// threads leave 80 registers, and the 2- and 4-row kernels at S = 88 spill). The half types lost
// with 4 at S = 80 - 88 and won at S <= 64: they keep 8 (not profiled). Figures:
// docs/decisions_sequence.md#small-lanes.
constexpr int64_t kSmallLongSteps = 32;

template <typename scalar_t, int W, int R>
constexpr int small_forward_lanes() {
  if constexpr (std::is_same_v<scalar_t, float>) {
    return R <= 2 && W != 88 ? 2 : 4;
  } else {
    return 8;
  }
}

template <typename scalar_t, int W, int R>
constexpr int small_backward_lanes(bool long_sequence) {
  if constexpr (std::is_same_v<scalar_t, float>) {
    return R <= 2 && (W <= 48 || (W > 64 && long_sequence)) ? 2 : 4;
  } else {
    return 8;
  }
}

// The forward kernel's gate math: StepMath (one-instruction reciprocals) for float32, whose
// forward kernel it made faster; the C library's division for the half types, whose forward
// kernel StepMath made slower (fewer instructions, so the compiler's schedule; not profiled).
// Backward uses StepMath for all: float32's backward kernel ran faster with it, the half types'
// the same. Figures: docs/decisions_sequence.md#small-gate-math.
template <typename scalar_t>
using SmallForwardMath = std::conditional_t<std::is_same_v<scalar_t, float>, StepMath, LibmMath>;

// Threads of a block for state S and L lanes a column: L per column in whole warps, then one more
// warp that loads the next step's operands into shared memory.
constexpr int small_threads(int64_t state, int lanes) {
  return static_cast<int>((state * lanes + 31) / 32 * 32) + 32;
}

// A kernel's launch bounds, for its W (`columns`) and L (`lanes`): those of S = 88 (the
// registers for W_h's share of each lane, and the blocks an SM holds, as measured), or of its own
// largest state past that (float32 at S = 96, 4 lanes: 416 threads, 157 registers a thread for
// W_h's 72; 2 lanes: 224 threads, up to 255 registers for W_h's 144, none spilled).
// At S = 128 the compiler kept float32's 96 in local memory (544 threads: 120 registers a thread).
constexpr int small_launch_bound(int columns, int lanes) {
  return small_threads(columns > 88 ? columns : 88, lanes);
}

// The loader warp's copy of `per_row` consecutive elements of each of the block's rows (rows
// `src_stride` apart from src) into shared memory, in acc_t, through registers: `fetch` issues the
// loads, `store` writes them (rows `dst_stride` apart), so that a step's operands from several
// tensors are all in flight at once (backward's three, fetched one tensor after the other's
// stores, were three round trips to L2 a step: the backward step's longest path; fetching them
// together, with the product's pairs and chains, made the sequence clearly faster, where the
// pairs, chains and factors alone moved it little). The loader's waits are its own: the other
// warps never wait for global memory in a step (with each gate lane loading its own operands a
// step ahead, the compiler had the step's first multiply-add wait on them too: the load's whole
// latency in every step, a large share of the forward kernel's stall samples). Figures:
// docs/decisions_sequence.md#small-loader. N: loads per lane and row, N * 32 >= per_row.
template <int R, int N, typename acc_t>
struct LoaderRows {
  acc_t v[R][N];

  template <typename scalar_t>
  __device__ __forceinline__ void fetch(const scalar_t* src, int64_t src_stride, int rows,
                                        int per_row, int lane) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int i = 0; i < N; ++i) {
        const int e = lane + 32 * i;
        v[r][i] = r < rows && e < per_row ? static_cast<acc_t>(src[r * src_stride + e]) : acc_t(0);
      }
    }
  }

  __device__ __forceinline__ void store(acc_t* dst, int dst_stride, int per_row, int lane) const {
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int i = 0; i < N; ++i) {
        const int e = lane + 32 * i;
        if (e < per_row) {
          dst[r * dst_stride + e] = v[r][i];
        }
      }
    }
  }
};

// The sum over a column's L adjacent lanes, in every one of them.
template <int L, typename acc_t>
__device__ __forceinline__ acc_t group_sum(acc_t v) {
#pragma unroll
  for (int offset = L / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

// Lane k's j-th of its N elements of a row of the product's operand (h forward, d_gates backward).
// float32 (L = 4): pairs of adjacent elements, L pairs apart, so that a lane reads two at a time
// (8 bytes: half the shared-memory loads) and a column's L lanes read 8 L consecutive bytes; an odd
// N's last element alone. The half types (L = 8) read one at a time, L apart (in pairs they lost
// at S = 80 - 88, where their N is odd; figures: docs/decisions_sequence.md#small-pairs).
template <int L, int N>
constexpr int small_pairs() {
  return L <= 4 ? N / 2 : 0;
}

template <int L, int N>
__device__ __forceinline__ int small_k(int k, int j) {
  constexpr int P = small_pairs<L, N>();
  return j < 2 * P ? 2 * (k + L * (j / 2)) + j % 2 : 2 * L * P + k + L * (j - 2 * P);
}

// Steps 0 .. steps - 1 forward, as sequence_forward_kernel (steps/steps.cu) computes them:
// z = gates_t + h_{t-1} W_h^T written back to gates_t, the gate math with the bias -> output[t],
// cells[t], and the last step's also to h_n, c_n where given. W >= S.
template <typename scalar_t, int W, int R, int L>
__global__ void __launch_bounds__(small_launch_bound(W, L))
    small_forward_kernel(scalar_t* __restrict__ gates, const scalar_t* __restrict__ bias,
                         const scalar_t* __restrict__ h0, const scalar_t* __restrict__ c0,
                         const scalar_t* __restrict__ w, int64_t ld, scalar_t* __restrict__ output,
                         scalar_t* __restrict__ cells, scalar_t* __restrict__ h_n,
                         scalar_t* __restrict__ c_n, int64_t batch, int64_t steps, int S) {
  cuda::pdl_wait();  // launched by launch_dependent_if; released at the last step
  using acc_t = cuda::opmath_t<scalar_t>;
  constexpr int KS = W / L;
  static_assert(R <= L && KS * L == W, "a group's lanes k < R run the gate math");
  constexpr int kWidth = KS * L;  // a row of h, zeros past S
  static_assert(std::is_same_v<acc_t, float>, "pairs of floats per load");
  __shared__ __align__(16) acc_t sh[2][R][kWidth];
  __shared__ acc_t sp[2][R][3 * kWidth];  // the steps' input projections, from the loader warp
  const int tid = static_cast<int>(threadIdx.x), s = tid / L, k = tid % L;
  const bool loader = tid >= static_cast<int>(blockDim.x) - 32;
  const int64_t b0 = static_cast<int64_t>(blockIdx.x) * R;
  const int rows_here = batch - b0 < R ? static_cast<int>(batch - b0) : R;
  acc_t wr[3][KS];  // W_h[q S + s][small_k<L, KS>(k, j)]
#pragma unroll
  for (int q = 0; q < 3; ++q) {
#pragma unroll
    for (int j = 0; j < KS; ++j) {
      const int kk = small_k<L, KS>(k, j);
      wr[q][j] = s < S && kk < S ? static_cast<acc_t>(w[static_cast<int64_t>(q * S + s) * ld + kk])
                                 : acc_t(0);
    }
  }
  for (int e = tid; e < 2 * R * kWidth; e += static_cast<int>(blockDim.x)) {
    const int buf = e / (R * kWidth), r = e / kWidth % R, kk = e % kWidth;
    sh[buf][r][kk] = buf == 0 && r < rows_here && kk < S && h0 != nullptr
                         ? static_cast<acc_t>(h0[(b0 + r) * S + kk])
                         : acc_t(0);
  }
  // Lane k < rows_here of column s owns element (b0 + k, s): its bias, c_{t-1} and projections.
  const bool mine = s < S && k < rows_here;
  const int64_t n = batch * S, j_el = (b0 + k) * S + s;
  acc_t bias_v[3], c_prev = acc_t(0);
  gate_bias(mine ? bias : nullptr, S, s, bias_v);
  if (mine && c0 != nullptr) {
    c_prev = static_cast<acc_t>(c0[j_el]);
  }
  scalar_t* g_el = gates + (b0 + k) * 3 * S + s;  // step t's: + t * 3n
  // Step t's projections into sp[t % 2], by the loader warp during step t - 1.
  const auto load_proj = [&](int64_t t) {
    LoaderRows<R, (3 * kWidth + 31) / 32, acc_t> p;
    p.fetch(gates + t * 3 * n + b0 * 3 * S, 3 * S, rows_here, 3 * S, tid & 31);
    p.store(&sp[t & 1][0][0], 3 * kWidth, 3 * S, tid & 31);
  };
  if (loader) {
    load_proj(0);
  }
  __syncthreads();
  for (int64_t t = 0; t < steps; ++t) {
    const int cur = static_cast<int>(t & 1);
    if (loader) {
      if (t + 1 < steps) {
        load_proj(t + 1);
      } else {
        // The next kernel's blocks may come in beside the last step, not all along (one thread
        // of a block releases it for all).
        cuda::pdl_release();
      }
    } else {
      // One row's three gates in two chains each where the block has one row (six independent
      // chains of KS / 2 multiply-adds), one chain each (3R) otherwise.
      constexpr int C = R == 1 ? 2 : 1;
      acc_t acc[R][3][C] = {};  // rows past the batch: zeros
      constexpr int P = small_pairs<L, KS>();
#pragma unroll
      for (int p = 0; p < P; ++p) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const float2 x = *reinterpret_cast<const float2*>(&sh[cur][r][small_k<L, KS>(k, 2 * p)]);
#pragma unroll
          for (int q = 0; q < 3; ++q) {
            acc[r][q][0] += wr[q][2 * p] * x.x;
            acc[r][q][C - 1] += wr[q][2 * p + 1] * x.y;
          }
        }
      }
#pragma unroll
      for (int j = 2 * P; j < KS; ++j) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const acc_t x = sh[cur][r][small_k<L, KS>(k, j)];
#pragma unroll
          for (int q = 0; q < 3; ++q) {
            acc[r][q][j % C] += wr[q][j] * x;
          }
        }
      }
      acc_t sum[R][3];
#pragma unroll
      for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int q = 0; q < 3; ++q) {
          sum[r][q] = acc[r][q][0];
#pragma unroll
          for (int c = 1; c < C; ++c) {
            sum[r][q] += acc[r][q][c];
          }
          sum[r][q] = group_sum<L>(sum[r][q]);
        }
      }
      if (mine) {
        acc_t pre[3];
#pragma unroll
        for (int q = 0; q < 3; ++q) {
          pre[q] = sum[0][q];
#pragma unroll
          for (int r = 1; r < R; ++r) {
            pre[q] = k == r ? sum[r][q] : pre[q];
          }
          pre[q] += sp[cur][k][q * S + s];
        }
        const ForwardStep<scalar_t> out =
            forward_step<scalar_t, acc_t, SmallForwardMath<scalar_t>>(pre, bias_v, c_prev);
        c_prev = static_cast<acc_t>(out.c);             // as stored
        sh[cur ^ 1][k][s] = static_cast<acc_t>(out.h);  // h_t, as stored
        write_gates(g_el + t * 3 * n, S, out.saved);
        output[t * n + j_el] = out.h;
        cells[t * n + j_el] = out.c;
        if (t == steps - 1 && h_n != nullptr) {  // the final state as well
          h_n[j_el] = out.h;
          c_n[j_el] = out.c;
        }
      }
    }
    __syncthreads();  // h_t in buffer cur ^ 1, step t + 1's projections in sp; buffer cur read
  }
}

// Steps steps - 1 down to 0 backward, as sequence_backward_kernel (steps/steps.cu) computes
// them: dL/dh_t = grad_output[t] + (grad_h_n at the last step, else d_gates[t + 1] W_h), dL/dc_t
// carried, the gate math -> d_gates[t]; d_cell (B, S) gets dL/dc_{-1}. W >= S.
template <typename scalar_t, int W, int R, int L>
__global__ void __launch_bounds__(small_launch_bound(W, L))
    small_backward_kernel(scalar_t* __restrict__ d_gates, const scalar_t* __restrict__ w,
                          int64_t ld, const scalar_t* __restrict__ grad_output,
                          const scalar_t* __restrict__ grad_h_n,
                          const scalar_t* __restrict__ grad_c_n, const scalar_t* __restrict__ cells,
                          const scalar_t* __restrict__ gates, const scalar_t* __restrict__ bias,
                          scalar_t* __restrict__ d_cell, int64_t batch, int64_t steps, int S) {
  cuda::pdl_wait();  // as the forward kernel
  using acc_t = cuda::opmath_t<scalar_t>;
  constexpr int KB = 3 * W / L;
  static_assert(R <= L && KB * L == 3 * W, "a group's lanes k < R run the gate math");
  constexpr int kWidth = KB * L;      // a row of d_gates (3S), zeros past it
  constexpr int kState = kWidth / 3;  // >= S
  // A step's operands of a row, from the loader warp: gates (3S), grad_output (S), cells (S).
  constexpr int kOperands = kWidth + 2 * kState;
  static_assert(std::is_same_v<acc_t, float>, "pairs of floats per load");
  __shared__ __align__(16) acc_t sd[2][R][kWidth];
  __shared__ acc_t so[2][R][kOperands];
  const int tid = static_cast<int>(threadIdx.x), s = tid / L, k = tid % L;
  const bool loader = tid >= static_cast<int>(blockDim.x) - 32;
  const int width = 3 * S;
  const int64_t b0 = static_cast<int64_t>(blockIdx.x) * R;
  const int rows_here = batch - b0 < R ? static_cast<int>(batch - b0) : R;
  acc_t wc[KB];  // W_h[small_k<L, KB>(k, j)][s]
#pragma unroll
  for (int j = 0; j < KB; ++j) {
    const int m = small_k<L, KB>(k, j);
    wc[j] = s < S && m < width ? static_cast<acc_t>(w[static_cast<int64_t>(m) * ld + s]) : acc_t(0);
  }
  for (int e = tid; e < 2 * R * kWidth; e += static_cast<int>(blockDim.x)) {
    (&sd[0][0][0])[e] = acc_t(0);
  }
  const bool mine = s < S && k < rows_here;
  const int64_t n = batch * S, j_el = (b0 + k) * S + s;
  acc_t bias_v[3], grad_c = acc_t(0), grad_h_last = acc_t(0);
  gate_bias(mine ? bias : nullptr, S, s, bias_v);
  if (mine) {  // absent (nullptr): zeros
    grad_c = grad_c_n != nullptr ? static_cast<acc_t>(grad_c_n[j_el]) : acc_t(0);
    grad_h_last = grad_h_n != nullptr ? static_cast<acc_t>(grad_h_n[j_el]) : acc_t(0);
  }
  // The operands of `step` (t = steps - 1 - step) into so[step % 2], by the loader warp during the
  // step before.
  const auto load_operands = [&](int64_t step) {
    const int64_t t = steps - 1 - step;
    acc_t* dst = &so[step & 1][0][0];
    const int lane = tid & 31;
    // Two rows at a time at most: four rows' 60 registers (S = 88 - 96) made the 4-row kernels
    // spill.
    constexpr int RC = R < 2 ? R : 2;
#pragma unroll
    for (int r0 = 0; r0 < R; r0 += RC) {
      LoaderRows<RC, (kWidth + 31) / 32, acc_t> g;
      LoaderRows<RC, (kState + 31) / 32, acc_t> go, c;
      const int rows = rows_here - r0;
      g.fetch(gates + t * 3 * n + (b0 + r0) * width, width, rows, width, lane);
      go.fetch(grad_output + t * n + (b0 + r0) * S, S, rows, S, lane);
      c.fetch(cells + t * n + (b0 + r0) * S, S, rows, S, lane);
      acc_t* row = dst + r0 * kOperands;
      g.store(row, kOperands, width, lane);
      go.store(row + kWidth, kOperands, S, lane);
      c.store(row + kWidth + kState, kOperands, S, lane);
    }
  };
  if (loader) {
    load_operands(0);
  }
  __syncthreads();
  for (int64_t step = 0; step < steps; ++step) {
    const int64_t t = steps - 1 - step;
    const int cur = static_cast<int>(step & 1);
    if (loader) {
      if (step + 1 < steps) {
        load_operands(step + 1);
      } else {
        cuda::pdl_release();  // as the forward kernel
      }
    } else {
      // The element's factors first (every lane: a row and column of its block's operands, so
      // that they share the product's basic block and their latency hides behind its
      // multiply-adds; only lanes of an element use them), then dL/dh_t, then four operations.
      const acc_t* o = so[cur][k < R ? k : 0];
      const int sc = s < S ? s : 0;
      const BackwardFactors<acc_t> f =
          backward_factors<acc_t, StepMath>(o[kWidth + kState + sc], o[sc] + bias_v[0],
                                            o[S + sc] + bias_v[1], o[2 * S + sc] + bias_v[2]);
      const acc_t grad_own = o[kWidth + sc] + (step == 0 ? grad_h_last : acc_t(0));
      // d_gates[t + 1] W_h: buffer 0 holds zeros at step 0. Four independent chains of
      // multiply-adds a lane: a row's sum in 4 / R.
      constexpr int C = 4 / R;
      acc_t acc[R][C] = {};  // rows past the batch: zeros
      constexpr int P = small_pairs<L, KB>();
#pragma unroll
      for (int p = 0; p < P; ++p) {
        const int c = C == 1 ? 0 : 2 * (p % (C / 2));
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const float2 x = *reinterpret_cast<const float2*>(&sd[cur][r][small_k<L, KB>(k, 2 * p)]);
          acc[r][c] += wc[2 * p] * x.x;
          acc[r][C == 1 ? 0 : c + 1] += wc[2 * p + 1] * x.y;
        }
      }
#pragma unroll
      for (int j = 2 * P; j < KB; ++j) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
          acc[r][j % C] += wc[j] * sd[cur][r][small_k<L, KB>(k, j)];
        }
      }
      acc_t grad_h = acc_t(0);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        acc_t sum = acc[r][0];
        if constexpr (C >= 2) {
          sum += acc[r][1];
        }
        if constexpr (C == 4) {
          sum += acc[r][2] + acc[r][3];
        }
        sum = group_sum<L>(sum);
        grad_h = k == r ? sum : grad_h;
      }
      if (mine) {
        const BackwardStep<scalar_t> out =
            backward_step<scalar_t>(f, grad_own + (step > 0 ? grad_h : acc_t(0)), grad_c);
        grad_c = static_cast<acc_t>(out.d_cell);  // as stored
#pragma unroll
        for (int q = 0; q < 3; ++q) {
          sd[cur ^ 1][k][q * S + s] = static_cast<acc_t>(out.d_z[q]);  // d_gates[t], as stored
        }
        write_gates(d_gates + t * 3 * n + (b0 + k) * width + s, S, out.d_z);
        if (t == 0) {
          d_cell[j_el] = out.d_cell;
        }
      }
    }
    __syncthreads();  // d_gates[t] in buffer cur ^ 1, the next step's operands in so
  }
}

// f(forward kernel, backward kernel, their threads) for state S (<= small_max_state), R rows per
// block and a sequence of kSmallLongSteps steps or more (long_sequence) or fewer: the columns W
// that cover S (32, 48, 64 or 88, and 96 for float32: the fewer k a lane has, the shorter its
// step), the lanes a column that small_forward_lanes and small_backward_lanes give.
template <typename T, int W, int R, typename F>
cudaError_t with_small_kernels_width(int64_t state, bool long_sequence, F&& f) {
  constexpr int LF = small_forward_lanes<T, W, R>();
  constexpr int LB = small_backward_lanes<T, W, R>(false);
  constexpr int LB_long = small_backward_lanes<T, W, R>(true);
  if constexpr (LB_long != LB) {
    if (long_sequence) {
      return f(small_forward_kernel<T, W, R, LF>, small_backward_kernel<T, W, R, LB_long>,
               small_threads(state, LF), small_threads(state, LB_long));
    }
  }
  return f(small_forward_kernel<T, W, R, LF>, small_backward_kernel<T, W, R, LB>,
           small_threads(state, LF), small_threads(state, LB));
}

template <typename T, int R, typename F>
cudaError_t with_small_kernels_rows(int64_t state, bool long_sequence, F&& f) {
  if (state <= 32) {
    return with_small_kernels_width<T, 32, R>(state, long_sequence, f);
  }
  if (state <= 48) {
    return with_small_kernels_width<T, 48, R>(state, long_sequence, f);
  }
  if (state <= 64) {
    return with_small_kernels_width<T, 64, R>(state, long_sequence, f);
  }
  if (state <= 88) {
    return with_small_kernels_width<T, 88, R>(state, long_sequence, f);
  }
  if constexpr (small_max_state<T>() == 96) {
    return with_small_kernels_width<T, 96, R>(state, long_sequence, f);
  } else {
    return cudaErrorInvalidValue;  // past small_max_state: small_step_rows never asks
  }
}

template <typename T, typename F>
cudaError_t with_small_kernels(int64_t state, int rows, bool long_sequence, F&& f) {
  if constexpr (std::is_same_v<T, double>) {
    return cudaErrorNotSupported;  // the registers hold float32 operands only
  } else {
    static_assert(kSmallMaxRows == 4);
    switch (rows) {
      case 1:
        return with_small_kernels_rows<T, 1>(state, long_sequence, f);
      case 2:
        return with_small_kernels_rows<T, 2>(state, long_sequence, f);
      case 4:
        return with_small_kernels_rows<T, 4>(state, long_sequence, f);
      default:
        return cudaErrorInvalidValue;
    }
  }
}

}  // namespace

template <typename T>
cudaError_t small_step_rows(int64_t batch, int64_t state, int sm_count, int* rows) {
  *rows = 0;
  if (state < 1 || state > small_max_state<T>() || batch < 1 || std::is_same_v<T, double>) {
    return cudaSuccess;
  }
  // The fewest rows whose grid runs at once with either backward kernel (the sequence's length
  // picks one: with_small_kernels_width).
  int blocks_per_sm = 0;
  const auto fewest_blocks = [&](auto forward, auto backward, int fwd_threads, int bwd_threads) {
    int fwd = 0, bwd = 0;
    cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fwd, forward, fwd_threads, 0);
    if (e == cudaSuccess) {
      e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bwd, backward, bwd_threads, 0);
    }
    blocks_per_sm = std::min({blocks_per_sm, fwd, bwd});
    return e;
  };
  cudaError_t err = cudaSuccess;
  for (int r = 1; err == cudaSuccess && r <= kSmallMaxRows && *rows == 0; r *= 2) {
    blocks_per_sm = std::numeric_limits<int>::max();
    err = with_small_kernels<T>(state, r, false, fewest_blocks);
    if (err == cudaSuccess) {
      err = with_small_kernels<T>(state, r, true, fewest_blocks);
    }
    if (err == cudaSuccess && (batch + r - 1) / r <= int64_t{blocks_per_sm} * sm_count) {
      *rows = r;
    }
  }
  return err;
}

template <typename T>
cudaError_t launch_small_forward(T* gates, const T* bias, const T* h0, const T* c0, const T* w,
                                 int64_t ld, T* output, T* cells, T* h_n, T* c_n, int64_t batch,
                                 int64_t state, int64_t steps, int rows, cudaStream_t stream) {
  const int64_t blocks = (batch + rows - 1) / std::max(rows, 1);
  return with_small_kernels<T>(
      state, rows, steps >= kSmallLongSteps, [&](auto forward, auto, int threads, int) {
        return cuda::launch_dependent_if(steps <= kDependentMaxSteps, forward,
                                         dim3(static_cast<unsigned int>(blocks)), dim3(threads), 0,
                                         stream, gates, bias, h0, c0, w, ld, output, cells, h_n,
                                         c_n, batch, steps, static_cast<int>(state));
      });
}

template <typename T>
cudaError_t launch_small_backward(T* d_gates, const T* w, int64_t ld, const T* grad_output,
                                  const T* grad_h_n, const T* grad_c_n, const T* cells,
                                  const T* gates, const T* bias, T* d_cell, int64_t batch,
                                  int64_t state, int64_t steps, int rows, cudaStream_t stream) {
  const int64_t blocks = (batch + rows - 1) / std::max(rows, 1);
  return with_small_kernels<T>(
      state, rows, steps >= kSmallLongSteps, [&](auto, auto backward, int, int threads) {
        return cuda::launch_dependent_if(
            steps <= kDependentMaxSteps, backward, dim3(static_cast<unsigned int>(blocks)),
            dim3(threads), 0, stream, d_gates, w, ld, grad_output, grad_h_n, grad_c_n, cells, gates,
            bias, d_cell, batch, steps, static_cast<int>(state));
      });
}

#define LLTM_EXT_INSTANTIATE(T)                                                                    \
  template cudaError_t small_step_rows<T>(int64_t, int64_t, int, int*);                            \
  template cudaError_t launch_small_forward<T>(T*, const T*, const T*, const T*, const T*,         \
                                               int64_t, T*, T*, T*, T*, int64_t, int64_t, int64_t, \
                                               int, cudaStream_t);                                 \
  template cudaError_t launch_small_backward<T>(T*, const T*, int64_t, const T*, const T*,         \
                                                const T*, const T*, const T*, const T*, T*,        \
                                                int64_t, int64_t, int64_t, int, cudaStream_t);
LLTM_EXT_FOR_FLOATING_TYPES(LLTM_EXT_INSTANTIATE)

}  // namespace lltm_ext::lltm
