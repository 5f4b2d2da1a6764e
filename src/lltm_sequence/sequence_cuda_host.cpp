// The LLTM sequence's time loops on CUDA (CUDA builds only): the input projections of all steps in
// one cuBLAS product, then the steps on the kernels that the planner picks (plan.h), and
// backward through time likewise; raw pointers throughout (no tensor made per step).
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "common/checks.h"
#include "common/cuda_host.h"
#include "common/dispatch.h"
#include "common/env_setting.h"
#include "lltm_sequence/cublas_gemm.h"
#include "lltm/lltm.h"
#include "lltm_sequence/lltm_sequence.h"
#include "lltm_sequence/sequence_launchers.h"
#include "lltm_sequence/plan.h"
#include "lltm_sequence/step_graphs.h"

namespace lltm_ext::lltm {
namespace {

using Path = SequencePlan::Path;

// The wide kernels' barrier counters: device memory on like's device, from the caching allocator
// (freed when the caller returns; the launch on the current stream, which allocated it, is
// ordered before any reuse).
at::Tensor wide_flags(const at::Tensor& like, int64_t batch, int64_t state, int cols) {
  return at::empty({wide_flag_count(batch, state, cols)}, like.options().dtype(at::kInt));
}

// The tiled kernels' counters, likewise, and their x: (2, batch, tiled_x_ld) floats, zeros (the
// columns past the state's K stay so).
at::Tensor tiled_flags(const at::Tensor& like, int64_t batch, int64_t state,
                       const TiledShape& shape) {
  return at::empty({tiled_flag_count(batch, state, shape)}, like.options().dtype(at::kInt));
}
at::Tensor tiled_x(const at::Tensor& like, int64_t batch, int64_t state, bool backward) {
  return at::zeros({2, batch, tiled_x_ld(state, backward)}, like.options().dtype(at::kFloat));
}

// Scratch for the split step product's partial sums (splits x rows x cols, float32), or none.
at::Tensor split_sums(const at::Tensor& like, const StepGemmShape& split, int64_t rows,
                      int64_t cols) {
  if (split.rows == 0 || split.splits < 2) {
    return {};
  }
  return at::empty({split.splits, rows, cols}, like.options().dtype(at::kFloat));
}

// W_h (3S x S, rows ld apart in `weights`) as launch_step_gemm reads it: the weights themselves
// where their rows are 16-byte aligned and S is a multiple of 4, else a copy with rows of S
// rounded up to a multiple of 4, zero-padded. None where the product (`shape`) is cuBLAS's.
// Backward's product on Hopper's kernel (shape.wgmma), which reads W K-contiguous, takes W_h^T
// instead (S x 3S, rows ld apart, a multiple of 4): `k_major`.
struct StepWeights {
  at::Tensor copy;
  const float* data = nullptr;
  int64_t ld = 0;
  bool k_major = false;
};
StepWeights step_weights(const at::Tensor& weights, int64_t S, const StepGemmShape& shape,
                         bool backward) {
  StepWeights w;
  if (weights.scalar_type() != at::kFloat || shape.rows == 0) {
    return w;
  }
  if (backward && shape.wgmma) {
    w.ld = (3 * S + 3) / 4 * 4;
    w.copy = at::empty({S, w.ld}, weights.options());
    w.copy.narrow(1, 0, 3 * S).copy_(weights.narrow(1, 0, S).t());
    if (w.ld > 3 * S) {
      w.copy.narrow(1, 3 * S, w.ld - 3 * S).zero_();  // read by the last 16-byte piece of a row
    }
    w.data = w.copy.const_data_ptr<float>();
    w.k_major = true;
    return w;
  }
  const int64_t ld = weights.size(1);
  const float* data = weights.const_data_ptr<float>();
  if (S % 4 == 0 && ld % 4 == 0 && reinterpret_cast<uintptr_t>(data) % 16 == 0) {
    w.data = data;
    w.ld = ld;
    return w;
  }
  w.ld = (S + 3) / 4 * 4;
  w.copy = at::empty({3 * S, w.ld}, weights.options());
  w.copy.narrow(1, 0, S).copy_(weights.narrow(1, 0, S));
  if (w.ld > S) {
    w.copy.narrow(1, S, w.ld - S).zero_();  // the padding alone: a fill of the whole copy cost
                                            // more (docs/decisions_sequence.md#weight-copy-padding)
  }
  w.data = w.copy.const_data_ptr<float>();
  return w;
}

// The split sums for a gate kernel (float32 only; none where sums is undefined).
template <typename T>
SplitSums<T> split_parts(const at::Tensor& sums, int splits, T* total) {
  if constexpr (std::is_same_v<T, float>) {
    if (sums.defined()) {
      return {sums.const_data_ptr<float>(), splits, total};
    }
  }
  return {};
}

// The padded product's sums for a gate kernel, rows `ld` apart (the half types only; none
// where there is no padding).
template <typename T>
SplitSums<T> padded_parts(const PaddedStep& pad, T* total, int64_t ld) {
  if constexpr (std::is_same_v<cuda::opmath_t<T>, float>) {
    if (pad.used()) {
      return {pad.sums.const_data_ptr<float>(), 1, total, ld};
    }
  }
  return {};
}

// The step product c = a op(w) through launch_step_gemm where the plan has it (float32 only; into
// sums where split): false where cuBLAS is to run it. after_gates: the kernel before it on the
// stream is one of the sequence's gate kernels, which write no weights (launch_step_gemm's
// w_early).
template <typename T>
bool step_gemm(const StepGemmShape& shape, const T* a, int64_t lda, const StepWeights& w,
               bool transposed, T* c, int64_t ldc, bool accumulate, const at::Tensor& sums,
               int64_t m, int64_t n, int64_t k, bool after_gates, cudaStream_t stream) {
  if constexpr (std::is_same_v<T, float>) {
    if (shape.rows > 0) {
      C10_CUDA_CHECK(launch_step_gemm(a, lda, w.data, w.ld, transposed || w.k_major, c, ldc,
                                      accumulate,
                                      sums.defined() ? sums.mutable_data_ptr<float>() : nullptr, m,
                                      n, k, shape, after_gates, stream));
      return true;
    }
  }
  return false;
}

// A float32 operand x (rows x cols) as Hopper's step-product kernel reads it: each row's elements
// contiguous (x(r, c) at r ld + c), rows 16-byte aligned. x itself where it is so, else a copy
// (held by `copy`) into rows padded to a multiple of 4 floats with zeros: the kernel uses no
// padding (its copies stop at the product's k), but a 16-byte piece cut short there still counts
// as a read of the whole piece for compute-sanitizer's initcheck. Aligned rows are copied 16 bytes
// at a time, others 4 bytes at a time.
struct KRows {
  const float* data;
  int64_t ld;
  at::Tensor copy;
};
KRows k_rows(const Mat& x, const at::TensorOptions& options) {
  const auto* p = static_cast<const float*>(x.data);
  if (!x.col_major && x.ld % 4 == 0 && reinterpret_cast<uintptr_t>(p) % 16 == 0) {
    return {p, x.ld, {}};
  }
  const std::vector<int64_t> strides =
      x.col_major ? std::vector<int64_t>{1, x.ld} : std::vector<int64_t>{x.ld, 1};
  const at::Tensor view = at::from_blob(const_cast<float*>(p), {x.rows, x.cols}, strides, options);
  const int64_t ld = (x.cols + 3) / 4 * 4;
  at::Tensor copy = at::empty({x.rows, ld}, options);
  copy.narrow(1, 0, x.cols).copy_(view);
  if (ld > x.cols) {
    copy.narrow(1, x.cols, ld - x.cols).zero_();
  }
  return {copy.const_data_ptr<float>(), ld, copy};
}

// c = a b + beta c (beta 0 or 1), a product outside the time loops, on Hopper's tensor cores in
// three TF32 passes with float32 sums where input_gemm_tensor has it, on the current stream of c's
// device; false, doing nothing, otherwise (cuBLAS's turn). Float32 at full precision, a and c
// row-major (so not the weight gradients' dG^T X, whose k runs down dG's columns), b either way
// where it is at most a quarter of a's size (a copy of b's transpose is cheap beside the product).
bool tensor_gemm(const Mat& a, const Mat& b, const Mat& c, double beta, at::ScalarType dtype,
                 bool tf32, int device) {
  const int64_t m = a.rows, n = b.cols, k = a.cols;
  if (dtype != at::kFloat || tf32 || a.col_major || c.col_major || (!b.col_major && 4 * n > m) ||
      !input_gemm_tensor(device, m, n, k)) {
    return false;
  }
  const auto options = at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, device);
  const KRows ka = k_rows(a, options), kw = k_rows(transposed(b), options);
  C10_CUDA_CHECK(launch_step_gemm_sm90(
      ka.data, ka.ld, kw.data, kw.ld, static_cast<float*>(const_cast<void*>(c.data)), c.ld,
      beta != 0, nullptr, m, n, k, 1, step_gemm_k_split(k, 1, true), /*w_early=*/false,
      c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device))));
  return true;
}

// The step product's plan and weights, as a loop's key holds them (step_graphs.h).
void add_step_product(LoopKey& key, const StepGemmShape& shape, const StepWeights& w) {
  key.add(shape.rows).add(shape.splits).add(shape.tensor).add(shape.wgmma);
  key.add(w.data).add(w.ld).add(w.k_major);
}

// Whether cuBLAS's step products (the cuBLAS path, per step) take TF32 where `tf32` allows it:
// past 32 batch rows only. Below, a product reads W_h once whatever its precision, and cuBLAS's
// full-precision kernels there (its matrix-vector kernel at B = 2) were the faster. Figures:
// docs/decisions_sequence.md#tf32-one-pass-batch.
bool step_tf32(bool tf32, int64_t batch) {
  return tf32 && batch > 32;
}

}  // namespace

void sequence_forward_cuda(const at::Tensor& input, const at::Tensor& weights,
                           const at::Tensor& bias, const at::Tensor& h0, const at::Tensor& c0,
                           const at::Tensor& output, const at::Tensor& h_n, const at::Tensor& c_n,
                           const at::Tensor& cells, const at::Tensor& gates, bool tf32,
                           bool projected) {
  const c10::cuda::CUDAGuard guard(input.device());
  const int sms = cuda::sm_count(input.get_device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const Blas blas(input.scalar_type(), tf32);
  const int64_t T = input.size(0), B = input.size(1), I = input.size(2), S = output.size(2);
  const int64_t es = blas.element_size();
  bool final_state_written = false;  // by the kernels that run all steps, at their last
  const Mat w = row_major(weights.const_data_ptr(), 3 * S, S + I, S + I);
  const Mat w_h = col_block(w, 0, S, es), w_i = col_block(w, S, I, es);
  // The input projections of all steps, one product: gates = input W_i^T (unless the caller's
  // product made them, over a whole packed batch).
  if (!projected) {
    const Mat x = row_major(input.const_data_ptr(), T * B, I, I);
    const Mat g = row_major(gates.const_data_ptr(), T * B, 3 * S, 3 * S);
    if (!tensor_gemm(x, transposed(w_i), g, 0, input.scalar_type(), tf32, input.get_device())) {
      blas.gemm(x, transposed(w_i), g, 0);
    }
  }
  LLTM_EXT_DISPATCH_FLOATING(input.scalar_type(), "lltm_sequence_forward_cuda", [&] {
    const scalar_t* b = bias.const_data_ptr<scalar_t>();
    scalar_t* out = output.mutable_data_ptr<scalar_t>();
    scalar_t* cell = cells.mutable_data_ptr<scalar_t>();
    scalar_t* g = gates.mutable_data_ptr<scalar_t>();
    const scalar_t* wp = weights.const_data_ptr<scalar_t>();
    const scalar_t* h_0 = data_or_null<scalar_t>(h0);
    const scalar_t* c_0 = data_or_null<scalar_t>(c0);
    const int64_t n = B * S;
    // The final state, where wanted (a packed batch's stretches leave it to their caller).
    scalar_t* h_n_out = h_n.defined() ? h_n.mutable_data_ptr<scalar_t>() : nullptr;
    scalar_t* c_n_out = c_n.defined() ? c_n.mutable_data_ptr<scalar_t>() : nullptr;
    const SequencePlan plan = plan_sequence<scalar_t>(input.get_device(), T, B, S, tf32);
    switch (plan.path) {
      case Path::kSmall:  // all steps in one launch, a block per 1, 2 or 4 batch rows
        C10_CUDA_CHECK(launch_small_forward<scalar_t>(g, b, h_0, c_0, wp, S + I, out, cell, h_n_out,
                                                      c_n_out, B, S, T, plan.small_rows, stream));
        final_state_written = true;
        return;
      case Path::kCluster:  // all steps in one launch of thread-block clusters (sm_90)
        C10_CUDA_CHECK(launch_cluster_forward<scalar_t>(
            g, b, h_0, c_0, wp, S + I, out, cell, h_n_out, c_n_out, B, T, plan.cluster, stream));
        final_state_written = true;
        return;
      case Path::kWide: {  // all steps in one cooperative launch over the GPU
        const at::Tensor flags = wide_flags(input, B, S, plan.wide_cols);
        C10_CUDA_CHECK(launch_wide_forward<scalar_t>(
            g, b, h_0, c_0, wp, S + I, out, cell,
            reinterpret_cast<unsigned int*>(flags.mutable_data_ptr<int32_t>()), B, S, T,
            plan.wide_cols, plan.product, stream));
        return;
      }
      case Path::kTiled: {  // all steps in one cooperative launch over the GPU
        const at::Tensor flags = tiled_flags(input, B, S, plan.tiled);
        const at::Tensor x = tiled_x(input, B, S, false);
        if (h0.defined()) {
          x.select(0, 0).narrow(1, 0, S).copy_(h0);  // h_{-1}, as float (else zeros)
        }
        C10_CUDA_CHECK(launch_tiled_forward<scalar_t>(
            g, b, c_0, wp, S + I, out, cell, x.mutable_data_ptr<float>(),
            reinterpret_cast<unsigned int*>(flags.mutable_data_ptr<int32_t>()), B, S, T, plan.tiled,
            plan.product, stream));
        return;
      }
      case Path::kSteps:  // the recurrent product and the gate math in one kernel
        for (int64_t t = 0; t < T; t += plan.all_at_once ? T : 1) {
          C10_CUDA_CHECK(launch_sequence_forward_steps<scalar_t>(
              g, b, h_0, c_0, wp, S + I, out, cell, B, S, t, plan.all_at_once ? T : 1, plan.overlap,
              stream));
        }
        return;
      case Path::kCublas: {  // per step: h_{t-1} W_h^T (cuBLAS or split), then the gate kernel
        const Blas step_blas(input.scalar_type(), step_tf32(tf32, B));
        const StepGemmShape& split = plan.forward_gemm;
        const at::Tensor sums = split_sums(input, split, B, 3 * S);
        const StepWeights step_w = step_weights(weights, S, split, /*backward=*/false);
        // cuBLAS's W_h (none where our split product runs every step), or its padded copy
        const PaddedStep pad =
            split.rows == 0 ? padded_step(weights, B, S, T, /*backward=*/false) : PaddedStep{};
        const CublasWeights blas_w = split.rows == 0 && !pad.used()
                                         ? cublas_w_h(weights, S, T, es)
                                         : CublasWeights{at::Tensor(), w_h};
        std::optional<Blas> pad_blas;  // half operands, float32 sums
        if (pad.used()) {
          pad_blas.emplace(input.scalar_type(), false, at::kFloat);
        }
        if (pad.used() && h0.defined()) {
          pad.operand.narrow(1, 0, S).copy_(h0);
        }
        // Every step's launches, on stream s (run_step_loop: directly or as a graph)
        const auto enqueue = [&](cudaStream_t s) {
          for (int64_t t = 0; t < T; ++t) {
            const scalar_t* h_prev = t == 0 ? h_0 : out + (t - 1) * n;
            const scalar_t* c_prev = t == 0 ? c_0 : cell + (t - 1) * n;
            scalar_t* g_t = g + t * 3 * n;
            SplitSums<scalar_t> parts;  // the product's sums, where the gate kernel adds them
            if (h_prev != nullptr && pad.used()) {  // h_{t-1} (B, sp) W^T -> sums (B, np)
              pad_blas->gemm(row_major(pad.operand.const_data_ptr(), B, pad.sp, pad.sp),
                             transposed(row_major(pad.w.const_data_ptr(), pad.np, pad.sp, pad.sp)),
                             row_major(pad.sums.const_data_ptr(), B, pad.np, pad.np), 0);
              parts = padded_parts(pad, g_t, pad.np);
            } else if (h_prev != nullptr) {  // none for a zero h_{-1}: the projection alone
              if (step_gemm(split, h_prev, S, step_w, /*transposed=*/true, g_t, 3 * S,
                            /*accumulate=*/true, sums, B, 3 * S, S, /*after_gates=*/t > 0, s)) {
                parts = split_parts(sums, split.splits, g_t);
              } else {
                step_blas.gemm(row_major(h_prev, B, S, S), transposed(blas_w.w_h),
                               row_major(g_t, B, 3 * S, 3 * S), 1);
              }
            }
            // h_t's padded copy, for the next step's product
            const RowCopy<scalar_t> copy =
                pad.used() && t + 1 < T
                    ? RowCopy<scalar_t>{pad.operand.mutable_data_ptr<scalar_t>(), pad.sp}
                    : RowCopy<scalar_t>{};
            C10_CUDA_CHECK(launch_forward_gates<scalar_t>(g_t, b, c_prev, out + t * n, cell + t * n,
                                                          n, S, sms, s, parts, copy));
          }
        };
        LoopKey key;
        key.add(StepLoop::kForward)
            .add(input.scalar_type())
            .add(step_tf32(tf32, B))
            .add(T)
            .add(B)
            .add(S);
        key.add(g).add(b).add(h_0).add(c_0).add(out).add(cell).add(sums.defined() ? sums.data_ptr()
                                                                                  : nullptr);
        add_step_product(key, split, step_w);
        key.add(blas_w.w_h.data).add(blas_w.w_h.ld).add(pad.sp).add(pad.np);
        if (pad.used()) {
          key.add(pad.w.data_ptr()).add(pad.operand.data_ptr()).add(pad.sums.data_ptr());
        }
        run_step_loop(key, T, stream, step_blas.handle(), enqueue);
        return;
      }
    }
  });
  if (!final_state_written && T > 0 && h_n.defined()) {  // both copies in one launch
    at::_foreach_copy_({h_n, c_n}, {output[T - 1], cells[T - 1]});
  }
}

void sequence_backward_cuda(const at::Tensor& grad_output, const at::Tensor& grad_h_n,
                            const at::Tensor& grad_c_n, const at::Tensor& weights,
                            const at::Tensor& bias, const at::Tensor& cells,
                            const at::Tensor& gates, const at::Tensor& d_gates,
                            const at::Tensor& d_h, const at::Tensor& d_c, bool want_d_h0,
                            bool tf32) {
  const c10::cuda::CUDAGuard guard(cells.device());
  const int sms = cuda::sm_count(cells.get_device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const Blas blas(cells.scalar_type(), tf32);
  const int64_t T = cells.size(0), B = cells.size(1), S = cells.size(2);
  const int64_t I = weights.size(1) - S, es = blas.element_size();
  const Mat w_h = col_block(row_major(weights.const_data_ptr(), 3 * S, S + I, S + I), 0, S, es);
  LLTM_EXT_DISPATCH_FLOATING(cells.scalar_type(), "lltm_sequence_backward_cuda", [&] {
    const scalar_t* go = grad_output.const_data_ptr<scalar_t>();
    const scalar_t* cell = cells.const_data_ptr<scalar_t>();
    const scalar_t* g = gates.const_data_ptr<scalar_t>();
    const scalar_t* b = bias.const_data_ptr<scalar_t>();
    scalar_t* dg = d_gates.mutable_data_ptr<scalar_t>();
    scalar_t* dh = d_h.mutable_data_ptr<scalar_t>();
    scalar_t* dc[2] = {d_c.mutable_data_ptr<scalar_t>(), d_c.mutable_data_ptr<scalar_t>() + B * S};
    const scalar_t* wp = weights.const_data_ptr<scalar_t>();
    const scalar_t* gh_n = data_or_null<scalar_t>(grad_h_n);
    const scalar_t* gc_n = data_or_null<scalar_t>(grad_c_n);
    const int64_t n = B * S;
    // d h0 = dG_0 W_h, after the kernels that run all steps, where it is wanted
    const auto d_h0 = [&] {
      if (want_d_h0) {
        blas.gemm(row_major(dg, B, 3 * S, 3 * S), w_h, row_major(dh, B, S, S), 0);
      }
    };
    const SequencePlan plan = plan_sequence<scalar_t>(cells.get_device(), T, B, S, tf32);
    switch (plan.path) {
      case Path::kSmall:  // all steps in one launch, a block per 1, 2 or 4 batch rows
        C10_CUDA_CHECK(launch_small_backward<scalar_t>(dg, wp, S + I, go, gh_n, gc_n, cell, g, b,
                                                       dc[0], B, S, T, plan.small_rows, stream));
        d_h0();
        return;
      case Path::kCluster:  // all steps in one launch of thread-block clusters (sm_90)
        C10_CUDA_CHECK(launch_cluster_backward<scalar_t>(dg, wp, S + I, go, gh_n, gc_n, cell, g, b,
                                                         dc[0], B, T, plan.cluster, stream));
        d_h0();
        return;
      case Path::kWide: {  // all steps in one cooperative launch over the GPU
        const at::Tensor flags = wide_flags(cells, B, S, plan.wide_cols);
        C10_CUDA_CHECK(launch_wide_backward<scalar_t>(
            dg, wp, S + I, go, gh_n, gc_n, cell, g, b, dc[0],
            reinterpret_cast<unsigned int*>(flags.mutable_data_ptr<int32_t>()), B, S, T,
            plan.wide_cols, plan.product, stream));
        d_h0();
        return;
      }
      case Path::kTiled: {  // all steps in one cooperative launch over the GPU
        const at::Tensor flags = tiled_flags(cells, B, S, plan.tiled);
        const at::Tensor x = tiled_x(cells, B, S, true);
        C10_CUDA_CHECK(launch_tiled_backward<scalar_t>(
            dg, wp, S + I, go, gh_n, gc_n, cell, g, b, dc[0], x.mutable_data_ptr<float>(),
            reinterpret_cast<unsigned int*>(flags.mutable_data_ptr<int32_t>()), B, S, T, plan.tiled,
            plan.product, stream));
        d_h0();
        return;
      }
      case Path::kSteps:  // dL/dh_t's product and the gate math in one kernel
        for (int64_t t = T - 1; t >= 0; t -= plan.all_at_once ? T : 1) {
          C10_CUDA_CHECK(launch_sequence_backward_steps<scalar_t>(
              dg, wp, S + I, go, gh_n, gc_n, cell, g, b, dc[0], B, S, T - 1, t,
              plan.all_at_once ? T : 1, plan.overlap, stream));
        }
        d_h0();
        return;
      case Path::kCublas: {  // per step: the gate kernel, then d h_{t-1} = dG_t W_h (cuBLAS or
                             // split; d h0 itself through cuBLAS, whole)
        const Blas step_blas(cells.scalar_type(), step_tf32(tf32, B));
        const StepGemmShape& split = plan.backward_gemm;
        const at::Tensor sums = split_sums(cells, split, B, S);
        const StepWeights step_w =
            T > 1 ? step_weights(weights, S, split, /*backward=*/true) : StepWeights{};
        // cuBLAS's W_h (none where our split product runs every step), or its padded copy
        const PaddedStep pad = split.rows == 0 && T > 1
                                   ? padded_step(weights, B, S, T, /*backward=*/true)
                                   : PaddedStep{};
        const CublasWeights blas_w = split.rows == 0 && !pad.used()
                                         ? cublas_w_h(weights, S, T, es)
                                         : CublasWeights{at::Tensor(), w_h};
        std::optional<Blas> pad_blas;  // half operands, float32 sums
        if (pad.used()) {
          pad_blas.emplace(cells.scalar_type(), false, at::kFloat);
        }
        // Every step's launches, on stream s (run_step_loop: directly or as a graph)
        const auto enqueue = [&](cudaStream_t s) {
          for (int64_t t = T - 1; t >= 0; --t) {
            // dL/dc_t: grad_c_n, or from step t + 1.
            const scalar_t* gc = t == T - 1 ? gc_n : dc[(t + 1) % 2];
            scalar_t* dg_t = dg + t * 3 * n;
            // dL/dh_t = grad_output[t] + (grad_h_n, or d h_t from step t + 1: dh, or its split or
            // padded product's sums).
            const scalar_t* gh = t == T - 1 ? gh_n : dh;
            const SplitSums<scalar_t> parts =
                t == T - 1   ? SplitSums<scalar_t>{}
                : pad.used() ? padded_parts<scalar_t>(pad, nullptr, pad.sp)
                             : split_parts<scalar_t>(sums, split.splits, nullptr);
            // dG_t's padded copy, for this step's product
            const RowCopy<scalar_t> copy =
                pad.used() && t > 0
                    ? RowCopy<scalar_t>{pad.operand.mutable_data_ptr<scalar_t>(), pad.np}
                    : RowCopy<scalar_t>{};
            // With no grad_h_n, the last step's dL/dh_t is grad_output[t] alone.
            C10_CUDA_CHECK(launch_backward_gates<scalar_t>(
                gh != nullptr ? gh : go + t * n, S, gh != nullptr ? go + t * n : nullptr, gc,
                cell + t * n, g + t * 3 * n, b, dg_t, dc[t % 2], nullptr, nullptr, n, S, sms, s,
                parts, copy));
            if (t > 0 && pad.used()) {  // dG_t (B, np) W -> sums (B, sp)
              pad_blas->gemm(row_major(pad.operand.const_data_ptr(), B, pad.np, pad.np),
                             row_major(pad.w.const_data_ptr(), pad.np, pad.sp, pad.sp),
                             row_major(pad.sums.const_data_ptr(), B, pad.sp, pad.sp), 0);
            } else if (t > 0 ? !step_gemm(split, dg_t, 3 * S, step_w, /*transposed=*/false, dh, S,
                                          /*accumulate=*/false, sums, B, S, 3 * S,
                                          /*after_gates=*/true, s)
                             : want_d_h0) {
              step_blas.gemm(row_major(dg_t, B, 3 * S, 3 * S), blas_w.w_h, row_major(dh, B, S, S),
                             0);
            }
          }
        };
        LoopKey key;
        key.add(StepLoop::kBackward).add(cells.scalar_type()).add(step_tf32(tf32, B)).add(T).add(B);
        key.add(S).add(want_d_h0).add(go).add(gh_n).add(gc_n).add(cell).add(g).add(b).add(dg);
        key.add(dh).add(dc[0]).add(sums.defined() ? sums.data_ptr() : nullptr);
        add_step_product(key, split, step_w);
        key.add(blas_w.w_h.data).add(blas_w.w_h.ld).add(pad.sp).add(pad.np);
        if (pad.used()) {
          key.add(pad.w.data_ptr()).add(pad.operand.data_ptr()).add(pad.sums.data_ptr());
        }
        run_step_loop(key, T, stream, step_blas.handle(), enqueue);
        return;
      }
    }
  });
}

namespace {

// Splits of k for the Hopper kernel's tiles (one block an SM): the fewest, up to 64 with at least
// 1024 rows each, whose blocks fill their last wave at least 90%, else the fullest.
int64_t weight_grad_sm90_splits(int64_t tiles, int64_t rows, int sms) {
  const int64_t most = std::clamp<int64_t>(rows / 1024, 1, 64);
  int64_t best = 1;
  double best_fill = 0.0;
  for (int64_t splits = 1; splits <= most; ++splits) {
    const int64_t blocks = tiles * splits;
    const double fill =
        static_cast<double>(blocks) / static_cast<double>((blocks + sms - 1) / sms * sms);
    if (fill >= 0.9) {
      return splits;
    }
    if (fill > best_fill + 1e-9) {
      best = splits;
      best_fill = fill;
    }
  }
  return best;
}

// The Hopper kernel's launch, float32's; the other dtypes never take it (sm90_runs).
cudaError_t launch_weight_grad_tensor(const WeightGradArgs<float>& p, float* partials, int splits,
                                      int64_t k_split, int sm_count, cudaStream_t stream) {
  return launch_weight_grad_sm90(p, partials, splits, k_split, sm_count, stream);
}
template <typename T>
cudaError_t launch_weight_grad_tensor(const WeightGradArgs<T>&, cuda::opmath_t<T>*, int, int64_t,
                                      int, cudaStream_t) {
  TORCH_INTERNAL_ASSERT(false, "the tensor-core weight gradient takes float32 only");
  return cudaErrorNotSupported;
}

}  // namespace

WeightGradPlan plan_weight_grad(int device, at::ScalarType dtype, int64_t steps, int64_t batch,
                                int64_t features, int64_t state, bool bias, bool tf32) {
  const std::string setting = env_choice("LLTM_EXT_SEQUENCE_WGRAD");
  const int64_t S = state, rows = steps * batch, cols = state + features + (bias ? 1 : 0);
  const double work = static_cast<double>(3 * S) * static_cast<double>(cols) * rows;
  const int64_t most = dtype == at::kFloat    ? kWeightGradMaxWork
                       : dtype == at::kDouble ? kWeightGradMaxWorkDouble
                                              : kWeightGradMaxWorkHalf;
  // The Hopper kernel: float32, on a device that runs this module's sm_90a image and has its
  // shared memory.
  const auto sm90_runs = [&] {
    if (dtype != at::kFloat) {
      return false;
    }
    static cuda::PerDevice<bool> loaded_cache;
    const cuda::DeviceLimits& f = cuda::device_limits(device);
    return f.major == 9 && weight_grad_sm90_smem_bytes() <= f.smem_optin &&
           loaded_cache.get(device, [](int d) {
             const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(d));
             bool is_loaded = false;
             C10_CUDA_CHECK(weight_grad_sm90_loaded(&is_loaded));
             return is_loaded;
           });
  };
  WeightGradPlan plan;
  bool tensor = setting == "tensor";
  if (tensor) {
    TORCH_CHECK(sm90_runs(),
                "lltm_ext.lltm_sequence: LLTM_EXT_SEQUENCE_WGRAD=tensor runs float32 on Hopper's "
                "tensor cores (a GPU of compute capability 9.0 running this module's sm_90a code, "
                "with ",
                weight_grad_sm90_smem_bytes(), " bytes of shared memory a block), but got ", dtype,
                " on cuda:", device, ".");
    plan_note("weight gradient: the Hopper kernel, forced (LLTM_EXT_SEQUENCE_WGRAD=tensor)");
  } else if (rows == 0 || setting == "cublas") {
    plan_note("weight gradient: cuBLAS's products and a column sum (",
              rows == 0 ? "no rows" : "LLTM_EXT_SEQUENCE_WGRAD=cublas", ")");
    return plan;  // no rows: the products' zeros
  } else if (setting == "auto" && work > static_cast<double>(most)) {
    // Past the SIMT kernel's work: float32 at full precision on Hopper's tensor cores where they
    // run (cuBLAS's exact kernels are SIMT ones; with TF32 allowed, cuBLAS's one pass is faster).
    if (tf32 || weight_grad_sm90_blocks(S, cols) < kWeightGradTensorTiles || !sm90_runs()) {
      plan_note(
          "weight gradient: cuBLAS's products and a column sum (the work 3S (S + I + 1) T B "
          "= ",
          static_cast<int64_t>(work), " is past the fused kernel's ", most, " for ", dtype,
          ", and the Hopper kernel ",
          dtype != at::kFloat                                         ? "takes float32 only"
          : tf32                                                      ? "gives way to TF32"
          : weight_grad_sm90_blocks(S, cols) < kWeightGradTensorTiles ? "would have too few tiles"
                                                                      : "does not run here",
          "; docs/decisions_sequence.md#sequence-wgrad-rule)");
      return plan;
    }
    tensor = true;
    plan_note("weight gradient: the Hopper kernel (float32 past the fused kernel's work, ",
              weight_grad_sm90_blocks(S, cols),
              " tiles; docs/decisions_sequence.md#sequence-wgrad-rule)");
  } else {
    plan_note("weight gradient: the fused kernel (",
              setting == "fused" ? "forced, LLTM_EXT_SEQUENCE_WGRAD=fused"
                                 : "the work 3S (S + I + 1) T B within its bound",
              "; docs/decisions_sequence.md#sequence-wgrad-rule)");
  }
  TORCH_CHECK((3 * S + 63) / 64 <= 65535,  // the grid: gate rows along gridDim.y
              "lltm_ext.lltm_sequence: LLTM_EXT_SEQUENCE_WGRAD=", setting,
              ", but the fused weight gradient takes states of at most 1398080, and got ", S, ".");
  if (rows == 0) {
    return plan;
  }
  const int sms = cuda::sm_count(device);
  int64_t wanted = 1;
  if (tensor) {
    wanted = weight_grad_sm90_splits(weight_grad_sm90_blocks(S, cols), rows, sms);
  } else {
    // Splits of k (rows of at least 64 each) for about two blocks an SM, at most 256 (a split's
    // sum over T B / 256 rows: T = 5, B = 40000, S = 16 rounded to 6e-4 of d W in 64).
    const int64_t blocks = weight_grad_blocks(S, cols);
    wanted = std::clamp<int64_t>((2 * sms + blocks - 1) / blocks, 1,
                                 std::max<int64_t>(1, std::min<int64_t>(256, rows / 64)));
  }
  plan.kind = tensor ? WeightGradPlan::Kind::kTensor : WeightGradPlan::Kind::kFused;
  plan.k_split = (rows + wanted - 1) / wanted;
  plan.splits = static_cast<int>(std::max<int64_t>(1, (rows + plan.k_split - 1) / plan.k_split));
  return plan;
}

bool sequence_weight_grad_cuda(const at::Tensor& d_gates, const at::Tensor& h0,
                               const at::Tensor& output, const at::Tensor& input,
                               const at::Tensor& d_weights, const at::Tensor& d_bias, bool tf32) {
  const int64_t T = input.size(0), B = input.size(1), I = input.size(2), S = output.size(2);
  const int64_t rows = T * B, cols = S + I + (d_bias.defined() ? 1 : 0);
  const WeightGradPlan plan =
      plan_weight_grad(input.get_device(), input.scalar_type(), T, B, I, S, d_bias.defined(), tf32);
  if (plan.kind == WeightGradPlan::Kind::kCublas) {
    return false;
  }
  const c10::cuda::CUDAGuard guard(input.device());
  const int sms = cuda::sm_count(input.get_device());
  const bool tensor = plan.kind == WeightGradPlan::Kind::kTensor;
  const int splits = plan.splits;
  const int64_t k_split = plan.k_split;
  LLTM_EXT_DISPATCH_FLOATING(input.scalar_type(), "lltm_sequence_weight_grad_cuda", [&] {
    using acc_t = cuda::opmath_t<scalar_t>;
    at::Tensor partials;
    if (splits > 1) {
      partials = at::empty({splits, 3 * S, cols},
                           input.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
    }
    WeightGradArgs<scalar_t> p{};
    p.d_gates = d_gates.const_data_ptr<scalar_t>();
    p.h0 = data_or_null<scalar_t>(h0);
    p.output = output.const_data_ptr<scalar_t>();
    p.input = input.const_data_ptr<scalar_t>();
    p.d_weights = d_weights.mutable_data_ptr<scalar_t>();
    p.d_bias = d_bias.defined() ? d_bias.mutable_data_ptr<scalar_t>() : nullptr;
    p.rows = rows;
    p.batch = B;
    p.state = S;
    p.features = I;
    p.cols = cols;
    acc_t* const sums = splits > 1 ? partials.mutable_data_ptr<acc_t>() : nullptr;
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    C10_CUDA_CHECK(tensor ? launch_weight_grad_tensor(p, sums, splits, k_split, sms, stream)
                          : launch_weight_grad(p, sums, splits, k_split, sms, stream));
  });
  return true;
}

// cuBLAS products on strided views (cublas_gemm.h): the sequence's products outside the time loops
// (and, on the CPU, lltm_sequence.cpp's ATen calls).
void gemm_cuda(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, double beta,
               bool tf32) {
  const c10::cuda::CUDAGuard guard(c.device());
  if (a.scalar_type() == c.scalar_type() &&
      tensor_gemm(mat_of(a), mat_of(b), mat_of(c), beta, a.scalar_type(), tf32, c.get_device())) {
    return;
  }
  Blas(a.scalar_type(), tf32, c.scalar_type()).gemm(mat_of(a), mat_of(b), mat_of(c), beta);
}

}  // namespace lltm_ext::lltm
