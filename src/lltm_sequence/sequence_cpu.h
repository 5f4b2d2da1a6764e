// The LLTM sequence's CPU time loops on pointers (sequence_cpu.cpp): per step the recurrent
// product on lltm_ext's CPU GEMM and the cell's gate pass, with no tensor view or dispatch per
// step, for a (T, B) sequence and a packed batch alike.
#pragma once

#include <cstdint>
#include <vector>

namespace lltm_ext::lltm {

// Which rows each step owns in step-major tensors of N rows (output, cells: rows of S; gates: of
// 3S): step t's sizes[t] rows start at row offsets[t], and they are the first sizes[t] rows of
// step t - 1's (a packed batch sorts its sequences longest first; sizes never grow).
struct StepRows {
  std::vector<int64_t> sizes, offsets;
  int64_t batch() const { return sizes.empty() ? 0 : sizes.front(); }
  // T steps of B rows each: a (T, B) sequence.
  static StepRows uniform(int64_t steps, int64_t batch);
};

// Forward through the steps. T: the state's dtype; P: the products' (T, or bfloat16 / float16 for
// a float32 state: a mixed sequence, where h_{t-1} is rounded to P and each product's result is
// P, as the pure loop's products under autocast). w_h: W_h (3S, S) in P, rows ld_w apart (the
// weights' recurrent block). gates (N, 3S): in, each row's input projection; out, the whole
// pre-activation without the bias (projection + h_{t-1} W_h^T, rounded to T), which backward reads.
// bias (3S); h0, c0 (B, S), each null for zeros. output, cells (N, S): written.
template <typename T, typename P>
void forward_loop_cpu(const StepRows& rows, int64_t S, const P* w_h, int64_t ld_w, const T* bias,
                      const T* h0, const T* c0, T* gates, T* output, T* cells);

// Backward through the steps, from forward's cells and gates (N, S | 3S), the output's gradient
// (N, S) and the final state's, grad_h_n and grad_c_n ((B, S); each null for zeros: past a
// packed sequence's last step, the rows of those that end there). D: T, or the products' half
// type of a mixed sequence (w_h as forward's). d_gates (N, 3S) written in D (rounded to it).
// d_h0, d_c0 (B, S): written where not null; d h_0 = dG_0 W_h is computed only then.
template <typename T, typename D>
void backward_loop_cpu(const StepRows& rows, int64_t S, const D* w_h, int64_t ld_w, const T* bias,
                       const T* grad_output, const T* grad_h_n, const T* grad_c_n, const T* cells,
                       const T* gates, D* d_gates, T* d_h0, T* d_c0);

}  // namespace lltm_ext::lltm
