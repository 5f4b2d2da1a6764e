// Autocast for lltm_ext's operators: what the AutocastCPU / AutocastCUDA kernels of an operator
// share (the casts torch.autocast makes for PyTorch's own ops, and the state rule of the LLTM).
//
// An op's autocast kernel casts its operands, then calls the operator again below autocast (so
// the cast tensors reach the operator's Autograd kernel and the casts are differentiated like any
// other op: gradients reach float32 parameters in float32). Tensors that autocast leaves alone
// (float64, integers, another device) make the kernel pass everything through unchanged, so the
// operator's own checks raise their usual errors.
#pragma once

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <initializer_list>

namespace lltm_ext::autocast {

// For the scope of an autocast kernel: calls made in it skip `device`'s autocast kernels (ours and
// PyTorch's), so the operator they reach runs in the dtypes it is given.
template <c10::DeviceType device>
struct Below {
  c10::impl::ExcludeDispatchKeyGuard guard{
      at::autocast::get_autocast_dispatch_key_from_device_type(device)};
};

// torch.autocast's dtype for `device` (float16 on CUDA and bfloat16 on the CPU unless the
// autocast region names another).
template <c10::DeviceType device>
at::ScalarType lower_dtype() {
  return at::autocast::get_autocast_dtype(device);
}

// Whether autocast would cast every defined tensor of `ts`: floating, not float64, on `device`.
template <c10::DeviceType device>
bool all_eligible(std::initializer_list<const at::Tensor*> ts) {
  for (const at::Tensor* t : ts) {
    if (t->defined() && !at::autocast::is_eligible(*t, device)) {
      return false;
    }
  }
  return true;
}

// t as autocast hands it to a lower-precision op (torch.mm's list): in `dtype` (a leaf weight's
// copy cached for the rest of the autocast region, as autocast caches it); undefined stays so.
template <c10::DeviceType device>
at::Tensor to_lower(const at::Tensor& t, at::ScalarType dtype) {
  return t.defined() ? at::autocast::cached_cast(dtype, t, device) : t;
}

// The dtype an LLTM state keeps in a Python loop of the pure-PyTorch cell under autocast: gates
// come out of the product in `lower`, and new_cell = old_cell + f(gates), new_h = tanh(new_cell) *
// g(gates) promote, so the state keeps promote(old_cell, lower): float32 for a float32 state,
// `lower` for a state already in it.
inline at::ScalarType lltm_state_dtype(const at::Tensor& cell, at::ScalarType lower) {
  return at::promote_types(cell.scalar_type(), lower);
}

}  // namespace lltm_ext::autocast
