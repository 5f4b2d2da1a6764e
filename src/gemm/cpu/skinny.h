// The CPU GEMM's paths for few rows of C: kRows with up to kAxpyMaxRows rows (axpy_rows over
// chunks of columns) and kDot (dot-product tiles over groups of columns, K in chunks). Included
// inside a gemm_cpu_<isa>.cpp target region by gemm/cpu/driver.h, after gemm/cpu/blocked.h.
#pragma once

namespace lltm_ext::gemm::cpugemm::LLTM_GEMM_CPU_NS {
namespace {

// Columns [r.n0, r.n1) of C (p.M <= kAxpyMaxRows rows) of a p whose B is contiguous along N:
// A packed whole (M x K is small), then per chunk of columns, axpy_rows streams B's rows once,
// the chunk of C (or of a float workspace) staying in L1.
constexpr int kAxpyCols = 1024;

template <typename T>
void axpy_columns(const Problem& p, const Region& r, Scratch& s) {
  using Acc = acc_t<T>;
  const int M = static_cast<int>(p.M);
  const int K = static_cast<int>(p.K);
  const T* B = ptr<T>(p.b);
  T* C = static_cast<T*>(p.c);
  const bool c_direct = std::is_same_v<T, Acc> && p.scn == 1;
  Acc* ap = s.a.get<Acc>(int64_t{M} * K);
  pack_a(ap, ptr<T>(p.a), p.sam, p.sak, M, K);
  for (int64_t j0 = r.n0; j0 < r.n1; j0 += kAxpyCols) {
    const int nc = static_cast<int>(std::min<int64_t>(kAxpyCols, r.n1 - j0));
    if (c_direct) {
      kAxpyRows<Acc, T>[M](K, ap, B + j0, p.sbk, nc, reinterpret_cast<Acc*>(C) + j0, p.scm, false);
      continue;
    }
    Acc* w = s.w.get<Acc>(int64_t{M} * nc);
    kAxpyRows<Acc, T>[M](K, ap, B + j0, p.sbk, nc, w, nc, false);
    for (int i = 0; i < M; ++i) {
      T* c = C + i * p.scm + j0 * p.scn;
      const Acc* src = w + i * nc;
      if (p.scn == 1) {
        constexpr int L = kLanes<Acc>;
        int j = 0;
        for (; j + L <= nc; j += L) store_cvt<T, Acc>(c + j, loadv(src + j));
        if (j < nc)
          store_cvt_partial<T, Acc>(c + j, load_cvt_partial<Acc>(src + j, nc - j), nc - j);
      } else {
        for (int j = 0; j < nc; ++j) c[j * p.scn] = from_acc<T>(src[j]);
      }
    }
  }
}

// ------------------------------------------------------------------------------------------------
// Dot path (kDot): columns of C by groups, K in long chunks, sums along K.
// ------------------------------------------------------------------------------------------------

constexpr int64_t kDotChunk = 8192;  // K per chunk (A rows of a chunk stay in L2)

// Columns [r.n0, r.n1) of C (all p.M rows) of a p whose B is contiguous along K (sbk == 1). A's
// rows are read in place when they are contiguous along K and in the accumulation type, else
// packed per K chunk. Sums across chunks go to a workspace.
template <typename T>
void dot_columns(const Problem& p, const Region& r, Scratch& s) {
  using Acc = acc_t<T>;
  const T* A = ptr<T>(p.a);
  const T* B = ptr<T>(p.b);
  T* C = static_cast<T*>(p.c);
  const int64_t M = p.M, K = p.K;
  const int64_t ncols = r.n1 - r.n0;
  const bool a_direct = std::is_same_v<T, Acc> && p.sak == 1;
  const bool one_chunk = K <= kDotChunk;
  Acc* W = one_chunk ? nullptr : s.w.get<Acc>(M * ncols);
  for (int64_t k0 = 0; k0 < K; k0 += kDotChunk) {
    const int64_t kd = std::min(kDotChunk, K - k0);
    const bool first = k0 == 0, last = k0 + kd >= K;
    const Acc* arows;
    int64_t lda;
    if (a_direct) {
      arows = reinterpret_cast<const Acc*>(A) + k0;
      lda = p.sam;
    } else {
      Acc* ap = s.a.get<Acc>(M * kd);
      for (int64_t i = 0; i < M; ++i) {
        const T* src = A + i * p.sam + k0 * p.sak;
        Acc* dst = ap + i * kd;
        if (p.sak == 1) {  // (a vector at a time: one by one, float16 cost more than the dot;
                           // docs/decisions_cpu.md#cpu-skinny-convert)
          constexpr int L = kLanes<Acc>;
          int64_t k = 0;
          for (; k + L <= kd; k += L) storev(dst + k, load_cvt<Acc>(src + k));
          for (; k < kd; ++k) dst[k] = to_acc(src[k]);
        } else {
          for (int64_t k = 0; k < kd; ++k) dst[k] = to_acc(src[k * p.sak]);
        }
      }
      arows = ap;
      lda = kd;
    }
    // C[i, j] from this chunk's sum x: added to the earlier chunks' in W, written after the last.
    const auto emit = [&](int64_t i, int64_t j, Acc x) {
      if (!one_chunk) {
        Acc& w = W[i * ncols + (j - r.n0)];
        if (!first) x += w;
        w = x;
      }
      if (last) C[i * p.scm + j * p.scn] = from_acc<T>(x);
    };
    int64_t j0 = r.n0;
    if (M == 1) {  // a single row of C (x @ w.T): kDotRowJB columns a tile, one vector of sums
      for (; j0 + kDotRowJB <= r.n1; j0 += kDotRowJB) {
        Acc out[kDotRowJB];
        dot_tile<1, kDotRowJB, Acc, T>(kd, arows, lda, B + j0 * p.sbn + k0, p.sbn, out);
        for (int j = 0; j < kDotRowJB; ++j) emit(0, j0 + j, out[j]);
      }
    }
    for (; j0 < r.n1; j0 += kDotJB) {
      const int jb = static_cast<int>(std::min<int64_t>(kDotJB, r.n1 - j0));
      for (int64_t i0 = 0; i0 < M; i0 += kDotIB) {
        const int ib = static_cast<int>(std::min<int64_t>(kDotIB, M - i0));
        Acc out[kDotIB * kDotJB];
        kDotTiles<Acc, T>[ib - 1][jb - 1](kd, arows + i0* lda, lda, B + j0* p.sbn + k0, p.sbn, out);
        for (int i = 0; i < ib; ++i) {
          for (int j = 0; j < jb; ++j) emit(i0 + i, j0 + j, out[i * jb + j]);
        }
      }
    }
  }
}

#if LLTM_GEMM_CPU_LEVEL == 2
// dot_columns for bfloat16 on vdpbf16ps: A's rows read in place when contiguous along K, else
// gathered into bfloat16 rows per chunk.
void pair_dot_columns(const Problem& p, const Region& r, Scratch& s) {
  const BFloat16* A = ptr<BFloat16>(p.a);
  const BFloat16* B = ptr<BFloat16>(p.b);
  BFloat16* C = static_cast<BFloat16*>(p.c);
  const int64_t M = p.M, K = p.K;
  const int64_t ncols = r.n1 - r.n0;
  const bool one_chunk = K <= kDotChunk;
  float* W = one_chunk ? nullptr : s.w.get<float>(M * ncols);
  for (int64_t k0 = 0; k0 < K; k0 += kDotChunk) {
    const int64_t kd = std::min(kDotChunk, K - k0);
    const bool first = k0 == 0, last = k0 + kd >= K;
    const BFloat16* arows;
    int64_t lda;
    if (p.sak == 1) {
      arows = A + k0;
      lda = p.sam;
    } else {
      BFloat16* ap = s.a.get<BFloat16>(M * kd);
      for (int64_t i = 0; i < M; ++i) {
        for (int64_t k = 0; k < kd; ++k) ap[i * kd + k] = A[i * p.sam + (k0 + k) * p.sak];
      }
      arows = ap;
      lda = kd;
    }
    for (int64_t j0 = r.n0; j0 < r.n1; j0 += kDotJB) {
      const int jb = static_cast<int>(std::min<int64_t>(kDotJB, r.n1 - j0));
      for (int64_t i0 = 0; i0 < M; i0 += kDotIB) {
        const int ib = static_cast<int>(std::min<int64_t>(kDotIB, M - i0));
        float out[kDotIB * kDotJB];
        kPairDots[ib - 1][jb - 1](kd, arows + i0 * lda, lda, B + j0 * p.sbn + k0, p.sbn, out);
        for (int i = 0; i < ib; ++i) {
          for (int j = 0; j < jb; ++j) {
            float x = out[i * jb + j];
            if (!one_chunk) {
              float& w = W[(i0 + i) * ncols + (j0 - r.n0 + j)];
              if (!first) x += w;
              w = x;
            }
            if (last) C[(i0 + i) * p.scm + (j0 + j) * p.scn] = BFloat16(x);
          }
        }
      }
    }
  }
}

#endif

}  // namespace
}  // namespace lltm_ext::gemm::cpugemm::LLTM_GEMM_CPU_NS
