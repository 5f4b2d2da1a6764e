// The LLTM operators' guard on second derivatives, shared by the cell and the sequence autograd.
#pragma once

#include <torch/csrc/autograd/custom_function.h>

#include <string>

namespace lltm_ext::lltm {

// Gradients as they are, marked first-order only: under create_graph=True they depend on the
// op's saved tensors (`saved`: new_cell and weights, say), and differentiating them again raises
// a clear error (instead of torch's "element 0 of tensors does not require grad", or a silently
// missing term). `op` names the operator in the message (lltm, lltm_sequence). Undefined
// gradients (inputs that need none) stay undefined.
struct FirstOrderOnly : torch::autograd::Function<FirstOrderOnly> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const std::string& op, const at::Tensor& d_0,
                                                const at::Tensor& d_1, const at::Tensor& d_2,
                                                const at::Tensor& d_3, const at::Tensor& d_4,
                                                const at::Tensor& /*saved_0*/,
                                                const at::Tensor& /*saved_1*/) {
    ctx->saved_data["op"] = op;
    const auto view = [](const at::Tensor& d) { return d.defined() ? d.view_as(d) : d; };
    return {view(d_0), view(d_1), view(d_2), view(d_3), view(d_4)};
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

}  // namespace lltm_ext::lltm
