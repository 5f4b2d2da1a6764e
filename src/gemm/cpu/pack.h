// The CPU GEMM's packing: blocks of A and B copied (and converted to the accumulation type) into
// the contiguous panels the register tiles read. Included inside a gemm_cpu_<isa>.cpp target
// region, after gemm/cpu/tile.h.
#pragma once

namespace lltm_ext::gemm::cpugemm::LLTM_GEMM_CPU_NS {
namespace {

// A (mc rows x kc, element (i, k) at a[i * sam + k * sak]) -> panels of kMR rows, the last one of
// mc % kMR rows if that is not 0, each k-major: panel r0 at dst + r0 * kc, element (r, k) of a
// panel of `rows` rows at [k * rows + r].
template <typename T>
void pack_a(acc_t<T>* __restrict__ dst, const T* a, int64_t sam, int64_t sak, int mc, int kc) {
  for (int ir = 0; ir < mc; ir += kMR) {
    const int rows = std::min(kMR, mc - ir);
    const T* src = a + ir * sam;
    if (rows == 1 && sak == 1) {  // one row, contiguous along k: a straight (converting) copy
      constexpr int L = kLanes<acc_t<T>>;
      int p = 0;
      for (; p + L <= kc; p += L) storev(dst + p, load_cvt<acc_t<T>>(src + p));
      if (p < kc)
        store_cvt_partial<acc_t<T>, acc_t<T>>(dst + p, load_cvt_partial<acc_t<T>>(src + p, kc - p),
                                              kc - p);
    } else if (sam == 1) {  // column-major A: a k's rows are contiguous
      constexpr int L = kLanes<acc_t<T>>;
      for (int p = 0; p < kc; ++p) {
        const T* s = src + p * sak;
        acc_t<T>* d = dst + p * rows;
        int r = 0;
        for (; r + L <= rows; r += L) storev(d + r, load_cvt<acc_t<T>>(s + r));
        if (r < rows) {
#if LLTM_GEMM_CPU_LEVEL == 2
          store_cvt_partial<acc_t<T>, acc_t<T>>(d + r, load_cvt_partial<acc_t<T>>(s + r, rows - r),
                                                rows - r);
#else
          for (; r < rows; ++r) d[r] = to_acc(s[r]);
#endif
        }
      }
    } else {
      const T* row[kMR];
      for (int r = 0; r < rows; ++r) row[r] = src + r * sam;
      if (sak == 1) {
        int p = 0;
#if LLTM_GEMM_CPU_LEVEL == 2
        // Row-major A: blocks of up to L rows x L k transposed in registers, stored with masks.
        constexpr int L = kLanes<acc_t<T>>;
        for (; p + L <= kc; p += L) {
          for (int r0 = 0; r0 < rows; r0 += L) {
            const int g = std::min(L, rows - r0);
            Vec<acc_t<T>> v[L];
#pragma GCC unroll 16
            for (int r = 0; r < L; ++r) {
              v[r] = r < g ? load_cvt<acc_t<T>>(row[r0 + r] + p) : Vec<acc_t<T>>{};
            }
            transpose_block<acc_t<T>>(v);
#pragma GCC unroll 16
            for (int t = 0; t < L; ++t) {
              store_cvt_partial<acc_t<T>, acc_t<T>>(dst + (p + t) * rows + r0, v[t], g);
            }
          }
        }
        if (p < kc) {  // the last kc - p < L k: partial loads
          const int n = kc - p;
          for (int r0 = 0; r0 < rows; r0 += L) {
            const int g = std::min(L, rows - r0);
            Vec<acc_t<T>> v[L];
#pragma GCC unroll 16
            for (int r = 0; r < L; ++r) {
              v[r] = r < g ? load_cvt_partial<acc_t<T>>(row[r0 + r] + p, n) : Vec<acc_t<T>>{};
            }
            transpose_block<acc_t<T>>(v);
            for (int t = 0; t < n; ++t) {
              store_cvt_partial<acc_t<T>, acc_t<T>>(dst + (p + t) * rows + r0, v[t], g);
            }
          }
          p = kc;
        }
#endif
        for (; p < kc; ++p) {
          for (int r = 0; r < rows; ++r) dst[p * rows + r] = to_acc(row[r][p]);
        }
      } else {
        for (int p = 0; p < kc; ++p) {
          for (int r = 0; r < rows; ++r) dst[p * rows + r] = to_acc(row[r][p * sak]);
        }
      }
    }
    dst += rows * kc;
  }
}

// B (kc x nc, element (k, j) at b[k * sbk + j * sbn]) -> panels of kNR columns, k-major, columns
// past nc zero: panel j0 at dst + j0 * kc, element (k, jj) at [k * kNR + jj].
template <typename T>
void pack_b(acc_t<T>* __restrict__ dst, const T* b, int64_t sbk, int64_t sbn, int kc, int nc) {
  using Acc = acc_t<T>;
  constexpr int NR = kNR<Acc>;
  constexpr int L = kLanes<Acc>;
  for (int jr = 0; jr < nc; jr += NR) {
    const int cols = std::min(NR, nc - jr);
    const T* src = b + jr * sbn;
    if (sbn == 1) {  // row-major B: a k's columns are contiguous
      for (int p = 0; p < kc; ++p) {
        const T* s = src + p * sbk;
        Acc* d = dst + p * NR;
        for (int v = 0; v < kTileVecs; ++v) {
          const int n = std::min(L, cols - v * L);
          if (n == L) {
            storev(d + v * L, load_cvt<Acc>(s + v * L));
          } else if (n > 0) {
            storev(d + v * L, load_cvt_partial<Acc>(s + v * L, n));
          } else {
            storev(d + v * L, Vec<Acc>{});
          }
        }
      }
    } else if (sbk == 1 && cols == NR) {  // K-contiguous (a transposed view), whole panel
      // Blocks of L columns x L k transposed in registers; the last k one by one.
      int p = 0;
      for (; p + L <= kc; p += L) {
#pragma GCC unroll 4
        for (int v = 0; v < kTileVecs; ++v) {
          Vec<Acc> blk[L];
#pragma GCC unroll 16
          for (int c = 0; c < L; ++c) blk[c] = load_cvt<Acc>(src + (v * L + c) * sbn + p);
          transpose_block<Acc>(blk);
#pragma GCC unroll 16
          for (int t = 0; t < L; ++t) storev(dst + (p + t) * NR + v * L, blk[t]);
        }
      }
      if (p < kc) {  // the last kc - p < L k: partial loads, zero-padded
        const int n = kc - p;
#pragma GCC unroll 4
        for (int v = 0; v < kTileVecs; ++v) {
          Vec<Acc> blk[L];
#pragma GCC unroll 16
          for (int c = 0; c < L; ++c) {
            blk[c] = load_cvt_partial<Acc>(src + (v * L + c) * sbn + p, n);
          }
          transpose_block<Acc>(blk);
          for (int t = 0; t < n; ++t) storev(dst + (p + t) * NR + v * L, blk[t]);
        }
      }
    } else {  // K-contiguous, or other strides: column by column
      for (int jj = 0; jj < cols; ++jj) {
        const T* s = src + jj * sbn;
        if (sbk == 1) {
          for (int p = 0; p < kc; ++p) dst[p * NR + jj] = to_acc(s[p]);
        } else {
          for (int p = 0; p < kc; ++p) dst[p * NR + jj] = to_acc(s[p * sbk]);
        }
      }
      if (cols < NR) {
        for (int p = 0; p < kc; ++p) {
          for (int jj = cols; jj < NR; ++jj) dst[p * NR + jj] = Acc(0);
        }
      }
    }
    dst += NR * kc;
  }
}

}  // namespace
}  // namespace lltm_ext::gemm::cpugemm::LLTM_GEMM_CPU_NS
