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
  template <typename T>
  LLTM_EXT_HD static T rcp(T x) {  // 1 / x
    return T(1) / x;
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
  return {Math::rcp(T(1) + Math::exp(-z_i)), Math::rcp(T(1) + Math::exp(-z_o)),
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

// What an element's backward step needs besides dL/dh and dL/dc: the factors that turn them into
// the gradients, from the saved pre-activations (z_i, z_o, z_c) and new_cell (the gates are
// recomputed: forward writes only new_h and new_cell). They depend on neither gradient, so a step
// kernel can compute them while it sums dL/dh (backward_apply is then three multiplies and a
// multiply-add). sigmoid' = s (1 - s); ELU' = 1 for z > 0, else e^z = candidate + 1 (what torch's
// ELU uses at 0).
template <typename T>
struct BackwardFactors {
  T cell;           // d new_cell / d h through new_h = tanh(new_cell) o: (1 - tanh^2) o
  T z_i, z_o, z_c;  // dL/dz_i = dL/dc f.z_i, dL/dz_o = dL/dh f.z_o, dL/dz_c = dL/dc f.z_c
};

template <typename T, typename Math = LibmMath>
LLTM_EXT_HD BackwardFactors<T> backward_factors(T new_cell, T z_i, T z_o, T z_c) {
  const auto [input_gate, output_gate, candidate_cell] = gate_values<T, Math>(z_i, z_o, z_c);
  const T t = Math::tanh(new_cell);
  const T d_elu = Math::select(candidate_cell > T(0), T(1), candidate_cell + T(1));
  BackwardFactors<T> f;
  f.cell = (T(1) - t * t) * output_gate;
  f.z_i = candidate_cell * input_gate * (T(1) - input_gate);
  f.z_o = t * output_gate * (T(1) - output_gate);
  f.z_c = input_gate * d_elu;
  return f;
}

// The gradients of an element's gate pre-activations and of old_cell, from its factors and the
// gradients of new_h and new_cell.
template <typename T>
LLTM_EXT_HD BackwardElement<T> backward_apply(const BackwardFactors<T>& f, T grad_h, T grad_cell) {
  BackwardElement<T> r;
  r.d_old_cell = f.cell * grad_h + grad_cell;
  r.d_z_i = r.d_old_cell * f.z_i;
  r.d_z_o = grad_h * f.z_o;
  r.d_z_c = r.d_old_cell * f.z_c;
  return r;
}

// Gradients of the gate pre-activations and of old_cell, from the saved pre-activations
// (z_i, z_o, z_c) and new_cell.
template <typename T, typename Math = LibmMath>
LLTM_EXT_HD BackwardElement<T> backward_element(T grad_h, T grad_cell, T new_cell, T z_i, T z_o,
                                                T z_c) {
  return backward_apply(backward_factors<T, Math>(new_cell, z_i, z_o, z_c), grad_h, grad_cell);
}

}  // namespace lltm_ext::lltm
