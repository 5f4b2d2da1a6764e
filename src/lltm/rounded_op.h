// The autocast kernels' rounded operands as an operator, for the LLTM cell's module and the
// sequence's, each of which registers it under its own name (lltm_ext::lltm_rounded,
// lltm_ext::lltm_sequence_rounded): a module's autocast kernel calls only its own operators.
//
// <name>(tensors, dtype): each tensor's values rounded to `dtype` (float16 or bfloat16, to nearest
// even) and held in float32, contiguous: the values a product in `dtype` reads, for the float32 op
// with TF32 products that an autocast kernel calls for a float32 state. On CUDA one kernel for all
// of them (round.cu) where they are float32 on one GPU; elsewhere ATen's casts to `dtype` and
// back. It replaces those casts (two kernels and two autograd nodes per operand, forward and
// backward), which took longer than the whole sequence at small shapes
// (docs/decisions_sequence.md#rounded-operands), and inductor keeps it where it drops the casts'
// round trip. Its gradient is the same rounding of the gradients, as the casts' gradients round
// them, so backward calls the operator again; the copy of an operand that needs no gradient needs
// none.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <algorithm>
#include <initializer_list>
#include <vector>

#include "lltm/lltm.h"

namespace lltm_ext::lltm::rounding {

// Op: a tag with the operator's name (kName; kQualifiedName with the namespace) and its schema
// (kSchema), as each module's TORCH_LIBRARY defines it.
template <typename Op>
std::vector<at::Tensor> rounded(at::TensorList tensors, at::ScalarType dtype) {
  TORCH_CHECK(dtype == at::kHalf || dtype == at::kBFloat16, "lltm_ext.", Op::kName,
              ": `dtype` must be torch.float16 or torch.bfloat16, but got ", dtype, ".");
  std::vector<at::Tensor> out;
  out.reserve(tensors.size());
#ifdef WITH_CUDA
  const bool one_gpu =
      !tensors.empty() && std::all_of(tensors.begin(), tensors.end(), [&](const at::Tensor& t) {
        return t.is_cuda() && t.scalar_type() == at::kFloat && t.device() == tensors[0].device();
      });
  if (one_gpu) {
    std::vector<at::Tensor> src;
    src.reserve(tensors.size());
    for (const at::Tensor& t : tensors) {
      src.push_back(t.contiguous());
      out.push_back(at::empty(t.sizes(), src.back().options()));
    }
    round_through_cuda(src, out, dtype);
    return out;
  }
#endif
  for (const at::Tensor& t : tensors) {
    out.push_back(t.contiguous().to(dtype).to(at::kFloat));
  }
  return out;
}

template <typename Op>
const auto& rounded_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow(Op::kQualifiedName, "")
                             .template typed<decltype(rounded<Op>)>();
  return op;
}

template <typename Op>
struct Rounded : torch::autograd::Function<Rounded<Op>> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                at::TensorList tensors, at::ScalarType dtype) {
    ctx->saved_data["dtype"] = dtype;
    ctx->set_materialize_grads(false);  // no tensor of zeros for an operand that needs no gradient
    torch::autograd::variable_list out;
    {
      const at::AutoDispatchBelowADInplaceOrView below_autograd;
      out = rounded_op<Op>().call(tensors, dtype);
    }
    // A copy of an operand that needs no gradient needs none either: else the op's backward would
    // make d input for nothing (in the sequence a product as large as the input projection).
    torch::autograd::variable_list constant;
    for (size_t k = 0; k < tensors.size(); ++k) {
      if (!tensors[k].requires_grad()) {
        constant.push_back(out[k]);
      }
    }
    ctx->mark_non_differentiable(constant);
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    std::vector<at::Tensor> defined;
    for (size_t k = 0; k < grads.size(); ++k) {
      if (grads[k].defined() && ctx->needs_input_grad(k)) {
        defined.push_back(grads[k]);
      }
    }
    const std::vector<at::Tensor> done =
        defined.empty() ? defined
                        : rounded_op<Op>().call(defined, ctx->saved_data["dtype"].toScalarType());
    torch::autograd::variable_list out(grads.size() + 1);  // + dtype's: none
    for (size_t k = 0, next = 0; k < grads.size(); ++k) {
      if (grads[k].defined() && ctx->needs_input_grad(k)) {
        out[k] = done[next++];
      }
    }
    return out;
  }
};

template <typename Op>
std::vector<at::Tensor> rounded_autograd(at::TensorList tensors, at::ScalarType dtype) {
  return Rounded<Op>::apply(tensors, dtype);
}

// The operator's schema and its CPU, CUDA and Autograd kernels, in the module's TORCH_LIBRARY.
template <typename Op>
void define(torch::Library& m) {
  m.def(Op::kSchema);
  m.impl(Op::kName, torch::dispatch(c10::DispatchKey::CPU, TORCH_FN(rounded<Op>)));
  m.impl(Op::kName, torch::dispatch(c10::DispatchKey::CUDA, TORCH_FN(rounded<Op>)));
  m.impl(Op::kName, torch::dispatch(c10::DispatchKey::Autograd, TORCH_FN(rounded_autograd<Op>)));
}

// For an autocast kernel: `operands` rounded to `dtype` and held in float32, in one call of the
// operator; an undefined one stays undefined.
template <typename Op>
std::vector<at::Tensor> round_operands(std::initializer_list<at::Tensor> operands,
                                       at::ScalarType dtype) {
  std::vector<at::Tensor> defined;
  for (const at::Tensor& t : operands) {
    if (t.defined()) {
      defined.push_back(t);
    }
  }
  const std::vector<at::Tensor> done =
      defined.empty() ? defined : rounded_op<Op>().call(defined, dtype);
  std::vector<at::Tensor> out;
  size_t next = 0;
  for (const at::Tensor& t : operands) {
    out.push_back(t.defined() ? done[next++] : t);
  }
  return out;
}

}  // namespace lltm_ext::lltm::rounding
