// The LLTM sequence's mixed precision on CUDA (CUDA builds only): a float32 state whose products
// run in float16 or bfloat16, as a loop of the cell keeps them under torch.autocast. The cuBLAS
// path's time loops with half-precision operands and float32 sums into float32 gates, and the
// float32 gate kernels between them (lltm_sequence.h has the contract).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdint>
#include <string>

#include "common/cuda_host.h"
#include "common/env_setting.h"
#include "lltm/lltm_launchers.h"
#include "lltm_sequence/cublas_gemm.h"
#include "lltm_sequence/lltm_sequence.h"
#include "lltm_sequence/plan.h"
#include "lltm_sequence/step_graphs.h"

namespace lltm_ext::lltm {

bool mixed_takes_cublas(int device, int64_t steps, int64_t batch, int64_t state) {
  if (env_choice("LLTM_EXT_SEQUENCE_MIXED") == "off") {
    return false;
  }
  // Where float32's plan is the cuBLAS path with cuBLAS's step products, and where the half
  // types' plan leaves their other kernels for that path: at small batches past S = 512 cuBLAS's
  // half step products cost less than float32's TF32 ones, ours (the cluster, wide and tiled
  // kernels, or the cuBLAS path's own products up to 32 rows) or cuBLAS's
  // (docs/decisions_sequence.md#half-small-batch-cublas). Not in float32's cuBLAS path's short
  // calls with our own step products there (docs/decisions_sequence.md#mixed-products).
  const SequencePlan plan = plan_sequence<float>(device, steps, batch, state, /*tf32=*/true);
  return (plan.path == SequencePlan::Path::kCublas && plan.forward_gemm.rows == 0 &&
          plan.backward_gemm.rows == 0) ||
         half_small_batch_cublas(steps, batch, state);
}

// The least work (multiply-adds of one of the products outside the time loop) at which the
// autocast kernel's call for a float32 state off the cuBLAS path takes the half products.
constexpr int64_t kMixedProductsWork = int64_t{1} << 30;

bool mixed_products_pay(int64_t steps, int64_t batch, int64_t features, int64_t state) {
  const std::string setting = env_choice("LLTM_EXT_SEQUENCE_MIXED");
  if (setting == "off" || setting == "products") {
    return setting == "products";
  }
  // d W's multiply-adds, T B 3S (S + I), the largest of the products outside the time loop; below
  // kMixedProductsWork the casts around the half products (a kernel each, forward and backward)
  // cost more than the products' speed saves.
  return steps * batch * 3 * state * (state + features) >= kMixedProductsWork;
}

namespace {

// The half type's c10 type, for the gate kernels' copies.
template <typename F>
void with_half_type(at::ScalarType t, F&& f) {
  if (t == at::kHalf) {
    f(c10::Half());
  } else {
    TORCH_INTERNAL_ASSERT(t == at::kBFloat16, "a mixed call's products in float16 or bfloat16");
    f(c10::BFloat16());
  }
}

}  // namespace

void sequence_forward_mixed_cuda(const at::Tensor& input, const at::Tensor& weights,
                                 const at::Tensor& bias, const at::Tensor& h0, const at::Tensor& c0,
                                 const at::Tensor& output, const at::Tensor& h_n,
                                 const at::Tensor& c_n, const at::Tensor& cells,
                                 const at::Tensor& gates) {
  const c10::cuda::CUDAGuard guard(input.device());
  const int sms = cuda::sm_count(input.get_device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const Blas blas(input.scalar_type(), /*tf32=*/false, at::kFloat);
  const int64_t T = input.size(0), B = input.size(1), I = input.size(2), S = output.size(2);
  const int64_t es = blas.element_size(), n = B * S;
  const Mat w = row_major(weights.const_data_ptr(), 3 * S, S + I, S + I);
  float* g = gates.mutable_data_ptr<float>();
  // The input projections of all steps, one product: gates = input W_i^T.
  blas.gemm(row_major(input.const_data_ptr(), T * B, I, I), transposed(col_block(w, S, I, es)),
            row_major(g, T * B, 3 * S, 3 * S), 0);
  // W_h as cuBLAS's step products read it (cublas_gemm.h: aligned rows), and h_{t-1} in the half
  // type: each step's gate kernel writes h_t's copy for the next step's product.
  // At S not a multiple of 8, padded (cublas_gemm.h: padded_step): h_{t-1} in rows of sp, zeros
  // past S, W_h in an (np, sp) corner of zeros, each product (B, np) float32 sums that the gate
  // kernel adds to the projection.
  const PaddedStep pad = padded_step(weights, B, S, T, /*backward=*/false);
  const CublasWeights w_h = pad.used() ? CublasWeights{} : cublas_w_h(weights, S, T, es);
  const at::Tensor h_half = pad.used() ? pad.operand : at::empty({B, S}, input.options());
  if (h0.defined()) {
    h_half.narrow(1, 0, S).copy_(h0);
  }
  const float* b = bias.const_data_ptr<float>();
  const float* c_0 = c0.defined() ? c0.const_data_ptr<float>() : nullptr;
  float* out = output.mutable_data_ptr<float>();
  float* cell = cells.mutable_data_ptr<float>();
  with_half_type(input.scalar_type(), [&](auto tag) {
    using H = decltype(tag);
    const int64_t ld = pad.used() ? pad.sp : S;
    const RowCopy<H> copy{h_half.mutable_data_ptr<H>(), ld};
    // Every step's launches, on stream s (run_step_loop: directly or as a graph)
    const auto enqueue = [&](cudaStream_t s) {
      for (int64_t t = 0; t < T; ++t) {
        float* g_t = g + t * 3 * n;
        SplitSums<float> sums;
        if (t > 0 || h0.defined()) {  // none for a zero h_{-1}: gates_0 is the projection alone
          if (pad.used()) {
            blas.gemm(row_major(h_half.const_data_ptr(), B, pad.sp, pad.sp),
                      transposed(row_major(pad.w.const_data_ptr(), pad.np, pad.sp, pad.sp)),
                      row_major(pad.sums.const_data_ptr(), B, pad.np, pad.np), 0);
            sums = SplitSums<float>{pad.sums.const_data_ptr<float>(), 1, g_t, pad.np};
          } else {
            blas.gemm(row_major(h_half.const_data_ptr(), B, S, S), transposed(w_h.w_h),
                      row_major(g_t, B, 3 * S, 3 * S), 1);
          }
        }
        const cudaError_t launched = launch_forward_gates<float, H>(
            g_t, b, t == 0 ? c_0 : cell + (t - 1) * n, out + t * n, cell + t * n, n, S, sms, s,
            sums, t + 1 < T ? copy : RowCopy<H>{});
        C10_CUDA_CHECK(launched);
      }
    };
    LoopKey key;
    key.add(StepLoop::kMixedForward).add(input.scalar_type()).add(T).add(B).add(S);
    key.add(h0.defined()).add(g).add(b).add(c_0).add(out).add(cell).add(h_half.data_ptr());
    key.add(w_h.w_h.data).add(w_h.w_h.ld).add(pad.sp).add(pad.np);
    if (pad.used()) {
      key.add(pad.w.data_ptr()).add(pad.sums.data_ptr());
    }
    run_step_loop(key, T, stream, blas.handle(), enqueue);
  });
  at::_foreach_copy_({h_n, c_n}, {output[T - 1], cells[T - 1]});
}

void sequence_backward_mixed_cuda(const at::Tensor& grad_output, const at::Tensor& grad_h_n,
                                  const at::Tensor& grad_c_n, const at::Tensor& weights,
                                  const at::Tensor& bias, const at::Tensor& cells,
                                  const at::Tensor& gates, const at::Tensor& d_gates,
                                  const at::Tensor& d_h, const at::Tensor& d_c, bool want_d_h0) {
  const c10::cuda::CUDAGuard guard(cells.device());
  const int sms = cuda::sm_count(cells.get_device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const Blas blas(weights.scalar_type(), /*tf32=*/false, at::kFloat);
  const int64_t T = cells.size(0), B = cells.size(1), S = cells.size(2);
  const int64_t es = blas.element_size(), n = B * S;
  const CublasWeights w_h = cublas_w_h(weights, S, T, es);
  // dG_t in float32 (the gate kernel's own output, unused: its copy in d_gates is what counts)
  const at::Tensor dg = at::empty({B, 3 * S}, cells.options());
  const float* go = grad_output.const_data_ptr<float>();
  const float* gh_n = grad_h_n.defined() ? grad_h_n.const_data_ptr<float>() : nullptr;
  const float* gc_n = grad_c_n.defined() ? grad_c_n.const_data_ptr<float>() : nullptr;
  const float* cell = cells.const_data_ptr<float>();
  const float* g = gates.const_data_ptr<float>();
  const float* b = bias.const_data_ptr<float>();
  float* dh = d_h.mutable_data_ptr<float>();
  float* dc[2] = {d_c.mutable_data_ptr<float>(), d_c.mutable_data_ptr<float>() + n};
  with_half_type(d_gates.scalar_type(), [&](auto tag) {
    using H = decltype(tag);
    H* dg_half = d_gates.mutable_data_ptr<H>();
    // Every step's launches, on stream s (run_step_loop: directly or as a graph)
    const auto enqueue = [&](cudaStream_t s) {
      for (int64_t t = T - 1; t >= 0; --t) {
        // dL/dc_t: grad_c_n, or from step t + 1; dL/dh_t = grad_output[t] + (grad_h_n, or d h_t).
        const float* gc = t == T - 1 ? gc_n : dc[(t + 1) % 2];
        const float* gh = t == T - 1 ? gh_n : dh;
        H* dg_t = dg_half + t * 3 * n;
        const cudaError_t launched = launch_backward_gates<float, H>(
            gh != nullptr ? gh : go + t * n, S, gh != nullptr ? go + t * n : nullptr, gc,
            cell + t * n, g + t * 3 * n, b, dg.mutable_data_ptr<float>(), dc[t % 2], nullptr,
            nullptr, n, S, sms, s, SplitSums<float>{}, RowCopy<H>{dg_t, 3 * S});
        C10_CUDA_CHECK(launched);
        if (t > 0 || want_d_h0) {  // d h_{t-1} = dG_t W_h
          blas.gemm(row_major(dg_t, B, 3 * S, 3 * S), w_h.w_h, row_major(dh, B, S, S), 0);
        }
      }
    };
    LoopKey key;
    key.add(StepLoop::kMixedBackward).add(d_gates.scalar_type()).add(T).add(B).add(S);
    key.add(want_d_h0).add(dg.data_ptr()).add(dg_half).add(go).add(gh_n).add(gc_n).add(cell);
    key.add(g).add(b).add(dh).add(dc[0]).add(w_h.w_h.data).add(w_h.w_h.ld);
    run_step_loop(key, T, stream, blas.handle(), enqueue);
  });
}

}  // namespace lltm_ext::lltm
