// The float32 CUDA GEMM's schedule heuristic (gemm_heuristic.h): for each candidate tile config,
// an estimate of the time of full-GPU waves of blocks plus the split-K reduction, for each K split
// and tail split; the cheapest wins. Plain C++: in both the CPU and the CUDA module.
#include "gemm/gemm_heuristic.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <limits>
#include <type_traits>
#include <utility>

namespace lltm_ext::gemm {
namespace {

// The candidates and their sustained float32 rates relative to each other with the GPU full, for
// an MN-contiguous B (row-major) and a K-contiguous one (a transposed view, as in backward's
// grad_c @ b.T), where both operands of a @ b.T need transposing (docs/gemm_notes.md,
// "K-contiguous operands" and "Both operands K-contiguous"), and each candidate's fixed work per
// block (prologue, epilogue) in K elements of its tile. Config 11 (256 x 128, A through registers
// and B through staging tiles in a @ b.T) is a candidate only for a K-contiguous B (rate 0: not a
// candidate): it beat config 2 on a @ b.T and config 1 on a.T @ b.T at 4096^3. Configs 12-15 are a
// 128 x 128 tile of 8 warps, a 128 x 64 one, and the narrow 128 x 32 and 32 x 128 tiles (outputs
// of few columns, resp. rows). All fitted with the model to every schedule's measured time over
// 128 random shapes on an H100 (benchmarks/gemm_f32_plan/, the sweep's seed 2) and 24 large
// aligned ones (six from 1024^3 to 8192^3, each layout; counted twice), checked on the 40 slowest
// shapes of seed 1, where the fit cut the pick's regret against the best measured schedule
// (docs/gemm_notes.md, "The float32 schedule with the narrow tiles"). The new configs' rates the
// fit did not move are its starting 0.8. Figures: docs/decisions.md#f32-candidates.
constexpr std::array<int, 9> kF32Candidates = {0, 1, 2, 3, 11, 12, 13, 14, 15};
constexpr std::array<double, 9> kF32CandidateRate = {1.07, 0.955, 0.85, 0.84, 0.0,
                                                     1.04, 0.8,   0.8,  0.8};
constexpr std::array<double, 9> kF32CandidateRateBK = {0.91, 0.95,  1.0, 0.91, 1.18,
                                                       1.12, 0.856, 0.8, 0.68};
constexpr std::array<int, 9> kF32CandidateFixedK = {11, 64, 64, 17, 64, 26, 16, 16, 12};
// Before sm_80 (no cp.async): the register-staged config, split-K chosen by the same estimate.
constexpr std::array<int, 1> kF32StagedCandidates = {4};
constexpr std::array<double, 1> kF32StagedRate = {1.0};
constexpr std::array<int, 1> kF32StagedFixedK = {64};
// The least K per split, in K tiles: fitted on the cp.async path (8 left skinny products over a K
// of a few hundred with too few blocks); the staged path keeps the 8 it was measured with.
constexpr int kAsyncMinSplitTiles = 5, kStagedMinSplitTiles = 8;

// Block tile of float32 config `index`: {BM, BN, BK}, and whether it is a cp.async config.
struct TileDims {
  int bm, bn, bk;
  bool async;
};

template <size_t... I>
constexpr std::array<TileDims, kNumF32Configs> f32_tile_dims(std::index_sequence<I...>) {
  return {TileDims{std::tuple_element_t<I, F32Configs>::BM, std::tuple_element_t<I, F32Configs>::BN,
                   std::tuple_element_t<I, F32Configs>::BK,
                   std::tuple_element_t<I, F32Configs>::STAGES > 0}...};
}
constexpr std::array<TileDims, kNumF32Configs> kF32Tiles =
    f32_tile_dims(std::make_index_sequence<kNumF32Configs>{});

// Whether every candidate is a valid config of the wanted kind (a loop: std::all_of is constexpr
// only from C++20, and torch builds extensions as C++17 before 2.13).
template <size_t N>
constexpr bool all_configs(const std::array<int, N>& candidates, bool async) {
  for (int c : candidates) {
    if (c < 0 || c >= kNumF32Configs || kF32Tiles[c].async != async) {
      return false;
    }
  }
  return true;
}
static_assert(all_configs(kF32Candidates, true),
              "the async path's candidates are cp.async configs");
static_assert(all_configs(kF32StagedCandidates, false),
              "the staged path's candidates are register-staged configs");

// Estimated time of config (bm x bn x bk tiles, blocks_per_sm resident, relative rate `rate`)
// with up to max_splits K splits, in units of one multiply-add of one SM at rate 1: full-GPU waves
// of blocks times each block's work, plus the split-K reduction (its workspace traffic,
// kUnitsPerByte per byte, and one more launch, kLaunchUnits). docs/gemm_notes.md ("The schedule:
// the heuristic's cost model") gives what these units and constants stand for on an H100 / H200.
// Tail split-K (tail_splits > 1, splits 1): the last tail_tiles tiles are split along K into
// tail_splits parts, the others run whole (see gemm_tiles::Params).
struct Estimate {
  double cost;
  int splits;
  int tail_tiles = 0;
  int tail_splits = 0;
};

constexpr double kUnitsPerByte = 0.032;
constexpr double kLaunchUnits = 1.28e6;
// A partial last wave's rate relative to a full one's: it costs its busiest SMs' blocks over
// their share of the SM at this rate (fewer warps hide less latency), at most a full wave. Fitted
// with the rest (docs/gemm_notes.md, "The float32 schedule with the narrow tiles"): only a last
// wave that fills under 30% of the busiest SM's slots costs less than a full one.
constexpr double kLastWaveRate = 0.3;

Estimate estimate(int64_t M, int64_t N, int64_t K, int bm, int bn, int bk, int fixed_k,
                  int min_split_tiles, int blocks_per_sm, double rate, int sms, int max_splits) {
  const int64_t tiles = ((M + bm - 1) / bm) * ((N + bn - 1) / bn);
  const int64_t slots = static_cast<int64_t>(sms) * blocks_per_sm;
  // A wave's time: each block's multiply-adds (plus a fixed start and epilogue, fixed_k of K)
  // over its share of the SM.
  auto wave = [&](int64_t k) {
    return static_cast<double>(bm) * bn * static_cast<double>(k + fixed_k) * blocks_per_sm / rate;
  };
  Estimate best{std::numeric_limits<double>::infinity(), 1};
  for (int s = 1; s <= max_splits; s *= 2) {
    const int64_t k_split = round_k_split(K, s, bk);
    if (s > 1 && k_split < min_split_tiles * bk) break;  // too little K per split
    const int64_t blocks = tiles * s;
    const int64_t waves = (blocks + slots - 1) / slots;
    const int64_t last = blocks - (waves - 1) * slots;  // blocks of the last wave
    const double busiest = static_cast<double>((last + sms - 1) / sms) / blocks_per_sm;
    double cost =
        (static_cast<double>(waves - 1) + std::min(1.0, busiest / kLastWaveRate)) * wave(k_split);
    if (s > 1) cost += static_cast<double>(2 * s + 1) * M * N * 4 * kUnitsPerByte + kLaunchUnits;
    if (cost < best.cost) best = {cost, s};
  }
  // Tail split-K: the tiles past the last full wave (or the last two) are split along K into s
  // parts, the others run whole. Calibrated on an H200 (docs/gemm_notes.md, "The schedule"): the
  // tail's last, partial wave costs as much as its busiest SMs' blocks at 0.85 of the full SM
  // rate (fewer warps hide less latency), and the tail's waves 1.1 times their estimate (split
  // blocks start and drain in lock step, plus the workspace round trip).
  const int64_t full = tiles / slots;
  for (int64_t kept = full; kept >= std::max<int64_t>(full - 1, 1); --kept) {
    const int64_t tail = tiles - kept * slots;
    if (tail <= 0) continue;
    for (int s = 2; s <= 8; ++s) {
      const int64_t k_split = round_k_split(K, s, bk);
      if (k_split < 8 * bk) break;
      if ((K + k_split - 1) / k_split != s) continue;  // rounding left fewer parts
      const int64_t tail_blocks = tail * s;
      const int64_t last = tail_blocks - (tail_blocks - 1) / slots * slots;  // in the last wave
      const double busiest = static_cast<double>((last + sms - 1) / sms) / blocks_per_sm;
      const double tail_waves =
          static_cast<double>((tail_blocks - 1) / slots) + std::min(1.0, busiest / 0.85);
      const double cost = static_cast<double>(kept) * wave(K) + 1.1 * tail_waves * wave(k_split) +
                          static_cast<double>(2 * s + 1) * tail * bm * bn * 4 * kUnitsPerByte +
                          kLaunchUnits;
      if (cost < best.cost) best = {cost, 1, static_cast<int>(tail), s};
    }
  }
  return best;
}

}  // namespace

std::vector<int> candidate_configs(TilePath path) {
  if (path == TilePath::kAsync) return {kF32Candidates.begin(), kF32Candidates.end()};
  return {kF32StagedCandidates.begin(), kF32StagedCandidates.end()};
}

Choice choose_tiles(int64_t M, int64_t N, int64_t K, bool b_k_contig, const GpuFacts& gpu) {
  const bool async = gpu.path == TilePath::kAsync;
  const int* candidates = async ? kF32Candidates.data() : kF32StagedCandidates.data();
  const double* rates =
      async ? (b_k_contig ? kF32CandidateRateBK : kF32CandidateRate).data() : kF32StagedRate.data();
  const int* fixed_k = async ? kF32CandidateFixedK.data() : kF32StagedFixedK.data();
  const int min_split_tiles = async ? kAsyncMinSplitTiles : kStagedMinSplitTiles;
  const size_t n = async ? kF32Candidates.size() : kF32StagedCandidates.size();
  int best_config = candidates[0];
  Estimate best{std::numeric_limits<double>::infinity(), 1};
  for (size_t c = 0; c < n; ++c) {
    if (rates[c] <= 0.0) continue;  // not a candidate for this layout
    const TileDims& tile = kF32Tiles[candidates[c]];
    // Up to 64 K splits: one or two tiles of C over a long K fill the SMs (figures:
    // docs/decisions.md#split-k-64).
    const Estimate e = estimate(M, N, K, tile.bm, tile.bn, tile.bk, fixed_k[c], min_split_tiles,
                                gpu.blocks_per_sm[candidates[c]], rates[c], gpu.sms,
                                /*max_splits=*/64);
    if (e.cost < best.cost * 0.999) {  // ties go to the earlier candidate
      best = e;
      best_config = candidates[c];
    }
  }
  return {best_config, best.splits, best.tail_tiles, best.tail_splits, best.cost};
}

Choice choose_tiles(int64_t M, int64_t N, int64_t K, int64_t sms, bool b_k_contig,
                    const std::string& path, const std::vector<int64_t>& blocks_per_sm) {
  constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
  TORCH_CHECK(M >= 0 && N >= 0 && K >= 0 && M <= kMaxInt && N <= kMaxInt && K <= kMaxInt,
              "lltm_ext.gemm: M, N and K must be in [0, 2^31), but got ", M, ", ", N, " and ", K,
              ".");
  TORCH_CHECK(sms >= 1 && sms <= kMaxInt, "lltm_ext.gemm: sms must be >= 1, but got ", sms, ".");
  TORCH_CHECK(path == "async" || path == "staged",
              "lltm_ext.gemm: path must be 'async' or 'staged', but got '", path, "'.");
  TORCH_CHECK(blocks_per_sm.size() == kNumF32Configs,
              "lltm_ext.gemm: blocks_per_sm must have one entry per float32 config (",
              kNumF32Configs, "), but got ", blocks_per_sm.size(), ".");
  GpuFacts gpu{static_cast<int>(sms), path == "async" ? TilePath::kAsync : TilePath::kStaged, {}};
  for (int c = 0; c < kNumF32Configs; ++c) {
    gpu.blocks_per_sm[c] = static_cast<int>(std::clamp<int64_t>(blocks_per_sm[c], 0, kMaxInt));
  }
  for (int c : candidate_configs(gpu.path)) {
    TORCH_CHECK(blocks_per_sm[c] >= 1, "lltm_ext.gemm: blocks_per_sm[", c, "] (config ",
                kF32ConfigNames[c], ", a candidate on the ", path, " path) must be >= 1, but got ",
                blocks_per_sm[c], ".");
  }
  return choose_tiles(M, N, K, b_k_contig, gpu);
}

}  // namespace lltm_ext::gemm
