// The CPU GEMM's direct path (kDirect): register tiles that read A and B where they are, nothing
// packed. A's elements are broadcast from any strides; B's rows are loaded along N (masked at C's
// last columns) or, where B is not contiguous along N, gathered. For float and double products too
// small for packing to pay (driver.h says which). Included by gemm/cpu/driver.h in the AVX2 and
// AVX-512 copies (masked loads and gathers: AVX-512's mask registers, AVX2's vector masks), after
// gemm/cpu/blocked.h.
#pragma once

#if LLTM_GEMM_CPU_LEVEL != 1 && LLTM_GEMM_CPU_LEVEL != 2
#error "gemm/cpu/direct.h is for the AVX2 and AVX-512 copies"
#endif

namespace lltm_ext::gemm::cpugemm::LLTM_GEMM_CPU_NS {
namespace {

// Whether kDirect can run p: float or double, and B's column stride small enough for 32-bit gather
// offsets when B is not contiguous along N.
template <typename T>
bool direct_fits(const Problem& p) {
  if constexpr (!std::is_same_v<T, acc_t<T>>) {
    return false;
  } else {
    return p.sbn == 1 || p.sbn < (int64_t{1} << 31) / (kNR<T> + 1);
  }
}

#if LLTM_GEMM_CPU_LEVEL == 2
// Lanes of a vector as an AVX-512 mask register's bits.
using LaneMask = uint32_t;

// Lanes of v < n (n may be past L) as an AVX-512 mask.
template <typename Acc>
LLTM_GEMM_INLINE LaneMask lane_mask(int n) {
  constexpr int L = kLanes<Acc>;
  return n >= L ? (1u << L) - 1 : n <= 0 ? 0u : (1u << n) - 1;
}

// Gather offsets of a vector of Acc (32-bit lanes: 16 for float, 8 for double).
template <typename Acc>
struct GatherIdxOf {
  using type = __m512i;
};
template <>
struct GatherIdxOf<double> {
  using type = __m256i;
};
template <typename Acc>
using GatherIdx = typename GatherIdxOf<Acc>::type;

// lane * sbn for every lane of a vector of Acc.
template <typename Acc>
LLTM_GEMM_INLINE GatherIdx<Acc> gather_idx(int64_t sbn) {
  if constexpr (std::is_same_v<Acc, float>) {
    return _mm512_mullo_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
        _mm512_set1_epi32(static_cast<int>(sbn)));
  } else {
    return _mm256_mullo_epi32(_mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0),
                              _mm256_set1_epi32(static_cast<int>(sbn)));
  }
}

// kLanes<Acc> elements of B along N at p (lanes of `mask`; the others zero): loaded where B's
// columns are contiguous, else gathered at the offsets idx.
template <typename Acc, bool kGather>
LLTM_GEMM_INLINE Vec<Acc> load_b(const Acc* p, LaneMask mask, GatherIdx<Acc> idx) {
  if constexpr (std::is_same_v<Acc, float>) {
    const __mmask16 m = static_cast<__mmask16>(mask);
    if constexpr (kGather) {
      return reinterpret_cast<Vec<Acc>>(
          _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, p, 4));
    } else {
      return reinterpret_cast<Vec<Acc>>(_mm512_maskz_loadu_ps(m, p));
    }
  } else {
    const __mmask8 m = static_cast<__mmask8>(mask);
    if constexpr (kGather) {
      return reinterpret_cast<Vec<Acc>>(
          _mm512_mask_i32gather_pd(_mm512_setzero_pd(), m, idx, p, 8));
    } else {
      return reinterpret_cast<Vec<Acc>>(_mm512_maskz_loadu_pd(m, p));
    }
  }
}
#else
// Lanes of a vector as an AVX2 vector mask: all ones in a lane that is on (64-bit lanes for
// double), as vmaskmov and vgather read it.
using LaneMask = __m256i;

// Lanes of v < n (n may be past L) as an AVX2 vector mask.
template <typename Acc>
LLTM_GEMM_INLINE LaneMask lane_mask(int n) {
  if constexpr (std::is_same_v<Acc, float>) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0));
  } else {
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_set_epi64x(3, 2, 1, 0));
  }
}

// Gather offsets of a vector of Acc (32-bit lanes: 8 for float, 4 for double).
template <typename Acc>
struct GatherIdxOf {
  using type = __m256i;
};
template <>
struct GatherIdxOf<double> {
  using type = __m128i;
};
template <typename Acc>
using GatherIdx = typename GatherIdxOf<Acc>::type;

// lane * sbn for every lane of a vector of Acc.
template <typename Acc>
LLTM_GEMM_INLINE GatherIdx<Acc> gather_idx(int64_t sbn) {
  if constexpr (std::is_same_v<Acc, float>) {
    return _mm256_mullo_epi32(_mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0),
                              _mm256_set1_epi32(static_cast<int>(sbn)));
  } else {
    return _mm_mullo_epi32(_mm_set_epi32(3, 2, 1, 0), _mm_set1_epi32(static_cast<int>(sbn)));
  }
}

// kLanes<Acc> elements of B along N at p (lanes of `mask`; the others zero, and not read): loaded
// where B's columns are contiguous, else gathered at the offsets idx.
template <typename Acc, bool kGather>
LLTM_GEMM_INLINE Vec<Acc> load_b(const Acc* p, LaneMask mask, GatherIdx<Acc> idx) {
  if constexpr (std::is_same_v<Acc, float>) {
    if constexpr (kGather) {
      return reinterpret_cast<Vec<Acc>>(
          _mm256_mask_i32gather_ps(_mm256_setzero_ps(), p, idx, _mm256_castsi256_ps(mask), 4));
    } else {
      return reinterpret_cast<Vec<Acc>>(_mm256_maskload_ps(p, mask));
    }
  } else {
    if constexpr (kGather) {
      return reinterpret_cast<Vec<Acc>>(
          _mm256_mask_i32gather_pd(_mm256_setzero_pd(), p, idx, _mm256_castsi256_pd(mask), 8));
    } else {
      return reinterpret_cast<Vec<Acc>>(_mm256_maskload_pd(p, mask));
    }
  }
}
#endif

// C tile (MR x nr at row i, column j of d; nr <= NV vectors) = A (MR rows at a, strides sam, sak)
// times B (K rows, the tile's columns at b, strides sbk, sbn), over all of K.
template <int MR, int NV, typename Acc, bool kGather>
__attribute__((noinline)) void direct_tile(int64_t K, const Acc* __restrict__ a, int64_t sam,
                                           int64_t sak, const Acc* __restrict__ b, int64_t sbk,
                                           int64_t sbn, const TileDst<Acc, Acc>& d, int64_t i,
                                           int64_t j, int nr) {
  constexpr int L = kLanes<Acc>;
  LaneMask mask[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) mask[v] = lane_mask<Acc>(nr - v * L);
  const GatherIdx<Acc> idx = gather_idx<Acc>(kGather ? sbn : 0);
  const int64_t b_vec = kGather ? L * sbn : L;  // elements between B's vectors of a row
  Vec<Acc> acc[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = Vec<Acc>{};
  }
  for (int64_t k = 0; k < K; ++k) {
    Vec<Acc> bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = load_b<Acc, kGather>(b + v * b_vec, mask[v], idx);
    const Acc* ak = a + k * sak;
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const Vec<Acc> x = broadcast(ak[r * sam]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] += x * bv[v];
    }
    b += sbk;
  }
  store_tile<MR, NV, Acc, Acc>(acc, d, i, j, nr);
}

template <typename Acc>
using DirectTileFn = void (*)(int64_t, const Acc*, int64_t, int64_t, const Acc*, int64_t, int64_t,
                              const TileDst<Acc, Acc>&, int64_t, int64_t, int);

template <typename Acc, int NV, bool kGather, size_t... R>
constexpr std::array<DirectTileFn<Acc>, kMR + 1> make_direct_tiles(std::index_sequence<R...>) {
  return {nullptr, &direct_tile<static_cast<int>(R) + 1, NV, Acc, kGather>...};
}
// direct_tile for 1 .. kMR rows, indexed by the row count (entry 0 unused), NV vectors of columns
// (1 for a last panel of at most one vector).
template <typename Acc, int NV, bool kGather>
constexpr std::array<DirectTileFn<Acc>, kMR + 1> kDirectTiles =
    make_direct_tiles<Acc, NV, kGather>(std::make_index_sequence<kMR>{});

// C's region r of p on the direct tiles: tiles of kMR rows outer (C written along its rows, a
// tile's rows of A kept in cache across the columns), panels of kNR columns inner.
template <typename T>
void direct_blocked(const Problem& p, const Region& r) {
  using Acc = acc_t<T>;
  constexpr int NR = kNR<Acc>;
  const Acc* A = ptr<Acc>(p.a);
  const Acc* B = ptr<Acc>(p.b);
  TileDst<Acc, Acc> d;
  if (p.scn == 1) {
    d.w = static_cast<Acc*>(p.c);
    d.ldw = p.scm;
  } else {
    d.c = static_cast<Acc*>(p.c);
    d.scm = p.scm;
    d.scn = p.scn;
  }
  constexpr int L = kLanes<Acc>;
  const bool gather = p.sbn != 1;
  for (int64_t i = r.m0; i < r.m1; i += kMR) {
    const int rows = static_cast<int>(std::min<int64_t>(kMR, r.m1 - i));
    const auto tile = gather ? kDirectTiles<Acc, kTileVecs, true>[rows]
                             : kDirectTiles<Acc, kTileVecs, false>[rows];
    const auto narrow =
        gather ? kDirectTiles<Acc, 1, true>[rows] : kDirectTiles<Acc, 1, false>[rows];
    for (int64_t j = r.n0; j < r.n1; j += NR) {
      const int nr = static_cast<int>(std::min<int64_t>(NR, r.n1 - j));
      (nr <= L ? narrow : tile)(p.K, A + i * p.sam, p.sam, p.sak, B + j * p.sbn, p.sbk, p.sbn, d, i,
                                j, nr);
    }
  }
}

}  // namespace
}  // namespace lltm_ext::gemm::cpugemm::LLTM_GEMM_CPU_NS
