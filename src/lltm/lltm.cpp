// The LLTM cell's operators: schema, input checks, CPU/CUDA dispatch and the matrix products
// (ATen), registered as torch.ops.lltm_ext.lltm_{forward,backward}, and the cell with its autograd
// in C++ (torch.ops.lltm_ext.lltm: no Python in a training step), which the Python module binds.
#include "lltm/lltm.h"

#include <torch/csrc/autograd/custom_function.h>

#include <tuple>
#include <vector>

#include "common/autocast.h"
#include "common/module.h"
#include "common/first_order.h"
#include "lltm/rounded_op.h"

namespace lltm_ext::lltm {

void forward_gates(const at::Tensor& gates, const at::Tensor& bias, const at::Tensor& old_cell,
                   const at::Tensor& new_h, const at::Tensor& new_cell) {
  if (old_cell.is_cuda()) {
#ifdef WITH_CUDA
    forward_gates_cuda(gates, bias, old_cell, new_h, new_cell);
#else
    fail_not_compiled_with_cuda("lltm");
#endif
  } else {
    forward_gates_cpu(gates, bias, old_cell, new_h, new_cell);
  }
}

void backward_gates(const at::Tensor& grad_h, int64_t grad_h_ld, const at::Tensor& grad_h_extra,
                    const at::Tensor& grad_cell, const at::Tensor& new_cell,
                    const at::Tensor& gates, const at::Tensor& bias, const at::Tensor& d_gates,
                    const at::Tensor& d_old_cell, const at::Tensor& d_bias) {
  if (new_cell.is_cuda()) {
#ifdef WITH_CUDA
    backward_gates_cuda(grad_h, grad_h_ld, grad_h_extra, grad_cell, new_cell, gates, bias, d_gates,
                        d_old_cell, d_bias);
#else
    fail_not_compiled_with_cuda("lltm");
#endif
  } else {
    backward_gates_cpu(grad_h, grad_h_ld, grad_h_extra, grad_cell, new_cell, gates, bias, d_gates,
                       d_old_cell);
    if (d_bias.defined()) {
      bias_grad_cpu(d_gates, d_bias);
    }
  }
}

namespace {

using Forward = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using Backward = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// A state tensor (`old_h` or `old_cell`) must be [batch, state_size].
void check_state(const at::Tensor& t, const char* name, int64_t batch, int64_t state) {
  TORCH_CHECK(t.dim() == 2 && t.size(0) == batch && t.size(1) == state, "lltm_ext.lltm: `", name,
              "` must have shape [", batch, ", ", state,
              "] ([batch, state_size]: batch from `input`, state_size = weights.size(0) / 3), "
              "but got a ",
              describe(t), ".");
}

// Forward: X = [old_h, input]; gates = X W^T + b; fused gate math.
// Returns (new_h, new_cell, gates, X); backward reads new_cell, the gate pre-activations (B, 3S)
// and X (the gates themselves it recomputes: forward writes two (B, S) tensors, not five).
Forward forward(const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
                const at::Tensor& old_h, const at::Tensor& old_cell) {
  CHECK_INPUT(input);
  CHECK_INPUT(weights);
  CHECK_INPUT(bias);
  CHECK_INPUT(old_h);
  CHECK_INPUT(old_cell);
  CHECK_LIKE(weights, input);
  CHECK_LIKE(bias, input);
  CHECK_LIKE(old_h, input);
  CHECK_LIKE(old_cell, input);
  check_backend(input, "lltm");
  // state_size S and input_features I come from the weights (3S, S + I), which a module owns: a
  // wrong input or state is reported as that argument's error, not as a weights mismatch.
  TORCH_CHECK(
      weights.dim() == 2 && weights.size(0) % 3 == 0 && weights.size(1) >= weights.size(0) / 3,
      "lltm_ext.lltm: `weights` must have shape [3 * state_size, state_size + "
      "input_features], but got a ",
      describe(weights), ".");
  const int64_t state = weights.size(0) / 3;
  const int64_t features = weights.size(1) - state;
  TORCH_CHECK(input.dim() == 2 && input.size(1) == features,
              "lltm_ext.lltm: `input` must have shape [batch, ", features,
              "] (input_features = weights.size(1) - state_size = ", weights.size(1), " - ", state,
              "), but got a ", describe(input), ".");
  const int64_t batch = input.size(0);
  check_state(old_h, "old_h", batch, state);
  check_state(old_cell, "old_cell", batch, state);
  TORCH_CHECK(
      bias.numel() == 3 * state && (bias.dim() == 1 || (bias.dim() == 2 && bias.size(0) == 1)),
      "lltm_ext.lltm: `bias` must have shape [", 3 * state, "] or [1, ", 3 * state,
      "] (3 * state_size), but got a ", describe(bias), ".");

#ifdef WITH_CUDA
  if (input.is_cuda() && fused_cell_cuda(batch, state, features)) {  // small: one launch
    at::Tensor X = at::empty({batch, state + features}, input.options());
    at::Tensor gates = at::empty({batch, 3 * state}, input.options());
    at::Tensor new_h = at::empty_like(old_cell);
    at::Tensor new_cell = at::empty_like(old_cell);
    fused_forward_cuda(input, weights, bias, old_h, old_cell, gates, X, new_h, new_cell);
    return {new_h, new_cell, gates, X};
  }
#endif
  const at::Tensor X = at::cat({old_h, input}, /*dim=*/1);
  const at::Tensor gates = at::addmm(bias.reshape({3 * state}), X, weights.t());
  at::Tensor new_h = at::empty_like(old_cell);
  at::Tensor new_cell = at::empty_like(old_cell);
  forward_gates(gates, /*bias=*/{}, old_cell, new_h, new_cell);
  return {new_h, new_cell, gates, X};
}

// Backward from the saved forward values (new_cell, the gate pre-activations, X). Returns (d_X,
// d_weights, d_bias, d_old_cell): d_X (B, S + I) is [d_old_h | d_input], one product (the autograd
// kernel hands out its two column blocks); d_bias is 1-D (3 * state_size,). grad_h may have a row
// stride (a column block of the next step's d_X), each row contiguous.
Backward backward(const at::Tensor& grad_h, const at::Tensor& grad_cell, const at::Tensor& new_cell,
                  const at::Tensor& gates, const at::Tensor& X, const at::Tensor& weights) {
  const int64_t grad_h_ld = CHECK_ROWS_INPUT(grad_h);
  CHECK_INPUT(grad_cell);
  CHECK_INPUT(new_cell);
  CHECK_INPUT(gates);
  CHECK_INPUT(X);
  CHECK_INPUT(weights);
  CHECK_LIKE(grad_h, new_cell);
  CHECK_LIKE(grad_cell, new_cell);
  CHECK_LIKE(gates, new_cell);
  CHECK_LIKE(X, new_cell);
  CHECK_LIKE(weights, new_cell);
  check_backend(new_cell, "lltm");
  CHECK_DIM(new_cell, 2);
  CHECK_DIM(X, 2);
  const int64_t batch = new_cell.size(0);
  const int64_t state = new_cell.size(1);
  const int64_t features = X.size(1) - state;
  TORCH_CHECK(features >= 0, "lltm_ext: `X` must have at least state_size (", state,
              ") columns, but got a ", describe(X), ".");
  CHECK_SHAPE(grad_h, batch, state);
  CHECK_SHAPE(grad_cell, batch, state);
  CHECK_SHAPE(gates, batch, 3 * state);
  CHECK_SHAPE(X, batch, state + features);
  CHECK_SHAPE(weights, 3 * state, state + features);

  at::Tensor d_gates = at::empty({batch, 3 * state}, new_cell.options());
  at::Tensor d_old_cell = at::empty_like(new_cell);
  at::Tensor d_bias = at::empty({3 * state}, new_cell.options());
#ifdef WITH_CUDA
  if (new_cell.is_cuda() && fused_cell_cuda(batch, state, features)) {  // small: two launches
    backward_gates(grad_h, grad_h_ld, /*grad_h_extra=*/{}, grad_cell, new_cell, gates,
                   /*bias=*/{}, d_gates, d_old_cell, /*d_bias=*/{});
    at::Tensor d_X = at::empty({batch, state + features}, new_cell.options());
    at::Tensor d_weights = at::empty({3 * state, state + features}, new_cell.options());
    fused_backward_products_cuda(d_gates, X, weights, d_X, d_weights, d_bias);
    return {d_X, d_weights, d_bias, d_old_cell};
  }
#endif
  backward_gates(grad_h, grad_h_ld, /*grad_h_extra=*/{}, grad_cell, new_cell, gates, /*bias=*/{},
                 d_gates, d_old_cell, d_bias);
  at::Tensor d_weights = at::mm(d_gates.t(), X);
  at::Tensor d_X = at::mm(d_gates, weights);
  return {d_X, d_weights, d_bias, d_old_cell};
}

// The cell without autograd (inference, or below the autograd kernel): any layout in, (new_h,
// new_cell) out.
std::tuple<at::Tensor, at::Tensor> cell(const at::Tensor& input, const at::Tensor& weights,
                                        const at::Tensor& bias, const at::Tensor& old_h,
                                        const at::Tensor& old_cell) {
  auto out = forward(input.contiguous(), weights.contiguous(), bias.contiguous(),
                     old_h.contiguous(), old_cell.contiguous());
  return {std::get<0>(out), std::get<1>(out)};
}

// The operators as the dispatcher has them: called through it (not as C++ functions) so that
// torch.compile's tracing, which runs below autograd on fake tensors, records them.
const auto& forward_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("lltm_ext::lltm_forward", "")
                             .typed<decltype(forward)>();
  return op;
}
const auto& backward_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("lltm_ext::lltm_backward", "")
                             .typed<decltype(backward)>();
  return op;
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Autograd for the cell: forward saves what the backward kernels read.
struct Cell : torch::autograd::Function<Cell> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& input,
                               const at::Tensor& weights, const at::Tensor& bias,
                               const at::Tensor& old_h, const at::Tensor& old_cell) {
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    const at::Tensor w = weights.contiguous();
    auto [new_h, new_cell, gates, X] = forward_op().call(input.contiguous(), w, bias.contiguous(),
                                                         old_h.contiguous(), old_cell.contiguous());
    ctx->save_for_backward({new_cell, gates, X, w});
    ctx->saved_data["bias_shape"] = bias.sizes().vec();
    return {new_h, new_cell};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& new_cell = saved[0];
    const at::Tensor& weights = saved[3];
    // grad_h may stay a column block of the next step's d_X: the kernels read rows with a stride.
    const at::Tensor& gh = grads[0];
    const at::Tensor grad_h = !gh.defined()             ? at::zeros_like(new_cell)
                              : has_contiguous_rows(gh) ? gh
                                                        : gh.contiguous();
    const at::Tensor grad_cell =
        grads[1].defined() ? grads[1].contiguous() : at::zeros_like(new_cell);
    at::Tensor d_X, d_weights, d_bias, d_old_cell;
    {
      const at::AutoDispatchBelowADInplaceOrView below_autograd;
      std::tie(d_X, d_weights, d_bias, d_old_cell) =
          backward_op().call(grad_h, grad_cell, new_cell, saved[1], saved[2], weights);
    }
    const int64_t state = new_cell.size(1);
    const at::Tensor d_old_h = d_X.narrow(1, 0, state);
    const at::Tensor d_input = d_X.narrow(1, state, d_X.size(1) - state);
    d_bias = d_bias.reshape(ctx->saved_data["bias_shape"].toIntVector());
    // Marked first-order only under create_graph=True.
    return first_order_only("lltm", {d_input, d_weights, d_bias, d_old_h, d_old_cell}, {new_cell});
  }
};

std::tuple<at::Tensor, at::Tensor> cell_autograd(const at::Tensor& input, const at::Tensor& weights,
                                                 const at::Tensor& bias, const at::Tensor& old_h,
                                                 const at::Tensor& old_cell) {
  variable_list out = Cell::apply(input, weights, bias, old_h, old_cell);
  return {out[0], out[1]};
}

// The autocast kernel's rounded operands (rounded_op.h), under this module's name.
struct CellRounded {
  static constexpr const char* kName = "lltm_rounded";
  static constexpr const char* kQualifiedName = "lltm_ext::lltm_rounded";
  static constexpr const char* kSchema =
      "lltm_rounded(Tensor[] tensors, ScalarType dtype) -> Tensor[]";
};

// The cell under torch.autocast on `device`: what a Python loop step of the pure-PyTorch cell
// gives there. Its product runs in the autocast dtype (`lower`) and its state keeps
// autocast::lltm_state_dtype. A state in `lower`: the cell runs in `lower`. A float32 state: the
// cell runs in float32 on the operands rounded to `lower` (input, weights, bias, old_h: the values
// the loop's product reads; one call of lltm_rounded), its products adding them up in float32, and
// the state and outputs stay float32 as in the loop. Anything autocast leaves alone (float64, ...)
// passes through.
template <c10::DeviceType device>
std::tuple<at::Tensor, at::Tensor> cell_autocast(const at::Tensor& input, const at::Tensor& weights,
                                                 const at::Tensor& bias, const at::Tensor& old_h,
                                                 const at::Tensor& old_cell) {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("lltm_ext::lltm", "").typed<decltype(cell)>();
  const autocast::Below<device> below;
  if (!autocast::all_eligible<device>({&input, &weights, &bias, &old_h, &old_cell})) {
    return op.call(input, weights, bias, old_h, old_cell);
  }
  const at::ScalarType lower = autocast::lower_dtype<device>();
  if (autocast::lltm_state_dtype(old_cell, lower) == lower) {
    return op.call(
        autocast::to_lower<device>(input, lower), autocast::to_lower<device>(weights, lower),
        autocast::to_lower<device>(bias, lower), autocast::to_lower<device>(old_h, lower),
        autocast::to_lower<device>(old_cell, lower));
  }
  // The operands rounded to `lower` and held in float32, in one call (lltm_rounded).
  const std::vector<at::Tensor> r =
      rounding::round_operands<CellRounded>({input, weights, bias, old_h}, lower);
  return op.call(r[0], r[1], r[2], r[3], old_cell.to(at::kFloat));
}

}  // namespace
}  // namespace lltm_ext::lltm

TORCH_LIBRARY_FRAGMENT(lltm_ext, m) {
  m.def(
      "lltm(Tensor input, Tensor weights, Tensor bias, Tensor old_h, Tensor old_cell) -> "
      "(Tensor new_h, Tensor new_cell)");
  m.def(
      "lltm_forward(Tensor input, Tensor weights, Tensor bias, Tensor old_h, Tensor old_cell) -> "
      "(Tensor new_h, Tensor new_cell, Tensor gates, Tensor X)");
  m.def(
      "lltm_backward(Tensor grad_h, Tensor grad_cell, Tensor new_cell, Tensor gates, Tensor X, "
      "Tensor weights) -> "
      "(Tensor d_X, Tensor d_weights, Tensor d_bias, Tensor d_old_cell)");
  lltm_ext::lltm::rounding::define<lltm_ext::lltm::CellRounded>(m);
  lltm_ext::impl_cpu_cuda(m, "lltm_forward", TORCH_FN(lltm_ext::lltm::forward));
  lltm_ext::impl_cpu_cuda(m, "lltm_backward", TORCH_FN(lltm_ext::lltm::backward));
  m.impl("lltm", torch::dispatch(c10::DispatchKey::CPU, TORCH_FN(lltm_ext::lltm::cell)));
  m.impl("lltm", torch::dispatch(c10::DispatchKey::CUDA, TORCH_FN(lltm_ext::lltm::cell)));
  m.impl("lltm",
         torch::dispatch(c10::DispatchKey::Autograd, TORCH_FN(lltm_ext::lltm::cell_autograd)));
  m.impl("lltm", torch::dispatch(c10::DispatchKey::AutocastCPU,
                                 TORCH_FN(lltm_ext::lltm::cell_autocast<c10::DeviceType::CPU>)));
  m.impl("lltm", torch::dispatch(c10::DispatchKey::AutocastCUDA,
                                 TORCH_FN(lltm_ext::lltm::cell_autocast<c10::DeviceType::CUDA>)));
}

namespace lltm_ext::lltm {
namespace {

// What a call of lltm on these tensors runs, and why (lltm_ext.explain): input (B, I), weights
// (3S, S + I). On CUDA, the small cell's two fused kernels, or cat, cuBLAS's products and the gate
// kernels (fused_cell_cuda's rule, lltm.h); on the CPU, ATen's products and the C++ gate pass.
py::dict explain(const at::Tensor& input, const at::Tensor& weights) {
  TORCH_CHECK(input.dim() == 2 && weights.dim() == 2 && weights.size(0) % 3 == 0,
              "lltm_ext.explain(lltm): `input` must be (B, I) and `weights` (3S, S + I), but got ",
              describe(input), " and ", describe(weights), ".");
  const int64_t B = input.size(0), I = input.size(1), S = weights.size(0) / 3;
  py::dict out;
  out["device"] = input.device().str();
  std::vector<std::string> notes;
  bool fused = false;
#ifdef WITH_CUDA
  fused = input.is_cuda() && fused_cell_cuda(B, S, I);
  if (input.is_cuda()) {
    notes.push_back(c10::str(
        "LLTM_EXT_CELL_PATH auto takes the fused kernels where B <= ", kFusedCellMaxBatch,
        ", S + I <= ", kFusedCellMaxK, " and B x 3S x (S + I) <= ", kFusedCellMaxWork,
        " (here B = ", B, ", S + I = ", S + I, ", B x 3S x (S + I) = ", B * 3 * S * (S + I),
        "): docs/decisions.md#fused-cell-rule"));
  }
#else
  (void)B, (void)I, (void)S;
#endif
  if (!input.is_cuda()) {
    out["path"] = "cpu";
    out["detail"] = "X = cat(old_h, input); gates = addmm (ATen); the gate pass in vectorized C++";
    out["kernels"] = std::vector<std::string>{};
  } else if (fused) {
    out["path"] = "fused";
    out["detail"] =
        "forward in one kernel (cat, product, bias, gate math); backward's gate pass "
        "and its three products in two more";
    out["kernels"] = std::vector<std::string>{"fused_forward_kernel", "backward_gates_kernel",
                                              "fused_backward_products_kernel"};
  } else {
    out["path"] = "cublas";
    out["detail"] = "cat, cuBLAS's product (addmm) and the gate kernel each way";
    out["kernels"] = std::vector<std::string>{"forward_gates_kernel", "backward_gates_kernel"};
  }
  out["notes"] = notes;
  return out;
}

}  // namespace
}  // namespace lltm_ext::lltm

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "LLTM cell (fused gate kernels; matrix products through ATen).";
  lltm_ext::bind_operator<std::tuple<at::Tensor, at::Tensor>(
      const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
      const at::Tensor&)>(m, "lltm",
                          "lltm(input, weights, bias, old_h, old_cell) -> (new_h, new_cell): the "
                          "operator lltm_ext::lltm, one LLTM step");
  m.def("_explain", &lltm_ext::lltm::explain,
        "What a call on input (B, I) and weights (3S, S + I) runs, and why (lltm_ext.explain)",
        py::arg("input"), py::arg("weights"));
  lltm_ext::bind_build_info(m);
}
