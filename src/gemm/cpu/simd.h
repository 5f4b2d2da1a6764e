// Vectors of the CPU GEMM's accumulation type, and the loads and stores that convert to and from
// the tensors' dtypes, for the ISA level LLTM_GEMM_CPU_LEVEL (0: SSE2 baseline, 1: AVX2 + FMA +
// F16C, 2: AVX-512). Included inside a gemm_cpu_<isa>.cpp target region, after gemm/cpu/prelude.h.
#pragma once

#ifndef LLTM_GEMM_CPU_LEVEL
#error "gemm/cpu/simd.h is included by gemm_cpu_<isa>.cpp, which sets LLTM_GEMM_CPU_LEVEL"
#endif

#define LLTM_GEMM_INLINE inline __attribute__((always_inline))

namespace lltm_ext::gemm::cpugemm::LLTM_GEMM_CPU_NS {
namespace {

using c10::BFloat16;
using c10::Half;

constexpr int kLevel = LLTM_GEMM_CPU_LEVEL;
constexpr int kVecBytes = kLevel == 2 ? 64 : kLevel == 1 ? 32 : 16;
// Vector registers the tiles may use (AVX-512: 32; SSE2 and AVX2: 16).
constexpr int kRegisters = kLevel == 2 ? 32 : 16;

// The accumulation type: float for float, bfloat16 and float16; double for double.
template <typename T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename Acc>
struct VecTraits {
  typedef Acc type __attribute__((vector_size(kVecBytes)));
  static constexpr int L = kVecBytes / static_cast<int>(sizeof(Acc));
};
template <typename Acc>
using Vec = typename VecTraits<Acc>::type;
template <typename Acc>
constexpr int kLanes = VecTraits<Acc>::L;

// L float lanes' worth of 16-bit and 32-bit integers (bfloat16 conversions).
typedef uint16_t U16 __attribute__((vector_size(kVecBytes / 2)));
typedef uint32_t U32 __attribute__((vector_size(kVecBytes)));
typedef int32_t I32 __attribute__((vector_size(kVecBytes)));

template <typename Acc>
LLTM_GEMM_INLINE Vec<Acc> broadcast(Acc x) {
  return x - Vec<Acc>{};  // (x + 0 would not fold: -0.0 + 0.0 is +0.0)
}

template <typename Acc>
LLTM_GEMM_INLINE Vec<Acc> loadv(const Acc* p) {
  Vec<Acc> v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

template <typename Acc>
LLTM_GEMM_INLINE void storev(Acc* p, Vec<Acc> v) {
  std::memcpy(p, &v, sizeof(v));
}

// One element of T as its accumulation type, and back (round to nearest even, as c10 does).
template <typename T>
LLTM_GEMM_INLINE acc_t<T> to_acc(T x) {
  if constexpr (std::is_same_v<T, Half> && kLevel >= 1) {
    return _cvtsh_ss(x.x);
  } else {
    return static_cast<acc_t<T>>(x);
  }
}

template <typename T>
LLTM_GEMM_INLINE T from_acc(acc_t<T> x) {
  if constexpr (std::is_same_v<T, Half> && kLevel >= 1) {
    return Half(static_cast<uint16_t>(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT)), Half::from_bits());
  } else {
    return static_cast<T>(x);
  }
}

// kLanes<Acc> elements of T at p, as a vector of Acc.
template <typename Acc, typename T>
LLTM_GEMM_INLINE Vec<Acc> load_cvt(const T* p) {
  if constexpr (std::is_same_v<T, Acc>) {
    return loadv(p);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    U16 h;
    std::memcpy(&h, p, sizeof(h));
    const U32 w = __builtin_convertvector(h, U32) << 16;
    Vec<float> v;
    std::memcpy(&v, &w, sizeof(v));
    return v;
  } else {
    static_assert(std::is_same_v<T, Half>);
#if LLTM_GEMM_CPU_LEVEL == 2
    // (the zero-masked form: the plain one makes GCC 12 warn about an undefined source vector)
    return reinterpret_cast<Vec<float>>(_mm512_maskz_cvtph_ps(
        static_cast<__mmask16>(0xFFFF), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
#elif LLTM_GEMM_CPU_LEVEL == 1
    return reinterpret_cast<Vec<float>>(
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#else
    Vec<float> v;
    for (int i = 0; i < kLanes<float>; ++i) v[i] = static_cast<float>(p[i]);
    return v;
#endif
  }
}

// Stores v's kLanes<Acc> lanes at p as T (bfloat16: round to nearest even, NaN as 0x7FC0, as
// c10::BFloat16 does; float16: round to nearest even).
template <typename T, typename Acc>
LLTM_GEMM_INLINE void store_cvt(T* p, Vec<Acc> v) {
  if constexpr (std::is_same_v<T, Acc>) {
    storev(p, v);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    U32 u;
    std::memcpy(&u, &v, sizeof(u));
    U32 r = (u + (((u >> 16) & 1u) + 0x7FFFu)) >> 16;
    const U32 nan = reinterpret_cast<U32>(v != v);  // all ones in NaN lanes
    r = (nan & 0x7FC0u) | (~nan & r);
    const U16 h = __builtin_convertvector(r, U16);
    std::memcpy(p, &h, sizeof(h));
  } else {
    static_assert(std::is_same_v<T, Half>);
#if LLTM_GEMM_CPU_LEVEL == 2
    _mm256_storeu_si256(
        reinterpret_cast<__m256i*>(p),
        _mm512_maskz_cvtps_ph(static_cast<__mmask16>(0xFFFF), reinterpret_cast<__m512>(v),
                              _MM_FROUND_TO_NEAREST_INT));
#elif LLTM_GEMM_CPU_LEVEL == 1
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph(reinterpret_cast<__m256>(v), _MM_FROUND_TO_NEAREST_INT));
#else
    for (int i = 0; i < kLanes<float>; ++i) p[i] = static_cast<Half>(v[i]);
#endif
  }
}

// The first n (0 < n <= kLanes<Acc>) elements of T at p as Acc lanes, the others zero; reads
// nothing past p[n - 1].
template <typename Acc, typename T>
LLTM_GEMM_INLINE Vec<Acc> load_cvt_partial(const T* p, int n) {
#if LLTM_GEMM_CPU_LEVEL == 2
  if constexpr (std::is_same_v<T, float>) {
    return reinterpret_cast<Vec<Acc>>(
        _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p));
  } else if constexpr (std::is_same_v<T, double>) {
    return reinterpret_cast<Vec<Acc>>(
        _mm512_maskz_loadu_pd(static_cast<__mmask8>((1u << n) - 1), p));
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(static_cast<__mmask16>((1u << n) - 1), p);
    if constexpr (std::is_same_v<T, BFloat16>) {
      const U32 w = __builtin_convertvector(reinterpret_cast<U16>(h), U32) << 16;
      return reinterpret_cast<Vec<Acc>>(w);
    } else {
      return reinterpret_cast<Vec<Acc>>(_mm512_maskz_cvtph_ps(static_cast<__mmask16>(0xFFFF), h));
    }
  }
#else
#if LLTM_GEMM_CPU_LEVEL == 1
  // (vmaskmov reads only the lanes that are on; element by element, a dot tile's partial last
  // vector of K cost more than its full ones)
  if constexpr (std::is_same_v<T, float>) {
    const __m256i on =
        _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0));
    return reinterpret_cast<Vec<Acc>>(_mm256_maskload_ps(p, on));
  } else if constexpr (std::is_same_v<T, double>) {
    const __m256i on = _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_set_epi64x(3, 2, 1, 0));
    return reinterpret_cast<Vec<Acc>>(_mm256_maskload_pd(p, on));
  }
#endif
  Vec<Acc> v{};
  for (int i = 0; i < n; ++i) v[i] = to_acc(p[i]);
  return v;
#endif
}

// Stores v's first n (0 < n <= kLanes<Acc>) lanes at p as T; writes nothing past p[n - 1].
template <typename T, typename Acc>
LLTM_GEMM_INLINE void store_cvt_partial(T* p, Vec<Acc> v, int n) {
#if LLTM_GEMM_CPU_LEVEL == 2
  if constexpr (std::is_same_v<T, float>) {
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), reinterpret_cast<__m512>(v));
    return;
  } else if constexpr (std::is_same_v<T, double>) {
    _mm512_mask_storeu_pd(p, static_cast<__mmask8>((1u << n) - 1), reinterpret_cast<__m512d>(v));
    return;
  }
#endif
  if constexpr (std::is_same_v<T, Acc>) {
    for (int i = 0; i < n; ++i) p[i] = v[i];
  } else {
    T tmp[kLanes<Acc>];
    store_cvt<T, Acc>(tmp, v);
#if LLTM_GEMM_CPU_LEVEL == 2
    __m256i h;
    std::memcpy(&h, tmp, sizeof(h));
    _mm256_mask_storeu_epi16(p, static_cast<__mmask16>((1u << n) - 1), h);
#else
    std::memcpy(p, tmp, sizeof(T) * n);
#endif
  }
}

// Signed integers as wide as Acc (shuffle masks).
template <typename Acc>
struct IVecTraits {
  using Int = std::conditional_t<sizeof(Acc) == 8, int64_t, int32_t>;
  typedef Int type __attribute__((vector_size(kVecBytes)));
};
template <typename Acc>
using IVec = typename IVecTraits<Acc>::type;

// x and y each hold kLanes / W groups of W lanes (partial sums of one value per group); returns
// the groups halved (lane e of a group plus lane e + W / 2), x's groups then y's.
template <typename Acc, int W>
LLTM_GEMM_INLINE Vec<Acc> fold_pair(Vec<Acc> x, Vec<Acc> y) {
  constexpr int L = kLanes<Acc>;
  constexpr int H = W / 2;
  IVec<Acc> lo, hi;
#pragma GCC unroll 16
  for (int o = 0; o < L; ++o) {
    const int g = o / H, e = o % H;
    const int src = g < L / W ? g * W : L + (g - L / W) * W;
    lo[o] = src + e;
    hi[o] = src + e + H;
  }
  return __builtin_shuffle(x, y, lo) + __builtin_shuffle(x, y, hi);
}

// v[0 .. N) (N <= kLanes) -> one vector whose lane t < N is the sum of v[t]'s lanes: a transposing
// reduction, pairs of vectors folded level by level (kLanes - 1 folds for kLanes vectors instead of
// a lane-by-lane sum per vector); a level with one vector left folds it with itself.
template <typename Acc, int N>
LLTM_GEMM_INLINE Vec<Acc> reduce_lanes(Vec<Acc>* v) {
  constexpr int L = kLanes<Acc>;
  static_assert(N >= 1 && N <= L, "reduce_lanes sums 1 .. kLanes vectors");
  int n = N;
#pragma GCC unroll 8
  for (int w = L; w > 1; w /= 2) {
    const int pairs = (n + 1) / 2;
#pragma GCC unroll 16
    for (int i = 0; i < pairs; ++i) {
      const Vec<Acc> x = v[2 * i];
      const Vec<Acc> y = 2 * i + 1 < n ? v[2 * i + 1] : (n == 1 ? x : Vec<Acc>{});
      if (w == 16) v[i] = fold_pair<Acc, 16>(x, y);
      if (w == 8) v[i] = fold_pair<Acc, 8>(x, y);
      if (w == 4) v[i] = fold_pair<Acc, 4>(x, y);
      if (w == 2) v[i] = fold_pair<Acc, 2>(x, y);
    }
    n = pairs;
  }
  return v[0];
}

// Transposes the L x L block held in L vectors (row r of the block in v[r]) in place: log2(L)
// stages, stage b swapping bit b of the row index with bit b of the lane index.
template <typename Acc>
LLTM_GEMM_INLINE void transpose_block(Vec<Acc>* v) {
  constexpr int L = kLanes<Acc>;
#pragma GCC unroll 8
  for (int b = 1; b < L; b *= 2) {
    IVec<Acc> lo, hi;
#pragma GCC unroll 16
    for (int l = 0; l < L; ++l) {
      lo[l] = (l & b) ? L + l - b : l;
      hi[l] = (l & b) ? L + l : l + b;
    }
#pragma GCC unroll 16
    for (int r = 0; r < L; ++r) {
      if (r & b) continue;
      const Vec<Acc> x = v[r], y = v[r + b];
      v[r] = __builtin_shuffle(x, y, lo);
      v[r + b] = __builtin_shuffle(x, y, hi);
    }
  }
}

}  // namespace
}  // namespace lltm_ext::gemm::cpugemm::LLTM_GEMM_CPU_NS
