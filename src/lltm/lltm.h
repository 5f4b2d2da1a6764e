// The LLTM cell's per-element gate math (shared by the CPU and CUDA kernels) and kernel entry
// points.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/macros.h"

#ifdef WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace at {
class Tensor;
}  // namespace at

namespace lltm_ext::lltm {

LLTM_EXT_HD float exp_(float x) {
  return expf(x);
}
LLTM_EXT_HD double exp_(double x) {
  return exp(x);
}
LLTM_EXT_HD float expm1_(float x) {
  return expm1f(x);
}
LLTM_EXT_HD double expm1_(double x) {
  return expm1(x);
}
LLTM_EXT_HD float tanh_(float x) {
  return tanhf(x);
}
LLTM_EXT_HD double tanh_(double x) {
  return tanh(x);
}

// The scalar math of the C library (CUDA's device functions on the GPU). The CPU kernels use a
// policy with the same members whose code the compiler vectorizes (lltm_cpu.cpp).
struct LibmMath {
  template <typename T>
  LLTM_EXT_HD static T exp(T x) {
    return exp_(x);
  }
  template <typename T>
  LLTM_EXT_HD static T expm1(T x) {
    return expm1_(x);
  }
  template <typename T>
  LLTM_EXT_HD static T tanh(T x) {
    return tanh_(x);
  }
  template <typename T>
  LLTM_EXT_HD static T select(bool c, T a, T b) {
    return c ? a : b;
  }
};

template <typename T>
struct GateValues {
  T input_gate, output_gate, candidate_cell;
};

// The gates from their pre-activations (z_i, z_o, z_c), forward and again in backward. Sigmoid is
// 1 / (1 + e^-z): for z -> -inf, e^-z -> inf and the result -> 0, never NaN. ELU with alpha = 1.
template <typename T, typename Math = LibmMath>
LLTM_EXT_HD GateValues<T> gate_values(T z_i, T z_o, T z_c) {
  return {T(1) / (T(1) + Math::exp(-z_i)), T(1) / (T(1) + Math::exp(-z_o)),
          Math::select(z_c > T(0), z_c, Math::expm1(z_c))};
}

template <typename T>
struct ForwardElement {
  T new_h, new_cell;
};

// Gate pre-activations (z_i, z_o, z_c) and the old cell state -> the cell's outputs.
template <typename T, typename Math = LibmMath>
LLTM_EXT_HD ForwardElement<T> forward_element(T z_i, T z_o, T z_c, T old_cell) {
  const GateValues<T> g = gate_values<T, Math>(z_i, z_o, z_c);
  ForwardElement<T> r;
  r.new_cell = old_cell + g.candidate_cell * g.input_gate;
  r.new_h = Math::tanh(r.new_cell) * g.output_gate;
  return r;
}

template <typename T>
struct BackwardElement {
  T d_old_cell, d_z_i, d_z_o, d_z_c;
};

// Gradients of the gate pre-activations and of old_cell, from the saved pre-activations
// (z_i, z_o, z_c) and new_cell: the gates are recomputed (forward writes only new_h and new_cell).
// sigmoid' = s (1 - s); ELU' = 1 for z > 0, else e^z = candidate + 1 (what torch's ELU uses at 0).
template <typename T, typename Math = LibmMath>
LLTM_EXT_HD BackwardElement<T> backward_element(T grad_h, T grad_cell, T new_cell, T z_i, T z_o,
                                                T z_c) {
  const auto [input_gate, output_gate, candidate_cell] = gate_values<T, Math>(z_i, z_o, z_c);
  const T t = Math::tanh(new_cell);
  const T d_new_cell = (T(1) - t * t) * output_gate * grad_h + grad_cell;
  const T d_elu = Math::select(candidate_cell > T(0), T(1), candidate_cell + T(1));
  BackwardElement<T> r;
  r.d_old_cell = d_new_cell;
  r.d_z_i = candidate_cell * d_new_cell * input_gate * (T(1) - input_gate);
  r.d_z_o = t * grad_h * output_gate * (T(1) - output_gate);
  r.d_z_c = input_gate * d_new_cell * d_elu;
  return r;
}

// gates (B, 3S) and old_cell (B, S) -> new_h, new_cell (B, S), all written.
void forward_gates_cpu(const at::Tensor& gates, const at::Tensor& old_cell, const at::Tensor& new_h,
                       const at::Tensor& new_cell);

// Incoming gradients, new_cell (B, S) and the gate pre-activations (B, 3S) -> d_gates (B, 3S) and
// d_old_cell (B, S), all written. grad_h's rows are grad_h_ld elements apart (it may be a column
// block of a larger matrix).
void backward_gates_cpu(const at::Tensor& grad_h, int64_t grad_h_ld, const at::Tensor& grad_cell,
                        const at::Tensor& new_cell, const at::Tensor& gates,
                        const at::Tensor& d_gates, const at::Tensor& d_old_cell);

#ifdef WITH_CUDA
// CUDA launchers (lltm_cuda.cu), for T = float, double, c10::Half, c10::BFloat16: the same
// outputs for n = B * S elements of state S, on `stream` (the tensors' device current), a grid
// sized for `sm_count` multiprocessors; they return the launch's error. grad_h's rows are
// grad_h_ld elements apart.
template <typename T>
cudaError_t launch_forward_gates(const T* gates, const T* old_cell, T* new_h, T* new_cell,
                                 int64_t n, int64_t state, int sm_count, cudaStream_t stream);
template <typename T>
cudaError_t launch_backward_gates(const T* grad_h, int64_t grad_h_ld, const T* grad_cell,
                                  const T* new_cell, const T* gates, T* d_gates, T* d_old_cell,
                                  int64_t n, int64_t state, int sm_count, cudaStream_t stream);
#endif

}  // namespace lltm_ext::lltm
