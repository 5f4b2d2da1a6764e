// The LLTM over a whole sequence in one call, module lltm_ext._lltm_sequence: operators
// torch.ops.lltm_ext.lltm_sequence{,_forward,_backward}, with backward through time and the
// autograd in C++. The CPU time loop is here (one product for the input projections of all steps;
// per step the recurrent product and the cell's gate pass; backward mirrored, the weight gradients
// as products over all steps at the end); CUDA runs the time loops of sequence_cuda_host.cpp. This
// binding is compiled again without WITH_CUDA for the CPU-only twin, so its CUDA calls sit under
// #ifdef WITH_CUDA; the cell's gate passes come from the objects of src/lltm/ (uses.txt).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/autocast.h"
#include "common/checks.h"
#include "common/dispatch.h"
#include "common/env_setting.h"
#include "common/module.h"
#include "common/first_order.h"
#include "gemm/gemm.h"
#include "lltm/lltm.h"
#include "lltm/rounded_op.h"
#include "lltm_sequence/sequence_cpu.h"
#ifdef WITH_CUDA
#include <c10/cuda/CUDAGuard.h>

#include "lltm_sequence/lltm_sequence.h"
#include "lltm_sequence/plan.h"
#include "lltm_sequence/step_graphs.h"
#endif

namespace lltm_ext::lltm {
namespace {

// Whether float32 products may use TF32 tensor cores: as torch's float32 matmuls may, and so the
// loop of lltm cells this replaces (torch.backends.cuda.matmul.allow_tf32, or
// torch.set_float32_matmul_precision "high" / "medium"; off by default). Not cuDNN's RNN setting,
// which torch.nn.LSTM follows and which is TF32 by default: the LLTM's cell state has no forget
// gate, so TF32's rounding in the recurrent product adds up over the steps (at T = 200 an output
// error of 2e-2 against float64; 2e-5 in full float32; docs/lltm_notes.md, "Precision").
// `requested`: the operator's own `tf32` argument, which asks for TF32 whatever torch's setting
// (the autocast kernel's, for a float32 state whose operands it rounded to bfloat16 or float16:
// exact in TF32, so the products read what the loop's half-precision products read).
bool matmul_allows_tf32(const at::Tensor& t, bool requested = false) {
  return t.is_cuda() && t.scalar_type() == at::kFloat &&
         (requested || at::globalContext().allowTF32CuBLAS());
}

// c = a @ b + beta c (beta 0 or 1) on the tensors' device: cuBLAS on CUDA (gemm_cuda); on the
// CPU lltm_ext's own GEMM where c is written (gemm/gemm.h: gemm_cpu, linked from src/gemm/, which
// takes any strides; ATen's falls far behind it where a side is narrow, such as the products with
// few input features: docs/lltm_sequence_cpu.md#the-products), ATen's addmm where it is added
// to; a, b, c 2-D views with unit stride in one dimension.
void gemm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, double beta, bool tf32) {
  if (c.is_cuda()) {
#ifdef WITH_CUDA
    gemm_cuda(a, b, c, beta, tf32);
#else
    fail_not_compiled_with_cuda("lltm_sequence");
#endif
  } else if (beta == 0) {
    gemm::gemm_cpu(a, b, c);
  } else {
    c.addmm_(a, b, beta, 1);
  }
}

// The block d_weights[:, :S] (3S, S) for cuBLAS to write the recurrent weight gradient into (over k
// rows of dG): the block itself, or, on CUDA where its rows' stride (S + I) breaks the 16-byte
// alignment that rows of S keep and the product is at least as deep as S, a contiguous tensor that
// the caller copies into the block after (copy_recurrent_block): as for the step products
// (cublas_gemm.h: cublas_w_h), cuBLAS runs its Hopper kernels on aligned operands only.
// Figures: docs/decisions_sequence.md#cublas-aligned-weights.
at::Tensor recurrent_block(const at::Tensor& d_weights, int64_t S, int64_t k) {
  const at::Tensor block = d_weights.narrow(1, 0, S);
  const int64_t es = d_weights.element_size();
  if (!d_weights.is_cuda() || (d_weights.size(1) * es) % 16 == 0 || (S * es) % 16 != 0 || k < S) {
    return block;
  }
  return at::empty({d_weights.size(0), S}, d_weights.options());
}
void copy_recurrent_block(const at::Tensor& d_weights, const at::Tensor& dw_h) {
  const at::Tensor block = d_weights.narrow(1, 0, dw_h.size(1));
  if (!block.is_same(dw_h)) {
    block.copy_(dw_h);
  }
}

// The weight gradient d_weights (3S, S + I) = sum_t dG_t^T [h_{t-1} | x_t], and the bias gradient
// d_bias (3S) where defined, in one kernel on CUDA (sequence_weight_grad_cuda) where that pays;
// false, nothing written, where the caller's products should run instead (and on the CPU).
bool weight_grad_in_one_kernel(const at::Tensor& d_gates, const at::Tensor& h0,
                               const at::Tensor& output, const at::Tensor& input,
                               const at::Tensor& d_weights, const at::Tensor& d_bias, bool tf32) {
#ifdef WITH_CUDA
  return input.is_cuda() &&
         sequence_weight_grad_cuda(d_gates, h0, output, input, d_weights, d_bias, tf32);
#else
  (void)d_gates, (void)h0, (void)output, (void)input, (void)d_weights, (void)d_bias, (void)tf32;
  return false;
#endif
}

// The sequence's shapes, from the checked arguments.
struct Dims {
  int64_t steps, batch, features, state;
};

// The state's dtype (h0, c0, and the outputs, cells and gates): the first defined of `state_ref`
// (backward's saved output), c0 and h0, else the input's. It is the input's, or float32 where the
// input, weights and bias are float16 or bfloat16: a mixed call, a float32 state whose products
// run in the input's dtype (the autocast kernel's, as a loop of the pure cell keeps its float32
// state under autocast).
at::ScalarType state_dtype(const at::Tensor& input, const at::Tensor& h0, const at::Tensor& c0,
                           const at::Tensor& state_ref = at::Tensor()) {
  for (const at::Tensor* t : {&state_ref, &c0, &h0}) {
    if (t->defined()) {
      return t->scalar_type();
    }
  }
  return input.scalar_type();
}
bool is_mixed(const at::Tensor& input, at::ScalarType state) {
  return state != input.scalar_type();
}

// The state's dtype (state_dtype), with h0 and c0 (named `h0_name`, `c0_name`) checked against it
// and `input` (named `input_name`): on input's device, in one dtype, which is input's, or float32
// with float16 or bfloat16 input (a mixed call).
at::ScalarType check_state(const at::Tensor& input, const char* input_name, const at::Tensor& h0,
                           const char* h0_name, const at::Tensor& c0, const char* c0_name,
                           const at::Tensor& state_ref) {
  const at::ScalarType state_type = state_dtype(input, h0, c0, state_ref);
  for (const auto& [t, name] : {std::pair<const at::Tensor&, const char*>{h0, h0_name},
                                std::pair<const at::Tensor&, const char*>{c0, c0_name}}) {
    if (t.defined()) {
      check_input(t, name);
      check_same_device(t, name, input, input_name);
      TORCH_CHECK(t.scalar_type() == state_type, "lltm_ext: all tensors must have one dtype, but `",
                  name, "` is ", t.scalar_type(), " and the state is ", state_type, " (", c0_name,
                  "'s, else ", h0_name, "'s).");
    }
  }
  TORCH_CHECK(!is_mixed(input, state_type) ||
                  (state_type == at::kFloat &&
                   (input.scalar_type() == at::kHalf || input.scalar_type() == at::kBFloat16)),
              "lltm_ext: all tensors must have one dtype, but the state (", h0_name, ", ", c0_name,
              ") is ", state_type, " and `", input_name, "` is ", input.scalar_type(),
              " (a float32 state may go with float16 or bfloat16 ", input_name,
              ", weights and bias: their products then run in that dtype).");
  return state_type;
}

// h0, c0: each (B, S), or undefined (the operator's None: zeros); state_ref as state_dtype's.
Dims check_forward_args(const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
                        const at::Tensor& h0, const at::Tensor& c0,
                        const at::Tensor& state_ref = at::Tensor()) {
  CHECK_INPUT(input);
  CHECK_INPUT(weights);
  CHECK_INPUT(bias);
  CHECK_LIKE(weights, input);
  CHECK_LIKE(bias, input);
  check_state(input, "input", h0, "h0", c0, "c0", state_ref);
  check_backend(input, "lltm_sequence");
  TORCH_CHECK(
      weights.dim() == 2 && weights.size(0) % 3 == 0 && weights.size(1) >= weights.size(0) / 3,
      "lltm_ext.lltm_sequence: `weights` must have shape [3 * state_size, state_size + "
      "input_features], but got a ",
      describe(weights), ".");
  const int64_t state = weights.size(0) / 3;
  const int64_t features = weights.size(1) - state;
  TORCH_CHECK(input.dim() == 3 && input.size(2) == features,
              "lltm_ext.lltm_sequence: `input` must have shape [seq_len, batch, ", features,
              "] (input_features = weights.size(1) - state_size = ", weights.size(1), " - ", state,
              "), but got a ", describe(input), ".");
  const int64_t batch = input.size(1);
  for (const auto& [t, name] : {std::pair<const at::Tensor&, const char*>{h0, "h_0"},
                                std::pair<const at::Tensor&, const char*>{c0, "c_0"}}) {
    TORCH_CHECK(!t.defined() || (t.dim() == 2 && t.size(0) == batch && t.size(1) == state),
                "lltm_ext.lltm_sequence: the state's `", name, "` must have shape [", batch, ", ",
                state,
                "] ([batch, state_size]: batch from `input`, state_size = weights.size(0) / 3), "
                "but got a ",
                describe(t), ".");
  }
  TORCH_CHECK(
      bias.numel() == 3 * state && (bias.dim() == 1 || (bias.dim() == 2 && bias.size(0) == 1)),
      "lltm_ext.lltm_sequence: `bias` must have shape [", 3 * state, "] or [1, ", 3 * state,
      "] (3 * state_size), but got a ", describe(bias), ".");
  return {input.size(0), batch, features, state};
}

using Forward = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using OptionalTensor = std::optional<at::Tensor>;

// An optional argument as a tensor: undefined where absent (None).
at::Tensor tensor_or_undefined(const OptionalTensor& t) {
  return t.has_value() ? *t : at::Tensor();
}
// And back, for calls through the dispatcher.
OptionalTensor as_optional(const at::Tensor& t) {
  return t.defined() ? OptionalTensor(t) : std::nullopt;
}
using Backward = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

Forward forward(const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
                const OptionalTensor& h0_in, const OptionalTensor& c0_in, bool tf32_requested);

// f(T{}, P{}) for the CPU loops' pairs of dtypes (sequence_cpu.h): the state's `state` and the
// products' `products`, one floating dtype, or float32 with bfloat16 / float16 (a mixed call).
template <typename F>
void dispatch_cpu_loop(at::ScalarType state, at::ScalarType products, F&& f) {
  if (state == products) {
    LLTM_EXT_DISPATCH_FLOATING(state, "lltm_sequence_cpu", [&] { f(scalar_t{}, scalar_t{}); });
  } else if (products == at::kBFloat16) {
    f(float{}, c10::BFloat16{});
  } else {
    f(float{}, c10::Half{});
  }
}

// forward_loop_cpu (sequence_cpu.h) on tensors: weights (3S, S + I) in the products' dtype, b
// (3S) and the rest in the state's; h0, c0 (B, S) or undefined for zeros; gates (holding the input
// projections), output and cells step-major (rows of 3S | S), contiguous.
void forward_loop_cpu_tensors(const StepRows& rows, const at::Tensor& weights, const at::Tensor& b,
                              const at::Tensor& h0, const at::Tensor& c0, const at::Tensor& gates,
                              const at::Tensor& output, const at::Tensor& cells) {
  dispatch_cpu_loop(gates.scalar_type(), weights.scalar_type(), [&](auto state, auto products) {
    using T = decltype(state);
    using P = decltype(products);
    forward_loop_cpu<T, P>(rows, b.numel() / 3, weights.const_data_ptr<P>(), weights.stride(0),
                           b.const_data_ptr<T>(), data_or_null<T>(h0), data_or_null<T>(c0),
                           gates.mutable_data_ptr<T>(), output.mutable_data_ptr<T>(),
                           cells.mutable_data_ptr<T>());
  });
}

// backward_loop_cpu (sequence_cpu.h) on tensors: weights as forward_loop_cpu's, d_gates in their
// dtype; grad_h_n, grad_c_n (B, S) or undefined for zeros; d_h0 (when want_h0) and d_c0 (B, S)
// written.
void backward_loop_cpu_tensors(const StepRows& rows, const at::Tensor& weights, const at::Tensor& b,
                               const at::Tensor& grad_output, const at::Tensor& grad_h_n,
                               const at::Tensor& grad_c_n, const at::Tensor& cells,
                               const at::Tensor& gates, const at::Tensor& d_gates,
                               const at::Tensor& d_h0, const at::Tensor& d_c0, bool want_h0) {
  dispatch_cpu_loop(gates.scalar_type(), weights.scalar_type(), [&](auto state, auto products) {
    using T = decltype(state);
    using D = decltype(products);
    backward_loop_cpu<T, D>(
        rows, b.numel() / 3, weights.const_data_ptr<D>(), weights.stride(0), b.const_data_ptr<T>(),
        grad_output.const_data_ptr<T>(), data_or_null<T>(grad_h_n), data_or_null<T>(grad_c_n),
        cells.const_data_ptr<T>(), gates.const_data_ptr<T>(), d_gates.mutable_data_ptr<D>(),
        want_h0 ? d_h0.mutable_data_ptr<T>() : nullptr, d_c0.mutable_data_ptr<T>());
  });
}

// Whether a mixed call (float32 state, half products) of these sizes runs its own loop on CUDA:
// where the float32 plan is the cuBLAS path, whose step products then run in the half type.
bool mixed_runs_cublas(const at::Tensor& input, const Dims& d) {
#ifdef WITH_CUDA
  return input.is_cuda() && d.steps > 0 &&
         mixed_takes_cublas(input.get_device(), d.steps, d.batch, d.state);
#else
  (void)input, (void)d;
  return false;
#endif
}

// Whether a mixed call of these sizes runs the float32 time loop between half products on CUDA
// (forward_mixed): off the cuBLAS path, unless LLTM_EXT_SEQUENCE_MIXED=off.
bool mixed_runs_float32_loop(const at::Tensor& input, const Dims& d) {
#ifdef WITH_CUDA
  return input.is_cuda() && d.steps > 0 && env_choice("LLTM_EXT_SEQUENCE_MIXED") != "off" &&
         !mixed_runs_cublas(input, d);
#else
  (void)input, (void)d;
  return false;
#endif
}

// Whether a mixed call runs the CPU's mixed time loop (forward_mixed_cpu): on the CPU, unless
// LLTM_EXT_SEQUENCE_MIXED=off.
bool mixed_runs_cpu_loop(const at::Tensor& input, const Dims& d) {
  return !input.is_cuda() && d.steps > 0 && env_choice("LLTM_EXT_SEQUENCE_MIXED") != "off";
}

// Whether the CPU's mixed loop pays for its casts and the steps' extra passes (h_{t-1} rounded,
// the product added), which the autocast kernel's call then takes: a step's product of at least
// 2^17 multiply-adds (B S 3S), or LLTM_EXT_SEQUENCE_MIXED=products. Below it the float32 loop on
// the rounded operands runs as fast or faster (docs/lltm_sequence_cpu.md#under-autocast).
bool cpu_mixed_products_pay(const Dims& d) {
  constexpr int64_t kMinStepProduct = int64_t{1} << 17;
  return d.batch * d.state * 3 * d.state >= kMinStepProduct ||
         env_choice("LLTM_EXT_SEQUENCE_MIXED") == "products";
}

// The CPU time loop of a mixed call over `rows` (a (T, B) sequence or a packed batch): every
// product in the half type on lltm_ext's CPU GEMM, its result rounded to that type as the loop's
// product is (the input projections of x (N, I) a stretch of rows at a time, through a buffer of
// about 1 MiB that stays in cache and in the process's pages, where one buffer for all rows would
// cost its fresh pages' first touch; then the time loop of sequence_cpu.h: per step h_{t-1}
// rounded to the half type, as the loop's product rounds it, times W_h^T), added up in float32
// gates; the gate math, the state and the outputs float32. b: the bias (3S) in float32. Writes
// output, cells (N, S) and gates (N, 3S: without the bias).
void forward_mixed_cpu(const at::Tensor& x, const at::Tensor& weights, const at::Tensor& b,
                       const at::Tensor& h0, const at::Tensor& c0, const StepRows& rows,
                       const at::Tensor& output, const at::Tensor& cells, const at::Tensor& gates) {
  const int64_t N = x.size(0), I = x.size(1), S = b.numel() / 3;
  if (N == 0) {
    return;
  }
  const int64_t row_bytes = std::max<int64_t>(3 * S * x.element_size(), 1);
  const int64_t chunk = std::clamp<int64_t>((int64_t{1} << 20) / row_bytes, 1, N);
  const at::Tensor w_i_t = weights.narrow(1, S, I).t();
  const at::Tensor projections = at::empty({chunk, 3 * S}, x.options());
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    const int64_t n = std::min(chunk, N - r0);
    const at::Tensor part = projections.narrow(0, 0, n);
    gemm(x.narrow(0, r0, n), w_i_t, part, 0, false);
    gates.narrow(0, r0, n).copy_(part);
  }
  forward_loop_cpu_tensors(rows, weights, b, h0, c0, gates, output, cells);
}

// Forward of a mixed call (check_forward_args): input, weights, bias in float16 or bfloat16, the
// state float32. On CUDA where the plan is the cuBLAS path, the products run in the half type
// (h_{t-1} rounded to it each step, as the loop's product rounds it) and add up in float32 into
// float32 gates; the gate math, the state and the outputs are float32. Elsewhere on CUDA the input
// projections are one such product, and the float32 time loop runs on them with TF32 step products
// (W_h in float32, which holds its values exactly; h_{t-1} rounded to TF32, less than the loop's
// half type rounds it). On the CPU, forward_mixed_cpu. Otherwise (LLTM_EXT_SEQUENCE_MIXED=off) the
// operands go to float32 and the float32 sequence runs with TF32 allowed. Outputs as forward's,
// float32.
Forward forward_mixed(const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
                      const at::Tensor& h0, const at::Tensor& c0, const Dims& d) {
  const bool cublas = mixed_runs_cublas(input, d);
  const bool cpu_loop = mixed_runs_cpu_loop(input, d);
  if (!cublas && !cpu_loop && !mixed_runs_float32_loop(input, d)) {
    return forward(input.to(at::kFloat), weights.to(at::kFloat), bias.to(at::kFloat),
                   as_optional(h0), as_optional(c0), /*tf32_requested=*/true);
  }
  const auto [T, B, I, S] = d;
  const at::TensorOptions f32 = input.options().dtype(at::kFloat);
  at::Tensor output = at::empty({T, B, S}, f32), cells = at::empty({T, B, S}, f32);
  at::Tensor gates = at::empty({T, B, 3 * S}, f32);
  at::Tensor h_n = at::empty({B, S}, f32), c_n = at::empty({B, S}, f32);
  const at::Tensor b = bias.reshape({3 * S}).to(at::kFloat);
  if (cpu_loop) {
    forward_mixed_cpu(input.view({T * B, I}), weights, b, h0, c0, StepRows::uniform(T, B),
                      output.view({T * B, S}), cells.view({T * B, S}), gates.view({T * B, 3 * S}));
    h_n.copy_(output[T - 1]);
    c_n.copy_(cells[T - 1]);
    return {output, h_n, c_n, cells, gates};
  }
#ifdef WITH_CUDA
  if (cublas) {
    sequence_forward_mixed_cuda(input, weights, b, h0, c0, output, h_n, c_n, cells, gates);
  } else {
    gemm(input.view({T * B, I}), weights.narrow(1, S, I).t(), gates.view({T * B, 3 * S}), 0, false);
    // With the projections given, the float32 loop reads of its input only the sizes, device and
    // dtype: a float32 tensor of those that holds one element.
    const at::Tensor sizes = at::empty({1, 1, 1}, f32).expand({T, B, I});
    sequence_forward_cuda(sizes, weights.to(at::kFloat), b, h0, c0, output, h_n, c_n, cells, gates,
                          /*tf32=*/true, /*projected=*/true);
  }
#endif
  return {output, h_n, c_n, cells, gates};
}

// Forward over T steps of input (T, B, I) from the state (h0, c0; each None for zeros, which the
// CUDA kernels read as such without a tensor of them). Returns (output (T, B, S): every step's
// new_h, h_n, c_n (B, S), cells (T, B, S): every step's new_cell, gates (T, B, 3S): the
// pre-activations without the bias, which the gate kernels add). Backward reads cells and gates.
Forward forward(const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
                const OptionalTensor& h0_in, const OptionalTensor& c0_in, bool tf32_requested) {
  const at::Tensor h0 = tensor_or_undefined(h0_in), c0 = tensor_or_undefined(c0_in);
  const auto [T, B, I, S] = check_forward_args(input, weights, bias, h0, c0);
  if (is_mixed(input, state_dtype(input, h0, c0))) {
    return forward_mixed(input, weights, bias, h0, c0, Dims{T, B, I, S});
  }
  const bool tf32 = matmul_allows_tf32(input, tf32_requested);
  const at::Tensor b = bias.reshape({3 * S});
  const at::Tensor w_i = weights.narrow(1, S, I);  // (3S, I)
  at::Tensor output = at::empty({T, B, S}, input.options());
  at::Tensor cells = at::empty({T, B, S}, input.options());
  at::Tensor gates = at::empty({T, B, 3 * S}, input.options());
  if (T == 0) {  // no steps: the final state is the initial one
    return {output, h0.defined() ? h0.clone() : at::zeros({B, S}, input.options()),
            c0.defined() ? c0.clone() : at::zeros({B, S}, input.options()), cells, gates};
  }
  at::Tensor h_n = at::empty({B, S}, input.options());
  at::Tensor c_n = at::empty({B, S}, input.options());
  if (input.is_cuda()) {
#ifdef WITH_CUDA
    sequence_forward_cuda(input, weights, b, h0, c0, output, h_n, c_n, cells, gates, tf32,
                          /*projected=*/false);
#else
    fail_not_compiled_with_cuda("lltm_sequence");
#endif
  } else {
    // The input projections of all steps, one product: gates = input W_i^T.
    gemm(input.view({T * B, I}), w_i.t(), gates.view({T * B, 3 * S}), 0, tf32);
    // Then per step the recurrent product and the gate pass (sequence_cpu.h).
    forward_loop_cpu_tensors(StepRows::uniform(T, B), weights, b, h0, c0, gates, output, cells);
    h_n.copy_(output[T - 1]);
    c_n.copy_(cells[T - 1]);
  }
  return {output, h_n, c_n, cells, gates};
}

// Which of backward's results are wanted: d_input, d_weights, d_bias, d_h0, d_c0 (autograd's
// needs_input_grad). Those not wanted come back undefined and are not computed: with the input and
// the initial state not requiring grad (the first layer of a model, or a state of zeros) that
// spares the products d_input = dG W_i and d h0 = dG_0 W_h.
using OutputMask = std::array<bool, 5>;

Backward backward(const at::Tensor& grad_output, const OptionalTensor& grad_h_n_in,
                  const OptionalTensor& grad_c_n_in, const at::Tensor& input,
                  const at::Tensor& weights, const at::Tensor& bias, const OptionalTensor& h0_in,
                  const at::Tensor& output, const at::Tensor& cells, const at::Tensor& gates,
                  OutputMask output_mask, bool tf32_requested);

// d b of a mixed call on the CPU: the column sums of dG (N, 3S) in its half type, as a product
// with a row of ones (float sums, rounded once), where ATen's sum in float of a half tensor makes
// a float copy of it first.
at::Tensor half_column_sums_cpu(const at::Tensor& dg) {
  at::Tensor sums = at::empty({dg.size(1)}, dg.options());
  gemm(at::ones({1, dg.size(0)}, dg.options()), dg, sums.view({1, dg.size(1)}), 0, false);
  return sums;
}

// Backward of a mixed call, as forward_mixed ran it: on CUDA's cuBLAS path, per step the float32
// gate kernel, dG_t rounded to the half type, d h_{t-1} = dG_t W_h in half products added up in
// float32; elsewhere on CUDA the float32 time loop (TF32 step products), then dG rounded to the
// half type. Then d input, d W (half products of dG and [h_{t-1} | x_t], h rounded as the loop's
// products read it) and d b in the half type, d h0 and d c0 in float32. Otherwise the float32
// sequence's backward on the operands in float32, its d input, d W and d b rounded to the half
// type (the dtypes of the arguments they belong to). On the CPU (mixed_runs_cpu_loop)
// backward_loop_cpu's mixed loop, then the products of the cuBLAS path's.
Backward backward_mixed(const at::Tensor& grad_output, const at::Tensor& grad_h_n,
                        const at::Tensor& grad_c_n, const at::Tensor& input,
                        const at::Tensor& weights, const at::Tensor& bias, const at::Tensor& h0,
                        const at::Tensor& output, const at::Tensor& cells, const at::Tensor& gates,
                        OutputMask mask, const Dims& d) {
  const at::ScalarType half = input.scalar_type();
  const bool cublas = mixed_runs_cublas(input, d);
  const bool cpu_loop = mixed_runs_cpu_loop(input, d);
  if (!cublas && !cpu_loop && !mixed_runs_float32_loop(input, d)) {
    auto [d_input, d_weights, d_bias, d_h0, d_c0] = backward(
        grad_output, as_optional(grad_h_n), as_optional(grad_c_n), input.to(at::kFloat),
        weights.to(at::kFloat), bias.to(at::kFloat), as_optional(h0), output, cells, gates, mask,
        /*tf32_requested=*/true);
    for (at::Tensor* t : {&d_input, &d_weights, &d_bias}) {
      if (t->defined()) {
        *t = t->to(half);
      }
    }
    return {d_input, d_weights, d_bias, d_h0, d_c0};
  }
  const auto [T, B, I, S] = d;
  const auto [want_input, want_weights, want_bias, want_h0, want_c0] = mask;
  at::Tensor d_input, d_weights, d_bias, d_h0, d_c0;
  if (!(want_input || want_weights || want_bias || want_h0 || want_c0)) {
    return {d_input, d_weights, d_bias, d_h0, d_c0};
  }
  const at::TensorOptions f32 = output.options();
  at::Tensor d_gates;  // in the half type
  at::Tensor d_h = at::empty({B, S}, f32);
  at::Tensor d_c = at::empty({2, B, S}, f32);
  const at::Tensor b = bias.reshape({3 * S}).to(at::kFloat);
  if (cpu_loop) {
    d_gates = at::empty({T, B, 3 * S}, input.options());
    backward_loop_cpu_tensors(StepRows::uniform(T, B), weights, b, grad_output, grad_h_n, grad_c_n,
                              cells, gates, d_gates, d_h, d_c[0], want_h0);
  }
#ifdef WITH_CUDA
  if (cublas) {
    d_gates = at::empty({T, B, 3 * S}, input.options());
    sequence_backward_mixed_cuda(grad_output, grad_h_n, grad_c_n, weights, b, cells, gates, d_gates,
                                 d_h, d_c, want_h0);
  } else if (!cpu_loop) {
    const at::Tensor d_gates_f32 = at::empty({T, B, 3 * S}, f32);
    sequence_backward_cuda(grad_output, grad_h_n, grad_c_n, weights.to(at::kFloat), b, cells, gates,
                           d_gates_f32, d_h, d_c, want_h0, /*tf32=*/true);
    d_gates = d_gates_f32.to(half);
  }
#endif
  const at::Tensor dg_all = d_gates.view({T * B, 3 * S});
  if (want_input) {
    d_input = at::empty({T, B, I}, input.options());
    gemm(dg_all, weights.narrow(1, S, I), d_input.view({T * B, I}), 0, false);
  }
  if (want_weights) {
    d_weights = at::empty({3 * S, S + I}, weights.options());
    gemm(dg_all.t(), input.view({T * B, I}), d_weights.narrow(1, S, I), 0, false);
    // h_{t-1} of every step in the half type: h0 (zeros where undefined), then output[:-1]
    at::Tensor h_prev = at::empty({T, B, S}, input.options());
    if (h0.defined()) {
      h_prev[0].copy_(h0);
    } else {
      h_prev[0].zero_();
    }
    if (T > 1) {
      h_prev.narrow(0, 1, T - 1).copy_(output.narrow(0, 0, T - 1));
    }
    const at::Tensor dw_h = recurrent_block(d_weights, S, T * B);
    gemm(dg_all.t(), h_prev.view({T * B, S}), dw_h, 0, false);
    copy_recurrent_block(d_weights, dw_h);
  }
  if (want_bias && input.is_cuda()) {
    d_bias = dg_all.sum(0, /*keepdim=*/false, at::kFloat).to(half);
  } else if (want_bias) {
    d_bias = half_column_sums_cpu(dg_all);
  }
  if (want_h0) {
    d_h0 = d_h;
  }
  if (want_c0) {
    d_c0 = d_c[0];
  }
  return {d_input, d_weights, d_bias, d_h0, d_c0};
}

// Backward through time from forward's saved tensors. grad_h_n, grad_c_n and h0 may be None
// (zeros: the final state's gradients where autograd has none, a zero initial state). Returns
// (d_input (T, B, I), d_weights (3S, S + I), d_bias (3S,), d_h0, d_c0 (B, S)), each undefined
// where output_mask says it is not wanted. tf32_requested: as forward's.
Backward backward(const at::Tensor& grad_output, const OptionalTensor& grad_h_n_in,
                  const OptionalTensor& grad_c_n_in, const at::Tensor& input,
                  const at::Tensor& weights, const at::Tensor& bias, const OptionalTensor& h0_in,
                  const at::Tensor& output, const at::Tensor& cells, const at::Tensor& gates,
                  OutputMask output_mask, bool tf32_requested) {
  const at::Tensor grad_h_n = tensor_or_undefined(grad_h_n_in);
  const at::Tensor grad_c_n = tensor_or_undefined(grad_c_n_in);
  const at::Tensor h0 = tensor_or_undefined(h0_in);
  CHECK_INPUT(output);
  const auto [T, B, I, S] = check_forward_args(input, weights, bias, h0, at::Tensor(), output);
  CHECK_INPUT(grad_output);
  CHECK_INPUT(cells);
  CHECK_INPUT(gates);
  // The saved tensors and the gradients are the state's (output's) dtype: input's, or float32 in
  // a mixed call.
  for (const at::Tensor* t : {&grad_output, &cells, &gates}) {
    check_like(*t, "a saved tensor or gradient", output, "output");
  }
  check_same_device(output, "output", input, "input");
  CHECK_SHAPE(grad_output, T, B, S);
  CHECK_SHAPE(output, T, B, S);
  CHECK_SHAPE(cells, T, B, S);
  CHECK_SHAPE(gates, T, B, 3 * S);
  if (grad_h_n.defined()) {
    CHECK_INPUT(grad_h_n);
    check_like(grad_h_n, "a saved tensor or gradient", output, "output");
    CHECK_SHAPE(grad_h_n, B, S);
  }
  if (grad_c_n.defined()) {
    CHECK_INPUT(grad_c_n);
    check_like(grad_c_n, "a saved tensor or gradient", output, "output");
    CHECK_SHAPE(grad_c_n, B, S);
  }
  if (is_mixed(input, output.scalar_type())) {
    return backward_mixed(grad_output, grad_h_n, grad_c_n, input, weights, bias, h0, output, cells,
                          gates, output_mask, Dims{T, B, I, S});
  }
  const auto [want_input, want_weights, want_bias, want_h0, want_c0] = output_mask;
  const bool tf32 = matmul_allows_tf32(input, tf32_requested);
  const at::Tensor b = bias.reshape({3 * S});
  const at::Tensor w_i = weights.narrow(1, S, I);
  at::Tensor d_input, d_weights, d_bias, d_h0, d_c0;
  if (!(want_input || want_weights || want_bias || want_h0 || want_c0)) {
    return {d_input, d_weights, d_bias, d_h0, d_c0};
  }
  if (T == 0) {  // no steps: the final state is the initial one
    if (want_input) {
      d_input = at::empty({0, B, I}, input.options());
    }
    if (want_weights) {
      d_weights = at::zeros({3 * S, S + I}, weights.options());
    }
    if (want_bias) {
      d_bias = at::zeros({3 * S}, b.options());
    }
    if (want_h0) {
      d_h0 = grad_h_n.defined() ? grad_h_n.clone() : at::zeros({B, S}, input.options());
    }
    if (want_c0) {
      d_c0 = grad_c_n.defined() ? grad_c_n.clone() : at::zeros({B, S}, input.options());
    }
    return {d_input, d_weights, d_bias, d_h0, d_c0};
  }
  at::Tensor d_gates = at::empty({T, B, 3 * S}, input.options());
  at::Tensor d_h = at::empty({B, S}, input.options());     // d h_{t-1} from step t's gates
  at::Tensor d_c = at::empty({2, B, S}, input.options());  // dL/dc_t, two buffers in turn
  if (input.is_cuda()) {
#ifdef WITH_CUDA
    sequence_backward_cuda(grad_output, grad_h_n, grad_c_n, weights, b, cells, gates, d_gates, d_h,
                           d_c, want_h0, tf32);
#else
    fail_not_compiled_with_cuda("lltm_sequence");
#endif
  } else {
    backward_loop_cpu_tensors(StepRows::uniform(T, B), weights, b, grad_output, grad_h_n, grad_c_n,
                              cells, gates, d_gates, d_h, d_c[0], want_h0);
  }
  const at::Tensor dg_all = d_gates.view({T * B, 3 * S});
  if (want_input) {
    d_input = at::empty({T, B, I}, input.options());
    gemm(dg_all, w_i, d_input.view({T * B, I}), 0, tf32);
  }
  bool bias_done = false;
  if (want_weights) {
    // d W = sum_t dG_t^T [h_{t-1} | x_t], with d b beside it, in one kernel where that pays on
    // CUDA; else the input block over all steps in one product, the recurrent block as h_0's step
    // plus the others (h_{t-1} = output[t - 1]).
    d_weights = at::empty({3 * S, S + I}, weights.options());
    const at::Tensor bias_out = want_bias ? at::empty({3 * S}, b.options()) : at::Tensor();
    if (weight_grad_in_one_kernel(d_gates, h0, output, input, d_weights, bias_out, tf32)) {
      d_bias = bias_out;
      bias_done = true;
    } else {
      gemm(dg_all.t(), input.view({T * B, I}), d_weights.narrow(1, S, I), 0, tf32);
      const at::Tensor dw_h = recurrent_block(d_weights, S, T * B);
      if (h0.defined()) {
        gemm(d_gates[0].t(), h0, dw_h, 0, tf32);
      }
      if (T > 1) {
        gemm(d_gates.narrow(0, 1, T - 1).view({(T - 1) * B, 3 * S}).t(),
             output.narrow(0, 0, T - 1).view({(T - 1) * B, S}), dw_h, h0.defined() ? 1 : 0, tf32);
      } else if (!h0.defined()) {
        dw_h.zero_();  // a zero h0's step alone
      }
      copy_recurrent_block(d_weights, dw_h);
    }
  }
  if (want_bias && !bias_done) {
    d_bias = dg_all.sum(0);
  }
  if (want_h0) {
    d_h0 = d_h;
  }
  if (want_c0) {
    d_c0 = d_c[0];  // dL/dc_{-1}: a view of the two buffers
  }
  return {d_input, d_weights, d_bias, d_h0, d_c0};
}

// An optional tensor made contiguous (None stays None).
OptionalTensor contiguous(const OptionalTensor& t) {
  return t.has_value() && t->defined() ? OptionalTensor(t->contiguous()) : std::nullopt;
}

// The sequence without autograd (inference, or below the autograd kernel): any layout in.
std::tuple<at::Tensor, at::Tensor, at::Tensor> sequence(const at::Tensor& input,
                                                        const at::Tensor& weights,
                                                        const at::Tensor& bias,
                                                        const OptionalTensor& h0,
                                                        const OptionalTensor& c0, bool tf32) {
  auto out = forward(input.contiguous(), weights.contiguous(), bias.contiguous(), contiguous(h0),
                     contiguous(c0), tf32);
  return {std::get<0>(out), std::get<1>(out), std::get<2>(out)};
}

const auto& forward_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("lltm_ext::lltm_sequence_forward", "")
                             .typed<decltype(forward)>();
  return op;
}
const auto& backward_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("lltm_ext::lltm_sequence_backward", "")
                             .typed<decltype(backward)>();
  return op;
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What the sequence's autograd Functions (Sequence, PackedFunction) share. Forward saves the
// operator's contiguous inputs (x, w, b, h0: undefined for None) and its saved outputs (output,
// cells, gates), in that order; h0, c0 None for a zero state are no inputs of the graph
// (autograd's edges are the given tensors only).
struct Inputs {
  at::Tensor x, w, b, h, c;
};
Inputs contiguous_inputs(const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
                         const OptionalTensor& h0, const OptionalTensor& c0) {
  return {input.contiguous(), weights.contiguous(), bias.contiguous(),
          tensor_or_undefined(contiguous(h0)), tensor_or_undefined(contiguous(c0))};
}
variable_list save_forward(AutogradContext* ctx, const Inputs& in, const Forward& out,
                           const at::Tensor& bias, bool tf32) {
  const auto& [output, h_n, c_n, cells, gates] = out;
  ctx->save_for_backward({in.x, in.w, in.b, in.h, output, cells, gates});
  ctx->set_materialize_grads(false);  // h_n's and c_n's gradients go on as None where unused
  ctx->saved_data["bias_shape"] = bias.sizes().vec();
  ctx->saved_data["h0_given"] = in.h.defined();
  ctx->saved_data["c0_given"] = in.c.defined();
  ctx->saved_data["tf32"] = tf32;  // backward's products at forward's precision
  return {output, h_n, c_n};
}

// Backward's arguments: the saved tensors, the gradients that autograd left undefined made zeros
// for the output's and None (read as zeros by the kernels) for the final state's, and which
// results are wanted (needs_input_grad counts the graph's edges: the input, weights, bias, then
// h0 and c0 where given).
struct BackwardArgs {
  variable_list saved;
  at::Tensor grad_output;
  OptionalTensor grad_h_n, grad_c_n;
  OutputMask mask;
  bool tf32;
};
BackwardArgs backward_args(AutogradContext* ctx, const variable_list& grads) {
  BackwardArgs a;
  a.saved = ctx->get_saved_variables();
  a.grad_output = grads[0].defined() ? grads[0].contiguous() : at::zeros_like(a.saved[4]);
  const auto optional = [&](size_t i) {
    return grads[i].defined() ? OptionalTensor(grads[i].contiguous()) : std::nullopt;
  };
  a.grad_h_n = optional(1);
  a.grad_c_n = optional(2);
  const bool h0_given = ctx->saved_data["h0_given"].toBool();
  const bool c0_given = ctx->saved_data["c0_given"].toBool();
  a.mask = {ctx->needs_input_grad(0), ctx->needs_input_grad(1), ctx->needs_input_grad(2),
            h0_given && ctx->needs_input_grad(3),
            c0_given && ctx->needs_input_grad(h0_given ? 4 : 3)};
  a.tf32 = ctx->saved_data["tf32"].toBool();
  return a;
}

// The gradients autograd takes back, one for each argument of forward: the backward operator's
// results (d_bias in the bias's own shape), undefined for `extra` (the packed operator's
// batch_sizes, after the input) and tf32; first order only under create_graph.
variable_list gradients(AutogradContext* ctx, const BackwardArgs& a, const char* op,
                        const Backward& results, bool extra) {
  auto [d_input, d_weights, d_bias, d_h0, d_c0] = results;
  if (d_bias.defined()) {
    d_bias = d_bias.reshape(ctx->saved_data["bias_shape"].toIntVector());
  }
  variable_list out = {d_input, d_weights, d_bias, d_h0, d_c0};
  if (at::GradMode::is_enabled()) {  // create_graph=True
    // Through the op's output (saved as an output, it carries this node): the gradients then
    // depend on every input of the graph, so a second derivative by any of them reaches the guard.
    out = first_order_only(op, out, {a.saved[4]});
  }
  if (extra) {
    out.insert(out.begin() + 1, at::Tensor());
  }
  out.emplace_back();  // tf32: not differentiable
  return out;
}

// Autograd for the sequence: forward saves what backward through time reads.
struct Sequence : torch::autograd::Function<Sequence> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& input,
                               const at::Tensor& weights, const at::Tensor& bias,
                               const OptionalTensor& h0, const OptionalTensor& c0, bool tf32) {
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    const Inputs in = contiguous_inputs(input, weights, bias, h0, c0);
    return save_forward(
        ctx, in, forward_op().call(in.x, in.w, in.b, as_optional(in.h), as_optional(in.c), tf32),
        bias, tf32);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const BackwardArgs a = backward_args(ctx, grads);
    const variable_list& v = a.saved;
    Backward results;
    {
      const at::AutoDispatchBelowADInplaceOrView below_autograd;
      results = backward_op().call(a.grad_output, a.grad_h_n, a.grad_c_n, v[0], v[1], v[2],
                                   as_optional(v[3]), v[4], v[5], v[6], a.mask, a.tf32);
    }
    return gradients(ctx, a, "lltm_sequence", results, /*extra=*/false);
  }
};

std::tuple<at::Tensor, at::Tensor, at::Tensor> sequence_autograd(
    const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
    const OptionalTensor& h0, const OptionalTensor& c0, bool tf32) {
  variable_list out = Sequence::apply(input, weights, bias, h0, c0, tf32);
  return {out[0], out[1], out[2]};
}

// --- Packed batches: the sequences of a PackedSequence in one call ---------------------------
//
// data (N, I): the rows of T steps, step t's batch_sizes[t] rows in turn (non-increasing: row j of
// a step is sequence j, sorted longest first), as torch.nn.utils.rnn packs them. One product for
// the input projections of all N rows and one for the weight gradient (and d data) over them all;
// between them, the time loop walks only real rows. On the CPU a step at a time (the recurrent
// product of its rows, its gate pass); on CUDA a stretch of steps with the same batch at a time,
// on the kernels the planner picks for that stretch (sequence_forward_cuda on views of the
// packed tensors, the input projection already made). A stretch's initial state is the rows of
// the step before it, read in place from output and cells. h_n, c_n (B = batch_sizes[0], S):
// each sequence's state after its own last step, rows in the packed (sorted) order.

// The packed layout: T steps, each step's first row, the batch.
struct Packing {
  std::vector<int64_t> sizes, offsets;
  int64_t rows = 0, batch = 0;
  int64_t steps() const { return static_cast<int64_t>(sizes.size()); }
  // The stretches of steps with one batch: (first step, steps), in order.
  std::vector<std::pair<int64_t, int64_t>> stretches() const {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (int64_t t = 0; t < steps();) {
      int64_t end = t;
      while (end < steps() && sizes[end] == sizes[t]) {
        ++end;
      }
      out.emplace_back(t, end - t);
      t = end;
    }
    return out;
  }
};

Packing check_packing(at::IntArrayRef batch_sizes, int64_t rows) {
  Packing p;
  p.sizes = batch_sizes.vec();
  int64_t total = 0;
  bool ok = !p.sizes.empty();
  for (size_t t = 0; t < p.sizes.size(); ++t) {
    ok = ok && p.sizes[t] > 0 && (t == 0 || p.sizes[t] <= p.sizes[t - 1]);
    p.offsets.push_back(total);
    total += p.sizes[t];
  }
  TORCH_CHECK(ok && total == rows,
              "lltm_ext.lltm_sequence_packed: `batch_sizes` must be positive, non-increasing "
              "counts (at least one step, as torch.nn.utils.rnn.pack_sequence makes them) that "
              "add up to `data`'s ",
              rows, " rows, but got ", batch_sizes.size(), " counts ",
              batch_sizes.slice(0, std::min<size_t>(batch_sizes.size(), 8)),
              batch_sizes.size() > 8 ? " ..." : "", " (sum ", total, ").");
  p.rows = rows;
  p.batch = p.sizes[0];
  return p;
}

// The packed arguments' checks: data (N, I), weights (3S, S + I), bias (3S) or (1, 3S), the
// state (B, S) and batch_sizes; returns the packing and (T, B, I, S).
// state_ref as state_dtype's (backward's saved output).
std::pair<Packing, Dims> check_packed_args(const at::Tensor& data, at::IntArrayRef batch_sizes,
                                           const at::Tensor& weights, const at::Tensor& bias,
                                           const at::Tensor& h0, const at::Tensor& c0,
                                           const at::Tensor& state_ref = at::Tensor()) {
  CHECK_INPUT(data);
  CHECK_INPUT(weights);
  CHECK_INPUT(bias);
  CHECK_LIKE(weights, data);
  CHECK_LIKE(bias, data);
  check_backend(data, "lltm_sequence_packed");
  TORCH_CHECK(data.dim() == 2,
              "lltm_ext.lltm_sequence_packed: `data` must be 2-D (rows, input_features), a "
              "PackedSequence's data, but got a ",
              describe(data), ".");
  TORCH_CHECK(
      weights.dim() == 2 && weights.size(0) % 3 == 0 && weights.size(1) >= weights.size(0) / 3,
      "lltm_ext.lltm_sequence_packed: `weights` must have shape [3 * state_size, state_size + "
      "input_features], but got a ",
      describe(weights), ".");
  const int64_t S = weights.size(0) / 3, I = weights.size(1) - S;
  TORCH_CHECK(data.size(1) == I, "lltm_ext.lltm_sequence_packed: `data` must have shape [rows, ", I,
              "] (input_features = weights.size(1) - state_size), but got a ", describe(data), ".");
  TORCH_CHECK(bias.numel() == 3 * S && (bias.dim() == 1 || (bias.dim() == 2 && bias.size(0) == 1)),
              "lltm_ext.lltm_sequence_packed: `bias` must have shape [", 3 * S, "] or [1, ", 3 * S,
              "] (3 * state_size), but got a ", describe(bias), ".");
  const Packing p = check_packing(batch_sizes, data.size(0));
  check_state(data, "data", h0, "h_0", c0, "c_0", state_ref);
  for (const auto& [t, name] : {std::pair<const at::Tensor&, const char*>{h0, "h_0"},
                                std::pair<const at::Tensor&, const char*>{c0, "c_0"}}) {
    if (t.defined()) {
      TORCH_CHECK(t.dim() == 2 && t.size(0) == p.batch && t.size(1) == S,
                  "lltm_ext.lltm_sequence_packed: the state's `", name, "` must have shape [",
                  p.batch, ", ", S, "] ([batch_sizes[0], state_size]), but got a ", describe(t),
                  ".");
    }
  }
  return {p, Dims{p.steps(), p.batch, I, S}};
}

// Each sequence's last row of x (N, S: output or cells), in the packed order: sequence j ends at
// the last step whose batch exceeds j. Pieces of x from the last step back, in one at::cat (no
// index copied to the device: nothing to wait for, nothing a CUDA graph would read later).
at::Tensor last_rows(const at::Tensor& x, const Packing& p) {
  std::vector<at::Tensor> pieces;
  for (int64_t t = p.steps() - 1; t >= 0; --t) {
    const int64_t next = t + 1 < p.steps() ? p.sizes[t + 1] : 0;
    if (next < p.sizes[t]) {
      pieces.push_back(x.narrow(0, p.offsets[t] + next, p.sizes[t] - next));
    }
  }
  return at::cat(pieces);
}

// Each row's h_{t-1} (N, S): step 0's rows h0 (zeros where undefined), step t's the same
// sequences' rows of step t - 1 in `output`. Per stretch two blocks of output: the step before it
// (its first bs rows) and its own steps but the last; in one at::cat, as last_rows.
at::Tensor previous_rows(const at::Tensor& output, const at::Tensor& h0, const Packing& p) {
  std::vector<at::Tensor> pieces;
  pieces.push_back(h0.defined() ? h0 : at::zeros({p.batch, output.size(1)}, output.options()));
  for (const auto& [t0, steps] : p.stretches()) {
    const int64_t bs = p.sizes[t0];
    if (t0 > 0) {
      pieces.push_back(output.narrow(0, p.offsets[t0 - 1], bs));
    }
    if (steps > 1) {
      pieces.push_back(output.narrow(0, p.offsets[t0], (steps - 1) * bs));
    }
  }
  return at::cat(pieces);
}

// Forward over the packed rows. Returns (output (N, S), h_n, c_n (B, S), cells (N, S), gates
// (N, 3S): the pre-activations without the bias), as forward's. A mixed call (half data, weights
// and bias, a float32 state) runs the CPU's mixed loop (forward_mixed_cpu) on the CPU; elsewhere
// (CUDA, or LLTM_EXT_SEQUENCE_MIXED=off) the float32 sequence on the operands in float32, TF32
// allowed, as forward_mixed's fallback.
Forward packed_forward(const at::Tensor& data, at::IntArrayRef batch_sizes,
                       const at::Tensor& weights, const at::Tensor& bias,
                       const OptionalTensor& h0_in, const OptionalTensor& c0_in,
                       bool tf32_requested) {
  const at::Tensor h0 = tensor_or_undefined(h0_in), c0 = tensor_or_undefined(c0_in);
  const auto [p, dims] = check_packed_args(data, batch_sizes, weights, bias, h0, c0);
  const auto [T, B, I, S] = dims;
  const bool mixed = is_mixed(data, state_dtype(data, h0, c0));
  if (mixed && !mixed_runs_cpu_loop(data, dims)) {
    return packed_forward(data.to(at::kFloat), batch_sizes, weights.to(at::kFloat),
                          bias.to(at::kFloat), h0_in, c0_in, /*tf32_requested=*/true);
  }
  const bool tf32 = matmul_allows_tf32(data, tf32_requested);
  const int64_t N = p.rows;
  const at::ScalarType state_type = mixed ? at::kFloat : data.scalar_type();
  const at::TensorOptions state_options = data.options().dtype(state_type);
  const at::Tensor b = bias.reshape({3 * S}).to(state_type);
  const at::Tensor w_i = weights.narrow(1, S, I);
  at::Tensor output = at::empty({N, S}, state_options);
  at::Tensor cells = at::empty({N, S}, state_options);
  at::Tensor gates = at::empty({N, 3 * S}, state_options);
  at::Tensor h_n, c_n;
  bool final_state_written = false;
  if (!mixed) {  // the input projections of all rows, one product: gates = data W_i^T
    gemm(data, w_i.t(), gates, 0, tf32);
  }
  if (mixed) {
    forward_mixed_cpu(data, weights, b, h0, c0, StepRows{p.sizes, p.offsets}, output, cells, gates);
  } else if (data.is_cuda()) {
#ifdef WITH_CUDA
    const auto stretches = p.stretches();
    // One stretch writes the final state itself; more leave it to last_rows (a stretch's last
    // state is final only in its rows past the next stretch's batch).
    if (stretches.size() == 1) {
      h_n = at::empty({B, S}, data.options());
      c_n = at::empty({B, S}, data.options());
      final_state_written = true;
    }
    int64_t before = -1;  // the first row of the step before a stretch
    for (const auto& [t0, steps] : stretches) {
      const int64_t bs = p.sizes[t0], first = p.offsets[t0], n = steps * bs;
      const at::Tensor h_prev = before < 0 ? h0 : output.narrow(0, before, bs);
      const at::Tensor c_prev = before < 0 ? c0 : cells.narrow(0, before, bs);
      sequence_forward_cuda(data.narrow(0, first, n).view({steps, bs, I}), weights, b, h_prev,
                            c_prev, output.narrow(0, first, n).view({steps, bs, S}), h_n, c_n,
                            cells.narrow(0, first, n).view({steps, bs, S}),
                            gates.narrow(0, first, n).view({steps, bs, 3 * S}), tf32,
                            /*projected=*/true);
      before = p.offsets[t0 + steps - 1];
    }
#else
    fail_not_compiled_with_cuda("lltm_sequence_packed");
#endif
  } else {
    forward_loop_cpu_tensors(StepRows{p.sizes, p.offsets}, weights, b, h0, c0, gates, output,
                             cells);
  }
  if (!final_state_written) {
    h_n = last_rows(output, p);
    c_n = last_rows(cells, p);
  }
  return {output, h_n, c_n, cells, gates};
}

// Backward through the packed rows from packed_forward's saved tensors, as backward's: (d_data
// (N, I), d_weights, d_bias, d_h0, d_c0), each undefined where output_mask says it is not wanted.
// A mixed call as packed_forward ran it: on the CPU backward_loop_cpu's mixed loop (dG rounded
// to the half type), then d data, d W and d b as half products of dG, as backward_mixed's;
// elsewhere the float32 sequence's backward on the operands in float32, its d data, d W and d b
// rounded to the half type.
Backward packed_backward(const at::Tensor& grad_output, const OptionalTensor& grad_h_n_in,
                         const OptionalTensor& grad_c_n_in, const at::Tensor& data,
                         at::IntArrayRef batch_sizes, const at::Tensor& weights,
                         const at::Tensor& bias, const OptionalTensor& h0_in,
                         const at::Tensor& output, const at::Tensor& cells, const at::Tensor& gates,
                         OutputMask output_mask, bool tf32_requested) {
  const at::Tensor grad_h_n = tensor_or_undefined(grad_h_n_in);
  const at::Tensor grad_c_n = tensor_or_undefined(grad_c_n_in);
  const at::Tensor h0 = tensor_or_undefined(h0_in);
  CHECK_INPUT(output);
  const auto [p, dims] =
      check_packed_args(data, batch_sizes, weights, bias, h0, at::Tensor(), output);
  const auto [T, B, I, S] = dims;
  const int64_t N = p.rows;
  // The saved tensors and the gradients are the state's (output's) dtype: data's, or float32 in
  // a mixed call.
  check_same_device(output, "output", data, "data");
  for (const at::Tensor* t : {&grad_output, &cells, &gates}) {
    CHECK_INPUT(*t);
    check_like(*t, "a saved tensor or gradient", output, "output");
  }
  CHECK_SHAPE(grad_output, N, S);
  CHECK_SHAPE(output, N, S);
  CHECK_SHAPE(cells, N, S);
  CHECK_SHAPE(gates, N, 3 * S);
  for (const at::Tensor* t : {&grad_h_n, &grad_c_n}) {
    if (t->defined()) {
      CHECK_INPUT(*t);
      check_like(*t, "a saved tensor or gradient", output, "output");
      check_shape(*t, "a final state's gradient", {B, S});
    }
  }
  const auto [want_data, want_weights, want_bias, want_h0, want_c0] = output_mask;
  at::Tensor d_data, d_weights, d_bias, d_h0, d_c0;
  if (!(want_data || want_weights || want_bias || want_h0 || want_c0)) {
    return {d_data, d_weights, d_bias, d_h0, d_c0};
  }
  const bool mixed = is_mixed(data, output.scalar_type());
  if (mixed && !mixed_runs_cpu_loop(data, dims)) {
    auto results = packed_backward(grad_output, grad_h_n_in, grad_c_n_in, data.to(at::kFloat),
                                   batch_sizes, weights.to(at::kFloat), bias.to(at::kFloat), h0_in,
                                   output, cells, gates, output_mask, /*tf32_requested=*/true);
    for (at::Tensor* t : {&std::get<0>(results), &std::get<1>(results), &std::get<2>(results)}) {
      if (t->defined()) {
        *t = t->to(data.scalar_type());
      }
    }
    return results;
  }
  const bool tf32 = matmul_allows_tf32(data, tf32_requested);
  const at::Tensor b = bias.reshape({3 * S}).to(output.scalar_type());
  const at::Tensor w_i = weights.narrow(1, S, I);
  // dG in the products' dtype: data's (the half type of a mixed call)
  at::Tensor d_gates = at::empty({N, 3 * S}, data.options());
  if (data.is_cuda()) {
#ifdef WITH_CUDA
    const auto given_or_zeros = [&](const at::Tensor& t) {
      return t.defined() ? t.clone() : at::zeros({B, S}, data.options());
    };
    // dL/dh of each sequence's rows, carried from stretch to stretch: a stretch of bs rows reads
    // the first bs rows of one buffer and writes its d h_{t-1} into the other's. Both start as
    // grad_h_n: rows past a stretch's batch are never written before the stretch whose batch
    // reaches them reads them, so there they hold the final state's gradient of the sequences
    // that end there.
    const at::Tensor dh[2] = {given_or_zeros(grad_h_n), given_or_zeros(grad_h_n)};
    // dL/dc: the stretch's gate kernels carry it in d_c (two buffers of its batch, in turn; dL/dc
    // before the stretch in the first), copied into `carried` for the stretch before.
    const at::Tensor carried = given_or_zeros(grad_c_n);
    const at::Tensor d_c = at::empty({2 * B * S}, data.options());
    const auto stretches = p.stretches();
    for (int64_t k = static_cast<int64_t>(stretches.size()) - 1; k >= 0; --k) {
      const auto [t0, steps] = stretches[k];
      const int64_t bs = p.sizes[t0], first = p.offsets[t0], n = steps * bs;
      const at::Tensor dc = d_c.narrow(0, 0, 2 * bs * S).view({2, bs, S});
      sequence_backward_cuda(grad_output.narrow(0, first, n).view({steps, bs, S}),
                             dh[(k + 1) % 2].narrow(0, 0, bs), carried.narrow(0, 0, bs), weights, b,
                             cells.narrow(0, first, n).view({steps, bs, S}),
                             gates.narrow(0, first, n).view({steps, bs, 3 * S}),
                             d_gates.narrow(0, first, n).view({steps, bs, 3 * S}),
                             dh[k % 2].narrow(0, 0, bs), dc, k > 0 || want_h0, tf32);
      if (k > 0) {
        carried.narrow(0, 0, bs).copy_(dc[0]);
      } else if (want_c0) {
        d_c0 = dc[0];
      }
    }
    if (want_h0) {
      d_h0 = dh[0];
    }
#else
    fail_not_compiled_with_cuda("lltm_sequence_packed");
#endif
  } else {
    d_h0 = want_h0 ? at::empty({B, S}, output.options()) : at::Tensor();
    d_c0 = at::empty({B, S}, output.options());
    backward_loop_cpu_tensors(StepRows{p.sizes, p.offsets}, weights, b, grad_output, grad_h_n,
                              grad_c_n, cells, gates, d_gates, d_h0, d_c0, want_h0);
    if (!want_c0) {
      d_c0 = at::Tensor();
    }
  }
  if (want_data) {
    d_data = at::empty({N, I}, data.options());
    gemm(d_gates, w_i, d_data, 0, tf32);
  }
  bool bias_done = false;
  if (want_weights) {
    // d W = dG^T [h_prev | data] over all rows, h_prev each row's h_{t-1}.
    // (h_{t-1} rounded to a mixed call's half type, as its products read it)
    const at::Tensor h_prev = previous_rows(output, h0, p).to(data.scalar_type());
    d_weights = at::empty({3 * S, S + I}, weights.options());
    const at::Tensor bias_out = want_bias ? at::empty({3 * S}, b.options()) : at::Tensor();
    // The sequence's kernel, on the rows as one step of N: its h0 is h_prev.
    if (weight_grad_in_one_kernel(d_gates.unsqueeze(0), h_prev, output.unsqueeze(0),
                                  data.unsqueeze(0), d_weights, bias_out, tf32)) {
      d_bias = bias_out;
      bias_done = true;
    } else {
      gemm(d_gates.t(), data, d_weights.narrow(1, S, I), 0, tf32);
      const at::Tensor dw_h = recurrent_block(d_weights, S, N);
      gemm(d_gates.t(), h_prev, dw_h, 0, tf32);
      copy_recurrent_block(d_weights, dw_h);
    }
  }
  if (want_bias && !bias_done) {
    d_bias = mixed ? half_column_sums_cpu(d_gates) : d_gates.sum(0);
  }
  return {d_data, d_weights, d_bias, d_h0, d_c0};
}

const auto& packed_forward_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("lltm_ext::lltm_sequence_packed_forward", "")
                             .typed<decltype(packed_forward)>();
  return op;
}
const auto& packed_backward_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("lltm_ext::lltm_sequence_packed_backward", "")
                             .typed<decltype(packed_backward)>();
  return op;
}

// The packed sequence without autograd.
std::tuple<at::Tensor, at::Tensor, at::Tensor> packed(
    const at::Tensor& data, at::IntArrayRef batch_sizes, const at::Tensor& weights,
    const at::Tensor& bias, const OptionalTensor& h0, const OptionalTensor& c0, bool tf32) {
  auto out = packed_forward(data.contiguous(), batch_sizes, weights.contiguous(), bias.contiguous(),
                            contiguous(h0), contiguous(c0), tf32);
  return {std::get<0>(out), std::get<1>(out), std::get<2>(out)};
}

// Autograd for the packed sequence, as Sequence's (batch_sizes saved beside).
struct PackedFunction : torch::autograd::Function<PackedFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& data,
                               at::IntArrayRef batch_sizes, const at::Tensor& weights,
                               const at::Tensor& bias, const OptionalTensor& h0,
                               const OptionalTensor& c0, bool tf32) {
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    const Inputs in = contiguous_inputs(data, weights, bias, h0, c0);
    ctx->saved_data["batch_sizes"] = batch_sizes.vec();
    return save_forward(ctx, in,
                        packed_forward_op().call(in.x, batch_sizes, in.w, in.b, as_optional(in.h),
                                                 as_optional(in.c), tf32),
                        bias, tf32);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const BackwardArgs a = backward_args(ctx, grads);
    const variable_list& v = a.saved;
    const std::vector<int64_t> sizes = ctx->saved_data["batch_sizes"].toIntVector();
    Backward results;
    {
      const at::AutoDispatchBelowADInplaceOrView below_autograd;
      results =
          packed_backward_op().call(a.grad_output, a.grad_h_n, a.grad_c_n, v[0], sizes, v[1], v[2],
                                    as_optional(v[3]), v[4], v[5], v[6], a.mask, a.tf32);
    }
    return gradients(ctx, a, "lltm_sequence_packed", results, /*extra=*/true);
  }
};

std::tuple<at::Tensor, at::Tensor, at::Tensor> packed_autograd(
    const at::Tensor& data, at::IntArrayRef batch_sizes, const at::Tensor& weights,
    const at::Tensor& bias, const OptionalTensor& h0, const OptionalTensor& c0, bool tf32) {
  variable_list out = PackedFunction::apply(data, batch_sizes, weights, bias, h0, c0, tf32);
  return {out[0], out[1], out[2]};
}

// The autocast kernel's rounded operands (lltm/rounded_op.h), under this module's name.
struct SequenceRounded {
  static constexpr const char* kName = "lltm_sequence_rounded";
  static constexpr const char* kQualifiedName = "lltm_ext::lltm_sequence_rounded";
  static constexpr const char* kSchema =
      "lltm_sequence_rounded(Tensor[] tensors, ScalarType dtype) -> Tensor[]";
};

// The sequence under torch.autocast on `device`: what a Python loop of the pure-PyTorch cell gives
// there (each step's product in the autocast dtype `lower`; the state in
// autocast::lltm_state_dtype of c0, or of the input where c0 is None, as the loop's zeros would
// be). A state in `lower`: the sequence runs in `lower`. A float32 state: the mixed call where
// mixed_call_for_autocast says (input, weights and bias in `lower`), else the sequence runs in
// float32 on the operands rounded to `lower` (input, weights, bias, h0: the values the loop's
// products read); the state and outputs stay float32 as in the loop. Products in TF32 (`tf32`)
// hold `lower`'s values exactly; the later steps' h, which the loop rounds to `lower` for its
// products, TF32 rounds less (docs/lltm_notes.md, "nn.LSTM's interface, autocast and packed
// batches"). Anything autocast leaves alone passes through.
// The operands an autocast kernel hands the operator below autocast, by the rule above; none where
// autocast leaves the call alone (the operator then takes its arguments as they are).
struct AutocastOperands {
  at::Tensor input, weights, bias, h0, c0;
  bool tf32;
};
// Whether the autocast kernel's call with these weights (3S, S + I) and a float32 state is the
// mixed call: on the CPU's mixed loop, where its products pay (cpu_mixed_products_pay; a packed
// batch's B there: its rows per step on average); for an unpacked input (T, B, I) also on CUDA's
// cuBLAS path, or off it where the products outside the time loop pay for the casts
// (mixed_products_pay). batch_sizes: a packed batch's, data (N, I); none: unpacked.
bool mixed_call_for_autocast(const at::Tensor& input, const at::Tensor& weights,
                             at::OptionalIntArrayRef batch_sizes = std::nullopt) {
  const bool packed = batch_sizes.has_value();
  if (input.dim() != (packed ? 2 : 3) || (packed && batch_sizes->empty()) || weights.dim() != 2 ||
      weights.size(0) % 3 != 0 || weights.size(1) < weights.size(0) / 3) {
    return false;  // the operator's checks say what is wrong
  }
  const int64_t S = weights.size(0) / 3;
  const int64_t steps = packed ? static_cast<int64_t>(batch_sizes->size()) : input.size(0);
  const int64_t batch = packed ? (input.size(0) + steps - 1) / steps : input.size(1);
  const Dims d{steps, batch, weights.size(1) - S, S};
  if (mixed_runs_cpu_loop(input, d)) {
    return cpu_mixed_products_pay(d);
  }
  if (packed) {
    return false;
  }
  if (mixed_runs_cublas(input, d)) {
    return true;
  }
#ifdef WITH_CUDA
  return mixed_runs_float32_loop(input, d) &&
         mixed_products_pay(d.steps, d.batch, d.features, d.state);
#else
  return false;
#endif
}

// input: an unpacked call's (T, B, I), or a packed batch's data (N, I) with its batch_sizes.
template <c10::DeviceType device>
std::optional<AutocastOperands> autocast_operands(
    const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
    const at::Tensor& h0, const at::Tensor& c0, bool tf32,
    at::OptionalIntArrayRef batch_sizes = std::nullopt) {
  if (!autocast::all_eligible<device>({&input, &weights, &bias, &h0, &c0})) {
    return std::nullopt;
  }
  const at::ScalarType lower = autocast::lower_dtype<device>();
  if (autocast::lltm_state_dtype(c0.defined() ? c0 : input, lower) == lower) {
    return AutocastOperands{
        autocast::to_lower<device>(input, lower), autocast::to_lower<device>(weights, lower),
        autocast::to_lower<device>(bias, lower),  autocast::to_lower<device>(h0, lower),
        autocast::to_lower<device>(c0, lower),    tf32};
  }
  // A float32 state where mixed_call_for_autocast says: the mixed call (forward_mixed,
  // packed_forward), products in `lower` on the operands in it, the state float32 (h0 and c0 in
  // it; c0 zeros where both are None, to say so).
  if (mixed_call_for_autocast(input, weights, batch_sizes)) {
    const int64_t batch = batch_sizes ? batch_sizes->front() : input.size(1);
    return AutocastOperands{
        autocast::to_lower<device>(input, lower),
        autocast::to_lower<device>(weights, lower),
        autocast::to_lower<device>(bias, lower),
        h0.defined() ? h0.to(at::kFloat) : h0,
        c0.defined() || h0.defined()
            ? (c0.defined() ? c0.to(at::kFloat) : c0)
            : at::zeros({batch, weights.size(0) / 3}, input.options().dtype(at::kFloat)),
        tf32};
  }
  // The operands rounded to `lower` and held in float32, in one call (lltm_sequence_rounded).
  const std::vector<at::Tensor> r =
      rounding::round_operands<SequenceRounded>({input, weights, bias, h0}, lower);
  return AutocastOperands{r[0],         r[1], r[2], r[3], c0.defined() ? c0.to(at::kFloat) : c0,
                          /*tf32=*/true};
}

template <c10::DeviceType device>
std::tuple<at::Tensor, at::Tensor, at::Tensor> sequence_autocast(
    const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
    const OptionalTensor& h0, const OptionalTensor& c0, bool tf32) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("lltm_ext::lltm_sequence", "")
                             .typed<decltype(sequence)>();
  const autocast::Below<device> below;
  const auto cast = autocast_operands<device>(input, weights, bias, tensor_or_undefined(h0),
                                              tensor_or_undefined(c0), tf32);
  if (!cast) {
    return op.call(input, weights, bias, h0, c0, tf32);
  }
  return op.call(cast->input, cast->weights, cast->bias, as_optional(cast->h0),
                 as_optional(cast->c0), cast->tf32);
}

// The packed sequence under torch.autocast, by the same rule (one cast of every row; the mixed
// call on the CPU alone).
template <c10::DeviceType device>
std::tuple<at::Tensor, at::Tensor, at::Tensor> packed_autocast(
    const at::Tensor& data, at::IntArrayRef batch_sizes, const at::Tensor& weights,
    const at::Tensor& bias, const OptionalTensor& h0, const OptionalTensor& c0, bool tf32) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("lltm_ext::lltm_sequence_packed", "")
                             .typed<decltype(packed)>();
  const autocast::Below<device> below;
  const auto cast = autocast_operands<device>(data, weights, bias, tensor_or_undefined(h0),
                                              tensor_or_undefined(c0), tf32, batch_sizes);
  if (!cast) {
    return op.call(data, batch_sizes, weights, bias, h0, c0, tf32);
  }
  return op.call(cast->input, batch_sizes, cast->weights, cast->bias, as_optional(cast->h0),
                 as_optional(cast->c0), cast->tf32);
}

}  // namespace
}  // namespace lltm_ext::lltm

TORCH_LIBRARY_FRAGMENT(lltm_ext, m) {
  m.def(
      "lltm_sequence(Tensor input, Tensor weights, Tensor bias, Tensor? h0=None, Tensor? c0=None, "
      "bool tf32=False) -> (Tensor output, Tensor h_n, Tensor c_n)");
  m.def(
      "lltm_sequence_forward(Tensor input, Tensor weights, Tensor bias, Tensor? h0=None, "
      "Tensor? c0=None, bool tf32=False) -> (Tensor output, Tensor h_n, Tensor c_n, Tensor cells, "
      "Tensor gates)");
  m.def(
      "lltm_sequence_backward(Tensor grad_output, Tensor? grad_h_n, Tensor? grad_c_n, "
      "Tensor input, Tensor weights, Tensor bias, Tensor? h0, Tensor output, Tensor cells, "
      "Tensor gates, bool[5] output_mask=[True, True, True, True, True], bool tf32=False) -> "
      "(Tensor d_input, Tensor d_weights, Tensor d_bias, Tensor d_h0, Tensor d_c0)");
  m.def(
      "lltm_sequence_packed(Tensor data, int[] batch_sizes, Tensor weights, Tensor bias, "
      "Tensor? h0=None, Tensor? c0=None, bool tf32=False) -> (Tensor output, Tensor h_n, "
      "Tensor c_n)");
  m.def(
      "lltm_sequence_packed_forward(Tensor data, int[] batch_sizes, Tensor weights, Tensor bias, "
      "Tensor? h0=None, Tensor? c0=None, bool tf32=False) -> (Tensor output, Tensor h_n, "
      "Tensor c_n, Tensor cells, Tensor gates)");
  m.def(
      "lltm_sequence_packed_backward(Tensor grad_output, Tensor? grad_h_n, Tensor? grad_c_n, "
      "Tensor data, int[] batch_sizes, Tensor weights, Tensor bias, Tensor? h0, Tensor output, "
      "Tensor cells, Tensor gates, bool[5] output_mask=[True, True, True, True, True], "
      "bool tf32=False) -> (Tensor d_data, Tensor d_weights, Tensor d_bias, Tensor d_h0, "
      "Tensor d_c0)");
  lltm_ext::lltm::rounding::define<lltm_ext::lltm::SequenceRounded>(m);
  lltm_ext::impl_cpu_cuda(m, "lltm_sequence_forward", TORCH_FN(lltm_ext::lltm::forward));
  lltm_ext::impl_cpu_cuda(m, "lltm_sequence_backward", TORCH_FN(lltm_ext::lltm::backward));
  m.impl("lltm_sequence",
         torch::dispatch(c10::DispatchKey::CPU, TORCH_FN(lltm_ext::lltm::sequence)));
  m.impl("lltm_sequence",
         torch::dispatch(c10::DispatchKey::CUDA, TORCH_FN(lltm_ext::lltm::sequence)));
  m.impl("lltm_sequence",
         torch::dispatch(c10::DispatchKey::Autograd, TORCH_FN(lltm_ext::lltm::sequence_autograd)));
  m.impl("lltm_sequence",
         torch::dispatch(c10::DispatchKey::AutocastCPU,
                         TORCH_FN(lltm_ext::lltm::sequence_autocast<c10::DeviceType::CPU>)));
  m.impl("lltm_sequence",
         torch::dispatch(c10::DispatchKey::AutocastCUDA,
                         TORCH_FN(lltm_ext::lltm::sequence_autocast<c10::DeviceType::CUDA>)));
  lltm_ext::impl_cpu_cuda(m, "lltm_sequence_packed_forward",
                          TORCH_FN(lltm_ext::lltm::packed_forward));
  lltm_ext::impl_cpu_cuda(m, "lltm_sequence_packed_backward",
                          TORCH_FN(lltm_ext::lltm::packed_backward));
  m.impl("lltm_sequence_packed",
         torch::dispatch(c10::DispatchKey::CPU, TORCH_FN(lltm_ext::lltm::packed)));
  m.impl("lltm_sequence_packed",
         torch::dispatch(c10::DispatchKey::CUDA, TORCH_FN(lltm_ext::lltm::packed)));
  m.impl("lltm_sequence_packed",
         torch::dispatch(c10::DispatchKey::Autograd, TORCH_FN(lltm_ext::lltm::packed_autograd)));
  m.impl("lltm_sequence_packed",
         torch::dispatch(c10::DispatchKey::AutocastCPU,
                         TORCH_FN(lltm_ext::lltm::packed_autocast<c10::DeviceType::CPU>)));
  m.impl("lltm_sequence_packed",
         torch::dispatch(c10::DispatchKey::AutocastCUDA,
                         TORCH_FN(lltm_ext::lltm::packed_autocast<c10::DeviceType::CUDA>)));
}

namespace lltm_ext::lltm {
namespace {

// What a call of lltm_sequence on these tensors runs, and why (lltm_ext.explain): input (T, B, I)
// and weights (3S, S + I), as the operator takes them; tf32_requested as the operator's `tf32`. On
// CUDA the planner's choice for the time steps (forward and backward take the same family), the
// step products of the cuBLAS path and the weight gradient, with the planner's notes; on the CPU
// the one loop there is.
py::dict explain(const at::Tensor& input, const at::Tensor& weights, bool bias_grad,
                 bool tf32_requested) {
  TORCH_CHECK(input.dim() == 3 && weights.dim() == 2 && weights.size(0) % 3 == 0,
              "lltm_ext.explain(lltm_sequence): `input` must be (T, B, I) and `weights` (3S, S + "
              "I), but got ",
              describe(input), " and ", describe(weights), ".");
  const int64_t T = input.size(0), B = input.size(1), I = input.size(2), S = weights.size(0) / 3;
  const bool tf32 = matmul_allows_tf32(input, tf32_requested);
  py::dict out;
  out["device"] = input.device().str();
  out["tf32"] = tf32;
  if (!input.is_cuda()) {
    out["path"] = "cpu";
    out["detail"] =
        "the time loop in C++: the input projections of all steps in one product (lltm_ext's "
        "CPU GEMM), per step h W_h^T (backward: dG W_h) on lltm_ext's GEMM into a step buffer "
        "and the cell's gate pass (vectorized C++)";
    out["kernels"] = py::list();
    out["notes"] = py::list();
    return out;
  }
#ifdef WITH_CUDA
  const c10::cuda::CUDAGuard guard(input.device());
  PlanNotes notes;
  SequencePlan plan;
  WeightGradPlan wgrad;
  LLTM_EXT_DISPATCH_FLOATING(input.scalar_type(), "lltm_sequence_explain", [&] {
    plan = plan_sequence<scalar_t>(input.get_device(), T, B, S, tf32);
  });
  wgrad = plan_weight_grad(input.get_device(), input.scalar_type(), T, B, I, S, bias_grad, tf32);
  using Path = SequencePlan::Path;
  std::string detail, product = "simt";
  std::vector<std::string> kernels;
  switch (plan.path) {
    case Path::kSmall:
      detail = c10::str(plan.small_rows,
                        " batch rows a block, W_h in registers, all steps in one "
                        "launch");
      kernels = {"small_forward_kernel", "small_backward_kernel"};
      break;
    case Path::kCluster:
      product = plan.cluster.split ? "3xtf32" : plan.cluster.mma ? "tf32" : "simt";
      detail = c10::str("clusters of ", plan.cluster.blocks, " blocks x ", plan.cluster.cols,
                        " state columns, ", plan.cluster.rows,
                        " batch rows a cluster, all steps in one launch");
      kernels = {"cluster_forward_kernel", "cluster_backward_kernel"};
      break;
    case Path::kWide:
      product = product_name(plan.product);
      detail = c10::str("16 batch rows x ", plan.wide_cols,
                        " state columns a block, cooperative, all steps in one launch");
      kernels = {"wide_forward_kernel", "wide_backward_kernel"};
      break;
    case Path::kTiled:
      product = product_name(plan.product);
      detail = c10::str("tiles of ", 16 * plan.tiled.mt, " batch rows x ", plan.tiled.cols,
                        " state columns, ", plan.tiled.stages,
                        " cp.async stages, cooperative, all steps in one launch");
      kernels = {"tiled_forward_kernel", "tiled_backward_kernel"};
      break;
    case Path::kSteps:
      detail = plan.all_at_once ? "one cooperative launch for all steps"
                                : (plan.overlap ? "one launch a step, each overlapping the one "
                                                  "before (programmatic dependent launch)"
                                                : "one launch a step");
      kernels = {"sequence_forward_kernel", "sequence_backward_kernel"};
      break;
    case Path::kCublas: {
      const auto step = [](const StepGemmShape& s) {
        return s.rows == 0 ? std::string("cuBLAS")
                           : c10::str(s.wgmma    ? "ours (wgmma, 3xTF32)"
                                      : s.tensor ? "ours (mma.sync, 3xTF32)"
                                                 : "ours (SIMT, exact float32)",
                                      ", ", s.splits, " splits of k");
      };
      detail = c10::str("per step: the recurrent product (forward ", step(plan.forward_gemm),
                        ", backward ", step(plan.backward_gemm), ") and the cell's gate kernel");
      if (T >= kGraphMinSteps && env_choice("LLTM_EXT_SEQUENCE_GRAPHS") != "off") {
        detail +=
            "; the steps replayed as one CUDA graph from a loop's second call on the same "
            "memory (LLTM_EXT_SEQUENCE_GRAPHS)";
      }
      kernels = {"forward_gates_kernel", "backward_gates_kernel"};
      const auto kernel_of = [](const StepGemmShape& s) {
        return s.wgmma    ? "step_gemm_sm90_kernel"
               : s.tensor ? "step_gemm_tf32x3_kernel"
                          : "step_gemm_kernel";
      };
      if (plan.forward_gemm.rows > 0) {
        kernels.emplace_back(kernel_of(plan.forward_gemm));
      }
      if (plan.backward_gemm.rows > 0) {
        kernels.emplace_back(kernel_of(plan.backward_gemm));
      }
      product = "";  // the step products in `detail` say it
      break;
    }
  }
  if (T == 0 || B == 0) {
    kernels.clear();
  }
  std::string weight_grad = "cuBLAS's products and a column sum";
  if (wgrad.kind != WeightGradPlan::Kind::kCublas) {
    const bool tensor = wgrad.kind == WeightGradPlan::Kind::kTensor;
    weight_grad = c10::str(
        tensor ? "one kernel on Hopper's tensor cores (3xTF32)" : "one kernel on the SIMT cores",
        ", ", wgrad.splits, wgrad.splits == 1 ? " split" : " splits", " of the T B rows");
    kernels.emplace_back(tensor ? "weight_grad_sm90_kernel" : "weight_grad_kernel");
  }
  // float32's products outside the time loops at full precision (sequence_cuda_host.cpp:
  // tensor_gemm): x W_i^T forward, d input = dG W_i backward (W_i row-major there, so only where it
  // is at most a quarter of dG's rows).
  std::string input_products;
  if (input.scalar_type() == at::kFloat && !tf32 && T * B > 0) {
    const int device = input.get_device();
    const bool forward = input_gemm_tensor(device, T * B, 3 * S, I);
    const bool backward = 4 * I <= T * B && input_gemm_tensor(device, T * B, I, 3 * S);
    const auto where = [](bool ours) {
      return ours ? "ours on Hopper's tensor cores (3xTF32)" : "cuBLAS (exact float32)";
    };
    input_products = c10::str("x W_i^T: ", where(forward), "; d input = dG W_i: ", where(backward));
    if (forward &&
        std::find(kernels.begin(), kernels.end(), "step_gemm_sm90_kernel") == kernels.end()) {
      kernels.emplace_back("step_gemm_sm90_kernel");
    }
  }
  out["path"] = path_name(plan.path);
  out["detail"] = detail;
  out["product"] = product;
  out["weight_gradient"] = weight_grad;
  out["input_products"] = input_products;
  out["kernels"] = kernels;
  out["notes"] = notes.lines;
#else
  (void)T, (void)B, (void)I, (void)S, (void)tf32, (void)bias_grad;
#endif
  return out;
}

// The share of the GPU that a call's step kernels hold, for LLTMSequence's choice of running its
// layers at once (plan_grid_share): `like` gives the device and dtype of the call, T steps of
// (B, S); tf32_requested as the operator's `tf32`. 1 on the CPU and in builds without CUDA.
// Marks the stream (torch.cuda.Stream.cuda_stream) on `device` as one LLTMSequence runs calls at
// once on, the GPU shared by `parts` calls (mark_at_once_stream). Nothing in builds without CUDA.
void mark_stream_at_once(int64_t device, int64_t stream, int64_t parts) {
#ifdef WITH_CUDA
  lltm_ext::lltm::mark_at_once_stream(
      static_cast<int>(device), reinterpret_cast<cudaStream_t>(stream), static_cast<int>(parts));
#else
  (void)device, (void)stream, (void)parts;
#endif
}

// Whether LLTMSequence may run its calls at once (LLTM_EXT_SEQUENCE_AT_ONCE, settings.h).
bool at_once() {
  return env_choice("LLTM_EXT_SEQUENCE_AT_ONCE") != "off";
}

// The most calls of a wavefront whose step kernels LLTMSequence plans to share the GPU
// (LLTM_EXT_SEQUENCE_AT_ONCE_PARTS, settings.h; 2 unset).
int64_t at_once_parts_setting() {
  const int parts = env_number("LLTM_EXT_SEQUENCE_AT_ONCE_PARTS");
  return parts > 0 ? parts : 2;
}

// How many chunks LLTMSequence's wavefront cuts (LLTM_EXT_SEQUENCE_AT_ONCE_CHUNKS, settings.h;
// 0 unset: by time, lltm_sequence.py's _wave_count).
int64_t at_once_chunks_setting() {
  return env_number("LLTM_EXT_SEQUENCE_AT_ONCE_CHUNKS");
}

// How many time loops ran directly, were captured as CUDA graphs, and were replayed
// (step_graphs.h); zeros in builds without CUDA.
std::vector<int64_t> step_graph_counts_or_zeros() {
#ifdef WITH_CUDA
  return lltm_ext::lltm::step_graph_counts();
#else
  return {0, 0, 0};
#endif
}

// How the autocast kernel's call on input (T, B, I) with these weights and a float32 state runs
// (explain's account of its path and precision): "cublas", the mixed call on the cuBLAS path's
// loops; "loop", the mixed call's float32 time loop between half products; "cpu", the CPU's mixed
// loop; "", not mixed.
std::string autocast_takes_mixed(const at::Tensor& input, const at::Tensor& weights) {
  if (!mixed_call_for_autocast(input, weights)) {
    return "";
  }
  const int64_t S = weights.size(0) / 3;
  const Dims d{input.size(0), input.size(1), weights.size(1) - S, S};
  return mixed_runs_cpu_loop(input, d) ? "cpu" : mixed_runs_cublas(input, d) ? "cublas" : "loop";
}

double grid_share(const at::Tensor& like, int64_t T, int64_t B, int64_t S, bool tf32_requested) {
  if (!like.is_cuda()) {
    return 1.0;
  }
  double share = 1.0;
#ifdef WITH_CUDA
  const c10::cuda::CUDAGuard guard(like.device());
  const bool tf32 = matmul_allows_tf32(like, tf32_requested);
  LLTM_EXT_DISPATCH_FLOATING(like.scalar_type(), "lltm_sequence_grid_share", [&] {
    const SequencePlan plan = plan_sequence<scalar_t>(like.get_device(), T, B, S, tf32);
    share = plan_grid_share<scalar_t>(like.get_device(), plan, B, S);
  });
#else
  (void)T, (void)B, (void)S, (void)tf32_requested;
#endif
  return share;
}

}  // namespace
}  // namespace lltm_ext::lltm

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "LLTM over whole sequences (time loops on the kernels its planner picks).";
  lltm_ext::bind_operator<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
      const at::Tensor&, const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
      const std::optional<at::Tensor>&, bool)>(
      m, "lltm_sequence",
      "lltm_sequence(input, weights, bias, h0, c0, tf32) -> (output, h_n, c_n): the operator "
      "lltm_ext::lltm_sequence (h0, c0: None for zeros; tf32: float32 products in TF32 whatever "
      "torch's matmul precision)");
  m.def("_explain", &lltm_ext::lltm::explain,
        "What a call on input (T, B, I) and weights (3S, S + I) runs, and why (lltm_ext.explain)",
        py::arg("input"), py::arg("weights"), py::arg("bias_grad") = true, py::arg("tf32") = false);
  m.def("_autocast_mixed", &lltm_ext::lltm::autocast_takes_mixed,
        "How the autocast kernel's call on input (T, B, I) with weights (3S, S + I) and a "
        "float32 state runs: 'cublas' (the mixed call on the cuBLAS path: products in the "
        "autocast dtype), 'loop' (the mixed call's float32 time loop between such products) or "
        "'' (not the mixed call)",
        py::arg("input"), py::arg("weights"));
  m.def("_at_once", &lltm_ext::lltm::at_once,
        "Whether LLTMSequence may run its calls at once (LLTM_EXT_SEQUENCE_AT_ONCE)");
  m.def("_at_once_parts", &lltm_ext::lltm::at_once_parts_setting,
        "The most calls of a wavefront whose kernels LLTMSequence plans to share the GPU "
        "(LLTM_EXT_SEQUENCE_AT_ONCE_PARTS)");
  m.def("_at_once_chunks", &lltm_ext::lltm::at_once_chunks_setting,
        "How many chunks LLTMSequence's wavefront cuts (LLTM_EXT_SEQUENCE_AT_ONCE_CHUNKS; 0 "
        "unset: by time)");
  m.def("_mark_at_once_stream", &lltm_ext::lltm::mark_stream_at_once,
        "Marks a CUDA stream (its cuda_stream) on a device as one LLTMSequence runs calls at once "
        "on, the GPU shared by `parts` calls: the tiled kernels' tiles there are planned for that "
        "share of the SMs",
        py::arg("device"), py::arg("stream"), py::arg("parts"));
  m.def("_grid_share", &lltm_ext::lltm::grid_share,
        "The share of the GPU (0 to 1) that the step kernels of T steps of (B, S) hold, in the "
        "device and dtype of `like`",
        py::arg("like"), py::arg("T"), py::arg("B"), py::arg("S"), py::arg("tf32") = false);
  m.def("_step_graph_counts", &lltm_ext::lltm::step_graph_counts_or_zeros,
        "[direct, captured, replayed]: how many of the per-step time loops ran directly, were "
        "captured as CUDA graphs, and were replayed (LLTM_EXT_SEQUENCE_GRAPHS)");
  lltm_ext::bind_build_info(m);
}
