// The CPU GEMM's dot-product tiles: IB x JB sums along K, for operands that are both contiguous
// along K (a @ b.T): vectors along K, one accumulator per (row, column), summed across lanes at
// the end. Included inside a gemm_cpu_<isa>.cpp target region, after gemm/cpu/simd.h.
#pragma once

namespace lltm_ext::gemm::cpugemm::LLTM_GEMM_CPU_NS {
namespace {

// Tile of the dot kernels: rows of A x columns of B (AVX-512: 4 x 4 accumulators, 4 B vectors and
// an A vector; SSE2 / AVX2, 16 registers: 2 x 4).
constexpr int kDotIB = kLevel == 2 ? 4 : 2;
constexpr int kDotJB = 4;
// Columns a tile for a single row of C: on AVX2 a vector's worth (8 sums, one vector when reduced
// across the lanes: 1 x 4 tiles reduced half a vector's worth at twice the shuffles per sum).
constexpr int kDotRowJB = kLevel == 1 ? 8 : kDotJB;

// out[r * JB + c] = sum over k < kd of a[r * lda + k] * b[c * ldb + k] (r < IB, c < JB): A in the
// accumulation type, B in T (converted as loaded); reads nothing past k = kd - 1.
template <int IB, int JB, typename Acc, typename T>
__attribute__((noinline)) void dot_tile(int64_t kd, const Acc* __restrict__ a, int64_t lda,
                                        const T* __restrict__ b, int64_t ldb, Acc* out) {
  constexpr int L = kLanes<Acc>;
  Vec<Acc> acc[IB][JB];
#pragma GCC unroll 8
  for (int r = 0; r < IB; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < JB; ++c) acc[r][c] = Vec<Acc>{};
  }
  int64_t k = 0;
  for (; k + L <= kd; k += L) {
    Vec<Acc> bv[JB];
#pragma GCC unroll 8
    for (int c = 0; c < JB; ++c) bv[c] = load_cvt<Acc>(b + c * ldb + k);
#pragma GCC unroll 8
    for (int r = 0; r < IB; ++r) {
      const Vec<Acc> av = loadv(a + r * lda + k);
#pragma GCC unroll 8
      for (int c = 0; c < JB; ++c) acc[r][c] += av * bv[c];
    }
  }
  if (k < kd) {
    const int n = static_cast<int>(kd - k);
    Vec<Acc> bv[JB];
    for (int c = 0; c < JB; ++c) bv[c] = load_cvt_partial<Acc>(b + c * ldb + k, n);
    for (int r = 0; r < IB; ++r) {
      const Vec<Acc> av = load_cvt_partial<Acc>(a + r * lda + k, n);
      for (int c = 0; c < JB; ++c) acc[r][c] += av * bv[c];
    }
  }
  // Sums across lanes, kLanes accumulators at a time.
  constexpr int kCount = IB * JB;
  Vec<Acc> flat[kCount];
#pragma GCC unroll 8
  for (int r = 0; r < IB; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < JB; ++c) flat[r * JB + c] = acc[r][c];
  }
  if constexpr (kCount >= L) {
#pragma GCC unroll 4
    for (int g = 0; g < kCount / L; ++g) storev(out + g * L, reduce_lanes<Acc, L>(flat + g * L));
  }
  constexpr int kRest = kCount % L;
  if constexpr (kRest > 0) {
    const Vec<Acc> sums = reduce_lanes<Acc, kRest>(flat + (kCount - kRest));
    std::memcpy(out + (kCount - kRest), &sums, sizeof(Acc) * kRest);
  }
}

template <typename Acc, typename T>
using DotTileFn = void (*)(int64_t, const Acc*, int64_t, const T*, int64_t, Acc*);

// dot_tile for every (rows, columns) up to (kDotIB, kDotJB): [rows - 1][columns - 1].
template <typename Acc, typename T, int IB, size_t... C>
constexpr std::array<DotTileFn<Acc, T>, kDotJB> dot_row(std::index_sequence<C...>) {
  return {&dot_tile<IB, static_cast<int>(C) + 1, Acc, T>...};
}
template <typename Acc, typename T, size_t... R>
constexpr std::array<std::array<DotTileFn<Acc, T>, kDotJB>, kDotIB> make_dot_tiles(
    std::index_sequence<R...>) {
  return {dot_row<Acc, T, static_cast<int>(R) + 1>(std::make_index_sequence<kDotJB>{})...};
}
template <typename Acc, typename T>
constexpr std::array<std::array<DotTileFn<Acc, T>, kDotJB>, kDotIB> kDotTiles =
    make_dot_tiles<Acc, T>(std::make_index_sequence<kDotIB>{});

}  // namespace
}  // namespace lltm_ext::gemm::cpugemm::LLTM_GEMM_CPU_NS
