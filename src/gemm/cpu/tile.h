// The CPU GEMM's register tiles: an MR x NR block of C accumulated over a K panel from packed A
// rows and B read packed or in place, and where a finished tile goes (C, or a float workspace).
// Included inside a gemm_cpu_<isa>.cpp target region, after gemm/cpu/simd.h.
#pragma once

namespace lltm_ext::gemm::cpugemm::LLTM_GEMM_CPU_NS {
namespace {

// Register tile of the multiply-add kernels: MR rows x kTileVecs vectors of C.
constexpr int kTileVecs = 2;
template <typename Acc>
constexpr int kNR = kTileVecs * kLanes<Acc>;
// Rows: as many as the registers hold beside the B vectors and a broadcast (AVX-512: 12 x 2
// zmm accumulators; SSE2 / AVX2: 6 x 2).
constexpr int kMR = kLevel == 2 ? 12 : 6;

// Where the tiles of one block of C go. Either an accumulation-type destination `w` (row stride
// ldw, unit column stride: C itself when it is float / double and row-major, else a workspace),
// written or, with `accumulate`, added to; or the final destination C (dtype T, strides scm /
// scn), written with the tile plus, if `add` is set, the partial sums there (row stride ld_add).
template <typename Acc, typename T>
struct TileDst {
  Acc* w = nullptr;
  int64_t ldw = 0;
  bool accumulate = false;
  T* c = nullptr;
  int64_t scm = 0, scn = 0;
  const Acc* add = nullptr;
  int64_t ld_add = 0;
};

// Stores the MR x NV*L tile acc (MR * NV vectors, row by row) at row i, column j of d, nr <=
// NV*L columns of it: partial tiles, C in its dtype or with any strides (out of line: the tiles
// keep their accumulators in registers for the common case, store_tile's first branch).
template <int MR, int NV, typename Acc, typename T>
__attribute__((noinline)) void store_tile_general(const Vec<Acc>* acc, const TileDst<Acc, T>& d,
                                                  int64_t i, int64_t j, int nr) {
  constexpr int L = kLanes<Acc>;
  if (d.w != nullptr) {
    Acc* const wt = d.w + i * d.ldw + j;
    for (int r = 0; r < MR; ++r) {
      for (int v = 0; v < NV && v * L < nr; ++v) {
        const int n = std::min(L, nr - v * L);
        Vec<Acc> x = acc[r * NV + v];
        if (d.accumulate) x += load_cvt_partial<Acc>(wt + r * d.ldw + v * L, n);
        store_cvt_partial<Acc, Acc>(wt + r * d.ldw + v * L, x, n);
      }
    }
    return;
  }
  const int64_t scm = d.scm, scn = d.scn, ld_add = d.ld_add;
  T* const c = d.c + i * scm + j * scn;
  const Acc* const add = d.add != nullptr ? d.add + i * ld_add + j : nullptr;
  if (scn == 1) {
    for (int r = 0; r < MR; ++r) {
      for (int v = 0; v < NV && v * L < nr; ++v) {
        const int n = std::min(L, nr - v * L);
        Vec<Acc> x = acc[r * NV + v];
        if (n == L) {
          if (add != nullptr) x += loadv(add + r * ld_add + v * L);
          store_cvt<T, Acc>(c + r * scm + v * L, x);
        } else {
          if (add != nullptr) x += load_cvt_partial<Acc>(add + r * ld_add + v * L, n);
          store_cvt_partial<T, Acc>(c + r * scm + v * L, x, n);
        }
      }
    }
    return;
  }
  if (scm == 1) {  // C written transposed (C^T = B^T A^T of a row-major C): blocks transposed
    for (int v = 0; v < NV && v * L < nr; ++v) {
      const int cols = std::min(L, nr - v * L);
      for (int r0 = 0; r0 < MR; r0 += L) {
        const int g = std::min(L, MR - r0);
        Vec<Acc> blk[L];
        for (int t = 0; t < L; ++t) {
          const int r = r0 + t;
          if (r >= MR) {
            blk[t] = Vec<Acc>{};
            continue;
          }
          blk[t] = acc[r * NV + v];
          if (add != nullptr) {
            const Acc* src = add + r * ld_add + v * L;
            blk[t] += cols == L ? loadv(src) : load_cvt_partial<Acc>(src, cols);
          }
        }
        transpose_block<Acc>(blk);
        for (int t = 0; t < cols; ++t)
          store_cvt_partial<T, Acc>(c + (v * L + t) * scn + r0, blk[t], g);
      }
    }
    return;
  }
  for (int r = 0; r < MR; ++r) {  // other strides: element by element
    Acc row[NV * kLanes<Acc>];
    std::memcpy(row, acc + r * NV, sizeof(row));
    for (int jj = 0; jj < nr; ++jj) {
      Acc x = row[jj];
      if (add != nullptr) x += add[r * ld_add + jj];
      c[r * scm + jj * scn] = from_acc<T>(x);
    }
  }
}

// Stores the MR x NV*L tile `acc` at row i, column j of d (nr <= NV*L valid columns).
template <int MR, int NV, typename Acc, typename T>
LLTM_GEMM_INLINE void store_tile(Vec<Acc> (&acc)[MR][NV], const TileDst<Acc, T>& d, int64_t i,
                                 int64_t j, int nr) {
  constexpr int L = kLanes<Acc>;
  // (d's fields as locals: stores through Acc* may alias d, and would reload them)
  Acc* const w = d.w;
  const int64_t ldw = d.ldw;
  const bool accumulate = d.accumulate;
  if (w != nullptr && nr == NV * L) {  // whole tiles into C or the workspace
    Acc* const wt = w + i * ldw + j;
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        Vec<Acc> x = acc[r][v];
        if (accumulate) x += loadv(wt + r * ldw + v * L);
        storev(wt + r * ldw + v * L, x);
      }
    }
    return;
  }
  if (w == nullptr && d.scn == 1 && nr == NV * L) {  // whole tiles into a row-major C
    T* const c = d.c + i * d.scm + j;
    const int64_t scm = d.scm, ld_add = d.ld_add;
    const Acc* const add = d.add != nullptr ? d.add + i * ld_add + j : nullptr;
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        Vec<Acc> x = acc[r][v];
        if (add != nullptr) x += loadv(add + r * ld_add + v * L);
        store_cvt<T, Acc>(c + r * scm + v * L, x);
      }
    }
    return;
  }
#if LLTM_GEMM_CPU_LEVEL == 2
  if (w != nullptr || d.scn == 1) {  // partial tiles (C's last columns): masked loads and stores
    int lanes[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) lanes[v] = std::clamp(nr - v * L, 0, L);
    if (w != nullptr) {
      Acc* const wt = w + i * ldw + j;
#pragma GCC unroll 16
      for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
          if (lanes[v] == 0) continue;
          Vec<Acc> x = acc[r][v];
          if (accumulate) x += load_cvt_partial<Acc>(wt + r * ldw + v * L, lanes[v]);
          store_cvt_partial<Acc, Acc>(wt + r * ldw + v * L, x, lanes[v]);
        }
      }
      return;
    }
    T* const c = d.c + i * d.scm + j;
    const int64_t scm = d.scm, ld_add = d.ld_add;
    const Acc* const add = d.add != nullptr ? d.add + i * ld_add + j : nullptr;
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        if (lanes[v] == 0) continue;
        Vec<Acc> x = acc[r][v];
        if (add != nullptr) x += load_cvt_partial<Acc>(add + r * ld_add + v * L, lanes[v]);
        store_cvt_partial<T, Acc>(c + r * scm + v * L, x, lanes[v]);
      }
    }
    return;
  }
#endif
  Vec<Acc> copy[MR * NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) copy[r * NV + v] = acc[r][v];
  }
  store_tile_general<MR, NV, Acc, T>(copy, d, i, j, nr);
}

// C tile (MR x nr at row i, column j of d, nr <= NV vectors) = A panel (MR rows, packed k-major:
// ap[k * MR + r]) times B panel (kc rows of NV vectors of BT at bp + k * bs, converted to Acc as
// loaded; NV = 1 for a last panel of at most one vector of columns). With
// kPrefetch (B read in place, rows far apart), each row's next kNR elements (the next tile's) are
// prefetched as this one is read: hardware prefetchers do not follow kc rows at once.
template <int MR, int NV, typename Acc, typename BT, typename T, bool kPrefetch>
__attribute__((noinline)) void fma_tile(int kc, const Acc* __restrict__ ap,
                                        const BT* __restrict__ bp, int64_t bs,
                                        const TileDst<Acc, T>& d, int64_t i, int64_t j, int nr) {
  constexpr int L = kLanes<Acc>;
  Vec<Acc> acc[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = Vec<Acc>{};
  }
  for (int p = 0; p < kc; ++p) {
    if constexpr (kPrefetch) __builtin_prefetch(bp + kNR<Acc>, 0, 3);
    Vec<Acc> b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) b[v] = load_cvt<Acc>(bp + v * L);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const Vec<Acc> a = broadcast(ap[r]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] += a * b[v];
    }
    ap += MR;
    bp += bs;
  }
  store_tile<MR, NV, Acc, T>(acc, d, i, j, nr);
}

// Rows of C from few rows of A, streaming B: w (MR rows of nc, row stride ldw; added to with
// `accumulate`, else written) += A panel (MR rows packed k-major: ap[k * MR + r], kc of them) times
// B (kc rows of nc contiguous elements of T, bs apart). B is read kAxpyK rows at a time, each row
// once, start to end; the nc-wide rows of w stay in L1 (the caller keeps nc small).
constexpr int kAxpyK = 8;
template <int MR, typename Acc, typename T>
__attribute__((noinline)) void axpy_rows(int kc, const Acc* __restrict__ ap,
                                         const T* __restrict__ b, int64_t bs, int nc,
                                         Acc* __restrict__ w, int64_t ldw, bool accumulate) {
  constexpr int L = kLanes<Acc>;
  if (nc <= L) {          // one vector of columns: accumulators in registers over all of K
    constexpr int U = 4;  // independent sums (FMA latency)
    Vec<Acc> acc[U][MR];
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) {
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) acc[u][r] = Vec<Acc>{};
    }
    int k = 0;
    for (; k + U <= kc; k += U) {
#pragma GCC unroll 4
      for (int u = 0; u < U; ++u) {
        const Vec<Acc> bv = load_cvt_partial<Acc>(b + (k + u) * bs, nc);
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) acc[u][r] += broadcast(ap[(k + u) * MR + r]) * bv;
      }
    }
    for (; k < kc; ++k) {
      const Vec<Acc> bv = load_cvt_partial<Acc>(b + k * bs, nc);
      for (int r = 0; r < MR; ++r) acc[0][r] += broadcast(ap[k * MR + r]) * bv;
    }
    for (int r = 0; r < MR; ++r) {
      Vec<Acc> x = (acc[0][r] + acc[1][r]) + (acc[2][r] + acc[3][r]);
      if (accumulate) x += load_cvt_partial<Acc>(w + r * ldw, nc);
      store_cvt_partial<Acc, Acc>(w + r * ldw, x, nc);
    }
    return;
  }
  int k0 = 0;
  for (; k0 < kc; k0 += kAxpyK) {
    const int ku = std::min(kAxpyK, kc - k0);
    const bool add = accumulate || k0 > 0;
    Vec<Acc> a[kAxpyK][MR];
#pragma GCC unroll 8
    for (int u = 0; u < kAxpyK; ++u) {
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) a[u][r] = broadcast(u < ku ? ap[(k0 + u) * MR + r] : Acc(0));
    }
    const T* brow = b + k0 * bs;
    int j = 0;
    // Whole vectors of columns over `rows` rows of B (kAxpyK as a constant: unrolled).
    const auto whole_vectors = [&](auto rows_of_b) {
      const int rows = rows_of_b;
      for (; j + L <= nc; j += L) {
        Vec<Acc> acc[MR];
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) acc[r] = add ? loadv(w + r * ldw + j) : Vec<Acc>{};
#pragma GCC unroll 8
        for (int u = 0; u < rows; ++u) {
          const Vec<Acc> bv = load_cvt<Acc>(brow + u * bs + j);
#pragma GCC unroll 8
          for (int r = 0; r < MR; ++r) acc[r] += a[u][r] * bv;
        }
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) storev(w + r * ldw + j, acc[r]);
      }
    };
    if (ku == kAxpyK) {
      whole_vectors(std::integral_constant<int, kAxpyK>{});
    } else {
      whole_vectors(ku);  // (fewer than kAxpyK rows left)
    }
    for (; j < nc; j += L) {  // the last columns
      const int n = std::min(L, nc - j);
      Vec<Acc> acc[MR];
      for (int r = 0; r < MR; ++r) {
        acc[r] = add ? load_cvt_partial<Acc>(w + r * ldw + j, n) : Vec<Acc>{};
      }
      for (int u = 0; u < ku; ++u) {
        const Vec<Acc> bv = load_cvt_partial<Acc>(brow + u * bs + j, n);
        for (int r = 0; r < MR; ++r) acc[r] += a[u][r] * bv;
      }
      for (int r = 0; r < MR; ++r) store_cvt_partial<Acc, Acc>(w + r * ldw + j, acc[r], n);
    }
  }
}

template <typename Acc, typename T>
using AxpyFn = void (*)(int, const Acc*, const T*, int64_t, int, Acc*, int64_t, bool);
constexpr int kAxpyMaxRows = 4;  // products with up to this many rows of C stream B with axpy_rows
template <typename Acc, typename T>
constexpr std::array<AxpyFn<Acc, T>, kAxpyMaxRows + 1> kAxpyRows = {
    nullptr, &axpy_rows<1, Acc, T>, &axpy_rows<2, Acc, T>, &axpy_rows<3, Acc, T>,
    &axpy_rows<4, Acc, T>};

template <typename Acc, typename BT, typename T>
using FmaTileFn = void (*)(int, const Acc*, const BT*, int64_t, const TileDst<Acc, T>&, int64_t,
                           int64_t, int);

// fma_tile for 1 .. kMR rows, indexed by the row count (entry 0 unused).
template <typename Acc, typename BT, typename T, int NV, bool kPrefetch, size_t... R>
constexpr std::array<FmaTileFn<Acc, BT, T>, kMR + 1> make_fma_tiles(std::index_sequence<R...>) {
  return {nullptr, &fma_tile<static_cast<int>(R) + 1, NV, Acc, BT, T, kPrefetch>...};
}
template <typename Acc, typename BT, typename T, int NV = kTileVecs, bool kPrefetch = false>
constexpr std::array<FmaTileFn<Acc, BT, T>, kMR + 1> kFmaTiles =
    make_fma_tiles<Acc, BT, T, NV, kPrefetch>(std::make_index_sequence<kMR>{});

}  // namespace
}  // namespace lltm_ext::gemm::cpugemm::LLTM_GEMM_CPU_NS
