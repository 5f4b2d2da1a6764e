// The CPU GEMM's blocked paths (kPacked, kRows): per-thread scratch, the blocking, and the loops
// over blocks of C, K panels and tiles, for the multiply-add tiles and (AVX-512 BF16) the pair
// tiles. Included inside a gemm_cpu_<isa>.cpp target region by gemm/cpu/driver.h.
#pragma once

namespace lltm_ext::gemm::cpugemm::LLTM_GEMM_CPU_NS {
namespace {

// ------------------------------------------------------------------------------------------------
// Scratch: per-thread buffers that grow to the largest size asked for and are kept (no allocation
// or page faults per call once warm).
// ------------------------------------------------------------------------------------------------

class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { std::free(data_); }

  template <typename U>
  U* get(int64_t count) {
    const size_t need = static_cast<size_t>(std::max<int64_t>(count, 1)) * sizeof(U);
    if (need > bytes_) {
      std::free(data_);
      data_ = nullptr;
      bytes_ = 0;
      const size_t bytes = (need + 4095) / 4096 * 4096;
      data_ = std::aligned_alloc(64, bytes);
      if (data_ == nullptr) throw std::bad_alloc();
      bytes_ = bytes;
    }
    return static_cast<U*>(data_);
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

struct Scratch {
  Buffer a, b, w, edge;
};

Scratch& thread_scratch() {
  static thread_local Scratch scratch;
  return scratch;
}

// ------------------------------------------------------------------------------------------------
// Blocking.
// ------------------------------------------------------------------------------------------------

// K panel depth, rows of a packed A block (kept in L2), columns of a B block (L3), and the rows of
// C one float workspace holds across K panels (half types, or C written transposed).
struct Blocks {
  int kc, mc, nc, mw;
};

template <typename Acc>
constexpr Blocks kBlocks = {256, 12 * kMR, 2048, 256};

constexpr Blocks kPairBlocks = {512, 12 * kMR, 2048, 256};

// A rectangle of C: rows [m0, m1), columns [n0, n1).
struct Region {
  int64_t m0, m1, n0, n1;
};

template <typename T>
const T* ptr(const void* p) {
  return static_cast<const T*>(p);
}

// ------------------------------------------------------------------------------------------------
// Blocked paths (kPacked, kRows): C in blocks, K in panels, A packed, B packed or read in place.
// ------------------------------------------------------------------------------------------------

// The multiply-add tiles over float / double panels (B packed, or, with kDirectB, read in place
// from a B whose columns are contiguous).
template <typename T, bool kDirectB>
struct FmaKernel {
  using Acc = acc_t<T>;
  using APanel = Acc;
  using BPanel = Acc;
  static constexpr int kNr = kNR<Acc>;
  static constexpr bool kDirect = kDirectB;
  static constexpr Blocks blocks() { return kBlocks<Acc>; }
  static int64_t a_size(int mc, int kc) { return static_cast<int64_t>(mc) * kc; }
  static int64_t b_size(int kc, int nc) {
    return static_cast<int64_t>(kc) * ((nc + kNr - 1) / kNr * kNr);
  }
  static const Acc* a_panel(const Acc* ap, int ir, int kc) { return ap + ir * kc; }
  static const Acc* b_panel(const Acc* bp, int jr, int kc) { return bp + jr * kc; }
  static void pack_a(Acc* dst, const T* a, int64_t sam, int64_t sak, int mc, int kc) {
    cpugemm::LLTM_GEMM_CPU_NS::pack_a(dst, a, sam, sak, mc, kc);
  }
  static void pack_b(Acc* dst, const T* b, int64_t sbk, int64_t sbn, int kc, int nc) {
    cpugemm::LLTM_GEMM_CPU_NS::pack_b(dst, b, sbk, sbn, kc, nc);
  }
  static void tile(int rows, int kc, const Acc* ap, const Acc* bp, const TileDst<Acc, T>& d,
                   int64_t i, int64_t j, int nr) {
    if (nr <= kLanes<Acc>) {  // a last panel of one vector of columns: half the tile
      kFmaTiles<Acc, Acc, T, 1>[rows](kc, ap, bp, kNr, d, i, j, nr);
    } else {
      kFmaTiles<Acc, Acc, T>[rows](kc, ap, bp, kNr, d, i, j, nr);
    }
  }
  // A tile whose B panel is read in place: kNr columns of rows bs apart.
  static void tile_direct(int rows, int kc, const Acc* ap, const T* b, int64_t bs,
                          const TileDst<Acc, T>& d, int64_t i, int64_t j) {
    kFmaTiles<Acc, T, T, kTileVecs, true>[rows](kc, ap, b, bs, d, i, j, kNr);
  }
};

#if LLTM_GEMM_CPU_LEVEL == 2
// bfloat16 on vdpbf16ps over pair-packed panels (B always packed).
struct PairKernel {
  using Acc = float;
  using APanel = uint32_t;
  using BPanel = uint32_t;
  static constexpr int kNr = kPairNR;
  static constexpr bool kDirect = false;
  static constexpr Blocks blocks() { return kPairBlocks; }
  static int64_t a_size(int mc, int kc) { return static_cast<int64_t>(mc) * ((kc + 1) / 2); }
  static int64_t b_size(int kc, int nc) {
    return static_cast<int64_t>((kc + 1) / 2) * ((nc + kNr - 1) / kNr * kNr);
  }
  static const uint32_t* a_panel(const uint32_t* ap, int ir, int kc) {
    return ap + ir * ((kc + 1) / 2);
  }
  static const uint32_t* b_panel(const uint32_t* bp, int jr, int kc) {
    return bp + jr * ((kc + 1) / 2);
  }
  static void pack_a(uint32_t* dst, const BFloat16* a, int64_t sam, int64_t sak, int mc, int kc) {
    pack_a_pairs(dst, a, sam, sak, mc, kc);
  }
  static void pack_b(uint32_t* dst, const BFloat16* b, int64_t sbk, int64_t sbn, int kc, int nc) {
    pack_b_pairs(dst, b, sbk, sbn, kc, nc);
  }
  static void tile(int rows, int kc, const uint32_t* ap, const uint32_t* bp,
                   const TileDst<float, BFloat16>& d, int64_t i, int64_t j, int nr) {
    if (nr <= 16) {
      kPairTiles<1>[rows]((kc + 1) / 2, ap, bp, d, i, j, nr);
    } else {
      kPairTiles<2>[rows]((kc + 1) / 2, ap, bp, d, i, j, nr);
    }
  }
};
#endif

// K panels up to this depth run a block's tiles row by row, deeper ones column panel by column
// panel (docs/gemm_cpu.md, "The paths": measured on 3061x2993 and 256^3).
constexpr int kRowMajorTilesMaxK = 64;

// C's region r (of p) by blocks: for each column block, K panel, row block: pack, then tiles.
// C takes the sums directly when it is float / double and row-major (unit column stride); else a
// float workspace holds mw rows of sums across K panels, and the last panel's tiles add them and
// write C (in its dtype, any strides). With one K panel, the tiles write C directly.
template <typename T, typename Kernel>
void blocked(const Problem& p, const Region& r, Scratch& s) {
  using Acc = acc_t<T>;
  using APanel = typename Kernel::APanel;
  using BPanel = typename Kernel::BPanel;
  constexpr int NR = Kernel::kNr;
  constexpr Blocks bl = Kernel::blocks();
  const T* A = ptr<T>(p.a);
  const T* B = ptr<T>(p.b);
  T* C = static_cast<T*>(p.c);
  const int64_t K = p.K;
  const bool c_direct = std::is_same_v<T, Acc> && p.scn == 1;
  const bool one_panel = K <= bl.kc;
  const int64_t mw_rows = c_direct || one_panel ? r.m1 - r.m0 : bl.mw;

  for (int64_t jc = r.n0; jc < r.n1; jc += bl.nc) {
    const int nc = static_cast<int>(std::min<int64_t>(bl.nc, r.n1 - jc));
    const int nc_full = nc / NR * NR;  // columns in whole panels
    for (int64_t mw = r.m0; mw < r.m1; mw += mw_rows) {
      const int64_t mw_end = std::min(r.m1, mw + mw_rows);
      Acc* W = c_direct || one_panel ? nullptr : s.w.get<Acc>((mw_end - mw) * nc);
      for (int64_t pc = 0; pc < K; pc += bl.kc) {
        const int kc = static_cast<int>(std::min<int64_t>(bl.kc, K - pc));
        const bool first = pc == 0;
        const bool last = pc + kc >= K;
        const BPanel* bpack = nullptr;
        const Acc* edge = nullptr;  // the last, partial panel of a B read in place, packed
        if constexpr (Kernel::kDirect) {
          if (nc_full < nc) {
            Acc* e = s.edge.get<Acc>(Kernel::b_size(kc, nc - nc_full));
            Kernel::pack_b(e, B + pc * p.sbk + (jc + nc_full) * p.sbn, p.sbk, p.sbn, kc,
                           nc - nc_full);
            edge = e;
          }
        } else {
          BPanel* bp = s.b.get<BPanel>(Kernel::b_size(kc, nc));
          Kernel::pack_b(bp, B + pc * p.sbk + jc * p.sbn, p.sbk, p.sbn, kc, nc);
          bpack = bp;
        }
        for (int64_t ic = mw; ic < mw_end; ic += bl.mc) {
          const int mc = static_cast<int>(std::min<int64_t>(bl.mc, mw_end - ic));
          APanel* ap = s.a.get<APanel>(Kernel::a_size(mc, kc));
          Kernel::pack_a(ap, A + ic * p.sam + pc * p.sak, p.sam, p.sak, mc, kc);
          // Where this block's tiles go; tile (i, j) relative to (ic, jc).
          TileDst<Acc, T> d;
          if (c_direct) {
            d.w = reinterpret_cast<Acc*>(C) + ic * p.scm + jc;
            d.ldw = p.scm;
            d.accumulate = !first;
          } else if (last) {
            d.c = C + ic * p.scm + jc * p.scn;
            d.scm = p.scm;
            d.scn = p.scn;
            if (!first) {
              d.add = W + (ic - mw) * nc;
              d.ld_add = nc;
            }
          } else {
            d.w = W + (ic - mw) * nc;
            d.ldw = nc;
            d.accumulate = !first;
          }
          const auto tile = [&](int ir, int jr) {
            const int nr = std::min(NR, nc - jr);
            const int rows = std::min(kMR, mc - ir);
            const APanel* a_panel = Kernel::a_panel(ap, ir, kc);
            if constexpr (Kernel::kDirect) {
              if (jr < nc_full) {
                Kernel::tile_direct(rows, kc, a_panel, B + pc * p.sbk + (jc + jr), p.sbk, d, ir,
                                    jr);
              } else {
                Kernel::tile(rows, kc, a_panel, edge, d, ir, jr, nr);
              }
            } else {
              Kernel::tile(rows, kc, a_panel, Kernel::b_panel(bpack, jr, kc), d, ir, jr, nr);
            }
          };
          if (kc <= kRowMajorTilesMaxK) {
            // Short K: storing C is most of the work. Row tiles walk along C's rows (kMR store
            // streams), the B block (kc x nc, small) staying in cache.
            for (int ir = 0; ir < mc; ir += kMR) {
              for (int jr = 0; jr < nc; jr += NR) tile(ir, jr);
            }
          } else {
            // Column panels outer: a panel of B (kc x NR) stays in L1 while the row tiles use it.
            for (int jr = 0; jr < nc; jr += NR) {
              for (int ir = 0; ir < mc; ir += kMR) tile(ir, jr);
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace lltm_ext::gemm::cpugemm::LLTM_GEMM_CPU_NS
