// bfloat16 kernels on the AVX-512 BF16 dot-product instruction (vdpbf16ps: 16 float lanes, each
// += a0 * b0 + a1 * b1 from pairs of bfloat16, products exact, sums in float): the register tile
// over pair-packed panels, its packing, and the dot-product tile for K-contiguous operands.
// Included by gemm_cpu_avx512.cpp only, inside its AVX-512 region, after gemm/cpu/tile.h; the
// kernels that run the instruction get their own region with avx512bf16, and run only where the
// CPU has it (driver.h checks).
#pragma once

#if LLTM_GEMM_CPU_LEVEL != 2
#error "gemm/cpu/bf16dot.h is for the AVX-512 copy"
#endif

namespace lltm_ext::gemm::cpugemm::LLTM_GEMM_CPU_NS {
namespace {

// The register tile is kMR x 32 columns (two vectors of 16 float lanes), as fma_tile's for float.
constexpr int kPairNR = 32;
static_assert(kPairNR == kNR<float>, "the pair tile stores through store_tile<float>");
static_assert(kDotIB * kDotJB <= 16, "pair_dot_tile sums 16 accumulators at most");

// Whether the CPU runs vdpbf16ps and vcvtneps2bf16 (the kernels below need it).
bool cpu_has_avx512_bf16() {
  static const bool has = __builtin_cpu_supports("avx512bf16");
  return has;
}

inline uint32_t bits_of(BFloat16 x) {
  return x.x;
}

// permutex2var_epi16 indices that interleave 16 bfloat16s of two rows (k, k + 1), from lane
// `first` on: 16 pairs (the even k the low half), e.g. pair_lanes(0) for columns 0-15 and
// pair_lanes(16) for 16-31.
inline __m512i pair_lanes(int first) {
  const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                      39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  return _mm512_add_epi16(lo, _mm512_set1_epi16(static_cast<int16_t>(first)));
}

// A (mc x kc, element (i, k) at a[i * sam + k * sak]) -> panels of kMR rows (the last one of mc %
// kMR), each [kc2][rows] pairs (k = 2q, 2q + 1) of bfloat16 in a uint32 (low half the even k), kc2
// = ceil(kc / 2), a missing odd k zero: panel r0 at dst + r0 * kc2.
void pack_a_pairs(uint32_t* __restrict__ dst, const BFloat16* a, int64_t sam, int64_t sak, int mc,
                  int kc) {
  const int kc2 = (kc + 1) / 2;
  const int even = kc / 2;
  for (int ir = 0; ir < mc; ir += kMR) {
    const int rows = std::min(kMR, mc - ir);
    if (sam == 1) {  // column-major A: rows contiguous for each k; pairs of k rows interleaved
      static_assert(kMR <= 16, "a panel's rows fit one vector of 16-bit lanes");
      const __mmask16 mask = static_cast<__mmask16>((1u << rows) - 1);
      const BFloat16* s = a + ir;
      for (int q = 0; q < kc2; ++q) {
        const __m256i k0 = _mm256_maskz_loadu_epi16(mask, s + 2 * q * sak);
        const __m256i k1 = 2 * q + 1 < kc ? _mm256_maskz_loadu_epi16(mask, s + (2 * q + 1) * sak)
                                          : _mm256_setzero_si256();
        const U32 lo = __builtin_convertvector(reinterpret_cast<U16>(k0), U32);
        const U32 hi = __builtin_convertvector(reinterpret_cast<U16>(k1), U32) << 16;
        _mm512_mask_storeu_epi32(dst + q * rows, mask, reinterpret_cast<__m512i>(lo | hi));
      }
      dst += rows * kc2;
      continue;
    }
    for (int r = 0; r < rows; ++r) {
      const BFloat16* s = a + (ir + r) * sam;
      if (sak == 1) {
        for (int q = 0; q < even; ++q) {
          uint32_t pair;
          std::memcpy(&pair, s + 2 * q, sizeof(pair));
          dst[q * rows + r] = pair;
        }
      } else {
        for (int q = 0; q < even; ++q) {
          dst[q * rows + r] = bits_of(s[2 * q * sak]) | (bits_of(s[(2 * q + 1) * sak]) << 16);
        }
      }
      if (kc2 > even) dst[even * rows + r] = bits_of(s[(kc - 1) * sak]);
    }
    dst += rows * kc2;
  }
}

// B (kc x nc, element (k, j) at b[k * sbk + j * sbn]) -> panels of kPairNR columns, each [kc2][32]
// pairs (k = 2q, 2q + 1), columns past nc and a missing odd k zero: panel j0 at dst + j0 * kc2.
void pack_b_pairs(uint32_t* __restrict__ dst, const BFloat16* b, int64_t sbk, int64_t sbn, int kc,
                  int nc) {
  const int kc2 = (kc + 1) / 2;
  for (int jr = 0; jr < nc; jr += kPairNR) {
    const int cols = std::min(kPairNR, nc - jr);
    const BFloat16* src = b + jr * sbn;
    if (sbn == 1) {  // row-major B: interleave rows 2q and 2q + 1
      const __mmask32 mask = cols == 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << cols) - 1);
      const __m512i lo_idx = pair_lanes(0), hi_idx = pair_lanes(16);
      for (int q = 0; q < kc2; ++q) {
        const __m512i r0 = _mm512_maskz_loadu_epi16(mask, src + 2 * q * sbk);
        const __m512i r1 = 2 * q + 1 < kc ? _mm512_maskz_loadu_epi16(mask, src + (2 * q + 1) * sbk)
                                          : _mm512_setzero_si512();
        _mm512_storeu_si512(dst + q * kPairNR, _mm512_permutex2var_epi16(r0, lo_idx, r1));
        _mm512_storeu_si512(dst + q * kPairNR + 16, _mm512_permutex2var_epi16(r0, hi_idx, r1));
      }
    } else if (sbk == 1 && cols == kPairNR) {  // K-contiguous B, whole panel
      // Blocks of 16 columns x 16 pairs (as 32-bit lanes) transposed in registers.
      const int even = kc / 2;
      int q = 0;
      for (; q + 16 <= even; q += 16) {
        for (int half = 0; half < 2; ++half) {
          Vec<float> blk[16];
          for (int c = 0; c < 16; ++c)
            blk[c] = loadv(reinterpret_cast<const float*>(src + (half * 16 + c) * sbn + 2 * q));
          transpose_block<float>(blk);
          for (int t = 0; t < 16; ++t)
            storev(reinterpret_cast<float*>(dst + (q + t) * kPairNR + half * 16), blk[t]);
        }
      }
      for (; q < kc2; ++q) {
        for (int jj = 0; jj < kPairNR; ++jj) {
          const BFloat16* col = src + jj * sbn;
          dst[q * kPairNR + jj] = 2 * q + 1 < kc
                                      ? bits_of(col[2 * q]) | (bits_of(col[2 * q + 1]) << 16)
                                      : bits_of(col[2 * q]);
        }
      }
    } else {  // K-contiguous or other strides: column by column
      const int even = kc / 2;
      for (int jj = 0; jj < cols; ++jj) {
        const BFloat16* s = src + jj * sbn;
        if (sbk == 1) {
          for (int q = 0; q < even; ++q) {
            uint32_t pair;
            std::memcpy(&pair, s + 2 * q, sizeof(pair));
            dst[q * kPairNR + jj] = pair;
          }
        } else {
          for (int q = 0; q < even; ++q) {
            dst[q * kPairNR + jj] = bits_of(s[2 * q * sbk]) | (bits_of(s[(2 * q + 1) * sbk]) << 16);
          }
        }
        if (kc2 > even) dst[even * kPairNR + jj] = bits_of(s[(kc - 1) * sbk]);
      }
      for (int q = 0; q < kc2; ++q) {
        for (int jj = cols; jj < kPairNR; ++jj) dst[q * kPairNR + jj] = 0;
      }
    }
    dst += kPairNR * kc2;
  }
}

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,f16c,avx512bf16")

// C tile (MR x nr at row i, column j of d, nr <= 16 NV) = A pair panel (MR rows) times B pair panel
// (its first 16 NV columns), kc2 pairs.
template <int MR, int NV>
__attribute__((noinline)) void pair_tile(int kc2, const uint32_t* __restrict__ ap,
                                         const uint32_t* __restrict__ bp,
                                         const TileDst<float, BFloat16>& d, int64_t i, int64_t j,
                                         int nr) {
  Vec<float> acc[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[r][v] = Vec<float>{};
  }
  for (int q = 0; q < kc2; ++q) {
    __m512bh b[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) b[v] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(bp + 16 * v));
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m512bh a = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(ap[r])));
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) {
        acc[r][v] = reinterpret_cast<Vec<float>>(
            _mm512_dpbf16_ps(reinterpret_cast<__m512>(acc[r][v]), a, b[v]));
      }
    }
    ap += MR;
    bp += kPairNR;
  }
  if (d.w == nullptr && d.scn == 1 && nr == 16 * NV) {  // whole tiles into a row-major C
    // (vcvtneps2bf16: round to nearest even, as c10::BFloat16; a denormal result becomes zero, as
    // vdpbf16ps makes it anyway)
    BFloat16* const c = d.c + i * d.scm + j;
    const int64_t scm = d.scm, ld_add = d.ld_add;
    const float* const add = d.add != nullptr ? d.add + i * ld_add + j : nullptr;
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) {
        Vec<float> x = acc[r][v];
        if (add != nullptr) x += loadv(add + r * ld_add + v * 16);
        _mm256_storeu_si256(
            reinterpret_cast<__m256i*>(c + r * scm + v * 16),
            reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(reinterpret_cast<__m512>(x))));
      }
    }
    return;
  }
  store_tile<MR, NV, float, BFloat16>(acc, d, i, j, nr);
}

// out[r * JB + c] = sum over k < kd of a[r * lda + k] * b[c * ldb + k], both bfloat16 contiguous
// along k, 32 k per instruction; reads nothing past k = kd - 1.
template <int IB, int JB>
__attribute__((noinline)) void pair_dot_tile(int64_t kd, const BFloat16* __restrict__ a,
                                             int64_t lda, const BFloat16* __restrict__ b,
                                             int64_t ldb, float* out) {
  __m512 acc[IB][JB];
#pragma GCC unroll 8
  for (int r = 0; r < IB; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < JB; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 32 <= kd; k += 32) {
    __m512bh bv[JB];
#pragma GCC unroll 8
    for (int c = 0; c < JB; ++c) {
      bv[c] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + c * ldb + k));
    }
#pragma GCC unroll 8
    for (int r = 0; r < IB; ++r) {
      const __m512bh av = reinterpret_cast<__m512bh>(_mm512_loadu_si512(a + r * lda + k));
#pragma GCC unroll 8
      for (int c = 0; c < JB; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], av, bv[c]);
    }
  }
  if (k < kd) {
    const __mmask32 mask = static_cast<__mmask32>((1ull << (kd - k)) - 1);
    __m512bh bv[JB];
    for (int c = 0; c < JB; ++c) {
      bv[c] = reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(mask, b + c * ldb + k));
    }
    for (int r = 0; r < IB; ++r) {
      const __m512bh av =
          reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(mask, a + r * lda + k));
      for (int c = 0; c < JB; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], av, bv[c]);
    }
  }
  // Sums across lanes.
  Vec<float> flat[IB * JB];
#pragma GCC unroll 8
  for (int r = 0; r < IB; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < JB; ++c) flat[r * JB + c] = reinterpret_cast<Vec<float>>(acc[r][c]);
  }
  const Vec<float> sums = reduce_lanes<float, IB * JB>(flat);
  std::memcpy(out, &sums, sizeof(float) * IB * JB);
}

#pragma GCC pop_options

using PairTileFn = void (*)(int, const uint32_t*, const uint32_t*, const TileDst<float, BFloat16>&,
                            int64_t, int64_t, int);
template <int NV, size_t... R>
constexpr std::array<PairTileFn, kMR + 1> make_pair_tiles(std::index_sequence<R...>) {
  return {nullptr, &pair_tile<static_cast<int>(R) + 1, NV>...};
}
template <int NV>
constexpr std::array<PairTileFn, kMR + 1> kPairTiles =
    make_pair_tiles<NV>(std::make_index_sequence<kMR>{});

using PairDotFn = void (*)(int64_t, const BFloat16*, int64_t, const BFloat16*, int64_t, float*);
template <int IB, size_t... C>
constexpr std::array<PairDotFn, kDotJB> pair_dot_row(std::index_sequence<C...>) {
  return {&pair_dot_tile<IB, static_cast<int>(C) + 1>...};
}
template <size_t... R>
constexpr std::array<std::array<PairDotFn, kDotJB>, kDotIB> make_pair_dots(
    std::index_sequence<R...>) {
  return {pair_dot_row<static_cast<int>(R) + 1>(std::make_index_sequence<kDotJB>{})...};
}
constexpr std::array<std::array<PairDotFn, kDotJB>, kDotIB> kPairDots =
    make_pair_dots(std::make_index_sequence<kDotIB>{});

}  // namespace
}  // namespace lltm_ext::gemm::cpugemm::LLTM_GEMM_CPU_NS
