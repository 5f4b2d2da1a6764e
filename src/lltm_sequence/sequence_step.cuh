// The per-element work of a sequence step, shared by the step kernels (steps/steps.cu,
// cluster/cluster_kernels.cuh, wide/wide_kernels.cuh): a (batch row, state column) element's
// own operands, read before its step's barrier, and its gate math after it, with the rounding to
// scalar_t that every stored (and carried) value gets.
#pragma once

#include <cstdint>

#include "lltm/gate_math.h"

namespace lltm_ext::lltm {

// The step kernels' gate math: the C library's, except that the sigmoids' reciprocal 1 / (1 +
// e^-z) is the hardware's approximation (at most 1 ulp off; an argument past 2^126, from z below
// -87, gives 0 where the quotient would be below 2^-126). An IEEE division compiles to a call of
// a slow path for special operands, which splits the gate math of a step kernel's critical path
// into blocks the compiler cannot schedule across; this reciprocal is one instruction.
struct StepMath : LibmMath {
  using LibmMath::rcp;
  __device__ static float rcp(float x) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
  }
};

// A thread's element (b, s) of the gate math: whether it exists (`mine`), its flat index j = b S +
// s in a (B, S) tensor, its column's three gate biases and the state carried from step to step
// (c_{t-1} forward, dL/dc_t backward), in acc_t; zeros where the element does not exist.
template <typename acc_t>
struct StepElement {
  bool mine;
  int64_t b, j;
  int s;
  acc_t bias[3];
  acc_t carried;
};

// carried: the (B, S) tensor that holds the carried state's first value (read at j), or nullptr
// for zeros (an initial state or final-state gradient the op was not given).
template <typename acc_t, typename scalar_t>
__device__ __forceinline__ StepElement<acc_t> step_element(int64_t b, int s, bool mine, int state,
                                                           const scalar_t* bias,
                                                           const scalar_t* carried) {
  StepElement<acc_t> e;
  e.mine = mine;
  e.b = b;
  e.s = s;
  e.j = b * state + s;
  e.bias[0] = e.bias[1] = e.bias[2] = e.carried = acc_t(0);
  if (mine) {
    gate_bias(bias, state, s, e.bias);
    e.carried = carried != nullptr ? static_cast<acc_t>(carried[e.j]) : acc_t(0);
  }
  return e;
}

// p[0], p[S], p[2 S] in acc_t: one column's three gates in a gate-major (.., 3S) row.
template <typename acc_t, typename scalar_t>
__device__ __forceinline__ void read_gates(const scalar_t* p, int state, acc_t (&v)[3]) {
#pragma unroll
  for (int q = 0; q < 3; ++q) {
    v[q] = static_cast<acc_t>(p[q * state]);
  }
}

template <typename scalar_t>
struct ForwardStep {
  scalar_t saved[3], h, c;
};

// One element's step forward. pre: its three gates' pre-activations without the bias (the input
// projection plus h_{t-1} W_h^T), stored rounded to scalar_t (`saved`: backward recomputes the
// gates from these); the gate math on saved + bias and c_{t-1} -> h_t, c_t, with Math's functions.
template <typename scalar_t, typename acc_t, typename Math = StepMath>
__device__ __forceinline__ ForwardStep<scalar_t> forward_step(const acc_t (&pre)[3],
                                                              const acc_t (&bias)[3],
                                                              acc_t c_prev) {
  ForwardStep<scalar_t> r;
  acc_t z[3];
#pragma unroll
  for (int q = 0; q < 3; ++q) {
    r.saved[q] = static_cast<scalar_t>(pre[q]);
    z[q] = static_cast<acc_t>(r.saved[q]) + bias[q];
  }
  const auto e = forward_element<acc_t, Math>(z[0], z[1], z[2], c_prev);
  r.h = static_cast<scalar_t>(e.new_h);
  r.c = static_cast<scalar_t>(e.new_cell);
  return r;
}

// One element's operands of backward step t: z = gates_t + bias, dL/dh_t's own part
// (grad_output[t], plus grad_h_n at the sequence's last step) and c_t.
template <typename acc_t>
struct BackwardOperands {
  acc_t z[3], grad_h, cell;
};

// g: the element's column in gates_t's row b; grad_output, cell: at (t, j); grad_h_n (B, S): its
// element j, read only at the last step (last_step), zero where grad_h_n is nullptr.
template <typename acc_t, typename scalar_t>
__device__ __forceinline__ BackwardOperands<acc_t> backward_operands(
    const scalar_t* g, int state, const acc_t (&bias)[3], const scalar_t* grad_output,
    const scalar_t* grad_h_n, int64_t j, bool last_step, const scalar_t* cell) {
  BackwardOperands<acc_t> r;
  read_gates(g, state, r.z);
#pragma unroll
  for (int q = 0; q < 3; ++q) {
    r.z[q] += bias[q];
  }
  r.grad_h = static_cast<acc_t>(*grad_output) +
             (last_step && grad_h_n != nullptr ? static_cast<acc_t>(grad_h_n[j]) : acc_t(0));
  r.cell = static_cast<acc_t>(*cell);
  return r;
}

template <typename scalar_t>
struct BackwardStep {
  scalar_t d_z[3], d_cell;
};

// One element's step backward from its factors (backward_factors of its operands), dL/dh_t
// complete and dL/dc_t -> d_gates[t]'s three values and dL/dc_{t-1}, rounded as stored.
template <typename scalar_t, typename acc_t>
__device__ __forceinline__ BackwardStep<scalar_t> backward_step(const BackwardFactors<acc_t>& f,
                                                                acc_t grad_h, acc_t grad_c) {
  const auto e = backward_apply(f, grad_h, grad_c);
  BackwardStep<scalar_t> r;
  r.d_z[0] = static_cast<scalar_t>(e.d_z_i);
  r.d_z[1] = static_cast<scalar_t>(e.d_z_o);
  r.d_z[2] = static_cast<scalar_t>(e.d_z_c);
  r.d_cell = static_cast<scalar_t>(e.d_old_cell);
  return r;
}

// One element's step backward: the operands (their grad_h completed with d_gates[t + 1] W_h where
// there is a step after) and dL/dc_t -> d_gates[t]'s three values and dL/dc_{t-1}, rounded as
// stored.
template <typename scalar_t, typename acc_t>
__device__ __forceinline__ BackwardStep<scalar_t> backward_step(const BackwardOperands<acc_t>& op,
                                                                acc_t grad_c) {
  return backward_step<scalar_t>(
      backward_factors<acc_t, StepMath>(op.cell, op.z[0], op.z[1], op.z[2]), op.grad_h, grad_c);
}

// Stores a step's three gate values (rounded) at p[0], p[S], p[2 S].
template <typename scalar_t>
__device__ __forceinline__ void write_gates(scalar_t* p, int state, const scalar_t (&v)[3]) {
#pragma unroll
  for (int q = 0; q < 3; ++q) {
    p[q * state] = v[q];
  }
}

}  // namespace lltm_ext::lltm
