// bfloat16 products on AMX tiles (AMX-BF16: tdpbf16ps, a 16 x 16 float tile += a 16 x 32 bfloat16
// tile of A times a 32 x 16 one of B, products exact, sums in float): the tile layout, the packing
// into it, the tile kernels and the blocked loops. Included by gemm/cpu/driver.h in the AVX-512
// copy only, after gemm/cpu/blocked.h; the code that runs tile instructions gets its own target
// region, and runs only where amx_bf16_usable() says the CPU and the OS allow it.
#pragma once

#if LLTM_GEMM_CPU_LEVEL != 2
#error "gemm/cpu/amx.h is for the AVX-512 copy"
#endif

namespace lltm_ext::gemm::cpugemm::LLTM_GEMM_CPU_NS {
namespace {

// Whether this process may run the AMX-BF16 kernels: the CPU has AMX-TILE, AMX-BF16 and AVX-512
// BF16 (the kernels round C with vcvtneps2bf16), and the OS lets the process use the tile data
// (Linux enables it per process on request: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA),
// which oneDNN and every other AMX user make too). Asked once.
bool amx_bf16_usable() {
  static const bool usable = [] {
#if defined(__linux__)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
    const bool tile = ((edx >> 24) & 1u) != 0, bf16 = ((edx >> 22) & 1u) != 0;
    if (!tile || !bf16 || !cpu_has_avx512_bf16()) return false;
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
  }();
  return usable;
}

// The tiles: an A tile is 16 rows x 32 k of bfloat16 (64 bytes a row), a B tile 16 pairs of k x 16
// columns (each column's pair, k = 2q and 2q + 1, in one 32-bit word, the low half the even k), a
// C tile 16 x 16 floats. Packed blocks hold whole tiles, 1 KB each, contiguous, zero past the
// operand's edges: A in groups of 16 rows, a group's tiles along K (group g, step s at
// (g * steps + s) * kATile bfloat16s); B in groups of 16 columns likewise (kBTile words a tile).
constexpr int kAmxRows = 16;
constexpr int kAmxK = 32;
constexpr int kATile = kAmxRows * kAmxK;  // bfloat16s
constexpr int kBTile = kAmxRows * 16;     // uint32 pairs

// Blocking: K panels of kAmxKc (the tiles accumulate over a whole panel; a float workspace of
// kAmxMw rows of C holds the sums across panels), blocks of kAmxNc columns of B (packed once a
// panel: 1 MB at most, in L2) and of kAmxMc rows of A (the tiles a block's rows take from A or
// its packed copy). Over products of 20-8227 rows on the development machine (one core of a Xeon
// with AMX), shallower panels ran slower; other blocks of rows (32-256) and columns (256-1024)
// moved it by less than the runs' spread. Figures: docs/decisions_cpu.md#cpu-amx-blocking.
constexpr int kAmxKc = 1024;
constexpr int kAmxMc = 128;
constexpr int kAmxNc = 512;
constexpr int kAmxMw = 512;

inline int amx_steps(int kc) {
  return (kc + kAmxK - 1) / kAmxK;
}
inline int round16(int64_t n) {
  return static_cast<int>((n + 15) / 16 * 16);
}

// 16 bfloat16s (a __m256i) of rows k and k + 1 -> 16 pairs (k, k + 1) as 32-bit words. (The
// zero-masked forms: the plain ones make GCC 12 warn about an undefined source vector.)
inline __m512i pairs_of(__m256i even, __m256i odd) {
  constexpr __mmask16 kAll = 0xFFFF;
  return _mm512_or_si512(_mm512_maskz_cvtepu16_epi32(kAll, even),
                         _mm512_maskz_slli_epi32(kAll, _mm512_maskz_cvtepu16_epi32(kAll, odd), 16));
}

inline __mmask16 mask16(int n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}
inline __mmask32 mask32(int n) {
  return n >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << n) - 1);
}

// A (mc x kc, element (i, k) at a[i * sam + k * sak]) -> A tiles (layout above).
void amx_pack_a(uint16_t* __restrict__ dst, const BFloat16* a, int64_t sam, int64_t sak, int mc,
                int kc) {
  const int steps = amx_steps(kc);
  for (int g = 0; g < mc; g += kAmxRows) {
    const int rows = std::min(kAmxRows, mc - g);
    uint16_t* tiles = dst + static_cast<int64_t>(g / kAmxRows) * steps * kATile;
    if (sak == 1) {  // rows contiguous along K: each tile row is (up to) 64 bytes of a row
      for (int r = 0; r < kAmxRows; ++r) {
        for (int s = 0; s < steps; ++s) {
          __m512i v = _mm512_setzero_si512();
          if (r < rows) {
            v = _mm512_maskz_loadu_epi16(mask32(kc - s * kAmxK), a + (g + r) * sam + s * kAmxK);
          }
          _mm512_storeu_si512(tiles + s * kATile + r * kAmxK, v);
        }
      }
    } else if (sam == 1) {  // columns contiguous (a transposed view): pairs, then transposed
      const __mmask16 m = mask16(rows);
      const BFloat16* src = a + g;
      for (int s = 0; s < steps; ++s) {
        Vec<float> blk[16];  // blk[q]: the pairs of k = 2q, 2q + 1 of the 16 rows
        for (int q = 0; q < 16; ++q) {
          const int k = s * kAmxK + 2 * q;
          const __m256i even =
              k < kc ? _mm256_maskz_loadu_epi16(m, src + k * sak) : _mm256_setzero_si256();
          const __m256i odd = k + 1 < kc ? _mm256_maskz_loadu_epi16(m, src + (k + 1) * sak)
                                         : _mm256_setzero_si256();
          blk[q] = reinterpret_cast<Vec<float>>(pairs_of(even, odd));
        }
        transpose_block<float>(blk);  // blk[r]: row r's 16 pairs, i.e. its 32 k
        for (int r = 0; r < kAmxRows; ++r) {
          storev(reinterpret_cast<float*>(tiles + s * kATile + r * kAmxK), blk[r]);
        }
      }
    } else {  // other strides: element by element
      for (int s = 0; s < steps; ++s) {
        for (int r = 0; r < kAmxRows; ++r) {
          for (int kk = 0; kk < kAmxK; ++kk) {
            const int k = s * kAmxK + kk;
            tiles[s * kATile + r * kAmxK + kk] =
                r < rows && k < kc ? a[(g + r) * sam + k * sak].x : uint16_t{0};
          }
        }
      }
    }
  }
}

// B (kc x nc, element (k, j) at b[k * sbk + j * sbn]) -> B tiles (layout above).
void amx_pack_b(uint32_t* __restrict__ dst, const BFloat16* b, int64_t sbk, int64_t sbn, int kc,
                int nc) {
  const int steps = amx_steps(kc);
  for (int h = 0; h < nc; h += 16) {
    const int cols = std::min(16, nc - h);
    uint32_t* tiles = dst + static_cast<int64_t>(h / 16) * steps * kBTile;
    const BFloat16* src = b + h * sbn;
    if (sbn == 1) {  // rows contiguous along N: rows k and k + 1 interleaved, 32 columns a pass
      if (h % 32 != 0) continue;  // (done with the group before it)
      const __mmask32 m = mask32(nc - h);
      const __m512i lo_idx = pair_lanes(0), hi_idx = pair_lanes(16);  // columns 0-15, 16-31
      uint32_t* next = tiles + static_cast<int64_t>(steps) * kBTile;  // the group of columns 16-31
      const bool two = nc - h > 16;
      for (int s = 0; s < steps; ++s) {
        for (int q = 0; q < 16; ++q) {
          const int k = s * kAmxK + 2 * q;
          const __m512i even =
              k < kc ? _mm512_maskz_loadu_epi16(m, src + k * sbk) : _mm512_setzero_si512();
          const __m512i odd = k + 1 < kc ? _mm512_maskz_loadu_epi16(m, src + (k + 1) * sbk)
                                         : _mm512_setzero_si512();
          _mm512_storeu_si512(tiles + s * kBTile + q * 16,
                              _mm512_permutex2var_epi16(even, lo_idx, odd));
          if (two) {
            _mm512_storeu_si512(next + s * kBTile + q * 16,
                                _mm512_permutex2var_epi16(even, hi_idx, odd));
          }
        }
      }
    } else if (sbk == 1) {  // columns contiguous along K: a column's pairs are 32-bit words
      for (int s = 0; s < steps; ++s) {
        const __mmask32 m = mask32(kc - s * kAmxK);
        Vec<float> blk[16];  // blk[c]: column c's 16 pairs
        for (int c = 0; c < 16; ++c) {
          blk[c] = c < cols ? reinterpret_cast<Vec<float>>(
                                  _mm512_maskz_loadu_epi16(m, src + c * sbn + s * kAmxK))
                            : Vec<float>{};
        }
        transpose_block<float>(blk);  // blk[q]: pair q of the 16 columns
        for (int q = 0; q < 16; ++q) {
          storev(reinterpret_cast<float*>(tiles + s * kBTile + q * 16), blk[q]);
        }
      }
    } else {  // other strides: element by element
      for (int s = 0; s < steps; ++s) {
        for (int q = 0; q < 16; ++q) {
          const int k = s * kAmxK + 2 * q;
          for (int c = 0; c < 16; ++c) {
            const uint32_t even = c < cols && k < kc ? src[k * sbk + c * sbn].x : 0u;
            const uint32_t odd = c < cols && k + 1 < kc ? src[(k + 1) * sbk + c * sbn].x : 0u;
            tiles[s * kBTile + q * 16 + c] = even | (odd << 16);
          }
        }
      }
    }
  }
}

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,f16c,avx512bf16,amx-tile,amx-bf16")

// The tile configuration every kernel runs with: palette 1, tiles 0-7 all 16 rows of 64 bytes (C
// tiles 0-3, A tiles 4-5, B tiles 6-7).
struct alignas(64) AmxConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

// Where a kernel reads the A tiles of one group of 16 rows: step s's tile at p + s * step
// (bfloat16s), its rows ld bytes apart (A itself, or a packed block); and, where K's last step is
// partial, that step's tile packed with zeros past K (tail, rows 64 bytes apart), else nullptr.
struct ATiles {
  const uint16_t* p;
  int64_t step;
  int64_t ld;
  const uint16_t* tail;
};

// Where a kernel's C tiles go: the float workspace w (row stride ldw floats), read first when
// `accumulate`; and, with `c` set (the last K panel), the bfloat16 C at c (strides scm, scn), rows
// x cols of the block's 32 x 32, through a 32 x 32 float scratch (then w is not written).
struct CTiles {
  float* w;
  int64_t ldw;
  bool accumulate;
  BFloat16* c;
  int64_t scm, scn;
  int rows, cols;
};

void amx_store_c(const float* w, int64_t ldw, int rows, int cols, BFloat16* c, int64_t scm,
                 int64_t scn);

// A TM x TN block of C tiles (TM, TN in 1, 2: up to 32 x 32) += TM groups of A tiles (a0, a1)
// times TN columns of B tiles (b, the next b_group words on), over `steps` steps of K (the last of
// them the tails', if any). (The tile intrinsics are asm statements that do not tell the compiler
// which memory they read and write: keeping them in this function, never inlined, orders them
// after the packing and before the stores of C.)
template <int TM, int TN>
__attribute__((noinline)) void amx_block(int steps, const ATiles& a0, const ATiles& a1,
                                         const uint32_t* b, int64_t b_group, const CTiles& d) {
  alignas(64) float scratch[32 * 32];
  float* const w = d.c != nullptr ? scratch : d.w;
  const int64_t ld = (d.c != nullptr ? 32 : d.ldw) * static_cast<int64_t>(sizeof(float));
  float* const w1 = w + 16 * (d.c != nullptr ? 32 : d.ldw);
  if (d.accumulate) {
    const int64_t in = d.ldw * static_cast<int64_t>(sizeof(float));
    _tile_loadd(0, d.w, in);
    if constexpr (TN > 1) _tile_loadd(1, d.w + 16, in);
    if constexpr (TM > 1) _tile_loadd(2, d.w + 16 * d.ldw, in);
    if constexpr (TM > 1 && TN > 1) _tile_loadd(3, d.w + 16 * d.ldw + 16, in);
  } else {
    _tile_zero(0);
    if constexpr (TN > 1) _tile_zero(1);
    if constexpr (TM > 1) _tile_zero(2);
    if constexpr (TM > 1 && TN > 1) _tile_zero(3);
  }
  const uint32_t* b1 = b + b_group;
  const int full = a0.tail != nullptr ? steps - 1 : steps;
  const uint16_t* p0 = a0.p;
  const uint16_t* p1 = a1.p;
  for (int s = 0; s < steps; ++s) {
    const bool tail = s == full;
    if (tail) {
      _tile_loadd(4, a0.tail, 64);
    } else {
      _tile_loadd(4, p0, a0.ld);
    }
    _tile_loadd(6, b + s * kBTile, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (TN > 1) {
      _tile_loadd(7, b1 + s * kBTile, 64);
      _tile_dpbf16ps(1, 4, 7);
    }
    if constexpr (TM > 1) {
      if (tail) {
        _tile_loadd(5, a1.tail, 64);
      } else {
        _tile_loadd(5, p1, a1.ld);
      }
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (TN > 1) _tile_dpbf16ps(3, 5, 7);
    }
    p0 += a0.step;
    p1 += a1.step;
  }
  _tile_stored(0, w, ld);
  if constexpr (TN > 1) _tile_stored(1, w + 16, ld);
  if constexpr (TM > 1) _tile_stored(2, w1, ld);
  if constexpr (TM > 1 && TN > 1) _tile_stored(3, w1 + 16, ld);
  if (d.c != nullptr) amx_store_c(scratch, 32, d.rows, d.cols, d.c, d.scm, d.scn);
}

// 16 floats rounded to bfloat16 (nearest even).
LLTM_GEMM_INLINE __m256bh to_bf16(Vec<float> x) {
  return _mm512_cvtneps_pbh(reinterpret_cast<__m512>(x));
}

// Rows x cols of a float workspace w (row stride ldw) -> C (bfloat16, strides scm / scn), rounded
// to nearest even (vcvtneps2bf16).
void amx_store_c(const float* w, int64_t ldw, int rows, int cols, BFloat16* c, int64_t scm,
                 int64_t scn) {
  if (scn == 1) {
    // (Plain stores where 16 columns remain: a masked store that crosses a cache line costs
    // several times more, and C's rows are rarely 32-byte aligned.)
    const int whole = cols / 16 * 16;
    for (int r = 0; r < rows; ++r) {
      BFloat16* row = c + r * scm;
      int j = 0;
      for (; j < whole; j += 16) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + j),
                            reinterpret_cast<__m256i>(to_bf16(loadv(w + r * ldw + j))));
      }
      if (j < cols) {
        _mm256_mask_storeu_epi16(row + j, mask16(cols - j),
                                 reinterpret_cast<__m256i>(to_bf16(loadv(w + r * ldw + j))));
      }
    }
  } else if (scm == 1) {  // C written transposed: 16 x 16 blocks transposed in registers
    for (int r0 = 0; r0 < rows; r0 += 16) {
      for (int j0 = 0; j0 < cols; j0 += 16) {
        Vec<float> blk[16];
        for (int t = 0; t < 16; ++t) blk[t] = loadv(w + (r0 + t) * ldw + j0);
        transpose_block<float>(blk);  // blk[j]: column j0 + j, rows r0 .. r0 + 15
        for (int j = 0; j < std::min(16, cols - j0); ++j) {
          _mm256_mask_storeu_epi16(c + (j0 + j) * scn + r0, mask16(rows - r0),
                                   reinterpret_cast<__m256i>(to_bf16(blk[j])));
        }
      }
    }
  } else {
    for (int r = 0; r < rows; ++r) {
      for (int j = 0; j < cols; ++j) c[r * scm + j * scn] = BFloat16(w[r * ldw + j]);
    }
  }
}

// C's region r (of p, bfloat16) on the tiles. Per block of kAmxNc columns and window of rows
// (the whole region when K fits one panel), K in panels of kAmxKc: B's panel packed once for the
// window, then per block of kAmxMc rows, A's tiles read in place where A's rows are contiguous
// along K (only a partial group of rows and K's partial last step packed), else packed. The sums
// of all but the last panel go to a float workspace; the last panel's go straight to C.
void amx_blocked(const Problem& p, const Region& r, Scratch& s) {
  static const AmxConfig config;
  _tile_loadconfig(&config);
  const BFloat16* A = ptr<BFloat16>(p.a);
  const BFloat16* B = ptr<BFloat16>(p.b);
  BFloat16* C = static_cast<BFloat16*>(p.c);
  const bool one_panel = p.K <= kAmxKc;
  const bool a_direct = p.sak == 1;
  const int64_t window = one_panel ? r.m1 - r.m0 : kAmxMw;
  for (int64_t jc = r.n0; jc < r.n1; jc += kAmxNc) {
    const int nc = static_cast<int>(std::min<int64_t>(kAmxNc, r.n1 - jc));
    const int ncp = round16(nc), col_tiles = ncp / 16;
    for (int64_t mw = r.m0; mw < r.m1; mw += window) {
      const int rows_w = static_cast<int>(std::min<int64_t>(window, r.m1 - mw));
      float* W = one_panel ? nullptr : s.w.get<float>(static_cast<int64_t>(round16(rows_w)) * ncp);
      for (int64_t pc = 0; pc < p.K; pc += kAmxKc) {
        const int kc = static_cast<int>(std::min<int64_t>(kAmxKc, p.K - pc));
        const int steps = amx_steps(kc);
        const bool last = pc + kc >= p.K, partial_k = kc % kAmxK != 0;
        const int64_t b_group = static_cast<int64_t>(steps) * kBTile;
        uint32_t* bp = s.b.get<uint32_t>(col_tiles * b_group);
        amx_pack_b(bp, B + pc * p.sbk + jc * p.sbn, p.sbk, p.sbn, kc, nc);
        for (int ic = 0; ic < rows_w; ic += kAmxMc) {
          const int mc = std::min(kAmxMc, rows_w - ic);
          const int row_tiles = round16(mc) / 16;
          const BFloat16* a_block = A + (mw + ic) * p.sam + pc * p.sak;
          ATiles groups[kAmxMc / 16];  // the A tiles of each group of 16 rows
          if (a_direct) {
            // Packed: K's partial last step of each whole group, and a partial group entire.
            const int tails = partial_k ? row_tiles : 0;
            uint16_t* packed = s.a.get<uint16_t>(static_cast<int64_t>(kATile) * (tails + steps));
            uint16_t* edge = packed + static_cast<int64_t>(kATile) * tails;
            for (int g = 0; g < row_tiles; ++g) {
              const int rows = std::min(16, mc - g * 16);
              const BFloat16* a_group = a_block + g * 16 * p.sam;
              if (rows < 16) {
                amx_pack_a(edge, a_group, p.sam, p.sak, rows, kc);
                groups[g] =
                    ATiles{edge, kATile, 64, partial_k ? edge + (steps - 1) * kATile : nullptr};
                continue;
              }
              const uint16_t* tail = nullptr;
              if (partial_k) {
                uint16_t* t = packed + g * kATile;
                amx_pack_a(t, a_group + (steps - 1) * kAmxK, p.sam, p.sak, 16,
                           kc - (steps - 1) * kAmxK);
                tail = t;
              }
              groups[g] =
                  ATiles{reinterpret_cast<const uint16_t*>(a_group), kAmxK, p.sam * 2, tail};
            }
          } else {
            uint16_t* ap = s.a.get<uint16_t>(static_cast<int64_t>(row_tiles) * steps * kATile);
            amx_pack_a(ap, a_block, p.sam, p.sak, mc, kc);
            for (int g = 0; g < row_tiles; ++g) {
              const uint16_t* t = ap + static_cast<int64_t>(g) * steps * kATile;
              groups[g] = ATiles{t, kATile, 64, partial_k ? t + (steps - 1) * kATile : nullptr};
            }
          }
          // Row pairs outer: C is written along its rows (down a column of tiles, short-K
          // products wrote slower; figures: docs/decisions_cpu.md#cpu-amx-loop-order), and a pair's
          // A tiles stay in L1 across the columns.
          for (int it = 0; it < row_tiles; it += 2) {
            const ATiles& g0 = groups[it];
            const bool two_rows = it + 1 < row_tiles;
            const ATiles& g1 = two_rows ? groups[it + 1] : g0;
            const int64_t row = ic + it * 16;
            for (int jt = 0; jt < col_tiles; jt += 2) {
              const uint32_t* bt = bp + jt * b_group;
              const bool two_cols = jt + 1 < col_tiles;
              CTiles d{};
              if (!one_panel) {
                d.w = W + row * ncp + jt * 16;
                d.ldw = ncp;
                d.accumulate = pc > 0;
              }
              if (last) {
                d.c = C + (mw + row) * p.scm + (jc + jt * 16) * p.scn;
                d.scm = p.scm;
                d.scn = p.scn;
                d.rows = static_cast<int>(std::min<int64_t>(32, mc - it * 16));
                d.cols = std::min(32, nc - jt * 16);
              }
              if (two_rows && two_cols) {
                amx_block<2, 2>(steps, g0, g1, bt, b_group, d);
              } else if (two_rows) {
                amx_block<2, 1>(steps, g0, g1, bt, b_group, d);
              } else if (two_cols) {
                amx_block<1, 2>(steps, g0, g1, bt, b_group, d);
              } else {
                amx_block<1, 1>(steps, g0, g1, bt, b_group, d);
              }
            }
          }
        }
      }
    }
  }
  _tile_release();
}

#pragma GCC pop_options

}  // namespace
}  // namespace lltm_ext::gemm::cpugemm::LLTM_GEMM_CPU_NS
