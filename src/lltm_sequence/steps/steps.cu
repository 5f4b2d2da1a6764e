// The sequence's fused step kernels (any GPU, S <= kFusedStepMaxState): the recurrent product and
// the gate math of a time step in one kernel, all steps in one cooperative launch where the grid
// fits on the GPU at once, else one launch per step; their launchers.
#include <cooperative_groups.h>

#include <algorithm>
#include <cstdint>

#include "common/cuda_kernel.cuh"
#include "lltm_sequence/sequence_launchers.h"
#include "lltm_sequence/sequence_loads.cuh"
#include "lltm_sequence/sequence_step.cuh"

namespace lltm_ext::lltm {
namespace {

// The sequence's fused time steps for small state sizes: the recurrent product and the gate math
// in one kernel (cuBLAS would take a GEMM, often split-K with its reduction, and a gate kernel per
// step, each with its host cost, for a product of a few hundred thousand multiply-adds). A block
// computes kStepRows batch rows x kStepCols state columns, all three gates, one (row, column) per
// thread, on the SIMT cores in acc_t, with its columns of W_h (which no step writes) copied once
// into shared memory. A kernel runs `steps` consecutive time steps: all of them in one cooperative
// launch where the grid fits on the GPU at once (a grid-wide barrier between steps: the persistent
// RNN of Diamos et al., 2016), else one launch per step, with programmatic stream serialization on
// sm_90+ (a step copies its weights while the step before it runs). Padded shared rows: no bank
// conflicts. Data other blocks wrote in an earlier step is read with ld.global.cg (L2, not a stale
// L1 line).
constexpr int kStepCols = 16, kStepRows = 8, kStepThreads = kStepCols * kStepRows;

// Shared memory of the step kernels, in elements of acc_t: W_h's columns [3S][kStepCols + 1] and
// the rows of h_{t-1} (forward, S + 1 each) or d_gates_{t+1} (backward, 3S + 1 each).
LLTM_EXT_HD int64_t forward_step_smem(int64_t state) {
  return 3 * state * (kStepCols + 1) + kStepRows * (state + 1);
}
LLTM_EXT_HD int64_t backward_step_smem(int64_t state) {
  return 3 * state * (kStepCols + 1) + kStepRows * (3 * state + 1);
}

// Steps t0 .. t0 + steps - 1 forward: z = gates_t (the input projection, in) + h_{t-1} W_h^T,
// written back to gates_t (the saved pre-activations), then the gate math with the bias -> h_t
// (output[t]), c_t (cells[t]). w is (3S, ld), W_h its first S columns; h_{-1}, c_{-1} = h0, c0.
template <typename scalar_t>
__global__ void __launch_bounds__(kStepThreads)
    sequence_forward_kernel(scalar_t* __restrict__ gates, const scalar_t* __restrict__ bias,
                            const scalar_t* __restrict__ h0, const scalar_t* __restrict__ c0,
                            const scalar_t* __restrict__ w, int64_t ld,
                            scalar_t* __restrict__ output, scalar_t* __restrict__ cells,
                            int64_t batch, int state, int64_t t0, int64_t steps) {
  using acc_t = cuda::opmath_t<scalar_t>;
  extern __shared__ unsigned char smem[];
  acc_t* sw = reinterpret_cast<acc_t*>(smem);    // [3S][kStepCols + 1]: W_h^T's columns
  acc_t* sh = sw + 3 * state * (kStepCols + 1);  // [kStepRows][S + 1]: h_{t-1} rows
  const int col = threadIdx.x % kStepCols, row = threadIdx.x / kStepCols;
  const int s0 = blockIdx.x * kStepCols;
  const int64_t b0 = static_cast<int64_t>(blockIdx.y) * kStepRows;
#pragma unroll 8  // several loads in flight per thread: the copy is latency-bound
  for (int e = threadIdx.x; e < 3 * kStepCols * state; e += kStepThreads) {
    const int g = e / (kStepCols * state), c = e / state % kStepCols, k = e % state;
    sw[(g * state + k) * (kStepCols + 1) + c] =
        s0 + c < state ? static_cast<acc_t>(w[(static_cast<int64_t>(g) * state + s0 + c) * ld + k])
                       : acc_t(0);
  }
  cuda::pdl_wait_then_release();  // launched as a programmatic dependent launch
  const int s = s0 + col;
  const int64_t b = b0 + row;
  const int64_t n = batch * state;
  const int gate_stride = state * (kStepCols + 1);
  // This thread's own operands need no other block: the bias, and c_{t-1} carried from the step
  // before (or read once: c0, or the previous launch's cells).
  StepElement<acc_t> my = step_element<acc_t>(b, s, s < state && b < batch, state, bias,
                                              t0 == 0 ? c0 : cells + (t0 - 1) * n);
  for (int64_t t = t0; t < t0 + steps; ++t) {
    scalar_t* g = gates + t * 3 * n + b * 3 * state + s;
    acc_t projection[3] = {0, 0, 0};  // the input projection (the product before the kernel)
    if (my.mine) {
      read_gates(g, state, projection);
    }
    if (t > t0) {
      cooperative_groups::this_grid().sync();  // step t - 1 done everywhere
    }
    const scalar_t* h_prev = t == 0 ? h0 : output + (t - 1) * n;
#pragma unroll 8
    for (int e = threadIdx.x; e < kStepRows * state; e += kStepThreads) {
      const int r = e / state, k = e % state;
      sh[r * (state + 1) + k] = b0 + r < batch && h_prev != nullptr
                                    ? static_cast<acc_t>(load_cg(h_prev + (b0 + r) * state + k))
                                    : acc_t(0);
    }
    __syncthreads();
    if (my.mine) {
      const acc_t* hr = sh + row * (state + 1);
      const acc_t* wc = sw + col;
      acc_t acc[3] = {0, 0, 0};
#pragma unroll 4
      for (int k = 0; k < state; ++k) {
        const acc_t hv = hr[k];
        const acc_t* wk = wc + k * (kStepCols + 1);
        acc[0] += hv * wk[0];
        acc[1] += hv * wk[gate_stride];
        acc[2] += hv * wk[2 * gate_stride];
      }
      const acc_t pre[3] = {acc[0] + projection[0], acc[1] + projection[1], acc[2] + projection[2]};
      const auto r = forward_step<scalar_t>(pre, my.bias, my.carried);
      write_gates(g, state, r.saved);
      output[t * n + my.j] = r.h;
      cells[t * n + my.j] = r.c;
      my.carried = static_cast<acc_t>(r.c);
    }
    __syncthreads();  // sh is rewritten next step
  }
}

// Steps t_hi, t_hi - 1, ..., t_hi - steps + 1 backward: dL/dh_t = grad_output[t] + (grad_h_n at
// the last step T - 1, else d_gates[t + 1] W_h), dL/dc_t = grad_c_n at the last step, else from
// step t + 1; the gate math -> d_gates[t] and dL/dc_{t-1}. d_cell (2, B, S): step t writes
// d_cell[t % 2] and reads d_cell[(t + 1) % 2] (written by this thread).
template <typename scalar_t>
__global__ void __launch_bounds__(kStepThreads)
    sequence_backward_kernel(scalar_t* __restrict__ d_gates, const scalar_t* __restrict__ w,
                             int64_t ld, const scalar_t* __restrict__ grad_output,
                             const scalar_t* __restrict__ grad_h_n,
                             const scalar_t* __restrict__ grad_c_n,
                             const scalar_t* __restrict__ cells, const scalar_t* __restrict__ gates,
                             const scalar_t* __restrict__ bias, scalar_t* __restrict__ d_cell,
                             int64_t batch, int state, int64_t last, int64_t t_hi, int64_t steps) {
  using acc_t = cuda::opmath_t<scalar_t>;
  extern __shared__ unsigned char smem[];
  const int width = 3 * state;
  acc_t* sw = reinterpret_cast<acc_t*>(smem);  // [3S][kStepCols + 1]: W_h's columns
  acc_t* sd = sw + width * (kStepCols + 1);    // [kStepRows][3S + 1]: d_gates[t + 1] rows
  const int col = threadIdx.x % kStepCols, row = threadIdx.x / kStepCols;
  const int s0 = blockIdx.x * kStepCols;
  const int64_t b0 = static_cast<int64_t>(blockIdx.y) * kStepRows;
#pragma unroll 8
  for (int e = threadIdx.x; e < width * kStepCols; e += kStepThreads) {
    const int j = e / kStepCols, c = e % kStepCols;
    sw[j * (kStepCols + 1) + c] =
        s0 + c < state ? static_cast<acc_t>(w[static_cast<int64_t>(j) * ld + s0 + c]) : acc_t(0);
  }
  cuda::pdl_wait_then_release();  // launched as a programmatic dependent launch
  const int s = s0 + col;
  const int64_t b = b0 + row;
  const int64_t n = batch * state;
  // This thread's own operands: the bias, and dL/dc_t carried from the step after (or read once:
  // grad_c_n at the last step, else the previous launch's d_cell).
  StepElement<acc_t> my =
      step_element<acc_t>(b, s, s < state && b < batch, state, bias,
                          t_hi == last ? grad_c_n : d_cell + ((t_hi + 1) % 2) * n);
  const int64_t j = my.j;
  for (int64_t t = t_hi; t > t_hi - steps; --t) {
    const bool first = t == last;  // the sequence's last step: no step after it
    // Step t's own operands, read before waiting for the other blocks.
    BackwardOperands<acc_t> op = {};
    if (my.mine) {
      op = backward_operands(gates + t * 3 * n + b * width + s, state, my.bias,
                             grad_output + t * n + j, grad_h_n, j, first, cells + t * n + j);
    }
    if (t < t_hi) {
      cooperative_groups::this_grid().sync();  // step t + 1 done everywhere
    }
    if (!first) {
      const scalar_t* dg_next = d_gates + (t + 1) * 3 * n;
#pragma unroll 8
      for (int e = threadIdx.x; e < kStepRows * width; e += kStepThreads) {
        const int r = e / width, k = e % width;
        sd[r * (width + 1) + k] =
            b0 + r < batch ? static_cast<acc_t>(load_cg(dg_next + (b0 + r) * width + k)) : acc_t(0);
      }
    }
    __syncthreads();
    if (my.mine) {
      if (!first) {  // + d_gates[t + 1] W_h, four partial sums (independent FMA chains)
        const acc_t* dr = sd + row * (width + 1);
        const acc_t* wc = sw + col;
        acc_t part[4] = {0, 0, 0, 0};
        int k = 0;
        for (; k + 4 <= width; k += 4) {
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            part[u] += dr[k + u] * wc[(k + u) * (kStepCols + 1)];
          }
        }
        for (; k < width; ++k) {
          part[0] += dr[k] * wc[k * (kStepCols + 1)];
        }
        op.grad_h += (part[0] + part[1]) + (part[2] + part[3]);
      }
      const auto r = backward_step<scalar_t>(op, my.carried);
      d_cell[(t % 2) * n + j] = r.d_cell;
      my.carried = static_cast<acc_t>(r.d_cell);
      write_gates(d_gates + t * 3 * n + b * width + s, state, r.d_z);
    }
    __syncthreads();  // sd is rewritten next step
  }
}

dim3 step_grid(int64_t batch, int64_t state) {
  return dim3(static_cast<unsigned int>((state + kStepCols - 1) / kStepCols),
              static_cast<unsigned int>((batch + kStepRows - 1) / kStepRows));
}

// Launches `kernel` for all steps at once (cooperative) when `steps` > 1, else one step, with
// programmatic stream serialization where `overlap`.
template <typename Kernel, typename... Args>
cudaError_t launch_steps(Kernel kernel, int64_t batch, int64_t state, size_t smem, bool all,
                         bool overlap, cudaStream_t stream, Args... args) {
  const dim3 grid = step_grid(batch, state), block(kStepThreads);
  if (all) {
    void* params[] = {static_cast<void*>(&args)...};
    return cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(kernel), grid, block, params,
                                       smem, stream);
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = overlap ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, args...);
}

}  // namespace

int64_t sequence_step_smem_bytes(int64_t state, int64_t element_size) {
  const int64_t acc = element_size == 8 ? 8 : 4;  // opmath: double, else float
  return std::max(forward_step_smem(state), backward_step_smem(state)) * acc;
}

template <typename T>
cudaError_t prepare_sequence_steps(int64_t batch, int64_t state, int sm_count, bool* all_at_once) {
  const int smem = static_cast<int>(sequence_step_smem_bytes(state, sizeof(T)));
  const void* kernels[] = {reinterpret_cast<const void*>(sequence_forward_kernel<T>),
                           reinterpret_cast<const void*>(sequence_backward_kernel<T>)};
  const dim3 grid = step_grid(batch, state);
  const int64_t blocks = static_cast<int64_t>(grid.x) * grid.y;
  int device = 0, cooperative = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status == cudaSuccess) {
    status = cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device);
  }
  if (status != cudaSuccess) {
    return status;
  }
  *all_at_once = cooperative != 0;
  for (const void* kernel : kernels) {
    cudaError_t err =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    int per_sm = 0;
    if (err == cudaSuccess) {
      err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kStepThreads, smem);
    }
    if (err != cudaSuccess) {
      return err;
    }
    *all_at_once = *all_at_once && blocks <= static_cast<int64_t>(per_sm) * sm_count;
  }
  return cudaSuccess;
}

template <typename T>
cudaError_t launch_sequence_forward_steps(T* gates, const T* bias, const T* h0, const T* c0,
                                          const T* w, int64_t ld, T* output, T* cells,
                                          int64_t batch, int64_t state, int64_t t0, int64_t steps,
                                          bool overlap, cudaStream_t stream) {
  const size_t smem = forward_step_smem(state) * sizeof(cuda::opmath_t<T>);
  return launch_steps(sequence_forward_kernel<T>, batch, state, smem, steps > 1, overlap, stream,
                      gates, bias, h0, c0, w, ld, output, cells, batch, static_cast<int>(state), t0,
                      steps);
}

template <typename T>
cudaError_t launch_sequence_backward_steps(T* d_gates, const T* w, int64_t ld, const T* grad_output,
                                           const T* grad_h_n, const T* grad_c_n, const T* cells,
                                           const T* gates, const T* bias, T* d_cell, int64_t batch,
                                           int64_t state, int64_t last, int64_t t_hi, int64_t steps,
                                           bool overlap, cudaStream_t stream) {
  const size_t smem = backward_step_smem(state) * sizeof(cuda::opmath_t<T>);
  return launch_steps(sequence_backward_kernel<T>, batch, state, smem, steps > 1, overlap, stream,
                      d_gates, w, ld, grad_output, grad_h_n, grad_c_n, cells, gates, bias, d_cell,
                      batch, static_cast<int>(state), last, t_hi, steps);
}

#define LLTM_EXT_INSTANTIATE(T)                                                               \
  template cudaError_t prepare_sequence_steps<T>(int64_t, int64_t, int, bool*);               \
  template cudaError_t launch_sequence_forward_steps<T>(                                      \
      T*, const T*, const T*, const T*, const T*, int64_t, T*, T*, int64_t, int64_t, int64_t, \
      int64_t, bool, cudaStream_t);                                                           \
  template cudaError_t launch_sequence_backward_steps<T>(                                     \
      T*, const T*, int64_t, const T*, const T*, const T*, const T*, const T*, const T*, T*,  \
      int64_t, int64_t, int64_t, int64_t, int64_t, bool, cudaStream_t);
LLTM_EXT_FOR_FLOATING_TYPES(LLTM_EXT_INSTANTIATE)

}  // namespace lltm_ext::lltm
