// The LLTM op's host functions on tensors, between its operators (lltm.cpp, lltm_sequence.cpp)
// and its kernels: the gate passes and the products on the tensors' device, their CPU halves
// (lltm_cpu.cpp, lltm.cpp) and, in CUDA builds, their CUDA halves (lltm_cuda_host.cpp,
// cublas_gemm_cuda_host.cpp) and the sequence's time loops (lltm_sequence_cuda_host.cpp).
#pragma once

#include <cstdint>

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

// c = a @ b + beta c (beta 0 or 1) on the tensors' device (lltm.cpp): cuBLAS on CUDA (gemm_cuda),
// ATen on the CPU; a, b, c 2-D views with unit stride in one dimension.
void gemm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, double beta, bool tf32);

// The sequence's time loops on CUDA (sequence_forward_cuda / sequence_backward_cuda below), or,
// in a build without CUDA, its error (lltm.cpp: the binding is the one file compiled apart for the
// CPU-only twin of a CUDA module).
void sequence_forward_on_cuda(const at::Tensor& input, const at::Tensor& weights,
                              const at::Tensor& bias, const at::Tensor& h0, const at::Tensor& c0,
                              const at::Tensor& output, const at::Tensor& h_n,
                              const at::Tensor& c_n, const at::Tensor& cells,
                              const at::Tensor& gates, bool tf32);
void sequence_backward_on_cuda(const at::Tensor& grad_output, const at::Tensor& grad_h_n,
                               const at::Tensor& grad_c_n, const at::Tensor& weights,
                               const at::Tensor& bias, const at::Tensor& cells,
                               const at::Tensor& gates, const at::Tensor& d_gates,
                               const at::Tensor& d_h, const at::Tensor& d_c, bool want_d_h0,
                               bool tf32);

// The sequence's weight gradient d_weights (3S, S + I) = sum_t dG_t^T [h_{t-1} | x_t], and its
// bias gradient d_bias (3S) where defined, in one kernel on CUDA (sequence_weight_grad_cuda below)
// where that pays; false, nothing written, where the caller's products should run instead (and
// in a build without CUDA). tf32: torch allows TF32 in float32 products (cuBLAS's then run one
// TF32 pass).
bool sequence_weight_grad_on_cuda(const at::Tensor& d_gates, const at::Tensor& h0,
                                  const at::Tensor& output, const at::Tensor& input,
                                  const at::Tensor& d_weights, const at::Tensor& d_bias, bool tf32);

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
// (batch, state, features) runs them (LLTM_EXT_CELL_PATH, read at every call: "auto" (default:
// where B <= 256, K = S + I <= 512 and B * 3S * K <= 2^23), "fused" (always; an error where they
// cannot) or "cublas" (never); B = 0 or S = 0 never: nothing to multiply); forward in one kernel
// (-> gates with the bias, X, new_h, new_cell, all written); backward's products in one kernel
// (-> d_X, d_weights, d_bias). Contiguous tensors. Auto's rule: at small cells the fused kernels
// win on the GPU (cuBLAS's kernels for such small products are slow) and save the host's work of
// the ATen calls too; past the work bound, where they break even, our kernels' plain products
// lose. The kernels sum a weight gradient over B rows and a gate over K columns in one thread
// each, hence the bounds on B and K. Figures: docs/decisions.md#fused-cell-rule.
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

// c (M x N) = a (M x K) @ b (K x N) + beta c, through cuBLAS on the current stream of c's device
// (cublas_gemm_cuda_host.cpp);
// each of a, b, c a 2-D view with unit stride in one dimension (a transpose or a column block of
// a larger matrix is read in place). float32 products use TF32 tensor cores when `tf32`; half
// types accumulate in float32. K = 0 leaves beta c (zeros for beta = 0).
void gemm_cuda(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, double beta,
               bool tf32);

// The sequence's time loops on CUDA (lltm_sequence_cuda_host.cpp, on the kernels that
// lltm_sequence_plan_cuda_host.cpp picks; lltm_sequence.cpp has the shapes). Forward: gates (T, B,
// 3S) = input W_i^T in one product, then per step gates[t] += h_{t-1} W_h^T and the gate kernel
// (bias (3S) added there) -> output[t], cells[t], and the final state h_n, c_n (B, S) (T >= 1).
// Backward: per step t = T-1..0 the gate kernel -> d_gates[t] and dL/dc_{t-1} (d_c (2, B, S): two
// buffers in turn, d c0 in d_c[0] at the end), then d_h = d_gates[t] W_h (d h0 at the end, where
// want_d_h0). Contiguous tensors of one dtype on one GPU; h0, c0, grad_h_n and grad_c_n may be
// undefined (zeros, read as such by the kernels: no tensor of zeros is made).
void sequence_forward_cuda(const at::Tensor& input, const at::Tensor& weights,
                           const at::Tensor& bias, const at::Tensor& h0, const at::Tensor& c0,
                           const at::Tensor& output, const at::Tensor& h_n, const at::Tensor& c_n,
                           const at::Tensor& cells, const at::Tensor& gates, bool tf32);
void sequence_backward_cuda(const at::Tensor& grad_output, const at::Tensor& grad_h_n,
                            const at::Tensor& grad_c_n, const at::Tensor& weights,
                            const at::Tensor& bias, const at::Tensor& cells,
                            const at::Tensor& gates, const at::Tensor& d_gates,
                            const at::Tensor& d_h, const at::Tensor& d_c, bool want_d_h0,
                            bool tf32);

// The weight gradients of sequence_weight_grad_on_cuda (lltm_sequence_cuda_host.cpp): d_gates (T,
// B, 3S), h0 (B, S; undefined: zeros), output (T, B, S), input (T, B, I), contiguous, of one
// dtype, on one GPU.
// LLTM_EXT_SEQUENCE_WGRAD, read at every call: "auto" (default: where the work 3S (S + I + 1) T B
// is at most kWeightGradMaxWork for float32, kWeightGradMaxWorkHalf for the half types and
// kWeightGradMaxWorkDouble for float64; float32 past that on Hopper's tensor cores where TF32 is
// not allowed and d W | d b spans kWeightGradTensorTiles tiles), "fused" (always, T B > 0),
// "tensor" (always, float32, Hopper) or "cublas" (never: three products and a column sum). The
// fused kernel sums in the accumulate type on the SIMT cores (exact float32 with TF32 allowed too),
// split over T B for about two blocks an SM; the Hopper kernel runs float32 as three TF32 passes
// of wgmma with float32 sums (about exact float32's error), split for full waves; cuBLAS's
// products, each often split with its own reduction, and the column sum cost five to seven
// launches, which decide short sequences; past the work bounds cuBLAS's kernels are ahead.
// bfloat16 (cuBLAS on the tensor cores) breaks even sooner, float64 (cuBLAS on the FP64 tensor
// cores, ours at half float32's SIMT rate) sooner still. Figures:
// docs/decisions.md#sequence-wgrad-rule.
constexpr int64_t kWeightGradMaxWork = int64_t{3} << 27, kWeightGradMaxWorkHalf = int64_t{1} << 28;
constexpr int64_t kWeightGradMaxWorkDouble = int64_t{3} << 25;
// The Hopper kernel's tiles of 128 x 128 outputs where auto takes it: at least
// kWeightGradTensorTiles (with fewer, a small state's product over many rows, its splits leave most
// SMs idle and cuBLAS is faster; figures: docs/decisions.md#wgrad-tensor-tiles).
constexpr int64_t kWeightGradTensorTiles = 4;
bool sequence_weight_grad_cuda(const at::Tensor& d_gates, const at::Tensor& h0,
                               const at::Tensor& output, const at::Tensor& input,
                               const at::Tensor& d_weights, const at::Tensor& d_bias, bool tf32);
#endif

}  // namespace lltm_ext::lltm
