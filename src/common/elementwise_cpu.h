// Element-wise CPU loops shared by the unary ops (out[i] = op(in_0[i], ...)), their math, checks.
//
// `op` is a functor, `template <typename A> A operator()(A...) const`, called with A = opmath
// (float for half types); ops that need exp, a reciprocal or rint take them from a `Math` policy,
// here `cpu::elementwise::Math`, on CUDA `cuda::elementwise::Math` (elementwise_cuda.cuh).
//
// The loop runs over raw pointers with branch-free element math, so that the compiler vectorizes it
// (std::exp and std::nearbyint are library calls that stop this, hence Math's own versions below),
// and splits the work across threads with at::parallel_for. It is compiled three times: for the
// baseline x86-64 ISA (packed SSE2) and, with the element math inlined into it, for AVX2 + FMA and
// for AVX-512, picked at run time (common/cpu_isa.h). At the baseline some float64 loops that
// select stay scalar (SSE2 has no 64-bit compare masks), still correct; the AVX2 and AVX-512 copies
// vectorize them (docs/kernel_notes.md says which loops vectorize where).
#pragma once

#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "common/checks.h"
#include "common/cpu_isa.h"
#include "common/dispatch.h"
#include "common/strided_rows.h"

namespace lltm_ext::cpu::elementwise {

namespace detail {

// IEEE layout of float and double: the integer of the same size, mantissa bits, exponent bias.
template <typename F>
struct Bits;
template <>
struct Bits<float> {
  using Int = int32_t;
  static constexpr int kMantissa = 23;
  static constexpr Int kBias = 127;
};
template <>
struct Bits<double> {
  using Int = int64_t;
  static constexpr int kMantissa = 52;
  static constexpr Int kBias = 1023;
};

template <typename To, typename From>
inline To bit_cast(From v) {
  static_assert(sizeof(To) == sizeof(From));
  To out;
  std::memcpy(&out, &v, sizeof(out));
  return out;
}

// 2^mantissa: adding it to a smaller non-negative value rounds that to an integer (ties to even).
template <typename F>
constexpr F kRound = static_cast<F>(typename Bits<F>::Int{1} << Bits<F>::kMantissa);

// 2^k for an integer k in the normal exponent range: k + bias moved to the exponent field.
template <typename F>
inline F pow2i(typename Bits<F>::Int k) {
  using I = typename Bits<F>::Int;
  const auto e = static_cast<std::make_unsigned_t<I>>(k + Bits<F>::kBias);
  return bit_cast<F>(static_cast<I>(e << Bits<F>::kMantissa));
}

// 1/k! for k = 0 .. N-1, computed at compile time.
template <int N>
constexpr std::array<double, N> inverse_factorials() {
  std::array<double, N> out{};
  double f = 1.0;
  for (int k = 0; k < N; ++k) {
    f *= k > 0 ? k : 1;
    out[k] = 1.0 / f;
  }
  return out;
}

// e^r for |r| <= ln(2) / 2: Taylor series to degree D (truncation below 1/2 ulp), Horner's rule.
template <typename F, int D>
inline F exp_small(F r) {
  static constexpr std::array<double, D + 1> c = inverse_factorials<D + 1>();
  F p = static_cast<F>(c[D]);
#pragma GCC unroll 16
  for (int k = D - 1; k >= 0; --k) {
    p = p * r + static_cast<F>(c[k]);
  }
  return p;
}

}  // namespace detail

// Branch-free exp, reciprocal, rint and select, for loops the compiler vectorizes. (With the
// default -ftrapping-math, GCC does not turn `c ? a : b` on computed floats into a vector blend:
// select does it with integer masks.)
struct Math {
  // c ? a : b, without a branch.
  template <typename F>
  static F select(bool c, F a, F b) {
    using I = typename detail::Bits<F>::Int;
    const I mask = -static_cast<I>(c);
    return detail::bit_cast<F>((detail::bit_cast<I>(a) & mask) | (detail::bit_cast<I>(b) & ~mask));
  }

  // 1 / x (IEEE division).
  template <typename F>
  static F reciprocal(F x) {
    return F(1) / x;
  }

  // x rounded to the nearest integer, ties to even (std::nearbyint in the default rounding mode).
  // |x| >= 2^mantissa (already integral), +-inf and NaN come back unchanged.
  template <typename F>
  static F rint(F x) {
    constexpr F k = detail::kRound<F>;
    const F a = std::fabs(x);
    const F r = std::copysign((a + k) - k, x);
    return select(a < k, r, x);
  }

  // e^x to about 1 ulp: x = n ln2 + r, |r| <= ln2 / 2, e^x = e^r 2^n1 2^n2 with n1 + n2 = n split
  // so that each power of two is a normal number. Overflows to inf, underflows to 0, NaN stays NaN
  // (e^r is NaN then, whatever n is).
  static float exp(float x) { return exp_impl<float, 7>(x, 160.0f, 0.693359375f, -2.12194440e-4f); }
  static double exp(double x) {
    return exp_impl<double, 13>(x, 1000.0, 6.93145751953125e-1, 1.42860682030941723212e-6);
  }

 private:
  // ln2 = ln2_hi + ln2_lo, ln2_hi with few bits so that n * ln2_hi is exact. |x| <= limit keeps
  // |n| / 2 inside the exponent range.
  template <typename F, int D>
  static F exp_impl(F x, F limit, F ln2_hi, F ln2_lo) {
    using I = typename detail::Bits<F>::Int;
    // Adding 1.5 * 2^mantissa rounds x / ln2 to the integer n, which lands in the low bits.
    constexpr F magic = F(1.5) * detail::kRound<F>;
    x = select(x < -limit, -limit, select(x > limit, limit, x));  // keeps NaN
    const F shifted = x * F(1.4426950408889634) + magic;
    const F n = shifted - magic;
    const I k = detail::bit_cast<I>(shifted) - detail::bit_cast<I>(magic);  // n as an integer
    const F r = (x - n * ln2_hi) - n * ln2_lo;
    const I k1 = k >> 1;
    return detail::exp_small<F, D>(r) * detail::pow2i<F>(k1) * detail::pow2i<F>(k - k1);
  }
};

// Elements [begin, end) of out = op(in...).
template <typename T, typename Op, typename... In>
void run_range(const Op& op, T* __restrict__ out, int64_t begin, int64_t end,
               const In* __restrict__... in) {
  using acc_t = at::opmath_type<T>;
  for (int64_t i = begin; i < end; ++i) {
    out[i] = static_cast<T>(op(static_cast<acc_t>(in[i])...));
  }
}

#if LLTM_EXT_CPU_X86_COPIES
// The same loop for AVX2 + FMA, and for AVX-512 (cpu_isa.h's LLTM_EXT_FLATTEN_FOR: run_range, the
// op and Math are inlined into these functions and compiled for that target).
template <typename T, typename Op, typename... In>
LLTM_EXT_FLATTEN_FOR(LLTM_EXT_AVX2_FEATURES)
void run_range_avx2(const Op& op, T* __restrict__ out, int64_t begin, int64_t end,
                    const In* __restrict__... in) {
  run_range(op, out, begin, end, in...);
}

template <typename T, typename Op, typename... In>
LLTM_EXT_FLATTEN_FOR(LLTM_EXT_AVX512_FEATURES)
void run_range_avx512(const Op& op, T* __restrict__ out, int64_t begin, int64_t end,
                      const In* __restrict__... in) {
  run_range(op, out, begin, end, in...);
}
#endif

// out = op(inputs...) element-wise over memory order, in parallel. Every tensor: dense, laid out
// as out, out's dtype and element count (checked by the caller; the bindings have checked the
// dtype, so the dispatch's error for other dtypes is never reached).
template <typename Op, typename... Inputs>
void launch(const at::Tensor& out, const Op& op, const Inputs&... inputs) {
  static_assert(sizeof...(Inputs) >= 1, "an element-wise op needs at least one input");
  const int64_t n = out.numel();
  if (n == 0) {
    return;
  }
  const Isa use = isa();
  LLTM_EXT_DISPATCH_FLOATING(out.scalar_type(), "lltm_ext_elementwise", [&] {
    scalar_t* o = out.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, n, at::internal::GRAIN_SIZE, [&](int64_t begin, int64_t end) {
#if LLTM_EXT_CPU_X86_COPIES
      if (use == Isa::kAvx512) {
        run_range_avx512(op, o, begin, end, inputs.template const_data_ptr<scalar_t>()...);
        return;
      }
      if (use == Isa::kAvx2) {
        run_range_avx2(op, o, begin, end, inputs.template const_data_ptr<scalar_t>()...);
        return;
      }
#endif
      run_range(op, o, begin, end, inputs.template const_data_ptr<scalar_t>()...);
    });
  });
}

// y = op(x) for x read as strided rows `r` (rows > 0; common/strided_rows.h) and a contiguous y,
// in parallel over y's elements: each thread gathers a stretch of a row at a time into a buffer
// that stays in L1 and runs the vectorized loop from it into y (a contiguous copy of x first would
// write and read the whole tensor once more). r.rows == 0: launch.
template <typename Op>
void launch_unary(const at::Tensor& y, const Op& op, const at::Tensor& x,
                  const ::lltm_ext::elementwise::StridedRows& r) {
  if (r.rows == 0) {
    launch(y, op, x);
    return;
  }
  const int64_t n = y.numel();
  if (n == 0) {
    return;
  }
  constexpr int64_t kStretch = 2048;  // elements per gather
  const Isa use = isa();
  LLTM_EXT_DISPATCH_FLOATING(y.scalar_type(), "lltm_ext_elementwise", [&] {
    scalar_t* out = y.mutable_data_ptr<scalar_t>();
    const scalar_t* in = x.const_data_ptr<scalar_t>();
    at::parallel_for(0, n, at::internal::GRAIN_SIZE, [&](int64_t begin, int64_t end) {
      scalar_t buffer[kStretch];
      for (int64_t i = begin; i < end;) {
        const int64_t row = i / r.cols, col = i - row * r.cols;
        const int64_t count = std::min({kStretch, r.cols - col, end - i});
        const scalar_t* src = in + row * r.row_stride + col * r.col_stride;
        for (int64_t k = 0; k < count; ++k) {
          buffer[k] = src[k * r.col_stride];
        }
        scalar_t* dst = out + i;
#if LLTM_EXT_CPU_X86_COPIES
        if (use == Isa::kAvx512) {
          run_range_avx512(op, dst, 0, count, static_cast<const scalar_t*>(buffer));
        } else if (use == Isa::kAvx2) {
          run_range_avx2(op, dst, 0, count, static_cast<const scalar_t*>(buffer));
        } else {
          run_range(op, dst, 0, count, static_cast<const scalar_t*>(buffer));
        }
#else
        run_range(op, dst, 0, count, static_cast<const scalar_t*>(buffer));
#endif
        i += count;
      }
    });
  });
}

}  // namespace lltm_ext::cpu::elementwise
