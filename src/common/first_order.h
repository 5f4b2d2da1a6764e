// The guard on second derivatives of the ops whose backward kernels are first-order only, shared
// by their C++ autograd (the element-wise ops, the LLTM cell and sequence).
#pragma once

#include <torch/csrc/autograd/custom_function.h>

#include <string>
#include <vector>

namespace lltm_ext {

// Gradients as they are, marked first-order only: under create_graph=True they depend on the
// op's saved tensors (`saved`: outputs of the op, saved as outputs, which carry its node and so
// depend on every input of the graph; a saved input or intermediate would leave the others out),
// and differentiating them again raises a clear error (instead of torch's "element 0 of tensors
// does not require grad", or a silently missing term). `op` names the operator in the message
// (relu, lltm, ...).
struct FirstOrderOnly : torch::autograd::Function<FirstOrderOnly> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const std::string& op, at::TensorList grads,
                                                at::TensorList /*saved*/) {
    ctx->saved_data["op"] = op;
    torch::autograd::variable_list out;
    out.reserve(grads.size());
    for (const at::Tensor& g : grads) {
      out.push_back(g.view_as(g));
    }
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 const torch::autograd::variable_list&) {
    const std::string op = ctx->saved_data["op"].toStringRef();
    TORCH_CHECK(false, "lltm_ext.", op,
                ": second derivatives are not supported: its backward kernels are first-order "
                "only. The gradients from torch.autograd.grad(..., create_graph=True) cannot be "
                "differentiated again through lltm_ext.",
                op,
                "; use a pure-PyTorch version of the op where a higher-order derivative is "
                "needed.");
  }
};

// A backward's gradients `grads` (some may be undefined: inputs that need none) as they are when
// grad mode is off, else through FirstOrderOnly (create_graph=True). Autograd takes no undefined
// input into a Function, so each stands in as an empty tensor through it and comes back undefined.
inline torch::autograd::variable_list first_order_only(const std::string& op,
                                                       torch::autograd::variable_list grads,
                                                       at::TensorList saved) {
  if (!at::GradMode::is_enabled()) {
    return grads;
  }
  TORCH_INTERNAL_ASSERT(!saved.empty());
  std::vector<bool> undefined(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    undefined[i] = !grads[i].defined();
    if (undefined[i]) {
      grads[i] = at::empty({0}, saved[0].options());
    }
  }
  // (TensorList, not the vector: autograd counts a vector argument as no tensor at all.)
  torch::autograd::variable_list out = FirstOrderOnly::apply(op, at::TensorList(grads), saved);
  for (size_t i = 0; i < out.size(); ++i) {
    if (undefined[i]) {
      out[i] = at::Tensor();
    }
  }
  return out;
}

}  // namespace lltm_ext
