// The tensor-core GEMM's planner (gemm_tc_plan.h): a cost model of each candidate plan (the
// Hopper wgmma kernel, with operand copies where TMA cannot read an operand, or reads it slowly
// where the copy pays; the mma.sync kernel in each block tile, its stages copied 16 or 4 bytes at
// a time or register-staged, with 1 to 128 K splits), and the cheapest one.
//
// The model, per plan: a fixed cost per kernel launched, plus the larger of the math (rounds of
// resident blocks over the SMs, each block's K steps at the kernel's measured rate, or at least a
// per-step latency when few blocks run) and the memory traffic (the operands and C once, at the
// device bandwidth scaled down when few blocks run); copies and split-K reductions add their
// traffic and a launch each. Its constants are fitted to measured times of every plan over random
// shapes on an H100 (docs/gemm_notes.md: "Performance across shapes"); a plan it ranks wrongly
// costs time, never correctness.
#include "gemm/gemm_tc_plan.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

namespace lltm_ext::gemm {
namespace {

// The constants below were fitted with benchmarks/gemm_tc_plan/ (every plan's measured time on
// 120 random shapes in bfloat16 and TF32 on an H100, the sweep's seed 2): they make the model rank
// plans as measured rather than describe the hardware (kBandwidth, for one, absorbs the lower
// bandwidth of a partly busy GPU that memory_us models only roughly).
constexpr double kBandwidth = 1.37e12;   // bytes/s the model charges for memory traffic
constexpr double kLaunchUs = 2.8;        // one more kernel in the call
constexpr double kWgmmaBaseUs = 3.5;     // a wgmma call's fixed cost (maps, prologue, epilogue)
constexpr double kMmaBaseUs = 2.5;       // an mma call's
constexpr double kCopyEfficiency = 1.2;  // an operand copy's traffic relative to kBandwidth
// The row copy of an operand whose rows are 16-byte aligned (16-byte loads): bytes/s each way.
constexpr double kAlignedCopyBandwidth = 3.8e12;
// TMA's reads of rows that start inside 32-byte sectors (16-byte aligned only) slow the wgmma
// kernel by this factor times their share of its operand reads (each A tile read once per column
// of tiles, each B tile once per row); an M-major A's by less (docs/decisions.md#mid-sector-rows).
constexpr double kMidSectorCost = 0.55, kMidSectorCostMMajorA = 0.2;
// B's, where the blocks run in clusters of two that share its stages (each reads half of them,
// and multicasts it): what is left of B's slower reads (docs/decisions.md#wgmma-clusters).
constexpr double kMidSectorCostClusterB = 0.1;
constexpr double kBusyShare = 0.5;  // below this share of SMs busy, memory slows proportionally
// The same for the wgmma kernel, one block per SM: each block's TMA copies reach a bounded share
// of the bandwidth, so a grid of fewer blocks than this share of the SMs reads at about its share
// of them (H200, linear layers at M = 128: docs/decisions.md#wgmma-split-k). K splits fill them.
constexpr double kWgmmaBusyShare = 0.7;
// How far (a factor) the model must put another wgmma width ahead of the round count's pick
// before the planner takes it (docs/decisions.md#wgmma-width).
constexpr double kOtherWidthMargin = 1.3;
constexpr int64_t kMaxWorkspace = int64_t{256} << 20;  // split-K float32 partials, bytes
// The share of kBandwidth the mma kernel's 16-byte cp.async copies reach where the product is
// bound by reading its operands (a full grid of wgmma's TMA copies: all of it); set from the
// linear layers at M = 128 on an H200, where the model without it picked mma tiles that ran well
// behind wgmma. The 4-byte copies and register-staged loads keep their fitted rates: the share
// there moved their K splits off the measured best (docs/decisions.md#tc-plan-mma-memory).
constexpr double kMmaMemoryShare = 0.45;
// Float32 at full precision in three tf32 passes: the wgmma kernel's tf32 rate over this (three
// passes, and each stage's sums added before the next stage starts), and its operand copies'
// traffic over a plain copy's (4 bytes read, 8 written an element).
constexpr double kX3Slowdown = 3.0, kX3CopyBytes = 1.5;

// Dense rates at full waves, FLOP/s: wgmma per tile width (64, 128, 256), bfloat16 / float16
// (TF32 at half); mma per tile (64, 128, 256), 16-bit and TF32, aligned (cp.async) operands; the
// register-staged 64 x 64 kernel at the last two.
constexpr std::array<double, 3> kWgmmaRate = {270e12, 600e12, 650e12};
// The 256-row tile's (kWgmmaTallTiles: 256 x 152); what a round of its tiles costs against a
// round of 128 x 256 ones in the round count (wgmma_width), and the least K it is taken at (its
// rounds cost more than that at a short K), set from the 256-row tile's and the other widths'
// measured times (docs/decisions.md#wgmma-tall).
constexpr double kWgmmaTallRate = 620e12;
constexpr int64_t kTallRoundCost = 130;
constexpr int64_t kTallMinK = 1024;
constexpr std::array<double, 3> kMmaRate16 = {250e12, 380e12, 305e12};
constexpr std::array<double, 3> kMmaRateTf32 = {140e12, 141e12, 139e12};
constexpr double kMmaUnalignedRate16 = 160e12, kMmaUnalignedRateTf32 = 80e12;
// The 4-byte cp.async copies, per tile (64, 128), 16-bit and TF32, shared by the blocks that run
// at once rather than by all resident slots (math_us's by_active): their many small copies
// saturate an SM's load path, so a block running alone goes faster than one of a full SM, and a
// full GPU slower than the 16-byte copies' rates (fitted with the others fixed, on 45 shapes of
// the sweep's seed 2 that take these copies in each type and seed 1's worst, H100).
constexpr std::array<double, 2> kMmaWordsRate16 = {98e12, 130e12};
constexpr std::array<double, 2> kMmaWordsRateTf32 = {43e12, 48e12};
// The least time of one K step of one block (memory latency not hidden when few blocks run), and
// a block's fixed time (prologue, epilogue), per round of resident blocks.
constexpr double kWgmmaStepUs = 0.25, kMmaStepUs = 0.12, kMmaUnalignedStepUs = 0.45;
constexpr double kMmaWordsStepUs = 0.46;
constexpr double kWgmmaBlockUs = 1.4, kMmaBlockUs = 1.0, kMmaUnalignedBlockUs = 1.5;
constexpr double kMmaWordsBlockUs = 0.67;

int tile_index(int tile) {
  return tile == 64 ? 0 : tile == 128 ? 1 : 2;
}

// The wgmma kernel's dense rate at tile width bn: kWgmmaRate's, and between 128 and 256 the line
// through theirs.
double wgmma_rate(int bn) {
  if (bn <= 128 || bn >= 256) return kWgmmaRate[tile_index(bn)];
  return kWgmmaRate[1] + (kWgmmaRate[2] - kWgmmaRate[1]) * (bn - 128) / 128.0;
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Time of `blocks` blocks of `steps` K steps each, `resident` per SM, one step doing `flops` at
// `rate` over the whole GPU, or at least step_us per step, plus block_us per round of blocks. The
// rate is shared by every resident slot, or (by_active) by the blocks an SM runs at once.
double math_us(int64_t blocks, int64_t steps, int resident, int sms, double flops, double rate,
               double step_us, double block_us, bool by_active = false) {
  const int64_t slots = static_cast<int64_t>(sms) * resident;
  const int64_t rounds = ceil_div(blocks, slots);
  const int64_t sharing =
      by_active ? static_cast<int64_t>(sms) * std::min<int64_t>(resident, ceil_div(blocks, sms))
                : slots;
  const double per_step = std::max(flops / (rate / static_cast<double>(sharing)) * 1e6, step_us);
  return static_cast<double>(rounds) * (static_cast<double>(steps) * per_step + block_us);
}

// Time to move `bytes` with `blocks` blocks running on `sms` SMs (fewer than half the SMs busy
// reach a proportionally lower bandwidth).
double memory_us(double bytes, int64_t blocks, int sms, double busy_share = kBusyShare) {
  const double busy = std::min(1.0, static_cast<double>(blocks) / (busy_share * sms));
  return bytes / (kBandwidth * std::max(busy, 0.02)) * 1e6;
}

// An operand copy's time: the row copy of 16-byte aligned rows at its measured rate, other copies
// (2- and 4-byte loads, tf32's transposes) at the fitted one.
double copy_us(double bytes, bool aligned_rows) {
  const double rate = aligned_rows ? kAlignedCopyBandwidth : kBandwidth * kCopyEfficiency;
  return kLaunchUs + 2.0 * bytes / rate * 1e6;
}

// A wgmma block tile: width x rows.
struct WgmmaTile {
  int width, rows;
};

// The wgmma kernel's block tile: the one whose tiles take the SMs the fewest rounds, a round of
// 128-row tiles 192- / 168- / 144- / 128- / 64-wide costing 0.8 / 0.74 / 0.61 / 0.55 / 0.3 of a
// 256-wide round, and of 256 x 152 tiles kTallRoundCost / 100 (ties to the wider of 128 and 256,
// then to 256 over 192, then to those over 168, then over 144, then over 256 x 152); 168, 144 and
// the 256-row tile only where off_grid allows them (plan_wgmma), the 256-row one where `tall` does
// and K is kTallMinK or more.
WgmmaTile wgmma_width(int64_t M, int64_t N, int64_t K, int sms, bool off_grid, bool tall) {
  const int64_t tiles_m = ceil_div(M, 128);
  auto rounds = [&](int64_t bn) { return ceil_div(tiles_m * ceil_div(N, bn), sms); };
  const int64_t cost256 = rounds(256) * 100, cost128 = rounds(128) * 55, cost64 = rounds(64) * 30;
  const int64_t cost192 = rounds(192) * 80;
  int width = 0;
  int64_t cost = 0;
  if (cost64 < cost128 && cost64 < cost256 && cost64 < cost192) {
    width = 64, cost = cost64;
  } else if (cost192 < cost128 && cost192 < cost256) {
    width = 192, cost = cost192;
  } else {
    width = cost128 < cost256 ? 128 : 256;
    cost = std::min(cost128, cost256);
  }
  if (off_grid && rounds(168) * 74 < cost) width = 168, cost = rounds(168) * 74;
  if (off_grid && rounds(144) * 61 < cost) width = 144, cost = rounds(144) * 61;
  const int tall_width = kWgmmaTallTiles[0];
  const int64_t tall_cost =
      ceil_div(ceil_div(M, 256) * ceil_div(N, tall_width), sms) * kTallRoundCost;
  if (off_grid && tall && K >= kTallMinK && tall_cost < cost) return {tall_width, 256};
  return {width, 128};
}

// The width of float32 in three passes (64 or 128), by the same round count.
int x3_width(int64_t M, int64_t N, int sms) {
  const int64_t tiles_m = ceil_div(M, 128);
  auto rounds = [&](int64_t bn) { return ceil_div(tiles_m * ceil_div(N, bn), sms); };
  return rounds(64) * 30 < rounds(128) * 55 ? 64 : 128;
}

}  // namespace

bool wgmma_clusters(const TcProblem& p, const TcPlan& plan, int sms) {
  if (plan.kernel != TcKernel::kWgmma) return false;
  if (plan.tile_m == 256) {
    // The 256-row tiles: pairs of tile rows wherever they take the SMs no more rounds than the
    // tiles alone (a pair's second block idles on a last, odd tile row; a pair holds two SMs).
    const int64_t tiles_m = ceil_div(p.M, 256), tiles_n = ceil_div(p.N, plan.tile);
    const int64_t pairs = std::max<int64_t>(sms / 2, 1);
    return plan.splits <= 1 && tiles_m >= 2 &&
           ceil_div(ceil_div(tiles_m, 2) * tiles_n, pairs) <=
               ceil_div(tiles_m * tiles_n, std::max(sms, 1));
  }
  return !plan.copy_b && !p.b_sectors && plan.tile >= 128 && plan.tile % 64 == 0 && p.M > 128;
}

double tc_cost_us(const TcProblem& p, const TcDevice& dev, const TcPlan& plan) {
  const double elem = p.tf32 ? 4.0 : 2.0;
  const double a_bytes = elem * static_cast<double>(p.M) * static_cast<double>(p.K);
  const double b_bytes = elem * static_cast<double>(p.K) * static_cast<double>(p.N);
  const double c_bytes = elem * static_cast<double>(p.M) * static_cast<double>(p.N);
  const int sms = std::max(dev.sms, 1);
  if (plan.kernel == TcKernel::kWgmma) {
    const int bn = plan.tile, bm = plan.tile_m;
    const int splits = std::max(plan.splits, 1);
    const int64_t k_split = splits > 1 ? plan.k_split : p.K;
    const int64_t items = ceil_div(p.M, bm) * ceil_div(p.N, bn) * splits;
    const int64_t bk = p.tf32 ? 32 : 64;
    const double rate = (bm == 256 ? kWgmmaTallRate : wgmma_rate(bn)) * (p.tf32 ? 0.5 : 1.0) /
                        (p.x3 ? kX3Slowdown : 1.0);
    const double math = math_us(items, ceil_div(k_split, bk), 1, sms, 2.0 * bm * bn * bk, rate,
                                kWgmmaStepUs, kWgmmaBlockUs);
    const double part_bytes = splits > 1 ? 4.0 * splits * static_cast<double>(p.M) * p.N : 0.0;
    const double mem = memory_us(a_bytes + b_bytes + (splits > 1 ? part_bytes : c_bytes),
                                 std::min<int64_t>(items, sms), sms, kWgmmaBusyShare);
    const double reads_a = a_bytes * static_cast<double>(ceil_div(p.N, bn));
    const double reads_b = b_bytes * static_cast<double>(ceil_div(p.M, bm));
    double slow = 0;
    if (!plan.copy_a && !p.a_sectors) {
      slow += (p.a_kcontig ? kMidSectorCost : kMidSectorCostMMajorA) * reads_a;
    }
    if (!plan.copy_b && !p.b_sectors) {
      slow += (wgmma_clusters(p, plan, sms) ? kMidSectorCostClusterB : kMidSectorCost) * reads_b;
    }
    slow /= std::max(reads_a + reads_b, 1.0);
    double us = kWgmmaBaseUs + std::max(math, mem) * (1.0 + slow);
    if (splits > 1) us += kLaunchUs + (part_bytes + c_bytes) / kBandwidth * 1e6;
    if (p.x3) {
      us += copy_us(kX3CopyBytes * a_bytes, false) + copy_us(kX3CopyBytes * b_bytes, false);
    } else {
      if (plan.copy_a) us += copy_us(a_bytes, p.a_aligned && !(p.tf32 && !p.a_kcontig));
      if (plan.copy_b) us += copy_us(b_bytes, p.b_aligned && !(p.tf32 && !p.b_kcontig));
    }
    return us;
  }
  if (plan.kernel == TcKernel::kMma) {
    const int bm = plan.tile == 64 ? 64 : 128, bn = plan.tile;
    const int resident = plan.tile == 64 ? 4 : plan.tile == 128 ? 2 : 1;
    const int64_t tiles = ceil_div(p.M, bm) * ceil_div(p.N, bn);
    const int splits = std::max(plan.splits, 1);
    const int64_t k_split = splits > 1 ? plan.k_split : p.K;
    const int64_t bk = p.tf32 ? 16 : 32;
    double rate, step, block;
    if (plan.aligned) {
      rate = (p.tf32 ? kMmaRateTf32 : kMmaRate16)[tile_index(plan.tile)];
      step = kMmaStepUs;
      block = kMmaBlockUs;
    } else if (plan.words) {
      rate = (p.tf32 ? kMmaWordsRateTf32 : kMmaWordsRate16)[plan.tile == 64 ? 0 : 1];
      step = kMmaWordsStepUs;
      block = kMmaWordsBlockUs;
    } else {
      rate = p.tf32 ? kMmaUnalignedRateTf32 : kMmaUnalignedRate16;
      step = kMmaUnalignedStepUs;
      block = kMmaUnalignedBlockUs;
    }
    const int64_t blocks = tiles * splits;
    const double math = math_us(blocks, ceil_div(k_split, bk), resident, sms, 2.0 * bm * bn * bk,
                                rate, step, block, /*by_active=*/!plan.aligned && plan.words);
    const double part_bytes = splits > 1 ? 4.0 * splits * static_cast<double>(p.M) * p.N : 0.0;
    const double mem =
        memory_us(a_bytes + b_bytes + (splits > 1 ? part_bytes : c_bytes),
                  std::min<int64_t>(blocks, static_cast<int64_t>(sms) * resident), sms) /
        (plan.aligned ? kMmaMemoryShare : 1.0);
    double us = kMmaBaseUs + std::max(math, mem);
    if (splits > 1) us += kLaunchUs + (part_bytes + c_bytes) / kBandwidth * 1e6;
    return us;
  }
  return std::numeric_limits<double>::infinity();
}

namespace {

// The K splits a plan may take (fewer where K is short: splits of whole steps).
constexpr std::array<int, 14> kSplits = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128};

// Calls plan_with(splits, k_split) for each distinct split of K into parts of whole `step`
// elements: the forced count alone, else those of kSplits (one split only unless `split`). An
// unforced split whose float32 partials would pass kMaxWorkspace is left out; K <= 0 is one split.
template <typename F>
void for_each_split(const TcProblem& p, const TcForce& force, int64_t step, bool split,
                    F plan_with) {
  if (p.K <= 0) {
    plan_with(1, 0);
    return;
  }
  const std::array<int, 1> forced = {force.splits};
  const int* first = force.splits > 0 ? forced.data() : kSplits.data();
  const int* end = force.splits > 0 ? forced.data() + 1
                   : split          ? kSplits.data() + kSplits.size()
                                    : first + 1;
  int last = 0;
  for (const int* it = first; it != end; ++it) {
    const int64_t k_split = ceil_div(ceil_div(p.K, *it), step) * step;
    const int splits = static_cast<int>(ceil_div(p.K, k_split));
    if (splits == last && force.splits <= 0) continue;  // the same split as the last one
    last = splits;
    if (splits > 1 && force.splits <= 0 &&
        4.0 * splits * static_cast<double>(p.M) * static_cast<double>(p.N) >
            static_cast<double>(kMaxWorkspace)) {
      continue;
    }
    plan_with(splits, splits > 1 ? k_split : 0);
  }
}

// The wgmma plans with these copies: unsplit, at the width whose tiles take the SMs the fewest
// rounds; and split (whole 64-element steps) at each width whose tiles leave SMs idle, into at most
// one round of items. Forced splits: at the forced width, else that first width. Each goes to
// consider(); *best is what it has kept so far.
template <typename F>
void plan_wgmma(const TcProblem& p, const TcDevice& dev, const TcForce& force, bool copy_a,
                bool copy_b, F&& consider, TcPlan* best) {
  TcPlan plan;
  plan.kernel = TcKernel::kWgmma;
  plan.copy_a = copy_a;
  plan.copy_b = copy_b;
  const int sms = std::max(dev.sms, 1);
  // Tiles off the 64-column grid (144, 168) only for a B that reaches the kernel K-major (where it
  // is, and tf32's always: copied K-major first; an N-major B's atoms are 64 columns wide) with
  // rows whole sectors apart, as they are or copied because TMA cannot read them: those tiles run
  // without clusters, and B's rows inside sectors run faster in clusters at another width than
  // either read so or copied first (docs/decisions.md#wgmma-width).
  const bool need_b = force.copy || !p.b_aligned || (p.tf32 && !p.b_kcontig);
  const bool off_grid = !p.x3 && (p.b_kcontig || p.tf32) && (p.b_sectors || need_b);
  // The 256-row tile: 16-bit types, B read K-major, unforced or forced to it.
  const bool tall = !p.tf32 && p.b_kcontig && force.tile_m != 128;
  if (force.tile_m == 256) {
    // Forced: its width (the only one), B K-major and 16-bit, else no wgmma plan.
    if (!tall || (force.tile > 0 && force.tile != kWgmmaTallTiles[0])) return;
    plan.tile = kWgmmaTallTiles[0];
    plan.tile_m = 256;
  } else if (force.tile > 0 || p.x3) {
    plan.tile = force.tile > 0 ? force.tile : x3_width(p.M, p.N, sms);
  } else {
    const WgmmaTile t = wgmma_width(p.M, p.N, p.K, sms, off_grid, tall);
    plan.tile = t.width;
    plan.tile_m = t.rows;
  }
  auto with_split = [&](int splits, int64_t k_split) {
    plan.splits = splits;
    plan.k_split = k_split;
    consider(plan);
  };
  if (force.splits > 0) {
    for_each_split(p, force, 64, true, with_split);
    return;
  }
  consider(plan);
  if (force.tile_m == 256) return;  // unsplit only, unless forced
  // The other widths unsplit where the model puts them well ahead of the round count's width,
  // which misleads at a long K over few rounds (docs/decisions.md#wgmma-width).
  if (force.tile <= 0) {
    const double rounds_us = tc_cost_us(p, dev, plan);
    for (const int tile : {64, 128, 144, 168, 192, 256}) {
      if ((tile % 64 != 0 && !off_grid) || (p.x3 && tile > 128)) continue;
      TcPlan other = plan;
      other.tile = tile;
      other.tile_m = 128;
      other.us = tc_cost_us(p, dev, other);
      if (other.us * kOtherWidthMargin < rounds_us && other.us < best->us) *best = other;
    }
  }
  // Split at each width (a forced one of kWgmmaWideTiles too) whose tiles leave SMs idle.
  const bool wide = force.tile > 0 && force.tile != 64 && force.tile != 128 && force.tile != 256;
  const std::array<int, 4> split_widths = {64, 128, p.x3 ? 0 : 256, wide ? force.tile : 0};
  for (const int tile : split_widths) {
    if (tile == 0) continue;
    const int64_t tiles = ceil_div(p.M, 128) * ceil_div(p.N, tile);
    if ((force.tile > 0 && tile != force.tile) || tiles >= sms) continue;
    plan.tile = tile;
    plan.tile_m = 128;
    for_each_split(p, force, 64, true, [&](int splits, int64_t k_split) {
      if (splits > 1 && tiles * splits <= sms) with_split(splits, k_split);
    });
  }
}

}  // namespace

TcPlan plan_tensor_core(const TcProblem& p, const TcDevice& dev, const TcForce& force) {
  TcPlan best;
  best.us = std::numeric_limits<double>::infinity();
  auto consider = [&](TcPlan plan) {
    plan.us = tc_cost_us(p, dev, plan);
    if (plan.us < best.us) best = plan;
  };
  const bool want_wgmma = force.kernel == TcKernel::kNone || force.kernel == TcKernel::kWgmma;
  const bool want_mma = force.kernel == TcKernel::kNone || force.kernel == TcKernel::kMma;
  if (dev.wgmma && want_wgmma) {
    // TMA needs aligned operands, and tf32 wgmma K-major ones: others are copied first. Operands
    // whose rows start inside sectors may be copied too (auto only), where the model says the
    // copy costs less than TMA's slower reads (docs/decisions.md#mid-sector-rows).
    // Float32 in three passes: both operands split by a copy, always.
    const bool need_a = force.copy || p.x3 || !p.a_aligned || (p.tf32 && !p.a_kcontig);
    const bool need_b = force.copy || p.x3 || !p.b_aligned || (p.tf32 && !p.b_kcontig);
    const bool auto_plan = force.kernel == TcKernel::kNone;
    for (int choice = 0; choice < 4; ++choice) {
      const bool copy_a = need_a || (choice & 1) != 0, copy_b = need_b || (choice & 2) != 0;
      if (((choice & 1) != 0 && (need_a || p.a_sectors || !auto_plan)) ||
          ((choice & 2) != 0 && (need_b || p.b_sectors || !auto_plan))) {
        continue;  // no optional copy of that operand: the same plan as a smaller choice
      }
      plan_wgmma(p, dev, force, copy_a, copy_b, consider, &best);
    }
  }
  if (dev.mma && want_mma && !p.x3) {
    const bool aligned = p.a_aligned && p.b_aligned && !force.unaligned && !force.registers;
    const bool words = !aligned && p.a_words && p.b_words && !force.registers;
    for (const int tile : {64, 128, 256}) {
      // Register-staged loads in the 64 x 64 tile only, 4-byte copies in the 64 and 128 ones.
      const int widest = aligned ? 256 : words ? 128 : 64;
      if (tile > widest || (force.tile > 0 && tile != force.tile)) continue;
      // Splits of whole stages (32 K elements: one 16-bit stage, two tf32 ones).
      for_each_split(p, force, 32, true, [&](int splits, int64_t k_split) {
        TcPlan plan;
        plan.kernel = TcKernel::kMma;
        plan.tile = tile;
        plan.aligned = aligned;
        plan.words = words;
        plan.splits = splits;
        plan.k_split = k_split;
        consider(plan);
      });
    }
  }
  if (best.kernel == TcKernel::kNone) best.us = 0;
  best.cluster = wgmma_clusters(p, best, dev.sms) ? 2 : 1;
  return best;
}

}  // namespace lltm_ext::gemm
