// The LLTM sequence's CPU time loops (sequence_cpu.h) on pointers: a step's work at small sizes
// is a few microseconds, about what a tensor view per operand and a dispatched call per product
// and gate pass cost, so the loops hold raw pointers and call the GEMM's and the gate passes'
// pointer forms (gemm/gemm.h, lltm/lltm.h) directly.
#include "lltm_sequence/sequence_cpu.h"

#include <c10/core/ScalarType.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <type_traits>

#include "gemm/gemm.h"
#include "lltm/lltm.h"

namespace lltm_ext::lltm {
namespace {

template <typename To, typename From>
void convert(const From* src, To* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    dst[i] = static_cast<To>(static_cast<float>(src[i]));
  }
}

// c (M x N, rows ldc apart) = a (M x K, rows lda apart) @ b, b's element (k, n) at
// b[k * sbk + n * sbn]; in P on lltm_ext's CPU GEMM.
template <typename P>
void product(int64_t M, int64_t N, int64_t K, const P* a, int64_t lda, const P* b, int64_t sbk,
             int64_t sbn, P* c, int64_t ldc) {
  gemm::gemm_cpu(c10::CppTypeToScalarType<P>::value,
                 gemm::cpugemm::Problem{M, N, K, a, lda, 1, b, sbk, sbn, c, ldc, 1});
}

// Where forward copies W_h^T row-major (forward_loop_cpu): the GEMM packs a row-major B with
// vector copies, a K-contiguous one with transposes, which weigh on small steps' products; at
// larger states and single rows the K-contiguous read is as fast or faster, and the copy costs
// about two mid-sized steps' products (docs/lltm_sequence_cpu.md#the-products).
constexpr int64_t kCopyWeightsMaxState = 256;
constexpr int64_t kCopyWeightsMinBatch = 4;
constexpr int64_t kCopyWeightsMinSteps = 8;

}  // namespace

StepRows StepRows::uniform(int64_t steps, int64_t batch) {
  StepRows r;
  r.sizes.assign(steps, batch);
  r.offsets.resize(steps);
  for (int64_t t = 0; t < steps; ++t) {
    r.offsets[t] = t * batch;
  }
  return r;
}

template <typename T, typename P>
void forward_loop_cpu(const StepRows& rows, int64_t S, const P* w_h, int64_t ld_w, const T* bias,
                      const T* h0, const T* c0, T* gates, T* output, T* cells) {
  const int64_t steps = static_cast<int64_t>(rows.sizes.size()), B = rows.batch();
  if (steps == 0 || B == 0 || S == 0) {
    return;
  }
  constexpr bool kMixed = !std::is_same_v<T, P>;
  // W_h^T (S, 3S) copied row-major once, where the steps' products are small enough that the
  // GEMM's packing of a K-contiguous W_h^T weighs on them and there are enough of them to repay
  // the copy; elsewhere read in place (element (k, n) at w_h[n * ld_w + k]).
  const bool copy_w =
      S <= kCopyWeightsMaxState && B >= kCopyWeightsMinBatch && steps >= kCopyWeightsMinSteps;
  std::vector<P> w_t(copy_w ? S * 3 * S : 0);
  for (int64_t n = 0; n < (copy_w ? 3 * S : 0); ++n) {
    for (int64_t k = 0; k < S; ++k) {
      w_t[k * 3 * S + n] = w_h[n * ld_w + k];
    }
  }
  std::vector<P> step_product(B * 3 * S);
  std::vector<P> h_rounded(kMixed ? B * S : 0);
  std::vector<T> zeros(c0 == nullptr ? B * S : 0);
  for (int64_t t = 0; t < steps; ++t) {
    const int64_t bs = rows.sizes[t], row = rows.offsets[t];
    const int64_t prev = t > 0 ? rows.offsets[t - 1] : 0;
    const T* h_prev = t > 0 ? output + prev * S : h0;
    const T* c_prev = t > 0 ? cells + prev * S : (c0 != nullptr ? c0 : zeros.data());
    if (h_prev != nullptr) {  // h_{t-1} W_h^T: W_h^T's element (k, n) is w_h[n * ld_w + k]
      const P* a = nullptr;
      if constexpr (kMixed) {
        convert(h_prev, h_rounded.data(), bs * S);
        a = h_rounded.data();
      } else {
        a = h_prev;
      }
      if (copy_w) {
        product<P>(bs, 3 * S, S, a, S, w_t.data(), 3 * S, 1, step_product.data(), 3 * S);
      } else {
        product<P>(bs, 3 * S, S, a, S, w_h, 1, ld_w, step_product.data(), 3 * S);
      }
    }
    forward_gates_cpu<T, P>(gates + row * 3 * S, h_prev != nullptr ? step_product.data() : nullptr,
                            bias, c_prev, output + row * S, cells + row * S, bs, S);
  }
}

template <typename T, typename D>
void backward_loop_cpu(const StepRows& rows, int64_t S, const D* w_h, int64_t ld_w, const T* bias,
                       const T* grad_output, const T* grad_h_n, const T* grad_c_n, const T* cells,
                       const T* gates, D* d_gates, T* d_h0, T* d_c0) {
  const int64_t steps = static_cast<int64_t>(rows.sizes.size()), B = rows.batch();
  if (steps == 0 || B == 0 || S == 0) {
    return;
  }
  constexpr bool kMixed = !std::is_same_v<T, D>;
  // dL/dh and dL/dc of each sequence's rows, two buffers each in turn: step t reads the first
  // sizes[t] rows of buffer (t + 1) % 2 and writes its dL/d{h,c}_{t-1} into buffer t % 2. Both
  // start as the final state's gradients: rows past a step's batch are not written before the
  // step whose batch reaches them reads them (sizes never shrink going back), so there they hold
  // the final state's gradient of the sequences that end there.
  const auto given_or_zeros = [&](const T* given) {
    std::vector<T> v(B * S);
    if (given != nullptr) {
      std::copy(given, given + B * S, v.begin());
    }
    return v;
  };
  std::vector<T> dh[2] = {given_or_zeros(grad_h_n), given_or_zeros(grad_h_n)};
  std::vector<T> dc[2] = {given_or_zeros(grad_c_n), given_or_zeros(grad_c_n)};
  std::vector<D> dh_rounded(kMixed ? B * S : 0);
  for (int64_t t = steps - 1; t >= 0; --t) {
    const int64_t bs = rows.sizes[t], row = rows.offsets[t];
    const int64_t in = (t + 1) % 2, out = t % 2;
    D* dg = d_gates + row * 3 * S;
    T* dc_out = t == 0 && d_c0 != nullptr ? d_c0 : dc[out].data();
    backward_gates_cpu<T, D>(dh[in].data(), S, grad_output + row * S, dc[in].data(),
                             cells + row * S, gates + row * 3 * S, bias, dg, dc_out, bs, S);
    if (t > 0 || d_h0 != nullptr) {  // d h_{t-1} = dG_t W_h
      T* dh_out = t == 0 ? d_h0 : dh[out].data();
      if constexpr (kMixed) {
        product<D>(bs, S, 3 * S, dg, 3 * S, w_h, ld_w, 1, dh_rounded.data(), S);
        convert(dh_rounded.data(), dh_out, bs * S);
      } else {
        product<D>(bs, S, 3 * S, dg, 3 * S, w_h, ld_w, 1, dh_out, S);
      }
    }
  }
}

#define LLTM_EXT_SEQUENCE_LOOPS(T, P)                                                             \
  template void forward_loop_cpu<T, P>(const StepRows&, int64_t, const P*, int64_t, const T*,     \
                                       const T*, const T*, T*, T*, T*);                           \
  template void backward_loop_cpu<T, P>(const StepRows&, int64_t, const P*, int64_t, const T*,    \
                                        const T*, const T*, const T*, const T*, const T*, P*, T*, \
                                        T*);
LLTM_EXT_FOR_EACH_STATE_AND_PRODUCT(LLTM_EXT_SEQUENCE_LOOPS)
#undef LLTM_EXT_SEQUENCE_LOOPS

}  // namespace lltm_ext::lltm
