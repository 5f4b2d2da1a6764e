// CPU kernels of the LLTM cell: the gate math fused into one vectorized loop each way, compiled for
// the baseline x86-64 ISA and again for AVX2 + FMA and AVX-512 (the widest the CPU runs is used,
// as for the element-wise ops: common/cpu_isa.h), parallel across the batch where that pays.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "common/checks.h"
#include "common/dispatch.h"
#include "common/elementwise_cpu.h"
#include "lltm/gate_math.h"
#include "lltm/lltm.h"

namespace lltm_ext::lltm {

namespace {

// The math of forward_element / backward_element in code the compiler vectorizes: exp and select
// from the element-wise ops' policy, and expm1 and tanh built on them, accurate to a few ulp also
// near 0 (where exp(x) - 1 would cancel), with NaN passed through.
struct VecMath {
  using Base = cpu::elementwise::Math;

  template <typename F>
  static F exp(F x) {
    return Base::exp(x);
  }

  template <typename F>
  static F select(bool c, F a, F b) {
    return Base::select(c, a, b);
  }

  template <typename F>
  static F rcp(F x) {
    return F(1) / x;
  }

  // e^x - 1: x (1 + x/2! + x^2/3! + ...) for |x| < ln2 / 2 (truncated below 1/2 ulp: degree 8
  // for float, 14 for double), else exp(x) - 1, whose result is then at least 0.29 in magnitude.
  template <typename F>
  static F expm1(F x) {
    constexpr int kDegree = sizeof(F) == 4 ? 7 : 13;
    static constexpr auto c = cpu::elementwise::detail::inverse_factorials<kDegree + 2>();
    F p = static_cast<F>(c[kDegree + 1]);
#pragma GCC unroll 16
    for (int k = kDegree; k >= 1; --k) {
      p = p * x + static_cast<F>(c[k]);
    }
    return Base::select(std::fabs(x) < F(0.34657359027997264), x * p, Base::exp(x) - F(1));
  }

  // tanh |x| = -expm1(-2|x|) / (2 + expm1(-2|x|)), with x's sign: no overflow, 1 for large |x|.
  template <typename F>
  static F tanh(F x) {
    const F t = expm1(F(-2) * std::fabs(x));
    return std::copysign(-t / (F(2) + t), x);
  }
};

// Rows per parallel task: about 64K elements of gate math each (a task's start costs about as much
// as a few thousand elements).
int64_t grain(int64_t state) {
  return std::max<int64_t>(1, 65536 / std::max<int64_t>(1, state));
}

// Rows [begin, end) of the forward gate math; g is (B, 3S), bias (3S) (read when kBias), the
// others (B, S). With kProduct, g first becomes g + product (B, 3S), rounded to T, and the math
// reads that stored value (as backward will).
template <typename T, typename P, bool kBias, bool kProduct>
void forward_rows_(T* g, const P* __restrict__ product, const T* __restrict__ bias,
                   const T* __restrict__ c, T* __restrict__ h_out, T* __restrict__ c_out,
                   int64_t state, int64_t begin, int64_t end) {
  using acc_t = at::opmath_type<T>;
  for (int64_t b = begin; b < end; ++b) {
    T* gb = g + b * 3 * state;
    if constexpr (kProduct) {
      const P* pb = product + b * 3 * state;
      for (int64_t s = 0; s < 3 * state; ++s) {
        gb[s] = static_cast<T>(static_cast<acc_t>(gb[s]) + static_cast<acc_t>(pb[s]));
      }
    }
    const int64_t row = b * state;
    for (int64_t s = 0; s < state; ++s) {
      const int64_t i = row + s;
      acc_t z_i = gb[s], z_o = gb[state + s], z_c = gb[2 * state + s];
      if constexpr (kBias) {
        z_i += static_cast<acc_t>(bias[s]);
        z_o += static_cast<acc_t>(bias[state + s]);
        z_c += static_cast<acc_t>(bias[2 * state + s]);
      }
      const auto r = forward_element<acc_t, VecMath>(z_i, z_o, z_c, static_cast<acc_t>(c[i]));
      h_out[i] = static_cast<T>(r.new_h);
      c_out[i] = static_cast<T>(r.new_cell);
    }
  }
}

template <typename T, typename P>
void forward_rows(T* g, const P* product, const T* bias, const T* c, T* h_out, T* c_out,
                  int64_t state, int64_t begin, int64_t end) {
  const auto run = [&](auto with_bias, auto with_product) {
    forward_rows_<T, P, decltype(with_bias)::value, decltype(with_product)::value>(
        g, product, bias, c, h_out, c_out, state, begin, end);
  };
  using Yes = std::true_type;
  using No = std::false_type;
  if (bias != nullptr) {
    product != nullptr ? run(Yes{}, Yes{}) : run(Yes{}, No{});
  } else {
    product != nullptr ? run(No{}, Yes{}) : run(No{}, No{});
  }
}

// Rows [begin, end) of the backward gate math; g and dg are (B, 3S) (dg in D: T, or rounded to
// a half type), bias (3S) (read when kBias), the others (B, S) (gh_extra read when kExtra), gh's
// rows ld_gh apart.
template <typename T, typename D, bool kBias, bool kExtra>
void backward_rows_(const T* __restrict__ gh, int64_t ld_gh, const T* __restrict__ gh_extra,
                    const T* __restrict__ gc, const T* __restrict__ nc, const T* __restrict__ g,
                    const T* __restrict__ bias, D* __restrict__ dg, T* __restrict__ dc,
                    int64_t state, int64_t begin, int64_t end) {
  using acc_t = at::opmath_type<T>;
  for (int64_t b = begin; b < end; ++b) {
    const T* gb = g + b * 3 * state;
    D* dgb = dg + b * 3 * state;
    const T* ghb = gh + b * ld_gh;
    const int64_t row = b * state;
    for (int64_t s = 0; s < state; ++s) {
      const int64_t i = row + s;
      acc_t grad_h = ghb[s];
      if constexpr (kExtra) {
        grad_h += static_cast<acc_t>(gh_extra[i]);
      }
      acc_t z_i = gb[s], z_o = gb[state + s], z_c = gb[2 * state + s];
      if constexpr (kBias) {
        z_i += static_cast<acc_t>(bias[s]);
        z_o += static_cast<acc_t>(bias[state + s]);
        z_c += static_cast<acc_t>(bias[2 * state + s]);
      }
      const auto r = backward_element<acc_t, VecMath>(grad_h, static_cast<acc_t>(gc[i]),
                                                      static_cast<acc_t>(nc[i]), z_i, z_o, z_c);
      dc[i] = static_cast<T>(r.d_old_cell);
      dgb[s] = static_cast<D>(r.d_z_i);
      dgb[state + s] = static_cast<D>(r.d_z_o);
      dgb[2 * state + s] = static_cast<D>(r.d_z_c);
    }
  }
}

template <typename T, typename D>
void backward_rows(const T* gh, int64_t ld_gh, const T* gh_extra, const T* gc, const T* nc,
                   const T* g, const T* bias, D* dg, T* dc, int64_t state, int64_t begin,
                   int64_t end) {
  const auto run = [&](auto with_bias, auto with_extra) {
    backward_rows_<T, D, decltype(with_bias)::value, decltype(with_extra)::value>(
        gh, ld_gh, gh_extra, gc, nc, g, bias, dg, dc, state, begin, end);
  };
  using Yes = std::true_type;
  using No = std::false_type;
  if (bias != nullptr) {
    gh_extra != nullptr ? run(Yes{}, Yes{}) : run(Yes{}, No{});
  } else {
    gh_extra != nullptr ? run(No{}, Yes{}) : run(No{}, No{});
  }
}

#if LLTM_EXT_CPU_X86_COPIES
// The same loops for AVX2 + FMA and for AVX-512 (see elementwise_cpu.h: `flatten` compiles all
// the inlined math for the target; only called where the CPU has it).
template <typename... Args>
LLTM_EXT_FLATTEN_FOR("avx2,fma")
void forward_rows_avx2(Args... args) {
  forward_rows(args...);
}
template <typename... Args>
LLTM_EXT_FLATTEN_FOR(LLTM_EXT_AVX512_FEATURES)
void forward_rows_avx512(Args... args) {
  forward_rows(args...);
}
template <typename... Args>
LLTM_EXT_FLATTEN_FOR("avx2,fma")
void backward_rows_avx2(Args... args) {
  backward_rows(args...);
}
template <typename... Args>
LLTM_EXT_FLATTEN_FOR(LLTM_EXT_AVX512_FEATURES)
void backward_rows_avx512(Args... args) {
  backward_rows(args...);
}
#endif

}  // namespace

template <typename T, typename P>
void forward_gates_cpu(T* gates, const P* product, const T* bias, const T* old_cell, T* new_h,
                       T* new_cell, int64_t batch, int64_t state) {
  if (batch * state == 0) {
    return;
  }
  const cpu::Isa use = cpu::isa();
  at::parallel_for(0, batch, grain(state), [&](int64_t begin, int64_t end) {
#if LLTM_EXT_CPU_X86_COPIES
    if (use == cpu::Isa::kAvx512) {
      return forward_rows_avx512(gates, product, bias, old_cell, new_h, new_cell, state, begin,
                                 end);
    }
    if (use == cpu::Isa::kAvx2) {
      return forward_rows_avx2(gates, product, bias, old_cell, new_h, new_cell, state, begin, end);
    }
#endif
    forward_rows(gates, product, bias, old_cell, new_h, new_cell, state, begin, end);
  });
}

template <typename T, typename D>
void backward_gates_cpu(const T* grad_h, int64_t grad_h_ld, const T* grad_h_extra,
                        const T* grad_cell, const T* new_cell, const T* gates, const T* bias,
                        D* d_gates, T* d_old_cell, int64_t batch, int64_t state) {
  if (batch * state == 0) {
    return;
  }
  const cpu::Isa use = cpu::isa();
  at::parallel_for(0, batch, grain(state), [&](int64_t begin, int64_t end) {
#if LLTM_EXT_CPU_X86_COPIES
    if (use == cpu::Isa::kAvx512) {
      return backward_rows_avx512(grad_h, grad_h_ld, grad_h_extra, grad_cell, new_cell, gates, bias,
                                  d_gates, d_old_cell, state, begin, end);
    }
    if (use == cpu::Isa::kAvx2) {
      return backward_rows_avx2(grad_h, grad_h_ld, grad_h_extra, grad_cell, new_cell, gates, bias,
                                d_gates, d_old_cell, state, begin, end);
    }
#endif
    backward_rows(grad_h, grad_h_ld, grad_h_extra, grad_cell, new_cell, gates, bias, d_gates,
                  d_old_cell, state, begin, end);
  });
}

// Compiled for the pairs of types the sequence's loops run (lltm.h): the state's dtype alone, and a
// float32 state with half products (a mixed sequence).
#define LLTM_EXT_GATE_PASSES(T, P)                                                         \
  template void forward_gates_cpu<T, P>(T*, const P*, const T*, const T*, T*, T*, int64_t, \
                                        int64_t);                                          \
  template void backward_gates_cpu<T, P>(const T*, int64_t, const T*, const T*, const T*,  \
                                         const T*, const T*, P*, T*, int64_t, int64_t);
LLTM_EXT_FOR_EACH_STATE_AND_PRODUCT(LLTM_EXT_GATE_PASSES)
#undef LLTM_EXT_GATE_PASSES

void forward_gates_cpu(const at::Tensor& gates, const at::Tensor& bias, const at::Tensor& old_cell,
                       const at::Tensor& new_h, const at::Tensor& new_cell) {
  LLTM_EXT_DISPATCH_FLOATING(gates.scalar_type(), "lltm_forward_cpu", [&] {
    // Without a product the gates are only read.
    forward_gates_cpu<scalar_t, scalar_t>(
        const_cast<scalar_t*>(gates.const_data_ptr<scalar_t>()), nullptr,
        data_or_null<scalar_t>(bias), old_cell.const_data_ptr<scalar_t>(),
        new_h.mutable_data_ptr<scalar_t>(), new_cell.mutable_data_ptr<scalar_t>(), old_cell.size(0),
        old_cell.size(1));
  });
}

void backward_gates_cpu(const at::Tensor& grad_h, int64_t grad_h_ld, const at::Tensor& grad_h_extra,
                        const at::Tensor& grad_cell, const at::Tensor& new_cell,
                        const at::Tensor& gates, const at::Tensor& bias, const at::Tensor& d_gates,
                        const at::Tensor& d_old_cell) {
  LLTM_EXT_DISPATCH_FLOATING(new_cell.scalar_type(), "lltm_backward_cpu", [&] {
    backward_gates_cpu<scalar_t, scalar_t>(
        grad_h.const_data_ptr<scalar_t>(), grad_h_ld, data_or_null<scalar_t>(grad_h_extra),
        grad_cell.const_data_ptr<scalar_t>(), new_cell.const_data_ptr<scalar_t>(),
        gates.const_data_ptr<scalar_t>(), data_or_null<scalar_t>(bias),
        d_gates.mutable_data_ptr<scalar_t>(), d_old_cell.mutable_data_ptr<scalar_t>(),
        new_cell.size(0), new_cell.size(1));
  });
}

// ATen's sum over dim 0 is mostly set-up at the tutorial's 16 x 384, a sizeable part of a training
// step that this loop saves (figures: docs/decisions.md#cell-bias-grad-cpu). Tasks own column
// blocks (a fixed order per column); a row's block of 64 columns is 256 or 512 contiguous bytes.
void bias_grad_cpu(const at::Tensor& d_gates, const at::Tensor& d_bias) {
  const int64_t rows = d_gates.size(0);
  const int64_t cols = d_gates.size(1);
  if (cols == 0) {
    return;
  }
  constexpr int64_t kBlock = 64;
  // Column blocks per task: about 64K elements each, as for the gate math.
  const int64_t grain = std::max<int64_t>(1, 65536 / (kBlock * std::max<int64_t>(1, rows)));
  LLTM_EXT_DISPATCH_FLOATING(d_gates.scalar_type(), "lltm_bias_grad_cpu", [&] {
    const scalar_t* dg = d_gates.const_data_ptr<scalar_t>();
    scalar_t* db = d_bias.mutable_data_ptr<scalar_t>();
    const int64_t blocks = (cols + kBlock - 1) / kBlock;
    at::parallel_for(0, blocks, grain, [&](int64_t begin, int64_t end) {
      for (int64_t block = begin; block < end; ++block) {
        const int64_t c0 = block * kBlock;
        const int64_t width = std::min(kBlock, cols - c0);
        double acc[kBlock] = {};
        for (int64_t r = 0; r < rows; ++r) {
          const scalar_t* row = dg + r * cols + c0;
          for (int64_t j = 0; j < width; ++j) {
            acc[j] += static_cast<double>(row[j]);
          }
        }
        for (int64_t j = 0; j < width; ++j) {
          db[c0 + j] = static_cast<scalar_t>(acc[j]);
        }
      }
    });
  });
}

}  // namespace lltm_ext::lltm
