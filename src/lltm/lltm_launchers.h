// The LLTM cell's CUDA kernels as the host code calls them (lltm_cuda.cu, compiled by nvcc without
// ATen): launchers on raw pointers, sizes and a stream that return the launch's error. Included by
// lltm_cuda.cu, lltm_cuda_host.cpp and the sequence's kernels and host code
// (lltm_sequence/sequence_launchers.h), whose cuBLAS path runs these gate kernels every step.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

#include "common/cuda_kernel.cuh"

namespace lltm_ext::lltm {

// The cell's gate kernels (lltm_cuda.cu), for T = float, double, c10::Half, c10::BFloat16: the same
// outputs for n = B * S elements of state S, on `stream` (the tensors' device current); they
// return the launch's error. bias and grad_h_extra may be null (none), old_cell and grad_cell too
// (zeros: the sequence's absent state on its cuBLAS path); grad_h's rows are grad_h_ld elements
// apart. With d_bias (3S), backward also writes the bias gradient, the column sums of
// d_gates: bias_sums is scratch of backward_row_blocks<T>(B, S, sm_count, true) rows of 3S
// (accumulate type), which a single row of blocks does not need (null then allowed). sm_count is
// the device's SM count: the grids are one full wave of blocks.
//
// The sequence's per-step product split over K (launch_step_gemm) leaves `splits` matrices of
// partial sums (SplitSums, each the gate kernel's B x 3S forward or B x S backward, rows `ld`
// elements apart: 0 for 3S forward, S backward, as contiguous; the cuBLAS path's padded products
// leave one matrix in wider rows). Forward adds them in order to `gates` and writes the total to
// `total` (the pre-activations as stored, beside the input projection); backward's grad_h is
// their sum. Null data: none.
template <typename T>
struct SplitSums {
  const cuda::opmath_t<T>* data = nullptr;
  int splits = 0;
  T* total = nullptr;
  int64_t ld = 0;
};
// A copy that a gate kernel also writes, in another dtype C, rows `ld` elements apart: forward's
// new_h, backward's d_gates, each rounded to C (a float32 state's half-precision products read
// them: the sequence's mixed loops, T = float and C = c10::Half or c10::BFloat16). Null data: none.
template <typename C>
struct RowCopy {
  C* data = nullptr;
  int64_t ld = 0;
};
template <typename T, typename C = T>
cudaError_t launch_forward_gates(const T* gates, const T* bias, const T* old_cell, T* new_h,
                                 T* new_cell, int64_t n, int64_t state, int sm_count,
                                 cudaStream_t stream, SplitSums<T> sums = {}, RowCopy<C> copy = {});
template <typename T>
int64_t backward_row_blocks(int64_t batch, int64_t state, int sm_count, bool bias_grad);
template <typename T, typename C = T>
cudaError_t launch_backward_gates(const T* grad_h, int64_t grad_h_ld, const T* grad_h_extra,
                                  const T* grad_cell, const T* new_cell, const T* gates,
                                  const T* bias, T* d_gates, T* d_old_cell,
                                  cuda::opmath_t<T>* bias_sums, T* d_bias, int64_t n, int64_t state,
                                  int sm_count, cudaStream_t stream, SplitSums<T> sums = {},
                                  RowCopy<C> copy = {});

// The small cell (lltm_cuda.cu), where a few launches beat cat, cuBLAS's products and the gate
// kernels (the host's work of those calls decides small cells): forward in one kernel, X = [old_h,
// input] (B, K = S + I), gates (B, 3S) = X W^T + bias (with the bias, as stored), new_h and
// new_cell; backward's products in one more, from d_gates (B, 3S): d_X (B, K) = d_gates W,
// d_weights (3S, K) = d_gates^T X, d_bias (3S) = its column sums. Contiguous tensors; sums in the
// accumulate type in a fixed order.
template <typename T>
cudaError_t launch_fused_forward(const T* input, const T* weights, const T* bias, const T* old_h,
                                 const T* old_cell, T* gates, T* X, T* new_h, T* new_cell,
                                 int64_t batch, int64_t state, int64_t features,
                                 cudaStream_t stream);
template <typename T>
cudaError_t launch_fused_backward_products(const T* d_gates, const T* X, const T* weights, T* d_X,
                                           T* d_weights, T* d_bias, int64_t batch, int64_t state,
                                           int64_t features, cudaStream_t stream);

// The autocast kernels' rounded operands (round.cu): for each segment, dst[i] = src[i]
// rounded to H (float16 or bfloat16, to nearest even) and back to float32; contiguous float32
// tensors of n elements (n may be 0), dst not overlapping src. Up to kRoundSegments per launch,
// one launch for them all.
constexpr int kRoundSegments = 4;
struct RoundSegment {
  const float* src;
  float* dst;
  int64_t n;
};
struct RoundSegments {
  RoundSegment segment[kRoundSegments];
  int count;
};
template <typename H>
cudaError_t launch_round_through(const RoundSegments& segments, int sms, cudaStream_t stream);

}  // namespace lltm_ext::lltm
