// The CPU GEMM's plan: which path and orientation a product takes, how it is cut into parts, and
// the threads that run them. gemm_cpu_<isa>.cpp includes it (and through it every kernel header)
// inside its target region; its run() is that copy's run_<isa>.
#pragma once

// (in dependency order)
#include "gemm/cpu/simd.h"
#include "gemm/cpu/tile.h"
#include "gemm/cpu/pack.h"
#include "gemm/cpu/dot.h"
#if LLTM_GEMM_CPU_LEVEL == 2
#include "gemm/cpu/bf16dot.h"
#endif
#include "gemm/cpu/blocked.h"
#if LLTM_GEMM_CPU_LEVEL == 2
#include "gemm/cpu/amx.h"
#endif
#if LLTM_GEMM_CPU_LEVEL >= 1
#include "gemm/cpu/direct.h"
#endif
#include "gemm/cpu/skinny.h"
#include "gemm/cpu/parts.h"

namespace lltm_ext::gemm::cpugemm::LLTM_GEMM_CPU_NS {
namespace {

// C^T = B^T A^T: the same product with the roles of A and B (and of C's strides) swapped.
Problem transposed(const Problem& p) {
  return Problem{p.N, p.M, p.K, p.b, p.sbn, p.sbk, p.a, p.sak, p.sam, p.c, p.scn, p.scm};
}

// The plan's thresholds (docs/gemm_cpu.md: how they were measured). kDot for rows of C up to
// kSkinny where the long operand is contiguous along K (and K >= 2 vectors and repays the sums
// across lanes: dot_suits), and up to kDotMaxRows where also K >= kDotMinK; the blocked paths
// read B in place (kRows) for up to kRowsMaxRows rows of C.
constexpr int64_t kSkinny = 8;
constexpr int64_t kDotMaxRows = 64;
constexpr int64_t kDotMinK = 128;
constexpr int64_t kRowsMaxRows = 128;
// ... and, past kRowsAnyB rows, a B of at most kRowsMaxB bytes: a larger B read in place, a panel
// of rows spread over as many pages, ran slower than packed (one core of a Xeon with AVX-512; at
// 4 MB and below, or up to 16 rows, in place won). Figures: docs/decisions_cpu.md#cpu-rows-max-b.
constexpr int64_t kRowsAnyB = 16;
constexpr double kRowsMaxB = 4.0 * 1024 * 1024;
constexpr int64_t kDotGatherN = 64;
// bfloat16 on AMX tiles (amx.h; the AVX-512 copy, where the CPU and the OS allow them): every
// product but those of K <= kAmxMinK or a single row or column of C, where storing C or streaming
// the long operand is the work and the other paths do it with less overhead, and those under
// kAmxMinMacs multiply-adds, where setting up the tiles is (figures:
// docs/decisions_cpu.md#cpu-amx-min-macs). C^T = B^T A^T (see amx_flip) from K >= kAmxFlipMinK.
constexpr int64_t kAmxMinK = 8;
constexpr double kAmxMinMacs = 4096;
constexpr int64_t kAmxFlipMinK = 32;
// kDirect (float and double, AVX2 and AVX-512 copies) for the products direct_q() describes: up to
// kDirectMaxRows rows of C, B of at most kDirectMaxB bytes, C^T from K >= kDirectFlipMinK, B
// gathered for K <= kDirectGatherK or over at least kDirectGatherN columns below K = kDotMinK,
// axpy_rows kept for more than kDirectAxpyN columns.
constexpr int64_t kDirectMaxRows = 32;
constexpr double kDirectMaxB = 2.0 * 1024 * 1024;
constexpr int64_t kDirectFlipMinK = 8;
constexpr int64_t kDirectGatherK = 16;
constexpr int64_t kDirectGatherN = 32;
constexpr int64_t kDirectAxpyN = 64;
// Whether the past-kSkinny gathers are left out (AVX-512 copy): on AMD's CPUs, where a gather
// costs more than on the Xeon these rules were fitted on, packing B ran faster at every such
// product measured (figures: docs/decisions_cpu.md#cpu-gather-max-k).
inline bool cpu_gathers_slow() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool amd = __builtin_cpu_is("amd");
  return amd;
#else
  return false;
#endif
}
// kDirect for many rows of C (direct_tall()): up to kDirectTallMaxN columns, B of at most
// kDirectTallMaxB bytes, gathered for K up to kDirectTallGatherK.
constexpr int64_t kDirectTallMaxN = 64;
// The AVX2 copy (8 float lanes, 16 registers, slower gathers) has costs and rules of its own,
// fitted on one core of an AMD EPYC of the Zen 3 kind (the CPU sweep's seed 1, every path forced
// in both orientations; docs/gemm_cpu.md). kPacked's
// orientation: an A packed from rows along K at 0.3 per element, a B at 0.75 (AVX-512: 0.3 and
// 0.3, where both go through in-register transposes) and a C stored transposed at 40 / rows per
// vector (AVX-512: 80); with the AVX-512 costs most a.T @ b.T products ran in the slower
// orientation there. kDirect gathers B only over a K of at most kDirectGatherK2 (or, for up to
// kAxpyMaxRows rows of C, kDirectGatherK), takes a few rows of C from axpy_rows at such a K
// (writing C is the work there); up to kDirectNearRows rows of C it takes the orientation that
// loads B along N where the skinny one would gather (direct_near()), and its tall case
// (direct_tall()) is tried in both orientations, C^T written transposed only from K >=
// kDirectTallFlipMinK. Figures: docs/decisions_cpu.md#cpu-avx2-rules.
constexpr double kPackKContigA = kLevel == 2 ? 0.3 : kLevel == 1 ? 0.3 : 1.0;
constexpr double kPackKContigB = kLevel == 2 ? 0.3 : 0.75;
constexpr int64_t kDirectGatherK2 = 4;
constexpr int64_t kDirectNearRows = 64;
constexpr int64_t kDirectTallFlipMinK = 32;
constexpr double kStoreTransposed = kLevel == 2 ? 80.0 : 40.0;
constexpr int64_t kDirectTallGatherK = 32;
constexpr double kDirectTallMaxB = 32.0 * 1024;
// Work per part below which a product runs on one thread: multiply-adds plus kOutputMacs per
// element of C (with small K, writing C is most of the time). 2^20 is some tens of microseconds of
// float32 on one core of the development machine. There, with the team's workers awake, two parts
// already paid at 64^3; the grain is kept larger because a woken worker on a core busy with other
// processes can hold a parallel region for a time slice of the OS scheduler, which only larger
// work can afford to risk (figures: docs/decisions_cpu.md#cpu-grain). Products of more than
// kFineParts grains are cut into two parts per thread, so that a thread slowed by other work on
// its core leaves more of the product to the others.
constexpr double kGrainMacs = 1048576.0;
constexpr double kOutputMacs = 16.0;
constexpr double kFineParts = 16.0;

// Cuts the rectangle [0, M) x [0, N) into `parts` regions, rows in multiples of kMR and columns
// of `nr` (nr_only: columns only).
Region region_of(int64_t M, int64_t N, int nr, int parts, int part, bool columns_only) {
  int64_t pm = 1, pn = parts;
  if (!columns_only) {
    // The split with the least edge (rows per part + columns per part) among parts = pm * pn.
    int64_t best = -1;
    for (int64_t d = 1; d <= parts; ++d) {
      if (parts % d != 0) continue;
      const int64_t cost = (M + d - 1) / d + (N + parts / d - 1) / (parts / d);
      if (best < 0 || cost < best) {
        best = cost;
        pm = d;
        pn = parts / d;
      }
    }
  }
  const int64_t unit_m = kMR, unit_n = nr;
  const int64_t bm = (M + unit_m - 1) / unit_m, bn = (N + unit_n - 1) / unit_n;
  const int64_t im = part / pn, in = part % pn;
  const int64_t m0 = std::min(M, bm * im / pm * unit_m),
                m1 = std::min(M, bm * (im + 1) / pm * unit_m);
  const int64_t n0 = std::min(N, bn * in / pn * unit_n),
                n1 = std::min(N, bn * (in + 1) / pn * unit_n);
  return Region{m0, m1, n0, n1};
}

template <typename T>
Report run_typed(Problem p, const Knobs& knobs) {
  using Acc = acc_t<T>;
  // Strides of extent-1 dimensions are free: call them unit so that such operands count as
  // contiguous either way.
  if (p.M == 1) p.sam = p.scm = 1;
  if (p.N == 1) p.sbn = p.scn = 1;
  if (p.K == 1) p.sak = p.sbk = 1;

  Report rep;
  bool pair_ok = false, amx_ok = false, gathers_slow = false;
#if LLTM_GEMM_CPU_LEVEL == 2
  pair_ok = std::is_same_v<T, BFloat16> && knobs.bf16_dot && cpu_has_avx512_bf16();
  amx_ok = std::is_same_v<T, BFloat16> && knobs.amx && amx_bf16_usable();
  gathers_slow = cpu_gathers_slow();
#endif
  constexpr int L = kLanes<Acc>;
  constexpr int NR = kNR<Acc>;
  // The skinny orientation: the short side of C as its rows (M), the long operand as B.
  const bool skinny_flip = p.N < p.M;
  const Problem q = skinny_flip ? transposed(p) : p;  // q.M <= q.N
  const auto fits = [](Path path, const Problem& x) {
    if (path == Path::kDirect) {
#if LLTM_GEMM_CPU_LEVEL >= 1
      return direct_fits<T>(x);
#else
      return false;
#endif
    }
    return path == Path::kPacked || (path == Path::kRows ? x.sbn == 1 : x.sbk == 1);
  };
  // kPacked's orientation: the one with the lower estimated cost (in vector multiply-adds), from
  // the work in tiles (columns round up to whole panels of NR; a last one of at most L columns
  // is one vector wide; bfloat16 pairs do two k per instruction), packing each operand (per
  // element: ~0.15 when its packed lines are contiguous in memory, ~0.3 through in-register
  // transposes, ~1 element by element; see kPackKContigB for the AVX2 copy's) and storing C (a
  // transposed C costs two L x L transposes and L stores per L columns of a tile,
  // ~kStoreTransposed / rows per vector, where a row-major C costs 1).
  const auto packed_cost = [&](const Problem& x) {
    const double m = static_cast<double>(x.M), n = static_cast<double>(x.N);
    const double k = static_cast<double>(x.K);
    const double whole = std::floor(n / NR) * NR, rest = n - whole;
    const double up_n = whole + (rest == 0 ? 0 : rest <= L ? L : NR);
    const double tiles = m * up_n * k / L / (pair_ok ? 2.0 : 1.0);
    const double a_elem = x.sam == 1 ? 0.15 : x.sak == 1 ? kPackKContigA : 1.0;
    const double b_elem = x.sbn == 1 ? 0.15 : x.sbk == 1 && n >= NR ? kPackKContigB : 1.0;
    const double packs = m * k * a_elem * std::ceil(n / 2048.0) + k * n * b_elem;
    const bool c_rows = x.scn == 1;
    const double stores = m * n / L * (c_rows ? 1.0 : kStoreTransposed / std::min<double>(m, kMR));
    return tiles + packs + stores;
  };
  // On AMX tiles (amx.h) the work is the packing and C's stores: A's tiles are read in place when
  // its rows run along K, B's rows interleaved cheaply when they run along N, and C written
  // transposed costs a transpose per 16 x 16 block. So C^T = B^T A^T only where neither holds in
  // C = A B but both do in C^T (a.T @ b.T), and K repays the transposed stores (below 32, a
  // single partial step of K, the stores are most of the work; figures:
  // docs/decisions_cpu.md#cpu-amx-flip).
  const auto amx_flip = [&] {
    return p.sak != 1 && p.sbn != 1 && p.sbk == 1 && p.sam == 1 && p.K >= kAmxFlipMinK;
  };
  const auto packed_flip = [&] {
    if (amx_ok && knobs.path == Path::kPacked) return amx_flip();
    return packed_cost(transposed(p)) < packed_cost(p);
  };
  // kDot in orientation x: its long operand contiguous along K, K of 2 vectors or more, and up to
  // kDotMaxRows rows of C where K repays reducing each element of C across the lanes: kDot beats
  // kPacked from K of about M * L / 2 in float, M * L on the bfloat16 pair kernels (measured on
  // 1500 x M x K up to kSkinny rows: M = 8 crosses at K ~ 64 in float32, ~ 128 in bfloat16; and on
  // x @ W.T up to 64 rows: docs/decisions_cpu.md#cpu-dot-rows), past kSkinny rows from K = kDotMinK
  // only, and at any such K where C is narrower than one of kPacked's panels (NR: there the panel's
  // padding and the packing cost more than the sums across lanes). A's rows must be contiguous
  // along K too, unless there are enough columns of C to repay gathering them (each A element
  // serves n) or so few rows that gathering them costs no more than packing them would (figures:
  // docs/decisions_cpu.md#cpu-dot-path).
  const int64_t dot_k_per_row = pair_ok ? L : L / 2;
  const auto dot_suits = [&](const Problem& x) {
    const bool repays = x.K >= x.M * dot_k_per_row;
    const bool few_rows = x.M <= kSkinny ? repays
                                         : x.M <= kDotMaxRows && x.K >= kDotMinK &&
                                               (repays || x.N < NR);  // (less than a panel)
    const bool a_cheap = x.sak == 1 || x.N >= kDotGatherN || x.M <= kSkinny;
    // (AVX2: a single row of C from K = L on: gathering B instead cost more there; figures:
    // docs/decisions_cpu.md#cpu-dot-path)
    const int64_t min_k = kLevel == 1 && x.M == 1 ? L : 2 * L;
    return fits(Path::kDot, x) && x.K >= min_k && few_rows && a_cheap;
  };
  // kDirect (direct.h), tried in the skinny orientation q (few rows of C: packing A would pay
  // over many columns, and packing B over many rows; here neither) where B is small enough to be
  // read again per tile of rows from cache, C is not a single dot product, and, where q is C^T, K
  // repays writing C transposed (or C is a single row or column, the same memory either way).
  // First with B's rows loaded along N (but axpy_rows keeps at most four rows of C over more than
  // kDirectAxpyN columns); then, after axpy_rows and the dot path for up to kSkinny rows, as given
  // when C has many rows over a few columns of a small B; then with B gathered, for a K short
  // enough (kDirectGatherK) that packing B would be most of the work (a transpose of a thin
  // matrix), or past kSkinny rows over at least kDirectGatherN columns, where the dot path's sums
  // across lanes cost more than the gathers, but only below kDotMinK: from there the dot path,
  // which reads B's rows along K, ran faster at every such shape measured, the most where the rows
  // are 4 KB apart (K = 1024 in float: the lines of a gather all map to one set of L1 and evict
  // each other between k steps); and not on CPUs whose gathers are slow (cpu_gathers_slow).
  // (Measured over the CPU sweep's shapes and linear layers: docs/gemm_cpu.md.)
  const auto direct_q = [&](bool gathered) {
    if (!fits(Path::kDirect, q) || q.M > kDirectMaxRows || q.N < 2) return false;
    if (static_cast<double>(q.K) * static_cast<double>(q.N) * sizeof(T) > kDirectMaxB) {
      return false;
    }
    if (skinny_flip && q.K < kDirectFlipMinK && q.M > 1) return false;
    if (!gathered) {
      return q.sbn == 1 &&
             (q.M > kAxpyMaxRows || q.N <= kDirectAxpyN || (kLevel == 1 && q.K <= kDirectGatherK2));
    }
    if constexpr (kLevel == 1) {
      return q.sbn != 1 &&
             (q.K <= kDirectGatherK2 || (q.M <= kAxpyMaxRows && q.K <= kDirectGatherK));
    }
    return q.sbn != 1 && (q.K <= kDirectGatherK || (!gathers_slow && q.M > kSkinny &&
                                                    q.N >= kDirectGatherN && q.K < kDotMinK));
  };
  // (AVX2 copy) kDirect in whichever orientation x loads B along N, up to kDirectNearRows rows of
  // C there, B small enough to be read again per tile of rows (as direct_q), and C written
  // transposed only past kDirectFlipMinK.
  const auto direct_near = [&](const Problem& x, bool x_flipped) {
    if constexpr (kLevel != 1) return false;
    if (!fits(Path::kDirect, x) || x.sbn != 1 || x.M > kDirectNearRows || x.N < 2) return false;
    if (static_cast<double>(x.K) * static_cast<double>(x.N) * sizeof(T) > kDirectMaxB) {
      return false;
    }
    return !(x_flipped && x.K < kDirectFlipMinK && x.M > 1);
  };
  // kDirect as given when C has many rows and few columns: up to kDirectTallMaxN columns of a B
  // small enough to stay in L1 (its rows loaded along N, or gathered for K up to
  // kDirectTallGatherK), A's rows along K: one panel of columns, A read once, nothing packed (the
  // packed paths pack all of A to use it for those few columns).
  const auto direct_tall_of = [&](const Problem& x) {
    return fits(Path::kDirect, x) && x.sak == 1 && x.N >= 2 && x.N <= kDirectTallMaxN &&
           (x.sbn == 1 || (kLevel == 2 && x.K <= kDirectTallGatherK)) &&
           static_cast<double>(x.K) * static_cast<double>(x.N) * sizeof(T) <= kDirectTallMaxB;
  };
  // (as given, C is the skinny one where !skinny_flip: direct_q's case; the AVX2 copy also tries
  // C^T = B^T A^T there, written transposed from K >= kDirectTallFlipMinK)
  const auto direct_tall = [&] { return skinny_flip && direct_tall_of(p); };
  const auto direct_tall_flipped = [&] {
    return kLevel == 1 && !skinny_flip && p.K >= kDirectTallFlipMinK &&
           direct_tall_of(transposed(p));
  };
  Path path = knobs.path;
  bool flipped = false;
  // (a forced kPacked runs on AMX tiles wherever they can run; an automatic choice only where
  // they pay)
  bool amx = amx_ok && path == Path::kPacked;
  if (path == Path::kAuto && amx_ok && p.K > kAmxMinK && p.M > 1 && p.N > 1 &&
      static_cast<double>(p.M) * static_cast<double>(p.N) * static_cast<double>(p.K) >=
          kAmxMinMacs) {
    path = Path::kPacked;
    flipped = amx_flip();
    amx = true;
  } else if (path == Path::kAuto && direct_q(/*gathered=*/false)) {
    path = Path::kDirect;
    flipped = skinny_flip;
  } else if (path == Path::kAuto) {
    const bool rows_q = fits(Path::kRows, q), dot_q = fits(Path::kDot, q);
    const Problem o = transposed(q);  // the other orientation (o.M >= o.N)
    if (rows_q && q.M <= kAxpyMaxRows && !(dot_q && q.N == 1 && q.K > 1)) {
      path = Path::kRows;  // a few rows of C streaming B (GEMV-like)
      flipped = skinny_flip;
    } else if (q.M <= kSkinny && dot_suits(q)) {
      path = Path::kDot;
      flipped = skinny_flip;
    } else if (q.M <= kSkinny && dot_suits(o)) {
      path = Path::kDot;
      flipped = !skinny_flip;
    } else if (direct_tall()) {
      path = Path::kDirect;
    } else if (direct_tall_flipped()) {
      path = Path::kDirect;
      flipped = true;
    } else if (direct_q(/*gathered=*/true)) {
      path = Path::kDirect;
      flipped = skinny_flip;
    } else if (direct_near(q, skinny_flip)) {
      path = Path::kDirect;
      flipped = skinny_flip;
    } else if (direct_near(o, !skinny_flip)) {
      path = Path::kDirect;
      flipped = !skinny_flip;
    } else if (dot_suits(q)) {
      path = Path::kDot;
      flipped = skinny_flip;
    } else if (dot_suits(o)) {
      path = Path::kDot;
      flipped = !skinny_flip;
    } else {
      flipped = packed_flip();
      const Problem& x = flipped ? transposed(p) : p;
      // (bfloat16 on the pair kernels: kPacked runs vdpbf16ps, twice the multiply-adds of kRows)
      const int64_t rows_max = pair_ok ? 0 : kRowsMaxRows;
      const bool b_small =
          x.M <= kRowsAnyB ||
          static_cast<double>(x.K) * static_cast<double>(x.N) * sizeof(T) <= kRowsMaxB;
      path = fits(Path::kRows, x) && x.M <= rows_max && b_small ? Path::kRows : Path::kPacked;
    }
  } else if (knobs.transpose >= 0) {  // a forced orientation: the path, or kPacked, runs in it
    flipped = knobs.transpose != 0;
    if (!fits(path, flipped ? transposed(p) : p)) path = Path::kPacked;
  } else if (path == Path::kPacked) {
    flipped = packed_flip();
  } else if (path == Path::kDirect && fits(path, p)) {
    // B loaded along N rather than gathered, then C written along its rows
    const Problem t = transposed(p);
    flipped = p.sbn != 1 && t.sbn == 1 ? true : p.sbn == 1 && t.sbn != 1 ? false : p.scn != 1;
  } else if (fits(path, q)) {
    flipped = skinny_flip;
  } else if (fits(path, transposed(q))) {
    flipped = !skinny_flip;
  } else {
    path = Path::kPacked;
    flipped = packed_flip();
  }
  const Problem run = flipped ? transposed(p) : p;
  rep.path = path;
  rep.transposed = flipped;
  rep.amx = amx && path == Path::kPacked;
  rep.bf16_dot = pair_ok && path != Path::kRows && !rep.amx;

  const int threads = std::max(1, at::get_num_threads());
  const double outputs = static_cast<double>(p.M) * static_cast<double>(p.N);
  const double work = outputs * (static_cast<double>(p.K) + kOutputMacs);
  const int most = work > kFineParts * kGrainMacs ? 2 * threads : threads;
  int parts = knobs.parts > 0 ? knobs.parts
                              : static_cast<int>(std::clamp<double>(work / kGrainMacs, 1, most));
  if (threads == 1 && knobs.parts <= 0) parts = 1;

#if LLTM_GEMM_CPU_LEVEL >= 1
  if (path == Path::kDirect) {
    const int64_t units = (run.M + kMR - 1) / kMR * ((run.N + NR - 1) / NR);
    parts = static_cast<int>(std::min<int64_t>(parts, units));
    rep.parts = parts;
    run_parts(parts, [&](int part) {
      const Region r = region_of(run.M, run.N, NR, parts, part, /*columns_only=*/false);
      if (r.m0 < r.m1 && r.n0 < r.n1) direct_blocked<T>(run, r);
    });
    return rep;
  }
#endif
  if (path == Path::kDot) {
    const int64_t groups = (run.N + kDotJB - 1) / kDotJB;
    parts = static_cast<int>(std::min<int64_t>(parts, groups));
    rep.parts = parts;
    run_parts(parts, [&](int part) {
      const Region r = region_of(run.M, run.N, kDotJB, parts, part, /*columns_only=*/true);
      if (r.n0 >= r.n1) return;
#if LLTM_GEMM_CPU_LEVEL == 2
      if constexpr (std::is_same_v<T, BFloat16>) {
        if (rep.bf16_dot) {
          pair_dot_columns(run, r, thread_scratch());
          return;
        }
      }
#endif
      dot_columns<T>(run, r, thread_scratch());
    });
    return rep;
  }

  const bool columns_only = path == Path::kRows;
  const int64_t units = (columns_only ? 1 : (run.M + kMR - 1) / kMR) * ((run.N + NR - 1) / NR);
  parts = static_cast<int>(std::min<int64_t>(parts, units));
  rep.parts = parts;
  run_parts(parts, [&](int part) {
    const Region r = region_of(run.M, run.N, NR, parts, part, columns_only);
    if (r.m0 >= r.m1 || r.n0 >= r.n1) return;
    Scratch& s = thread_scratch();
    if (path == Path::kRows) {
      if (run.M <= kAxpyMaxRows) {
        axpy_columns<T>(run, r, s);
      } else {
        blocked<T, FmaKernel<T, true>>(run, r, s);
      }
      return;
    }
#if LLTM_GEMM_CPU_LEVEL == 2
    if constexpr (std::is_same_v<T, BFloat16>) {
      if (rep.amx) {
        amx_blocked(run, r, s);
        return;
      }
      if (rep.bf16_dot) {
        blocked<T, PairKernel>(run, r, s);
        return;
      }
    }
#endif
    blocked<T, FmaKernel<T, false>>(run, r, s);
  });
  return rep;
}

Report run(Dtype dtype, const Problem& p, const Knobs& knobs) {
  switch (dtype) {
    case Dtype::kFloat:
      return run_typed<float>(p, knobs);
    case Dtype::kDouble:
      return run_typed<double>(p, knobs);
    case Dtype::kBFloat16:
      return run_typed<BFloat16>(p, knobs);
    case Dtype::kHalf:
      return run_typed<Half>(p, knobs);
  }
  return Report{};
}
}  // namespace
}  // namespace lltm_ext::gemm::cpugemm::LLTM_GEMM_CPU_NS
