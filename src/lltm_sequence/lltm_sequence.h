// The LLTM sequence's host functions on tensors (CUDA builds only), between its operators
// (lltm_sequence.cpp) and its kernels: the time loops (sequence_cuda_host.cpp, on the kernels that
// plan_cuda_host.cpp picks), the weight gradients in one kernel, and the cuBLAS products on
// strided views (gemm_cuda). The CPU loop (lltm_sequence.cpp) calls the cell's gate passes
// (lltm/lltm.h).
#pragma once

#include <cstdint>

namespace at {
class Tensor;
}  // namespace at

namespace lltm_ext::lltm {

// c (M x N) = a (M x K) @ b (K x N) + beta c, through cuBLAS on the current stream of c's device
// (sequence_cuda_host.cpp);
// each of a, b, c a 2-D view with unit stride in one dimension (a transpose or a column block of
// a larger matrix is read in place). float32 products use TF32 tensor cores when `tf32`; half
// types accumulate in float32. K = 0 leaves beta c (zeros for beta = 0).
void gemm_cuda(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, double beta,
               bool tf32);

// The sequence's time loops on CUDA (sequence_cuda_host.cpp, on the kernels that
// plan_cuda_host.cpp picks; lltm_sequence.cpp has the shapes). Forward: gates (T, B,
// 3S) = input W_i^T in one product, then per step gates[t] += h_{t-1} W_h^T and the gate kernel
// (bias (3S) added there) -> output[t], cells[t], and the final state h_n, c_n (B, S) (T >= 1).
// Backward: per step t = T-1..0 the gate kernel -> d_gates[t] and dL/dc_{t-1} (d_c (2, B, S): two
// buffers in turn, d c0 in d_c[0] at the end), then d_h = d_gates[t] W_h (d h0 at the end, where
// want_d_h0). Contiguous tensors of one dtype on one GPU; h0, c0, grad_h_n and grad_c_n may be
// undefined (zeros, read as such by the kernels: no tensor of zeros is made). `projected`: gates
// holds the input projection already (a packed batch's, made for all its rows at once); input
// then gives only the shape. The tensors may be views of larger ones, each contiguous itself;
// h_n and c_n both undefined: the final state is not written.
void sequence_forward_cuda(const at::Tensor& input, const at::Tensor& weights,
                           const at::Tensor& bias, const at::Tensor& h0, const at::Tensor& c0,
                           const at::Tensor& output, const at::Tensor& h_n, const at::Tensor& c_n,
                           const at::Tensor& cells, const at::Tensor& gates, bool tf32,
                           bool projected);
void sequence_backward_cuda(const at::Tensor& grad_output, const at::Tensor& grad_h_n,
                            const at::Tensor& grad_c_n, const at::Tensor& weights,
                            const at::Tensor& bias, const at::Tensor& cells,
                            const at::Tensor& gates, const at::Tensor& d_gates,
                            const at::Tensor& d_h, const at::Tensor& d_c, bool want_d_h0,
                            bool tf32);

// A mixed call's time loops (mixed_cuda_host.cpp): input (T, B, I) and weights (3S, S + I) in
// float16 or bfloat16, the state float32: bias (3S), h0, c0 (B, S; undefined: zeros), output,
// cells (T, B, S), gates (T, B, 3S), h_n, c_n (B, S) float32, as sequence_forward_cuda's. Every
// product runs in the half type (h_{t-1} rounded to it, as a loop of the cell under autocast
// rounds it) and adds up in float32; the gate kernels run in float32. Backward, as
// sequence_backward_cuda's but d_gates (T, B, 3S) in the half type (each step's rounded for its
// product), d_h and d_c float32. mixed_takes_cublas: whether a mixed call of these sizes runs
// these loops (where float32's plan, TF32 allowed, is the cuBLAS path); else the caller runs the
// float32 sequence's time loop with the products outside it in the half type (lltm_sequence.cpp:
// forward_mixed). mixed_products_pay: whether the autocast kernel's call for a float32 state
// elsewhere is the mixed call (the products outside the time loop in the half type: they are large
// enough to pay for the casts around them), rather than the float32 sequence on the operands
// rounded to the half type (docs/decisions_sequence.md#mixed-products).
bool mixed_takes_cublas(int device, int64_t steps, int64_t batch, int64_t state);
bool mixed_products_pay(int64_t steps, int64_t batch, int64_t features, int64_t state);
void sequence_forward_mixed_cuda(const at::Tensor& input, const at::Tensor& weights,
                                 const at::Tensor& bias, const at::Tensor& h0, const at::Tensor& c0,
                                 const at::Tensor& output, const at::Tensor& h_n,
                                 const at::Tensor& c_n, const at::Tensor& cells,
                                 const at::Tensor& gates);
void sequence_backward_mixed_cuda(const at::Tensor& grad_output, const at::Tensor& grad_h_n,
                                  const at::Tensor& grad_c_n, const at::Tensor& weights,
                                  const at::Tensor& bias, const at::Tensor& cells,
                                  const at::Tensor& gates, const at::Tensor& d_gates,
                                  const at::Tensor& d_h, const at::Tensor& d_c, bool want_d_h0);

// The weight gradients of sequence_weight_grad_cuda (sequence_cuda_host.cpp): d_gates (T,
// B, 3S), h0 (B, S; undefined: zeros), output (T, B, S), input (T, B, I), contiguous, of one
// dtype, on one GPU.
// LLTM_EXT_SEQUENCE_WGRAD (settings.h: what each value forces) picks the way. Auto's rule: the
// fused kernel where the work 3S (S + I + 1) T B is at most kWeightGradMaxWork for float32,
// kWeightGradMaxWorkHalf for the half types and kWeightGradMaxWorkDouble for float64; float32 past
// that on Hopper's tensor cores where TF32 is not allowed and d W | d b spans
// kWeightGradTensorTiles tiles; else cuBLAS. The fused kernel sums in the accumulate type on the
// SIMT cores (exact float32 with TF32 allowed too), split over T B for about two blocks an SM; the
// Hopper kernel runs float32 as three TF32 passes of wgmma with float32 sums (about exact float32's
// error), split for full waves; cuBLAS's products, each often split with its own reduction, and the
// column sum cost five to seven launches, which decide short sequences; past the work bounds
// cuBLAS's kernels are ahead. bfloat16 (cuBLAS on the tensor cores) breaks even sooner, float64
// (cuBLAS on the FP64 tensor cores, ours at half float32's SIMT rate) sooner still. Figures:
// docs/decisions_sequence.md#sequence-wgrad-rule.
constexpr int64_t kWeightGradMaxWork = int64_t{3} << 27, kWeightGradMaxWorkHalf = int64_t{1} << 28;
constexpr int64_t kWeightGradMaxWorkDouble = int64_t{3} << 25;
// The Hopper kernel's tiles of 128 x 128 outputs where auto takes it: at least
// kWeightGradTensorTiles (with fewer, a small state's product over many rows, its splits leave most
// SMs idle and cuBLAS is faster; figures: docs/decisions_sequence.md#wgrad-tensor-tiles).
constexpr int64_t kWeightGradTensorTiles = 4;
bool sequence_weight_grad_cuda(const at::Tensor& d_gates, const at::Tensor& h0,
                               const at::Tensor& output, const at::Tensor& input,
                               const at::Tensor& d_weights, const at::Tensor& d_bias, bool tf32);

}  // namespace lltm_ext::lltm
