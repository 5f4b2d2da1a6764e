// CUDA kernels of the LLTM cell: one fused kernel for the forward gate math, one for backward (with
// the bias gradient's column sums), and the kernel that adds those sums; for small cells, the whole
// forward in one kernel and backward's products in one more; their launchers.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>

#include "common/cuda_kernel.cuh"
#include "lltm/gate_math.h"
#include "lltm/lltm_launchers.h"

namespace lltm_ext::lltm {
namespace {

// The gate kernels' blocks: up to 256 consecutive state columns of one row (a thread per column:
// a block reads whole stretches of each row); the grid's rows of blocks step through the batch
// together, gridDim.y rows apart. Rows are 64-bit offsets (B * 3S may pass 2^31), columns 32-bit.
constexpr int kMaxCols = 256;
constexpr int kMaxRowBlocks = 65535;  // gridDim.y
// bias_sum_kernel's blocks: 32 columns x 32 rows of partial sums (a grid of 3S / 32 blocks only:
// each thread's serial chain of loads is kept short; figures: docs/decisions.md#bias-sum-rows).
constexpr int kCols = 32;
constexpr int kRows = 32;

// Rows a gate kernel's thread takes per round of its row loop (forward, backward): their loads
// are all issued before the math, so that each thread keeps several in flight (the kernels are
// bound by memory: one row per block kept too few bytes in flight to reach copy bandwidth;
// figures: docs/decisions.md#gate-kernel-rows).
constexpr int kForwardRows = 4, kBackwardRows = 2;

// Forward of rows r, r + step, ..., r + (U - 1) step at state column s (bias b), with the split
// product's partial sums (B = `batch` rows) where there are any.
template <int U, typename scalar_t, typename acc_t, typename copy_t>
__device__ __forceinline__ void forward_rows(const scalar_t* gates, const acc_t (&b)[3],
                                             const scalar_t* old_cell, scalar_t* new_h,
                                             scalar_t* new_cell, const SplitSums<scalar_t>& sums,
                                             const RowCopy<copy_t>& copy, int64_t batch, int64_t r,
                                             int64_t step, int state, int s) {
  acc_t z[U][3], c[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t row = r + u * step;
    const int64_t at = row * 3 * state + s;
#pragma unroll
    for (int q = 0; q < 3; ++q) {
      z[u][q] = static_cast<acc_t>(gates[at + q * state]);
    }
    if (sums.data != nullptr) {
      const int64_t ld = sums.ld > 0 ? sums.ld : 3 * static_cast<int64_t>(state);
      for (int p = 0; p < sums.splits; ++p) {
        const acc_t* part = sums.data + (p * batch + row) * ld + s;
#pragma unroll
        for (int q = 0; q < 3; ++q) {
          z[u][q] += part[q * state];
        }
      }
#pragma unroll
      for (int q = 0; q < 3; ++q) {
        sums.total[at + q * state] = static_cast<scalar_t>(z[u][q]);
        z[u][q] = static_cast<acc_t>(static_cast<scalar_t>(z[u][q]));  // as stored
      }
    }
#pragma unroll
    for (int q = 0; q < 3; ++q) {
      z[u][q] += b[q];
    }
    c[u] = old_cell != nullptr ? static_cast<acc_t>(old_cell[row * state + s]) : acc_t(0);
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t row = r + u * step, i = row * state + s;
    const auto out = forward_element<acc_t>(z[u][0], z[u][1], z[u][2], c[u]);
    const scalar_t h = static_cast<scalar_t>(out.new_h);
    new_h[i] = h;
    new_cell[i] = out.new_cell;
    if (copy.data != nullptr) {
      copy.data[row * copy.ld + s] = static_cast<copy_t>(static_cast<acc_t>(h));
    }
  }
}

// Forward: gates (B, 3S) [+ the split product's sums] [+ bias (3S)] and old_cell -> new_h,
// new_cell. bias may be null: the cell's gates include it, the sequence's do not (its kernels add
// it). gates is not __restrict__: with sums, their total is written over it. A thread takes its
// column in rows blockIdx.y, blockIdx.y + gridDim.y, ..., kForwardRows at a time. With copy, new_h
// is also written there, rounded to copy_t.
template <typename scalar_t, typename copy_t>
__global__ void __launch_bounds__(kMaxCols)
    forward_gates_kernel(const scalar_t* gates, const scalar_t* __restrict__ bias,
                         const scalar_t* __restrict__ old_cell, scalar_t* __restrict__ new_h,
                         scalar_t* __restrict__ new_cell, SplitSums<scalar_t> sums,
                         RowCopy<copy_t> copy, int64_t batch, int state) {
  cuda::pdl_wait_then_release();  // launched by launch_dependent
  using acc_t = cuda::opmath_t<scalar_t>;
  const int s = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (s >= state) {
    return;
  }
  acc_t b[3];
  gate_bias(bias, state, s, b);
  const int64_t step = gridDim.y;
  int64_t r = blockIdx.y;
  for (; r + (kForwardRows - 1) * step < batch; r += kForwardRows * step) {
    forward_rows<kForwardRows>(gates, b, old_cell, new_h, new_cell, sums, copy, batch, r, step,
                               state, s);
  }
  for (; r < batch; r += step) {
    forward_rows<1>(gates, b, old_cell, new_h, new_cell, sums, copy, batch, r, step, state, s);
  }
}

// Backward of rows r, r + step, ..., r + (U - 1) step at state column s (bias b); d_gates as
// stored is added to sums (i, o, c) in row order.
template <int U, typename scalar_t, typename acc_t, typename copy_t>
__device__ __forceinline__ void backward_rows(
    const scalar_t* grad_h, int64_t grad_h_ld, const scalar_t* grad_h_extra,
    const scalar_t* grad_cell, const scalar_t* new_cell, const scalar_t* gates, const acc_t (&b)[3],
    scalar_t* d_gates, scalar_t* d_old_cell, acc_t (&sums)[3], const SplitSums<scalar_t>& parts,
    const RowCopy<copy_t>& copy, int64_t batch, int64_t r, int64_t step, int state, int s) {
  acc_t gh[U], gc[U], cell[U], z[U][3];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t row = r + u * step;
    const int64_t i = row * state + s;
    const scalar_t* g = gates + row * 3 * state + s;
    if (parts.data != nullptr) {
      const int64_t ld = parts.ld > 0 ? parts.ld : state;
      gh[u] = parts.data[row * ld + s];
      for (int p = 1; p < parts.splits; ++p) {
        gh[u] += parts.data[(p * batch + row) * ld + s];
      }
    } else {
      gh[u] = grad_h[row * grad_h_ld + s];
    }
    if (grad_h_extra != nullptr) {
      gh[u] += static_cast<acc_t>(grad_h_extra[i]);
    }
    gc[u] = grad_cell != nullptr ? static_cast<acc_t>(grad_cell[i]) : acc_t(0);
    cell[u] = new_cell[i];
#pragma unroll
    for (int q = 0; q < 3; ++q) {
      z[u][q] = static_cast<acc_t>(g[q * state]) + b[q];
    }
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t row = r + u * step;
    const auto d = backward_element<acc_t>(gh[u], gc[u], cell[u], z[u][0], z[u][1], z[u][2]);
    d_old_cell[row * state + s] = d.d_old_cell;
    scalar_t* dg = d_gates + row * 3 * state + s;
    const scalar_t stored[3] = {d.d_z_i, d.d_z_o, d.d_z_c};
#pragma unroll
    for (int q = 0; q < 3; ++q) {
      dg[q * state] = stored[q];
      sums[q] += static_cast<acc_t>(stored[q]);
    }
    if (copy.data != nullptr) {
      copy_t* out = copy.data + row * copy.ld + s;
#pragma unroll
      for (int q = 0; q < 3; ++q) {
        out[q * state] = static_cast<copy_t>(static_cast<acc_t>(stored[q]));
      }
    }
  }
}

// Backward: incoming gradients, new_cell and the pre-activations [+ bias] -> d_gates, d_old_cell;
// grad_h's rows are grad_h_ld apart (or grad_h is the split product's sums, parts), grad_h_extra
// (a second gradient of new_h) and bias may be null. Rows as in forward, kBackwardRows at a time.
// With bias_sums, each thread also sums its column of d_gates over its rows, in row order (the same
// bits run to run), into row blockIdx.y of bias_sums (gridDim.y, 3S) in the accumulate type; a
// single row of blocks writes d_bias itself. With copy, d_gates is also written there, rounded to
// copy_t.
template <typename scalar_t, typename copy_t>
__global__ void __launch_bounds__(kMaxCols)
    backward_gates_kernel(const scalar_t* __restrict__ grad_h, int64_t grad_h_ld,
                          const scalar_t* __restrict__ grad_h_extra,
                          const scalar_t* __restrict__ grad_cell,
                          const scalar_t* __restrict__ new_cell, const scalar_t* __restrict__ gates,
                          const scalar_t* __restrict__ bias, scalar_t* __restrict__ d_gates,
                          scalar_t* __restrict__ d_old_cell,
                          cuda::opmath_t<scalar_t>* __restrict__ bias_sums,
                          scalar_t* __restrict__ d_bias, SplitSums<scalar_t> parts,
                          RowCopy<copy_t> copy, int64_t batch, int state) {
  cuda::pdl_wait_then_release();  // launched by launch_dependent
  using acc_t = cuda::opmath_t<scalar_t>;
  const int s = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (s >= state) {
    return;
  }
  acc_t b[3];
  gate_bias(bias, state, s, b);
  acc_t sums[3] = {0, 0, 0};
  const int64_t step = gridDim.y;
  int64_t r = blockIdx.y;
  for (; r + (kBackwardRows - 1) * step < batch; r += kBackwardRows * step) {
    backward_rows<kBackwardRows>(grad_h, grad_h_ld, grad_h_extra, grad_cell, new_cell, gates, b,
                                 d_gates, d_old_cell, sums, parts, copy, batch, r, step, state, s);
  }
  for (; r < batch; r += step) {
    backward_rows<1>(grad_h, grad_h_ld, grad_h_extra, grad_cell, new_cell, gates, b, d_gates,
                     d_old_cell, sums, parts, copy, batch, r, step, state, s);
  }
  if (gridDim.y == 1 && d_bias != nullptr) {
#pragma unroll
    for (int q = 0; q < 3; ++q) {
      d_bias[q * state + s] = static_cast<scalar_t>(sums[q]);
    }
  } else if (bias_sums != nullptr) {
    acc_t* row = bias_sums + static_cast<int64_t>(blockIdx.y) * 3 * state;
#pragma unroll
    for (int q = 0; q < 3; ++q) {
      row[q * state + s] = sums[q];
    }
  }
}

// d_bias (3S) = the sum of the rows of blocks' partial sums (row_blocks, 3S): a column per lane,
// kRows rows of partial sums at a time, added in a fixed order.
template <typename scalar_t>
__global__ void __launch_bounds__(kCols* kRows)
    bias_sum_kernel(const cuda::opmath_t<scalar_t>* __restrict__ bias_sums,
                    scalar_t* __restrict__ d_bias, int64_t row_blocks, int64_t width) {
  using acc_t = cuda::opmath_t<scalar_t>;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kCols + threadIdx.x;
  acc_t total = 0;
  if (j < width) {
    for (int64_t c = threadIdx.y; c < row_blocks; c += kRows) {
      total += bias_sums[c * width + j];
    }
  }
  __shared__ acc_t part[kRows][kCols];
  part[threadIdx.y][threadIdx.x] = total;
  __syncthreads();
  if (threadIdx.y == 0 && j < width) {
#pragma unroll
    for (int y = 1; y < kRows; ++y) {
      total += part[y][threadIdx.x];
    }
    d_bias[j] = static_cast<scalar_t>(total);
  }
}

// The small cell (launch_fused_forward, launch_fused_backward_products): blocks of kFusedThreads
// threads, kFusedRows batch rows x kFusedCols state columns forward, X and W staged in shared
// memory in tiles of kFusedK columns of K = S + I.
constexpr int kFusedCols = 32, kFusedRows = 8, kFusedK = 32;
constexpr int kFusedThreads = kFusedCols * kFusedRows;
static_assert(kFusedK == kFusedCols, "a thread loads one X element of each tile");

// The cell's forward in one kernel: X = [old_h, input], gates = X W^T + bias, the gate math.
// Block (x, y) takes state columns [32x, 32x + 32) of batch rows [8y, 8y + 8), a thread per (row,
// column) summing its three gates' products over K in order, from tiles of X (read as broadcasts)
// and of the block's 96 rows of W (padded rows: the warp's 32 rows fall in 32 banks). The column
// group 0 blocks also write X for backward. gates get the pre-activations with the bias, rounded
// to scalar_t, and the gate math reads them as stored (as backward recomputes them).
template <typename scalar_t>
__global__ void __launch_bounds__(kFusedThreads)
    fused_forward_kernel(const scalar_t* __restrict__ input, const scalar_t* __restrict__ weights,
                         const scalar_t* __restrict__ bias, const scalar_t* __restrict__ old_h,
                         const scalar_t* __restrict__ old_cell, scalar_t* __restrict__ gates,
                         scalar_t* __restrict__ X, scalar_t* __restrict__ new_h,
                         scalar_t* __restrict__ new_cell, int64_t batch, int state, int features) {
  using acc_t = cuda::opmath_t<scalar_t>;
  __shared__ acc_t sx[kFusedRows][kFusedK];
  __shared__ acc_t sw[3 * kFusedCols][kFusedK + 1];
  const int tid = static_cast<int>(threadIdx.x);
  const int c = tid % kFusedCols, r = tid / kFusedCols;
  const int s = static_cast<int>(blockIdx.x) * kFusedCols + c;
  const int64_t row = static_cast<int64_t>(blockIdx.y) * kFusedRows + r;
  const int K = state + features;
  acc_t acc[3] = {acc_t(0), acc_t(0), acc_t(0)};
  for (int k0 = 0; k0 < K; k0 += kFusedK) {
    const int k = k0 + c;  // this thread's element of the X tile: row r, column c
    acc_t xv = acc_t(0);
    if (row < batch && k < K) {
      const scalar_t v = k < state ? old_h[row * state + k] : input[row * features + (k - state)];
      if (blockIdx.x == 0) {
        X[row * K + k] = v;
      }
      xv = static_cast<acc_t>(v);
    }
    sx[r][c] = xv;
    for (int e = tid; e < 3 * kFusedCols * kFusedK; e += kFusedThreads) {
      const int o = e / kFusedK, kk = e % kFusedK;  // W tile row o: gate o / 32, column o % 32
      const int ws = static_cast<int>(blockIdx.x) * kFusedCols + o % kFusedCols;
      sw[o][kk] =
          ws < state && k0 + kk < K
              ? static_cast<acc_t>(
                    weights[static_cast<int64_t>(o / kFusedCols * state + ws) * K + k0 + kk])
              : acc_t(0);
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < kFusedK; ++kk) {
      const acc_t x = sx[r][kk];
#pragma unroll
      for (int q = 0; q < 3; ++q) {
        acc[q] += x * sw[q * kFusedCols + c][kk];
      }
    }
    __syncthreads();
  }
  if (row < batch && s < state) {
    acc_t z[3];
    scalar_t* g = gates + row * 3 * state + s;
#pragma unroll
    for (int q = 0; q < 3; ++q) {
      const scalar_t stored =
          static_cast<scalar_t>(acc[q] + static_cast<acc_t>(bias[q * state + s]));
      g[q * state] = stored;
      z[q] = static_cast<acc_t>(stored);
    }
    const int64_t i = row * state + s;
    const auto out = forward_element<acc_t>(z[0], z[1], z[2], static_cast<acc_t>(old_cell[i]));
    new_h[i] = out.new_h;
    new_cell[i] = out.new_cell;
  }
}

// The small cell's backward products in one kernel, two kinds of blocks:
// - the first w_blocks: d_weights (3S, K) = d_gates^T X and d_bias (3S) = d_gates^T 1 (X's
//   column K taken as ones), a thread per output (gate row j, column k) summing over the batch in
//   row order; a block covers 8 gate rows x 32 columns (a warp: one row, 32 columns).
// - the rest: d_X (B, K) = d_gates W, a block per (batch row, 32 columns), its 8 warps summing
//   the gate rows j = w, w + 8, ... in order, then warp 0 adding the 8 partial sums in order.
// Every sum in a fixed order: the same bits run to run.
template <typename scalar_t>
__global__ void __launch_bounds__(kFusedThreads)
    fused_backward_products_kernel(const scalar_t* __restrict__ d_gates,
                                   const scalar_t* __restrict__ X,
                                   const scalar_t* __restrict__ weights, scalar_t* __restrict__ d_X,
                                   scalar_t* __restrict__ d_weights, scalar_t* __restrict__ d_bias,
                                   int64_t batch, int state, int features, int64_t w_blocks) {
  using acc_t = cuda::opmath_t<scalar_t>;
  const int K = state + features, width = 3 * state;
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int64_t block = blockIdx.x;
  if (block < w_blocks) {
    const int64_t k_tiles = (K + 1 + 31) / 32;
    const int j = static_cast<int>(block / k_tiles) * 8 + warp;
    const int k = static_cast<int>(block % k_tiles) * 32 + lane;
    if (j >= width || k > K) {
      return;
    }
    acc_t sum = acc_t(0);
    if (k < K) {
      for (int64_t b = 0; b < batch; ++b) {
        sum += static_cast<acc_t>(d_gates[b * width + j]) * static_cast<acc_t>(X[b * K + k]);
      }
      d_weights[static_cast<int64_t>(j) * K + k] = static_cast<scalar_t>(sum);
    } else {
      for (int64_t b = 0; b < batch; ++b) {
        sum += static_cast<acc_t>(d_gates[b * width + j]);
      }
      d_bias[j] = static_cast<scalar_t>(sum);
    }
    return;
  }
  const int64_t x_block = block - w_blocks;
  const int64_t k_tiles = (K + 31) / 32;
  const int64_t row = x_block / k_tiles;
  const int k = static_cast<int>(x_block % k_tiles) * 32 + lane;
  acc_t sum = acc_t(0);
  if (k < K) {
    const scalar_t* dg = d_gates + row * width;
    for (int j = warp; j < width; j += 8) {
      sum +=
          static_cast<acc_t>(dg[j]) * static_cast<acc_t>(weights[static_cast<int64_t>(j) * K + k]);
    }
  }
  __shared__ acc_t part[8][32];
  part[warp][lane] = sum;
  __syncthreads();
  if (warp == 0 && k < K) {
#pragma unroll
    for (int w = 1; w < 8; ++w) {
      sum += part[w][lane];
    }
    d_X[row * K + k] = static_cast<scalar_t>(sum);
  }
}

// A gate kernel's threads per block: the state's columns rounded up to whole warps, at most 256.
unsigned int column_threads(int64_t state) {
  return static_cast<unsigned int>(std::min<int64_t>(kMaxCols, (state + 31) / 32 * 32));
}
unsigned int column_blocks(int64_t state) {
  return static_cast<unsigned int>((state + column_threads(state) - 1) / column_threads(state));
}

// Blocks of gate kernel `kernel` with `threads` threads (a multiple of 32, at most 256) that one
// SM holds at once on the current device (cached per kernel, device and block size: a grid of one
// full wave needs it, and the kernel's registers decide it).
template <auto kernel>
int resident_blocks(unsigned int threads) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    return 1;
  }
  constexpr int kSizes = kMaxCols / 32;
  static std::array<std::atomic<int>, 64 * kSizes> cache{};
  const int key = device * kSizes + static_cast<int>(threads / 32) - 1;
  std::atomic<int>* slot = key < static_cast<int>(cache.size()) ? &cache[key] : nullptr;
  int blocks = slot != nullptr ? slot->load(std::memory_order_relaxed) : 0;
  if (blocks == 0) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, static_cast<int>(threads),
                                                      0) != cudaSuccess ||
        blocks < 1) {
      (void)cudaGetLastError();  // a failed query leaves no error behind: one block per SM
      blocks = 1;
    }
    if (slot != nullptr) {
      slot->store(blocks, std::memory_order_relaxed);
    }
  }
  return blocks;
}

// Rows of blocks that make one full wave of `kernel` for `state` columns (at least 1).
template <auto kernel>
int64_t full_wave_rows(int64_t state, int sm_count) {
  return std::max<int64_t>(1, static_cast<int64_t>(sm_count) *
                                  resident_blocks<kernel>(column_threads(state)) /
                                  column_blocks(state));
}

}  // namespace

template <typename T>
int64_t backward_row_blocks(int64_t batch, int64_t state, int sm_count, bool bias_grad) {
  // Without the bias gradient, a row of blocks per row (up to gridDim.y's limit). With it, one
  // full wave of blocks (as many as the GPU holds at once: a second, partial wave would cost a
  // whole block's rows more time), each summing its rows, so few partial sums are left to add.
  const int64_t wanted =
      bias_grad ? full_wave_rows<backward_gates_kernel<T, T>>(state, sm_count) : batch;
  return std::max<int64_t>(1, std::min<int64_t>({wanted, batch, kMaxRowBlocks}));
}

template <typename T, typename C>
cudaError_t launch_forward_gates(const T* gates, const T* bias, const T* old_cell, T* new_h,
                                 T* new_cell, int64_t n, int64_t state, int sm_count,
                                 cudaStream_t stream, SplitSums<T> sums, RowCopy<C> copy) {
  if (n == 0) {
    return cudaSuccess;
  }
  // One full wave of blocks (at most a row of blocks per row), each taking its rows in rounds.
  const int64_t batch = n / state;
  const int64_t rows = std::min<int64_t>(
      {batch, full_wave_rows<forward_gates_kernel<T, C>>(state, sm_count), kMaxRowBlocks});
  const dim3 grid(column_blocks(state), static_cast<unsigned int>(rows));
  // Each step's gate kernel follows its product: launched to start as that one ends.
  return cuda::launch_dependent(forward_gates_kernel<T, C>, grid, dim3(column_threads(state)), 0,
                                stream, gates, bias, old_cell, new_h, new_cell, sums, copy, batch,
                                static_cast<int>(state));
}

template <typename T, typename C>
cudaError_t launch_backward_gates(const T* grad_h, int64_t grad_h_ld, const T* grad_h_extra,
                                  const T* grad_cell, const T* new_cell, const T* gates,
                                  const T* bias, T* d_gates, T* d_old_cell,
                                  cuda::opmath_t<T>* bias_sums, T* d_bias, int64_t n, int64_t state,
                                  int sm_count, cudaStream_t stream, SplitSums<T> sums,
                                  RowCopy<C> copy) {
  if (n == 0) {
    return cudaSuccess;
  }
  const int64_t batch = n / state;
  const dim3 grid(column_blocks(state), static_cast<unsigned int>(backward_row_blocks<T>(
                                            batch, state, sm_count, d_bias != nullptr)));
  cudaError_t err = cuda::launch_dependent(
      backward_gates_kernel<T, C>, grid, dim3(column_threads(state)), 0, stream, grad_h, grad_h_ld,
      grad_h_extra, grad_cell, new_cell, gates, bias, d_gates, d_old_cell, bias_sums, d_bias, sums,
      copy, batch, static_cast<int>(state));
  if (err == cudaSuccess && d_bias != nullptr && grid.y > 1) {
    const int64_t width = 3 * state;
    bias_sum_kernel<T>
        <<<static_cast<unsigned int>((width + kCols - 1) / kCols), dim3(kCols, kRows), 0, stream>>>(
            bias_sums, d_bias, grid.y, width);
    err = cudaGetLastError();
  }
  return err;
}

template <typename T>
cudaError_t launch_fused_forward(const T* input, const T* weights, const T* bias, const T* old_h,
                                 const T* old_cell, T* gates, T* X, T* new_h, T* new_cell,
                                 int64_t batch, int64_t state, int64_t features,
                                 cudaStream_t stream) {
  if (batch == 0 || state == 0) {
    return cudaSuccess;
  }
  const dim3 grid(static_cast<unsigned int>((state + kFusedCols - 1) / kFusedCols),
                  static_cast<unsigned int>((batch + kFusedRows - 1) / kFusedRows));
  fused_forward_kernel<T><<<grid, kFusedThreads, 0, stream>>>(
      input, weights, bias, old_h, old_cell, gates, X, new_h, new_cell, batch,
      static_cast<int>(state), static_cast<int>(features));
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_fused_backward_products(const T* d_gates, const T* X, const T* weights, T* d_X,
                                           T* d_weights, T* d_bias, int64_t batch, int64_t state,
                                           int64_t features, cudaStream_t stream) {
  if (state == 0) {
    return cudaSuccess;
  }
  const int64_t k = state + features;
  const int64_t w_blocks = (3 * state + 7) / 8 * ((k + 1 + 31) / 32);
  const int64_t x_blocks = batch * ((k + 31) / 32);
  fused_backward_products_kernel<T>
      <<<static_cast<unsigned int>(w_blocks + x_blocks), kFusedThreads, 0, stream>>>(
          d_gates, X, weights, d_X, d_weights, d_bias, batch, static_cast<int>(state),
          static_cast<int>(features), w_blocks);
  return cudaGetLastError();
}

#define LLTM_EXT_INSTANTIATE_GATES(T, C)                                                         \
  template cudaError_t launch_forward_gates<T, C>(const T*, const T*, const T*, T*, T*, int64_t, \
                                                  int64_t, int, cudaStream_t, SplitSums<T>,      \
                                                  RowCopy<C>);                                   \
  template cudaError_t launch_backward_gates<T, C>(                                              \
      const T*, int64_t, const T*, const T*, const T*, const T*, const T*, T*, T*,               \
      cuda::opmath_t<T>*, T*, int64_t, int64_t, int, cudaStream_t, SplitSums<T>, RowCopy<C>);
LLTM_EXT_INSTANTIATE_GATES(float, c10::Half)
LLTM_EXT_INSTANTIATE_GATES(float, c10::BFloat16)

#define LLTM_EXT_INSTANTIATE(T)                                                                    \
  LLTM_EXT_INSTANTIATE_GATES(T, T)                                                                 \
  template int64_t backward_row_blocks<T>(int64_t, int64_t, int, bool);                            \
  template cudaError_t launch_fused_forward<T>(const T*, const T*, const T*, const T*, const T*,   \
                                               T*, T*, T*, T*, int64_t, int64_t, int64_t,          \
                                               cudaStream_t);                                      \
  template cudaError_t launch_fused_backward_products<T>(const T*, const T*, const T*, T*, T*, T*, \
                                                         int64_t, int64_t, int64_t, cudaStream_t);
LLTM_EXT_FOR_FLOATING_TYPES(LLTM_EXT_INSTANTIATE)

}  // namespace lltm_ext::lltm
