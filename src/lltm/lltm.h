// The LLTM cell's host functions on tensors, between its operators (lltm.cpp) and its kernels: the
// gate passes on the tensors' device, their CPU halves (lltm_cpu.cpp) and, in CUDA builds, their
// CUDA halves and the small cell (lltm_cuda_host.cpp). The sequence (src/lltm_sequence/) links the
// same objects and calls the CPU and CUDA halves of the gate passes every step.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <vector>

namespace at {
class Tensor;
}  // namespace at

namespace lltm_ext::lltm {

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

// The same two passes on pointers, for loops that run them step after step (the sequence's CPU
// time loops), where a tensor view per operand and a dtype dispatch per call would cost as much
// as a small step's math. Rows as above (contiguous, batch x state); bias null for none. Forward
// with `product` (B, 3S) given first makes gates = gates + product, rounded to T, and reads that
// stored value (backward reads it too): the step's recurrent product added to the input
// projection. Backward writes d_gates in D, rounded to it. (T, P / D): each floating dtype with
// itself, and float32 with bfloat16 or float16 (a mixed sequence: a float32 state, half products).
// The (T, P) pairs the pointer forms, and the sequence's CPU loops on them, are compiled for:
// X(T, P) for each.
#define LLTM_EXT_FOR_EACH_STATE_AND_PRODUCT(X) \
  X(float, float)                              \
  X(double, double)                            \
  X(c10::BFloat16, c10::BFloat16)              \
  X(c10::Half, c10::Half)                      \
  X(float, c10::BFloat16)                      \
  X(float, c10::Half)

template <typename T, typename P>
void forward_gates_cpu(T* gates, const P* product, const T* bias, const T* old_cell, T* new_h,
                       T* new_cell, int64_t batch, int64_t state);
template <typename T, typename D>
void backward_gates_cpu(const T* grad_h, int64_t grad_h_ld, const T* grad_h_extra,
                        const T* grad_cell, const T* new_cell, const T* gates, const T* bias,
                        D* d_gates, T* d_old_cell, int64_t batch, int64_t state);

// d_bias (3S) = the column sums of d_gates (B, 3S), each column added up row by row in double:
// the same bits for any thread count.
void bias_grad_cpu(const at::Tensor& d_gates, const at::Tensor& d_bias);

// The same on the tensors' device: forward_gates_cpu / backward_gates_cpu, or on CUDA (device
// guard, current stream, dtype dispatch, launch check) the CUDA halves below; a CUDA tensor in
// a build without CUDA raises.
void forward_gates(const at::Tensor& gates, const at::Tensor& bias, const at::Tensor& old_cell,
                   const at::Tensor& new_h, const at::Tensor& new_cell);
// backward_gates also writes d_bias (3S), the column sums of d_gates, when it is defined (fused
// into the CUDA kernel; a reduction after the CPU one).
void backward_gates(const at::Tensor& grad_h, int64_t grad_h_ld, const at::Tensor& grad_h_extra,
                    const at::Tensor& grad_cell, const at::Tensor& new_cell,
                    const at::Tensor& gates, const at::Tensor& bias, const at::Tensor& d_gates,
                    const at::Tensor& d_old_cell, const at::Tensor& d_bias);

#ifdef WITH_CUDA
// CUDA halves of forward_gates / backward_gates (lltm_cuda_host.cpp): the gate kernels of
// lltm_launchers.h.
void forward_gates_cuda(const at::Tensor& gates, const at::Tensor& bias, const at::Tensor& old_cell,
                        const at::Tensor& new_h, const at::Tensor& new_cell);
void backward_gates_cuda(const at::Tensor& grad_h, int64_t grad_h_ld,
                         const at::Tensor& grad_h_extra, const at::Tensor& grad_cell,
                         const at::Tensor& new_cell, const at::Tensor& gates,
                         const at::Tensor& bias, const at::Tensor& d_gates,
                         const at::Tensor& d_old_cell, const at::Tensor& d_bias);

// The small cell on CUDA (lltm_cuda_host.cpp; the kernels of lltm_launchers.h): whether a cell of
// (batch, state, features) runs them (as LLTM_EXT_CELL_PATH says, settings.h; auto: where B <= 256,
// K = S + I <= 512 and B * 3S * K <= 2^23; B = 0 or S = 0 never: nothing to multiply); forward in
// one kernel (-> gates with the bias, X, new_h, new_cell, all written); backward's products in one
// kernel (-> d_X, d_weights, d_bias). Contiguous tensors. Auto's rule: at small cells the fused
// kernels win on the GPU (cuBLAS's kernels for such small products are slow) and save the host's
// work of the ATen calls too; past the work bound, where they break even, our kernels' plain
// products lose. The kernels sum a weight gradient over B rows and a gate over K columns in one
// thread each, hence the bounds on B and K. Figures: docs/decisions.md#fused-cell-rule.
constexpr int64_t kFusedCellMaxBatch = 256, kFusedCellMaxK = 512;
constexpr int64_t kFusedCellMaxWork = int64_t{1} << 23;
bool fused_cell_cuda(int64_t batch, int64_t state, int64_t features);
void fused_forward_cuda(const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
                        const at::Tensor& old_h, const at::Tensor& old_cell,
                        const at::Tensor& gates, const at::Tensor& X, const at::Tensor& new_h,
                        const at::Tensor& new_cell);
void fused_backward_products_cuda(const at::Tensor& d_gates, const at::Tensor& X,
                                  const at::Tensor& weights, const at::Tensor& d_X,
                                  const at::Tensor& d_weights, const at::Tensor& d_bias);

// The autocast kernels' rounded operands on CUDA (round_cuda_host.cpp; rounded_op.h is the
// operator): dst[k] = src[k] rounded to `dtype` (float16 or bfloat16, to nearest even) and held
// in float32, for every k in one kernel launch (a launch per kRoundSegments tensors); src and dst
// contiguous float32 tensors of one GPU, dst[k] as large as src[k] and apart from it.
void round_through_cuda(const std::vector<at::Tensor>& src, const std::vector<at::Tensor>& dst,
                        at::ScalarType dtype);
#endif

}  // namespace lltm_ext::lltm
