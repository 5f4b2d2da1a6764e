// The LLTM operators' guard on second derivatives, shared by the cell and the sequence autograd.
#pragma once

#include <torch/csrc/autograd/custom_function.h>

#include <array>
#include <string>

namespace lltm_ext::lltm {

// Gradients as they are, marked first-order only: under create_graph=True they depend on the
// op's saved tensors (`saved`: new_cell and weights, say), and differentiating them again raises
// a clear error (instead of torch's "element 0 of tensors does not require grad", or a silently
// missing term). `op` names the operator in the message (lltm, lltm_sequence).
struct FirstOrderOnly : torch::autograd::Function<FirstOrderOnly> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const std::string& op, const at::Tensor& d_0,
                                                const at::Tensor& d_1, const at::Tensor& d_2,
                                                const at::Tensor& d_3, const at::Tensor& d_4,
                                                const at::Tensor& /*saved_0*/,
                                                const at::Tensor& /*saved_1*/) {
    ctx->saved_data["op"] = op;
    return {d_0.view_as(d_0), d_1.view_as(d_1), d_2.view_as(d_2), d_3.view_as(d_3),
            d_4.view_as(d_4)};
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

// FirstOrderOnly over five gradients of which some may be undefined (inputs that need none):
// autograd takes no undefined input into a Function, so each stands in as an empty tensor through
// it and comes back undefined.
inline torch::autograd::variable_list first_order_only(const std::string& op,
                                                       torch::autograd::variable_list grads,
                                                       const at::Tensor& saved_0,
                                                       const at::Tensor& saved_1) {
  TORCH_INTERNAL_ASSERT(grads.size() == 5);
  std::array<bool, 5> undefined{};
  for (size_t i = 0; i < grads.size(); ++i) {
    undefined[i] = !grads[i].defined();
    if (undefined[i]) {
      grads[i] = at::empty({0}, saved_0.options());
    }
  }
  torch::autograd::variable_list out =
      FirstOrderOnly::apply(op, grads[0], grads[1], grads[2], grads[3], grads[4], saved_0, saved_1);
  for (size_t i = 0; i < out.size(); ++i) {
    if (undefined[i]) {
      out[i] = at::Tensor();
    }
  }
  return out;
}

}  // namespace lltm_ext::lltm
