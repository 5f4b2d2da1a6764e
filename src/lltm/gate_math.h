// The LLTM cell's per-element gate math, shared by the CPU kernels (lltm_cpu.cpp) and the CUDA
// kernels (lltm_cuda.cu and the sequence's step kernels, through sequence_step.cuh): plain C++ that
// compiles for the host and the device.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/macros.h"

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

// State column s's bias of the three gates, in acc_t: bias (3S) holds the input gates' S values,
// then the output gates', then the candidates'; zeros when bias is null (the cell's products
// include it already).
template <typename acc_t, typename scalar_t>
LLTM_EXT_HD void gate_bias(const scalar_t* bias, int64_t state, int64_t s, acc_t (&b)[3]) {
  for (int q = 0; q < 3; ++q) {
    b[q] = bias != nullptr ? static_cast<acc_t>(bias[q * state + s]) : acc_t(0);
  }
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

}  // namespace lltm_ext::lltm
