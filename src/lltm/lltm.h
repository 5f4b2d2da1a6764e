// The LLTM cell's per-element gate math (shared by the CPU and CUDA kernels) and kernel entry
// points.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/macros.h"

#ifdef WITH_CUDA
#include <cuda_runtime_api.h>

#include "common/cuda_kernel.cuh"
#endif

namespace at {
class Tensor;
}  // namespace at

namespace lltm_ext::lltm {

LLTM_EXT_HD float exp_(float x) {
  return expf(x);
}
LLTM_EXT_HD double exp_(double x) {
  return exp(x);
}
LLTM_EXT_HD float expm1_(float x) {
  return expm1f(x);
}
LLTM_EXT_HD double expm1_(double x) {
  return expm1(x);
}
LLTM_EXT_HD float tanh_(float x) {
  return tanhf(x);
}
LLTM_EXT_HD double tanh_(double x) {
  return tanh(x);
}

// The scalar math of the C library (CUDA's device functions on the GPU). The CPU kernels use a
// policy with the same members whose code the compiler vectorizes (lltm_cpu.cpp).
struct LibmMath {
  template <typename T>
  LLTM_EXT_HD static T exp(T x) {
    return exp_(x);
  }
  template <typename T>
  LLTM_EXT_HD static T expm1(T x) {
    return expm1_(x);
  }
  template <typename T>
  LLTM_EXT_HD static T tanh(T x) {
    return tanh_(x);
  }
  template <typename T>
  LLTM_EXT_HD static T select(bool c, T a, T b) {
    return c ? a : b;
  }
};

template <typename T>
struct GateValues {
  T input_gate, output_gate, candidate_cell;
};

// The gates from their pre-activations (z_i, z_o, z_c), forward and again in backward. Sigmoid is
// 1 / (1 + e^-z): for z -> -inf, e^-z -> inf and the result -> 0, never NaN. ELU with alpha = 1.
template <typename T, typename Math = LibmMath>
LLTM_EXT_HD GateValues<T> gate_values(T z_i, T z_o, T z_c) {
  return {T(1) / (T(1) + Math::exp(-z_i)), T(1) / (T(1) + Math::exp(-z_o)),
          Math::select(z_c > T(0), z_c, Math::expm1(z_c))};
}

// State column s's bias of the three gates, in acc_t: bias (3S) holds the input gates' S values,
// then the output gates', then the candidates'; zeros when bias is null (the cell's products
// include it already).
template <typename acc_t, typename scalar_t>
LLTM_EXT_HD void gate_bias(const scalar_t* bias, int64_t state, int64_t s, acc_t (&b)[3]) {
  for (int q = 0; q < 3; ++q) {
    b[q] = bias != nullptr ? static_cast<acc_t>(bias[q * state + s]) : acc_t(0);
  }
}

template <typename T>
struct ForwardElement {
  T new_h, new_cell;
};

// Gate pre-activations (z_i, z_o, z_c) and the old cell state -> the cell's outputs.
template <typename T, typename Math = LibmMath>
LLTM_EXT_HD ForwardElement<T> forward_element(T z_i, T z_o, T z_c, T old_cell) {
  const GateValues<T> g = gate_values<T, Math>(z_i, z_o, z_c);
  ForwardElement<T> r;
  r.new_cell = old_cell + g.candidate_cell * g.input_gate;
  r.new_h = Math::tanh(r.new_cell) * g.output_gate;
  return r;
}

template <typename T>
struct BackwardElement {
  T d_old_cell, d_z_i, d_z_o, d_z_c;
};

// Gradients of the gate pre-activations and of old_cell, from the saved pre-activations
// (z_i, z_o, z_c) and new_cell: the gates are recomputed (forward writes only new_h and new_cell).
// sigmoid' = s (1 - s); ELU' = 1 for z > 0, else e^z = candidate + 1 (what torch's ELU uses at 0).
template <typename T, typename Math = LibmMath>
LLTM_EXT_HD BackwardElement<T> backward_element(T grad_h, T grad_cell, T new_cell, T z_i, T z_o,
                                                T z_c) {
  const auto [input_gate, output_gate, candidate_cell] = gate_values<T, Math>(z_i, z_o, z_c);
  const T t = Math::tanh(new_cell);
  const T d_new_cell = (T(1) - t * t) * output_gate * grad_h + grad_cell;
  const T d_elu = Math::select(candidate_cell > T(0), T(1), candidate_cell + T(1));
  BackwardElement<T> r;
  r.d_old_cell = d_new_cell;
  r.d_z_i = candidate_cell * d_new_cell * input_gate * (T(1) - input_gate);
  r.d_z_o = t * grad_h * output_gate * (T(1) - output_gate);
  r.d_z_c = input_gate * d_new_cell * d_elu;
  return r;
}

// gates (B, 3S) [+ bias (3S), when defined] and old_cell (B, S) -> new_h, new_cell (B, S), all
// written.
void forward_gates_cpu(const at::Tensor& gates, const at::Tensor& bias, const at::Tensor& old_cell,
                       const at::Tensor& new_h, const at::Tensor& new_cell);

// Incoming gradients, new_cell (B, S) and the gate pre-activations (B, 3S) [+ bias (3S), when
// defined] -> d_gates (B, 3S) and d_old_cell (B, S), all written. grad_h's rows are grad_h_ld
// elements apart (it may be a column block of a larger matrix); grad_h_extra, when defined, is a
// second (B, S) gradient of new_h added to it (the sequence's output gradient beside the
// recurrent one).
void backward_gates_cpu(const at::Tensor& grad_h, int64_t grad_h_ld, const at::Tensor& grad_h_extra,
                        const at::Tensor& grad_cell, const at::Tensor& new_cell,
                        const at::Tensor& gates, const at::Tensor& bias, const at::Tensor& d_gates,
                        const at::Tensor& d_old_cell);

// d_bias (3S) = the column sums of d_gates (B, 3S), each column added up row by row in double:
// the same bits for any thread count.
void bias_grad_cpu(const at::Tensor& d_gates, const at::Tensor& d_bias);

// The same on the tensors' device: forward_gates_cpu / backward_gates_cpu, or on CUDA (device
// guard, current stream, dtype dispatch, launch check) the kernels below; a CUDA tensor in a
// build without CUDA raises.
void forward_gates(const at::Tensor& gates, const at::Tensor& bias, const at::Tensor& old_cell,
                   const at::Tensor& new_h, const at::Tensor& new_cell);
// backward_gates also writes d_bias (3S), the column sums of d_gates, when it is defined (fused
// into the CUDA kernel; a reduction after the CPU one).
void backward_gates(const at::Tensor& grad_h, int64_t grad_h_ld, const at::Tensor& grad_h_extra,
                    const at::Tensor& grad_cell, const at::Tensor& new_cell,
                    const at::Tensor& gates, const at::Tensor& bias, const at::Tensor& d_gates,
                    const at::Tensor& d_old_cell, const at::Tensor& d_bias);

// c = a @ b + beta c (beta 0 or 1) on the tensors' device (lltm.cpp): cuBLAS on CUDA (gemm_cuda),
// ATen on the CPU; a, b, c 2-D views with unit stride in one dimension.
void gemm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, double beta, bool tf32);

// The sequence's time loops on CUDA (sequence_forward_cuda / sequence_backward_cuda below), or,
// in a build without CUDA, its error (lltm.cpp: the binding is the one file compiled apart for the
// CPU-only twin of a CUDA module).
void sequence_forward_on_cuda(const at::Tensor& input, const at::Tensor& weights,
                              const at::Tensor& bias, const at::Tensor& h0, const at::Tensor& c0,
                              const at::Tensor& output, const at::Tensor& cells,
                              const at::Tensor& gates, bool tf32);
void sequence_backward_on_cuda(const at::Tensor& grad_output, const at::Tensor& grad_h_n,
                               const at::Tensor& grad_c_n, const at::Tensor& weights,
                               const at::Tensor& bias, const at::Tensor& cells,
                               const at::Tensor& gates, const at::Tensor& d_gates,
                               const at::Tensor& d_h, const at::Tensor& d_c, bool tf32);

#ifdef WITH_CUDA
// CUDA halves of forward_gates / backward_gates (lltm_cuda_host.cpp).
void forward_gates_cuda(const at::Tensor& gates, const at::Tensor& bias, const at::Tensor& old_cell,
                        const at::Tensor& new_h, const at::Tensor& new_cell);
void backward_gates_cuda(const at::Tensor& grad_h, int64_t grad_h_ld,
                         const at::Tensor& grad_h_extra, const at::Tensor& grad_cell,
                         const at::Tensor& new_cell, const at::Tensor& gates,
                         const at::Tensor& bias, const at::Tensor& d_gates,
                         const at::Tensor& d_old_cell, const at::Tensor& d_bias);

// c (M x N) = a (M x K) @ b (K x N) + beta c, through cuBLAS on the current stream of c's device;
// each of a, b, c a 2-D view with unit stride in one dimension (a transpose or a column block of
// a larger matrix is read in place). float32 products use TF32 tensor cores when `tf32`; half
// types accumulate in float32. K = 0 leaves beta c (zeros for beta = 0).
void gemm_cuda(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, double beta,
               bool tf32);

// The sequence's time loops on CUDA (lltm_sequence.cpp has the shapes). Forward: gates (T, B, 3S)
// = input W_i^T in one product, then per step gates[t] += h_{t-1} W_h^T and the gate kernel (bias
// (3S) added there) -> output[t], cells[t]. Backward: per step t = T-1..0 the gate kernel ->
// d_gates[t] and dL/dc_{t-1} (d_c (2, B, S): two buffers in turn, d c0 in d_c[0] at the end), then
// d_h = d_gates[t] W_h (d h0 at the end). Contiguous tensors of one dtype on one GPU.
void sequence_forward_cuda(const at::Tensor& input, const at::Tensor& weights,
                           const at::Tensor& bias, const at::Tensor& h0, const at::Tensor& c0,
                           const at::Tensor& output, const at::Tensor& cells,
                           const at::Tensor& gates, bool tf32);
void sequence_backward_cuda(const at::Tensor& grad_output, const at::Tensor& grad_h_n,
                            const at::Tensor& grad_c_n, const at::Tensor& weights,
                            const at::Tensor& bias, const at::Tensor& cells,
                            const at::Tensor& gates, const at::Tensor& d_gates,
                            const at::Tensor& d_h, const at::Tensor& d_c, bool tf32);

// CUDA launchers (lltm_cuda.cu), for T = float, double, c10::Half, c10::BFloat16: the same
// outputs for n = B * S elements of state S, on `stream` (the tensors' device current); they
// return the launch's error. bias and grad_h_extra may be null (none); grad_h's rows are grad_h_ld
// elements apart. With d_bias (3S), backward also writes the bias gradient, the column sums of
// d_gates: bias_sums is scratch of backward_row_blocks<T>(B, S, sm_count, true) rows of 3S
// (accumulate type), which a single row of blocks does not need (null then allowed). sm_count is
// the device's SM count: the grids are one full wave of blocks.
template <typename T>
cudaError_t launch_forward_gates(const T* gates, const T* bias, const T* old_cell, T* new_h,
                                 T* new_cell, int64_t n, int64_t state, int sm_count,
                                 cudaStream_t stream);
template <typename T>
int64_t backward_row_blocks(int64_t batch, int64_t state, int sm_count, bool bias_grad);
template <typename T>
cudaError_t launch_backward_gates(const T* grad_h, int64_t grad_h_ld, const T* grad_h_extra,
                                  const T* grad_cell, const T* new_cell, const T* gates,
                                  const T* bias, T* d_gates, T* d_old_cell,
                                  cuda::opmath_t<T>* bias_sums, T* d_bias, int64_t n, int64_t state,
                                  int sm_count, cudaStream_t stream);

// The sequence's fused time steps (lltm_cuda.cu), for state sizes up to kFusedStepMaxState whose
// shared memory (sequence_step_smem_bytes) the GPU has: the recurrent product and the gate math in
// one kernel. prepare_sequence_steps sets the kernels' shared memory size on the current device
// and says whether the grid fits on the GPU at once (then one cooperative launch runs all steps,
// a grid-wide barrier between them; else one launch per step). Forward, steps t0 .. t0 + steps -
// 1: gates (T, B, 3S) holds the input projections and gets the pre-activations (without the
// bias); -> output, cells (T, B, S); h0, c0 (B, S) before step 0. Backward, steps t_hi down to
// t_hi - steps + 1 (`last` = T - 1): -> d_gates (T, B, 3S) and d_cell (2, B, S), step t's
// dL/dc_{t-1} in d_cell[t % 2]. w (3S, ld): W_h is its first S columns. `overlap` (sm_90+):
// per-step launches with programmatic stream serialization (a step copies its weights while the
// step before it runs).
constexpr int64_t kFusedStepMaxState = 256;
int64_t sequence_step_smem_bytes(int64_t state, int64_t element_size);
template <typename T>
cudaError_t prepare_sequence_steps(int64_t batch, int64_t state, int sm_count, bool* all_at_once);
template <typename T>
cudaError_t launch_sequence_forward_steps(T* gates, const T* bias, const T* h0, const T* c0,
                                          const T* w, int64_t ld, T* output, T* cells,
                                          int64_t batch, int64_t state, int64_t t0, int64_t steps,
                                          bool overlap, cudaStream_t stream);
template <typename T>
cudaError_t launch_sequence_backward_steps(T* d_gates, const T* w, int64_t ld, const T* grad_output,
                                           const T* grad_h_n, const T* grad_c_n, const T* cells,
                                           const T* gates, const T* bias, T* d_cell, int64_t batch,
                                           int64_t state, int64_t last, int64_t t_hi, int64_t steps,
                                           bool overlap, cudaStream_t stream);

// The sequence's time steps for wide states (lltm_sequence_wide.cu), S % 4 == 0 and S <=
// kWideMaxState: a persistent cooperative kernel, each block kWideRows batch rows x `cols` state
// columns with its slice of W_h in shared memory for all T steps, a barrier per step over each
// row of blocks. The same inputs and outputs as the fused step kernels above over all T steps;
// flags: wide_flag_count(batch, state, cols) words of device memory for the barriers' step
// counters (the launch zeroes them first, on `stream`). wide_step_columns: on the current device,
// the fewest columns per block (4, 8 or 16) whose grid runs at once in max_smem per block, their
// shared memory set; 0 when none does (or S does not qualify); `only` (4, 8 or 16): those columns
// or none. mma: the product on the tensor cores (float32 and the half types; the kernels of
// wide_mma_loaded's answer, which needs this module's code for the device compiled for sm_80 or
// newer), else on the SIMT cores.
constexpr int64_t kWideMaxState = 1024;
constexpr int kWideRows = 16;
template <typename T>
cudaError_t wide_mma_loaded(bool* loaded);
template <typename T>
cudaError_t wide_step_columns(int64_t batch, int64_t state, int sm_count, int max_smem, int* cols,
                              int only, bool mma);
int64_t wide_flag_count(int64_t batch, int64_t state, int cols);
template <typename T>
cudaError_t launch_wide_forward(T* gates, const T* bias, const T* h0, const T* c0, const T* w,
                                int64_t ld, T* output, T* cells, unsigned int* flags, int64_t batch,
                                int64_t state, int64_t steps, int cols, bool mma,
                                cudaStream_t stream);
template <typename T>
cudaError_t launch_wide_backward(T* d_gates, const T* w, int64_t ld, const T* grad_output,
                                 const T* grad_h_n, const T* grad_c_n, const T* cells,
                                 const T* gates, const T* bias, T* d_cell, unsigned int* flags,
                                 int64_t batch, int64_t state, int64_t steps, int cols, bool mma,
                                 cudaStream_t stream);

// The sequence's time steps on sm_90 (lltm_sequence_cluster.cu): thread-block clusters of
// kClusterSize blocks, each cluster a slice of `rows` batch rows and the whole state (block j:
// state columns [j * cols, (j + 1) * cols)), h (forward) or d_gates (backward) exchanged through
// distributed shared memory with one cluster barrier per step; all steps in one launch. The same
// inputs and outputs as the fused step kernels above over all T steps (backward: d_cell (B, S)
// gets dL/dc_0's gradient d c0). For state sizes up to kClusterMaxState; cluster_shape_ok and
// the device's shared memory (cluster_smem_bytes) say which `rows` a state size takes.
constexpr int kClusterSize = 8, kClusterThreads = 256;
constexpr int64_t kClusterMaxState = 256;
// A block's work: state S, columns per block, batch rows per cluster, and the product: on the
// tensor cores (`mma`: mma.sync with tf32 operands, float32 sums; float32 where TF32 is allowed,
// and the half types, whose values tf32 holds exactly), or on the SIMT cores split into `units` (a
// column x 2 rows) x `parts` (of K), units_pow2 * parts = kClusterThreads.
struct ClusterShape {
  int state, cols, rows, units, units_pow2, parts;
  bool mma;
};
ClusterShape cluster_shape(int64_t state, int rows, bool mma);
bool cluster_shape_ok(const ClusterShape& shape);
int64_t cluster_smem_bytes(const ClusterShape& shape, bool backward, int64_t element_size);
// Whether the current device runs this module's sm_90 code of the cluster kernels.
template <typename T>
cudaError_t cluster_image_loaded(bool* loaded);
// On the current device: the kernels' shared-memory limit set to max_smem, and the clusters of
// `shape` that run at once, forward and backward.
template <typename T>
cudaError_t prepare_cluster_steps(int max_smem, const ClusterShape& shape, int* forward_clusters,
                                  int* backward_clusters);
template <typename T>
cudaError_t launch_cluster_forward(T* gates, const T* bias, const T* h0, const T* c0, const T* w,
                                   int64_t ld, T* output, T* cells, int64_t batch, int64_t steps,
                                   const ClusterShape& shape, cudaStream_t stream);
template <typename T>
cudaError_t launch_cluster_backward(T* d_gates, const T* w, int64_t ld, const T* grad_output,
                                    const T* grad_h_n, const T* grad_c_n, const T* cells,
                                    const T* gates, const T* bias, T* d_cell, int64_t batch,
                                    int64_t steps, const ClusterShape& shape, cudaStream_t stream);
#endif

}  // namespace lltm_ext::lltm
