// The planner of the LLTM sequence's CUDA time steps (plan.h; CUDA builds only): which
// kernels run a call, decided from the device's facts (compute capability, shared memory, which
// code images it runs, the kernels' occupancy, cached per device and shape), the dtype, the shape
// and the LLTM_EXT_SEQUENCE_* settings. The measurements behind each rule are in
// docs/decisions.md and docs/lltm_sequence_kernels.md.
#include <ATen/ATen.h>

#include <algorithm>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "common/cuda_host.h"
#include "common/env_setting.h"
#include "lltm_sequence/sequence_launchers.h"
#include "lltm_sequence/plan.h"

namespace lltm_ext::lltm {

namespace {
thread_local PlanNotes* active_notes = nullptr;
}  // namespace

PlanNotes::PlanNotes() : previous_(active_notes) {
  active_notes = this;
}
PlanNotes::~PlanNotes() {
  active_notes = previous_;
}
PlanNotes* PlanNotes::active() {
  return active_notes;
}

namespace {
std::mutex at_once_mutex;
// (device, stream) -> how many calls share the GPU there (2 .. kAtOnceMostParts)
std::map<std::pair<int, cudaStream_t>, int>& at_once_streams() {
  static std::map<std::pair<int, cudaStream_t>, int> streams;
  return streams;
}
}  // namespace

void mark_at_once_stream(int device, cudaStream_t stream, int parts) {
  TORCH_CHECK(parts >= 2 && parts <= kAtOnceMostParts,
              "lltm_ext.lltm_sequence: a stream's calls at once share the GPU in 2 to ",
              kAtOnceMostParts, " parts, but got ", parts, ".");
  const std::lock_guard<std::mutex> lock(at_once_mutex);
  at_once_streams()[{device, stream}] = parts;
}

int at_once_parts(int device) {
  const cudaStream_t stream =
      c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
  const std::lock_guard<std::mutex> lock(at_once_mutex);
  const auto it = at_once_streams().find({device, stream});
  return it == at_once_streams().end() ? 0 : it->second;
}

const char* path_name(SequencePlan::Path path) {
  switch (path) {
    case SequencePlan::Path::kSmall:
      return "small";
    case SequencePlan::Path::kCluster:
      return "cluster";
    case SequencePlan::Path::kWide:
      return "wide";
    case SequencePlan::Path::kTiled:
      return "tiled";
    case SequencePlan::Path::kSteps:
      return "steps";
    case SequencePlan::Path::kCublas:
      return "cublas";
  }
  return "?";
}

const char* product_name(Product product) {
  return product == Product::kSimt ? "simt" : product == Product::kTf32 ? "tf32" : "3xtf32";
}

namespace {

// LLTM_EXT_SEQUENCE_PATH (settings.h: what each value forces), read at every call.
enum class SequencePath { kAuto, kSmall, kCluster, kWide, kTiled, kGrid, kCublas };

SequencePath sequence_path_setting() {
  const std::string value = env_choice("LLTM_EXT_SEQUENCE_PATH");
  return value == "small"     ? SequencePath::kSmall
         : value == "cluster" ? SequencePath::kCluster
         : value == "wide"    ? SequencePath::kWide
         : value == "tiled"   ? SequencePath::kTiled
         : value == "grid"    ? SequencePath::kGrid
         : value == "cublas"  ? SequencePath::kCublas
                              : SequencePath::kAuto;
}

// How the cluster, wide-state and tiled kernels' recurrent product runs (Product), as
// LLTM_EXT_SEQUENCE_PRODUCT says (settings.h), read at every call. Auto's tf32 pass for the half
// types holds their values exactly; float32 takes one where `tf32` allows it (torch's float32
// matmuls may use TF32), else three (3xTF32), as accurate as float32. In the cluster and wide
// kernels (`chains` false) a small batch's step is one m-tile's chain of mma, which the one pass
// runs k step after k step where the three passes run four independent chains: there float32
// keeps three passes up to 64 rows (the one pass lost below and won past them). The tiled kernels
// (`chains` true) split every product into four chains whatever its passes, so float32 takes one
// pass there at every batch. Figures: docs/decisions_sequence.md#tf32-one-pass-batch.
std::string sequence_product_setting() {
  return env_choice("LLTM_EXT_SEQUENCE_PRODUCT");
}

Product sequence_product(at::ScalarType dtype, bool tf32, int64_t batch, bool chains) {
  const std::string setting = sequence_product_setting();
  if (setting == "simt" || dtype == at::kDouble) {
    return Product::kSimt;
  }
  const bool one_pass_any_batch = chains || setting == "tf32";
  return dtype == at::kFloat && (!tf32 || (batch <= 64 && !one_pass_any_batch)) ? Product::kTf32x3
                                                                                : Product::kTf32;
}

// Whether the sequence's steps run fused on `device` (the fused step kernels of
// sequence_launchers.h), and whether steps overlap there.
struct StepPlan {
  bool fused, overlap;
};

StepPlan step_plan(int device, int64_t batch, int64_t state, int64_t element_size) {
  const cuda::DeviceLimits& f = cuda::device_limits(device);
  const SequencePath setting = sequence_path_setting();
  const bool fused = (setting == SequencePath::kAuto || setting == SequencePath::kGrid) &&
                     state > 0 && state <= kFusedStepMaxState && batch > 0 &&
                     batch <= 65535LL * 8 &&
                     sequence_step_smem_bytes(state, element_size) <= f.smem_optin;
  if (!fused) {
    plan_note("steps: no (",
              setting != SequencePath::kAuto && setting != SequencePath::kGrid
                  ? "LLTM_EXT_SEQUENCE_PATH excludes them"
              : state > kFusedStepMaxState ? "the state is past their 256"
                                           : "their shared memory or grid does not fit",
              ")");
  }
  return {fused, f.major >= 9};
}

// Blocks per cluster for a state of S and a batch of B on a GPU of `sms` SMs: the fewest (of 1, 2,
// 4, 8) whose clusters of 2-row slices cover the SMs (ceil(B / 2) * blocks >= sms: with many rows,
// fewer blocks per cluster exchange less per step), but with at most 36 columns a block (its
// share of a step's product stays short). The rule was read off the sweep's S <= 256 shapes on the
// H100: where B / 2 x 8 blocks do not cover the SMs (B = 2 ... 20), 8 blocks were the fastest or
// close to it; with 40 to 47 columns a block they lost, hence 36. Figures:
// docs/decisions_sequence.md#cluster-blocks. LLTM_EXT_SEQUENCE_CLUSTER_BLOCKS (settings.h) forces
// them.
int cluster_blocks(int64_t state, int64_t batch, int sms) {
  const int forced = env_number("LLTM_EXT_SEQUENCE_CLUSTER_BLOCKS");
  if (forced > 0) {
    return forced;
  }
  int blocks = 1;
  while (blocks < kClusterMaxBlocks &&
         ((batch + 1) / 2 * blocks < sms || int64_t{36} * blocks < state)) {
    blocks *= 2;
  }
  return blocks;
}

// Whether the sequence's steps run on the cluster kernels, and in which shape.
struct ClusterPlan {
  bool use;
  ClusterShape shape;
  bool at_once;  // all of the batch's clusters run at once (else they take turns)
};

// The cluster kernels apply on sm_90 GPUs that run this module's sm_90 code, for 1 <= S <=
// kClusterMaxState and B >= 1, where the shared memory fits. Batch rows per cluster: the fewest
// (of 2, 4, 8, 16) whose clusters all run at once (the most SMs, the least work per block), else
// the most that fit (clusters then run in turns: they never wait on each other). The product on the
// tensor cores as sequence_product says (`tf32`: float32 may use TF32), for slices of 8 or 16
// rows.
// LLTM_EXT_SEQUENCE_CLUSTER_ROWS (settings.h) forces the rows.
template <typename T>
ClusterPlan cluster_plan(int device, int64_t batch, int64_t state, bool tf32) {
  const SequencePath setting = sequence_path_setting();
  ClusterPlan plan{false, {}, false};
  if (setting != SequencePath::kAuto && setting != SequencePath::kCluster) {
    plan_note("cluster: no (LLTM_EXT_SEQUENCE_PATH excludes them)");
    return plan;
  }
  const cuda::DeviceLimits& f = cuda::device_limits(device);
  static cuda::PerDevice<bool> loaded_cache;  // whether the device runs the sm_90 kernels
  const bool loaded = f.major >= 9 && loaded_cache.get(device, [](int d) {
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(d));
    bool is_loaded = false;
    C10_CUDA_CHECK(cluster_image_loaded<T>(&is_loaded));
    return is_loaded;
  });
  if (loaded && batch >= 1 && state >= 1 && state <= kClusterMaxState) {
    static std::mutex mutex;
    static std::map<std::tuple<int, int64_t, int, int, Product>, std::pair<int, int>> resident;
    const Product product =
        sequence_product(c10::CppTypeToScalarType<T>::value, tf32, batch, false);
    const int forced = env_number("LLTM_EXT_SEQUENCE_CLUSTER_ROWS");
    const int blocks = cluster_blocks(state, batch, cuda::sm_count(device));
    const bool blocks_forced = env_number("LLTM_EXT_SEQUENCE_CLUSTER_BLOCKS") > 0;
    for (const int rows : {2, 4, 8, 16}) {
      if (forced > 0 && rows != forced) {
        continue;
      }
      // The tensor cores pay from 8-row slices on: a 16-row mma tile holds the slice, and with 2 or
      // 4 rows most of it is padding.
      // float32 at full precision takes three passes here too. With four k steps in flight as
      // independent chains and the split in integer instructions (sequence_mma.cuh), they tied or
      // won against the SIMT cores at all but one shape measured; before those two changes three
      // passes lost. Figures: docs/decisions_sequence.md#cluster-tensor-cores.
      const Product p = rows >= 8 ? product : Product::kSimt;
      const auto fits = [&](const ClusterShape& shape) {
        return cluster_shape_ok(shape) &&
               cluster_smem_bytes(shape, false, sizeof(T)) <= f.smem_optin &&
               cluster_smem_bytes(shape, true, sizeof(T)) <= f.smem_optin;
      };
      // Where these rows take too many columns for a block, more blocks (unless forced).
      ClusterShape cs = cluster_shape(state, blocks, rows, p);
      while (!fits(cs) && !blocks_forced && cs.blocks < kClusterMaxBlocks) {
        cs = cluster_shape(state, 2 * cs.blocks, rows, p);
      }
      if (!fits(cs)) {
        continue;
      }
      std::pair<int, int> counts;
      {
        const std::lock_guard<std::mutex> lock(mutex);
        const auto key = std::make_tuple(device, state, cs.blocks, rows,
                                         cs.split ? Product::kTf32x3
                                         : cs.mma ? Product::kTf32
                                                  : Product::kSimt);
        auto it = resident.find(key);
        if (it == resident.end()) {
          int fwd = 0, bwd = 0;
          C10_CUDA_CHECK(prepare_cluster_steps<T>(f.smem_optin, cs, &fwd, &bwd));
          it = resident.emplace(key, std::make_pair(fwd, bwd)).first;
        }
        counts = it->second;
      }
      if (counts.first < 1 || counts.second < 1) {
        continue;
      }
      plan = {true, cs, (batch + rows - 1) / rows <= std::min(counts.first, counts.second)};
      if (plan.at_once) {
        break;
      }
    }
  }
  if (!plan.use) {
    plan_note("cluster: no (",
              !loaded                    ? "they need an sm_90 GPU running this module's sm_90 code"
              : state > kClusterMaxState ? "the state is past their 256"
                                         : "no slice of rows fits a block's shared memory",
              ")");
  } else if (!plan.at_once) {
    plan_note("cluster: the batch's clusters would take turns (", plan.shape.rows,
              "-row slices); the tiled kernels run instead where they apply "
              "(docs/decisions_sequence.md#cluster-or-tiled)");
  }
  TORCH_CHECK(plan.use || setting != SequencePath::kCluster,
              "lltm_ext.lltm_sequence: LLTM_EXT_SEQUENCE_PATH=cluster, but the cluster kernels do "
              "not apply to cuda:",
              device, " (compute capability ", f.major, ", sm_90 code ",
              loaded ? "loaded" : "not loaded", "), batch ", batch, ", state ", state,
              " (they need an sm_90 GPU running this module's sm_90 code, batch >= 1, 1 <= "
              "state <= ",
              kClusterMaxState,
              ", and a block's slice rows x ceil(state / blocks) of at most 512 pairs in its "
              "shared memory: LLTM_EXT_SEQUENCE_CLUSTER_ROWS and _BLOCKS, where set, must allow "
              "that).");
  return plan;
}

// Columns per block of the wide-state kernels for (batch, state) on `device`, 0 when they do
// not run, and whether their product runs on the tensor cores (sequence_product, where the
// device runs their sm_80+ code). They apply for S <= kWideMaxState, where their grid runs at once
// on the GPU (wide_step_columns), for any S (rows of x whose S is not a multiple of 4 read element
// by element; auto takes those for float32 on the tensor cores only, below). With the tensor cores
// auto takes them wherever they apply (a block reads its slice once per step); on the SIMT cores
// for S <= 512 and S^2 B <= 2^24: there a step's product (3 S^2 B multiply-adds on the SIMT cores,
// each block reading its W_h slice from shared memory once per batch row, and the whole of x from
// L2) takes less than cuBLAS's tensor-core GEMM and its launches; at S = 1024, no gain (twice the
// L2 traffic per step). Against the fused step kernels at S <= 256 they were faster at every size.
// Figures: docs/decisions_sequence.md#wide-plan. LLTM_EXT_SEQUENCE_WIDE_COLS (settings.h) forces
// the columns.
struct WidePlan {
  int cols;  // 0: the wide kernels do not run
  Product product;
};

template <typename T>
WidePlan wide_plan(int device, int64_t batch, int64_t state, bool tf32) {
  const SequencePath setting = sequence_path_setting();
  if (setting != SequencePath::kWide && setting != SequencePath::kAuto) {
    plan_note("wide: no (LLTM_EXT_SEQUENCE_PATH excludes them)");
    return {0, Product::kSimt};
  }
  const int smem_optin = cuda::device_limits(device).smem_optin;
  static cuda::PerDevice<bool> mma_cache;  // whether the device runs the tensor-core kernels
  const bool mma_loaded = mma_cache.get(device, [](int d) {
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(d));
    bool is_loaded = false;
    C10_CUDA_CHECK(wide_mma_loaded<T>(&is_loaded));
    return is_loaded;
  });
  // The half types take the tensor cores at every state: they beat the SIMT product at all but one
  // of the sweep's shapes with 256 < S <= 1024 that the kernels fit. Figures:
  // docs/decisions_sequence.md#wide-half-tensor-cores.
  const at::ScalarType dtype = c10::CppTypeToScalarType<T>::value;
  const Product product = mma_loaded ? sequence_product(dtype, tf32, batch, false) : Product::kSimt;
  if (setting == SequencePath::kAuto && product == Product::kSimt &&
      (state > 512 || state * state * batch > (int64_t{1} << 24))) {
    plan_note(
        "wide: no (their product would run on the SIMT cores, which pay only to S = 512 and "
        "S^2 B = 2^24; docs/decisions_sequence.md#wide-plan)");
    return {0, Product::kSimt};
  }
  // Where S is not a multiple of 4 (rows of x read element by element) auto takes them on the
  // tensor cores only, and for the half types at S <= 512 only: against the cuBLAS path float32
  // (three TF32 passes) won or tied at every shape measured, bfloat16 won at every S <= 512 but
  // lost at some past it, float64 (SIMT) lost at most. Figures:
  // docs/decisions_sequence.md#wide-unaligned-state.
  if (setting == SequencePath::kAuto && state % 4 != 0 &&
      (product == Product::kSimt || (dtype != at::kFloat && state > 512))) {
    plan_note(
        "wide: no (S % 4 != 0: rows of x read element by element pay only on the tensor "
        "cores, and for the half types to S = 512; "
        "docs/decisions_sequence.md#wide-unaligned-state)");
    return {0, Product::kSimt};
  }
  static std::mutex mutex;
  static std::map<std::tuple<int, int64_t, int64_t, Product>, int> columns;
  // The choice depends on the batch through its row blocks only.
  const int64_t row_blocks = (batch + kWideRows - 1) / kWideRows;
  int cols = 0;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    const auto key = std::make_tuple(device, row_blocks, state, product);
    auto it = columns.find(key);
    if (it == columns.end()) {
      int c = 0;
      C10_CUDA_CHECK(
          wide_step_columns<T>(batch, state, cuda::sm_count(device), smem_optin, &c, 0, product));
      it = columns.emplace(key, c).first;
    }
    cols = it->second;
  }
  const int forced = cols > 0 ? env_number("LLTM_EXT_SEQUENCE_WIDE_COLS") : 0;
  if (forced > 0) {
    int c = 0;  // whether the forced columns fit: ask for them alone
    C10_CUDA_CHECK(wide_step_columns<T>(batch, state, cuda::sm_count(device), smem_optin, &c,
                                        forced, product));
    cols = c;
  }
  if (cols == 0) {
    plan_note("wide: no (",
              state > kWideMaxState ? "the state is past their 1024"
                                    : "no grid of 16-row blocks runs at once",
              ")");
  }
  TORCH_CHECK(cols > 0 || setting != SequencePath::kWide,
              "lltm_ext.lltm_sequence: LLTM_EXT_SEQUENCE_PATH=wide, but the wide-state kernels do "
              "not apply to cuda:",
              device, " with batch ", batch, ", state ", state, " (they need a state of at most ",
              kWideMaxState, ", and a grid of ", kWideRows,
              "-row blocks that runs at once on the GPU, with a cooperative launch).");
  return {cols, product};
}

// The tile of the tiled kernels for (batch, state) on `device`, mt = 0 where they do not run. They
// apply on GPUs that run their sm_90 code, for float32 and the half types with the product on the
// tensor cores (sequence_product), where a tile's slice of W_h fits an SM's shared memory with a
// grid of at most one block per SM (tiled_step_shape); auto takes them where a tile's rows x the
// state is at most kTiledAutoWork. A block's step costs about its rows (16 mt) x its k steps
// (S forward, 3S backward) x its outputs, and a step of its kernels has a fixed cost each way (a
// barrier over global memory), where cuBLAS every step costs least at large batches. Against
// LLTM_EXT_SEQUENCE_PATH=cublas over the sweep's shapes that the wide kernels do not take, the
// more m-tiles, the smaller the largest state at which the tiled kernels still won (eight never
// did): kTiledAutoWork sits between, with one shape on the wrong side; bfloat16 the same way.
// Figures: docs/decisions_sequence.md#tiled-rule.
// LLTM_EXT_SEQUENCE_TILED_TILES, _COLS and _STAGES (settings.h) restrict the tile;
// forced (LLTM_EXT_SEQUENCE_PATH=tiled), the kernels run wherever they apply.
constexpr int64_t kTiledAutoWork = 30720;
// Calls of fewer steps take the cuBLAS path, twice as many at large batches or states
// (plan_sequence; LLTM_EXT_SEQUENCE_SHORT_STEPS).
constexpr int64_t kShortSteps = 4;
// float32 at full precision takes the cuBLAS path at 2 <= B <= kFloat32SmallBatch from S =
// kFloat32SmallBatchState on (float32_small_batch_cublas; at B = 1 the other kernels were the
// faster). Figures: docs/decisions_sequence.md#float32-small-batch-cublas.
constexpr int64_t kFloat32SmallBatch = 16;
constexpr int64_t kFloat32SmallBatchState = 512;
int64_t short_steps(int64_t batch, int64_t state) {
  const int forced = env_number("LLTM_EXT_SEQUENCE_SHORT_STEPS");
  return forced > 0 ? forced : batch >= 256 || state >= 512 ? 2 * kShortSteps : kShortSteps;
}
struct TiledPlan {
  TiledShape shape;  // mt = 0: the tiled kernels do not run
  Product product;
};

template <typename T>
TiledPlan tiled_plan(int device, int64_t batch, int64_t state, bool tf32) {
  const SequencePath setting = sequence_path_setting();
  TiledShape shape{};
  if (setting != SequencePath::kTiled && setting != SequencePath::kAuto) {
    plan_note("tiled: no (LLTM_EXT_SEQUENCE_PATH excludes them)");
    return {shape, Product::kSimt};
  }
  static cuda::PerDevice<bool> loaded_cache;  // whether the device runs the sm_90 kernels
  const bool loaded = loaded_cache.get(device, [](int d) {
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(d));
    bool is_loaded = false;
    C10_CUDA_CHECK(tiled_image_loaded<T>(&is_loaded));
    return is_loaded;
  });
  const int only_mt = env_number("LLTM_EXT_SEQUENCE_TILED_TILES");
  const int only_cols = env_number("LLTM_EXT_SEQUENCE_TILED_COLS");
  const int only_stages = env_number("LLTM_EXT_SEQUENCE_TILED_STAGES");
  const Product product =
      loaded ? sequence_product(c10::CppTypeToScalarType<T>::value, tf32, batch, true)
             : Product::kSimt;
  bool ruled_out = false;  // by auto's rules below (noted there)
  if (product != Product::kSimt) {
    static std::mutex mutex;
    struct SharedTile {
      TiledShape shape;
      bool shared = false;  // planned for a share of the SMs (kTiledSharedWork's bound)
    };
    static std::map<std::tuple<int, int64_t, int64_t, Product, int, int, int, int, bool>,
                    SharedTile>
        shapes;
    // The choice depends on the batch through its m-tiles only. On a stream where LLTMSequence
    // runs calls at once (mark_at_once_stream: the GPU shared by `parts` calls), batches of at
    // most kSharedMaxTiles m-tiles take the tile whose grid fits 1 / parts of the SMs (else 1 /
    // (parts - 1), ... 1 / 2), where one fits of at most kTiledSharedWork rows x the state: a
    // call's step is slower, but the calls' kernels run beside each other, where a grid over the
    // whole GPU waits for the other's to end (so the bound is past auto's kTiledAutoWork, which
    // weighs one call alone against cuBLAS every step). Larger batches keep the whole GPU: their
    // steps are bound by the SMs' throughput, not by latency.
    // Figures: docs/decisions_sequence.md#layers-at-once.
    constexpr int64_t kSharedMaxTiles = 8;
    constexpr int64_t kTiledSharedWork = 2 * kTiledAutoWork;
    const int64_t m_tiles = (batch + 15) / 16;
    const int parts = m_tiles <= kSharedMaxTiles ? at_once_parts(device) : 0;
    const std::lock_guard<std::mutex> lock(mutex);
    const auto key = std::make_tuple(device, m_tiles, state, product, only_mt, only_cols,
                                     only_stages, parts, setting == SequencePath::kAuto);
    auto it = shapes.find(key);
    if (it == shapes.end()) {
      SharedTile s{};
      const int sms = cuda::sm_count(device);
      for (int p = parts; p >= 2 && s.shape.mt == 0; --p) {
        C10_CUDA_CHECK(tiled_step_shape<T>(batch, state, sms / p,
                                           cuda::device_limits(device).smem_optin, product, only_mt,
                                           only_cols, only_stages, &s.shape));
        s.shared = s.shape.mt > 0;
        if (setting == SequencePath::kAuto && 16 * s.shape.mt * state > kTiledSharedWork) {
          s = SharedTile{};  // past the shared bound: a larger share's tile instead
        }
      }
      if (s.shape.mt == 0) {
        C10_CUDA_CHECK(tiled_step_shape<T>(batch, state, sms,
                                           cuda::device_limits(device).smem_optin, product, only_mt,
                                           only_cols, only_stages, &s.shape));
      }
      it = shapes.emplace(key, s).first;
    }
    shape = it->second.shape;
    const bool shared = it->second.shared;
    if (parts > 0) {
      plan_note("tiled: tiles for 1 / ", parts,
                " of the SMs, else a larger share, where a grid of them fits (a stream "
                "LLTMSequence runs calls at once on, a batch of at most ",
                kSharedMaxTiles, " m-tiles, a tile of at most ", kTiledSharedWork, " rows x S)");
    }
    if (setting == SequencePath::kAuto && !shared && 16 * shape.mt * state > kTiledAutoWork) {
      ruled_out = true;
      plan_note("tiled: no (a tile of ", 16 * shape.mt, " rows x S = ", state, " is past ",
                kTiledAutoWork,
                ": cuBLAS every step costs less; docs/decisions_sequence.md#tiled-rule)");
      shape = TiledShape{};  // cuBLAS every step costs less (above)
    }
    // Since float32's step products on the cuBLAS path run as 3xTF32 at small batches
    // (steps/step_gemm.cu), that path beats one m-tile at large states and batches of
    // up to 6 (float32 only: the half types' step products are cuBLAS's); at S <= 1100 one m-tile
    // stays the faster. Figures: docs/decisions_sequence.md#tiled-small-batch.
    if (std::is_same_v<T, float> && setting == SequencePath::kAuto && shape.mt == 1 && batch <= 6 &&
        state >= 1200) {
      ruled_out = true;
      plan_note(
          "tiled: no (float32, B <= 6, S >= 1200: the cuBLAS path with 3xTF32 step products "
          "costs less; docs/decisions_sequence.md#tiled-small-batch)");
      shape = TiledShape{};
    }
  }
  if (product == Product::kSimt) {
    plan_note("tiled: no (they run on the tensor cores: ",
              !loaded ? "this GPU does not run their sm_90 code" : "not for this dtype or product",
              ")");
  } else if (shape.mt == 0 && !ruled_out) {
    plan_note("tiled: no (no tile's slice of W_h fits an SM's shared memory in one wave)");
  }
  TORCH_CHECK(shape.mt > 0 || setting != SequencePath::kTiled,
              "lltm_ext.lltm_sequence: LLTM_EXT_SEQUENCE_PATH=tiled, but the tiled kernels do not "
              "apply to cuda:",
              device, " with dtype ", c10::CppTypeToScalarType<T>::value, ", batch ", batch,
              ", state ", state,
              " (they need a GPU that runs their sm_90 code, float32, float16 or bfloat16 with the "
              "product on the tensor cores, and a tile of 16, 32, 64 or 128 batch rows x 4 to 24 "
              "state columns, at most 2048 elements, whose slice of W_h fits in an SM's shared "
              "memory, in a grid of at most one block per SM; LLTM_EXT_SEQUENCE_TILED_TILES and "
              "_COLS, where set, must allow that).");
  return {shape, product};
}

// Batch rows per block of the small-state kernels, 0 where they do not run: S <= small_max_state,
// float32 or a half type, and the fewest rows (1, 2, 4) whose grid runs at once on the device
// (else its blocks would take turns, each running all T steps). Where they apply they take the
// place of every other path (measurements beside their kernels).
template <typename T>
int small_plan(int device, int64_t batch, int64_t state) {
  const SequencePath setting = sequence_path_setting();
  int rows = 0;
  if ((setting == SequencePath::kAuto || setting == SequencePath::kSmall) &&
      !std::is_same_v<T, double>) {
    static std::mutex mutex;
    static std::map<std::tuple<int, int64_t, int64_t>, int> cache;
    const std::lock_guard<std::mutex> lock(mutex);
    const auto key = std::make_tuple(device, batch, state);
    auto it = cache.find(key);
    if (it == cache.end()) {
      C10_CUDA_CHECK(small_step_rows<T>(batch, state, cuda::sm_count(device), &rows));
      it = cache.emplace(key, rows).first;
    }
    rows = it->second;
    // LLTM_EXT_SEQUENCE_SMALL_ROWS (settings.h) forces the rows where the kernels apply.
    const int forced = rows > 0 ? env_number("LLTM_EXT_SEQUENCE_SMALL_ROWS") : 0;
    if (forced > 0) {
      rows = forced;
    }
  }
  if (rows == 0) {
    plan_note("small: no (",
              setting != SequencePath::kAuto && setting != SequencePath::kSmall
                  ? "LLTM_EXT_SEQUENCE_PATH excludes them"
              : std::is_same_v<T, double> ? "float64: they take float32 and the half types"
              : state > small_max_state<T>()
                  ? c10::str("the state is past their ", small_max_state<T>())
                  : std::string("their grid does not run at once"),
              ")");
  }
  TORCH_CHECK(rows > 0 || setting != SequencePath::kSmall,
              "lltm_ext.lltm_sequence: LLTM_EXT_SEQUENCE_PATH=small, but the small-state kernels "
              "do not apply to cuda:",
              device, " with dtype ", c10::CppTypeToScalarType<T>::value, ", batch ", batch,
              ", state ", state,
              " (they need float32, float16 or bfloat16, 1 <= state <= ", small_max_state<T>(),
              ", and a grid of ceil(batch / 4) blocks that runs at once).");
  return rows;
}

// LLTM_EXT_SEQUENCE_STEP_GEMM (settings.h), read at every call.
std::string step_gemm_setting() {
  return env_choice("LLTM_EXT_SEQUENCE_STEP_GEMM");
}

// Whether `device` runs Hopper's step product (its sm_90a code, with the shared memory it needs).
bool step_gemm_sm90_runs(int device) {
  static cuda::PerDevice<bool> cache;
  return cache.get(device, [](int d) {
    const cuda::DeviceLimits& f = cuda::device_limits(d);
    if (f.major != 9 || step_gemm_sm90_smem_bytes() > f.smem_optin) {
      return false;
    }
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(d));
    bool is_loaded = false;
    C10_CUDA_CHECK(step_gemm_sm90_loaded(&is_loaded));
    return is_loaded;
  });
}

// Whether auto runs a float32 sequence at S <= 1024 (full precision) on the cuBLAS path with
// Hopper's step product both ways, instead of the wide or tiled kernels: from B = 40 past S = 896,
// 64 from S = 640, 128 from 512, 192 from 384 (never below 384), for S a multiple of 4 (rows that
// the product copies 16 bytes at a time), on a stream that runs no calls at once (at_once_parts:
// its blocks hold an SM each, and beside other layers' calls it lost). Since the product's K
// splits fill the GPU (step_wgmma_splits) it wins there; below those batches the kernels that keep
// every step on the GPU do. Figures: docs/decisions_sequence.md#step-wgmma-auto.
bool step_wgmma_mid_state(int device, int64_t batch, int64_t state) {
  const int64_t least = state > 896    ? 40
                        : state >= 640 ? 64
                        : state >= 512 ? 128
                        : state >= 384 ? 192
                                       : std::numeric_limits<int64_t>::max();
  return state <= 1024 && state % 4 == 0 && batch >= least && at_once_parts(device) == 0;
}

// Where auto takes Hopper's step product (float32 at full precision, on a GPU that runs it): S >
// 1024, forward from B = 96, backward from B = 33 (against the cuBLAS path with cuBLAS's product
// the other way); at S <= 1024, both ways where step_wgmma_mid_state says (plan_sequence takes the
// cuBLAS path there). Figures: docs/decisions_sequence.md#step-wgmma-auto. The kernel: "Long
// sequences on Hopper's tensor cores" in docs/lltm_sequence_kernels.md.
bool step_wgmma_auto(int device, int64_t batch, int64_t state, bool backward) {
  if (state <= 1024) {
    return step_wgmma_mid_state(device, batch, state);
  }
  return batch >= (backward ? 33 : 96);
}

// The splits of k for Hopper's step product of `tiles` 128 x 128 tiles (m x n x k) on `sms` SMs:
// the count s (1 to 64, each split at least 64 k) whose estimate is least, the blocks' waves
// (ceil(tiles s / sms), one block an SM) times a split's k at kWgmmaUsPerK, plus, past one
// split, the s float32 partial products that the kernel writes and the gate kernel reads, at
// kPartialUsPerMB: so 96 tiles on 132 SMs take 4 splits in three waves, not one wave with 36 SMs
// idle. Fitted to H200 runs. Figures: docs/decisions_sequence.md#step-wgmma-splits.
int step_wgmma_splits(int64_t tiles, int64_t m, int64_t n, int64_t k, int sms) {
  constexpr double kWgmmaUsPerK = 0.068, kPartialUsPerMB = 1.1;
  const int most = static_cast<int>(std::clamp<int64_t>(k / 64, 1, 64));
  int best = 1;
  double best_us = 0.0;
  for (int s = 1; s <= most; ++s) {
    const double waves = static_cast<double>((tiles * s + sms - 1) / sms);
    const double split_k = static_cast<double>((k + s - 1) / s);
    const double partial_mb = s > 1 ? s * static_cast<double>(m) * n * 4 / 1e6 : 0.0;
    const double us = waves * split_k * kWgmmaUsPerK + partial_mb * kPartialUsPerMB;
    if (s == 1 || us < best_us) {
      best = s;
      best_us = us;
    }
  }
  return best;
}

// The cuBLAS path's step product m x n x k (forward B x 3S x S, backward B x S x 3S) through
// launch_step_gemm: float32 at full precision only (cuBLAS's tensor-core kernels serve the rest).
// Auto, per product, where the device runs the tensor-core kernel (sm_80+ code and its shared
// memory): forward 3xTF32 at 5 <= B <= 32; backward 3xTF32 at 2 <= B <= 32 and on the SIMT cores at
// 33 <= B <= 64; cuBLAS elsewhere (without the tensor-core kernel, backward on the SIMT cores at 2
// <= B <= 64). Measured per product, forward and backward apart:
// docs/decisions_sequence.md#step-gemm-plan (docs/lltm_sequence_kernels.md has all 15 shapes).
// Splits: enough blocks for ~2 a SM, each split at least 64 k and splits x m at most k / 2 (the
// partial sums' traffic, written and read once, then stays below W_h's);
// LLTM_EXT_SEQUENCE_STEP_SPLITS (settings.h) forces them.
template <typename T>
StepGemmShape step_gemm_plan(int device, int64_t m, int64_t n, int64_t k, bool tf32,
                             bool backward) {
  StepGemmShape shape;
  const std::string setting = step_gemm_setting();
  const bool full = std::is_same_v<T, float> && !tf32;
  // With TF32 allowed, auto keeps ours (at full precision) at batches up to 32, where a product
  // reads W_h once whatever its precision. Figures: docs/decisions_sequence.md#tf32-one-pass-batch.
  const bool applies = full || (std::is_same_v<T, float> && setting == "auto" && m <= 32);
  TORCH_CHECK(full || (setting != "own" && setting != "tensor" && setting != "wgmma"),
              "lltm_ext.lltm_sequence: LLTM_EXT_SEQUENCE_STEP_GEMM=", setting,
              " needs float32 at full precision (torch's float32 matmul precision \"highest\"), "
              "but got dtype ",
              c10::CppTypeToScalarType<T>::value, (tf32 ? " with TF32 allowed" : ""), ".");
  const char* which = backward ? "backward" : "forward";
  if (!applies || setting == "cublas") {
    plan_note("step product (", which, ", ", m, " x ", n, " x ", k, "): cuBLAS (",
              setting == "cublas"        ? "LLTM_EXT_SEQUENCE_STEP_GEMM=cublas"
              : std::is_same_v<T, float> ? "with TF32 allowed, ours serve batches up to 32 rows"
                                         : "ours serve float32 only",
              ")");
    return shape;
  }
  const cuda::DeviceLimits& f = cuda::device_limits(device);
  static cuda::PerDevice<bool> loaded_cache;  // whether the device runs the sm_80+ kernel
  const bool tensor_fits = f.major >= 8 && step_gemm_smem_bytes(64, true) <= f.smem_optin &&
                           loaded_cache.get(device, [](int d) {
                             const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(d));
                             bool is_loaded = false;
                             C10_CUDA_CHECK(step_gemm_tensor_loaded(&is_loaded));
                             return is_loaded;
                           });
  TORCH_CHECK(tensor_fits || setting != "tensor",
              "lltm_ext.lltm_sequence: LLTM_EXT_SEQUENCE_STEP_GEMM=tensor needs mma.sync's tf32 "
              "(code compiled for compute capability 8.0 or newer, running on such a GPU) and ",
              step_gemm_smem_bytes(64, true), " bytes of shared memory a block; cuda:", device,
              " has compute capability ", f.major, ".x and ", f.smem_optin, " bytes.");
  const bool wgmma_runs = step_gemm_sm90_runs(device);
  TORCH_CHECK(wgmma_runs || setting != "wgmma",
              "lltm_ext.lltm_sequence: LLTM_EXT_SEQUENCE_STEP_GEMM=wgmma needs a Hopper GPU "
              "(compute capability 9.0) running this build's sm_90a code (TORCH_CUDA_ARCH_LIST "
              "with 9.0a) and ",
              step_gemm_sm90_smem_bytes(), " bytes of shared memory a block; cuda:", device,
              " has compute capability ", f.major, ".x and ", f.smem_optin, " bytes.");
  const bool wgmma_fits = (m + 127) / 128 <= 65535;  // the grid's row tiles
  TORCH_CHECK(wgmma_fits || setting != "wgmma",
              "lltm_ext.lltm_sequence: the step product through LLTM_EXT_SEQUENCE_STEP_GEMM=wgmma "
              "takes batches of at most ",
              65535 * int64_t{128}, " rows, but got ", m, ".");
  if (setting == "wgmma" || (setting == "auto" && wgmma_runs && wgmma_fits &&
                             step_wgmma_auto(device, m, backward ? n : k, backward))) {
    // One block an SM: the splits of k (each at least 64 k) that step_wgmma_splits' cost model
    // finishes first.
    shape.wgmma = shape.tensor = true;
    shape.rows = 128;
    const int64_t tiles = step_gemm_tiles(m, n, shape.rows);
    int splits = step_wgmma_splits(tiles, m, n, k, cuda::sm_count(device));
    const int forced = env_number("LLTM_EXT_SEQUENCE_STEP_SPLITS");
    if (forced > 0) {
      splits = forced;
    }
    shape.splits = step_gemm_splits(k, splits, true);
    plan_note("step product (", which, ", ", m, " x ", n, " x ", k,
              "): ours on Hopper's tensor cores, 3xTF32, ", shape.splits, " splits of k (",
              setting == "wgmma"
                  ? "LLTM_EXT_SEQUENCE_STEP_GEMM=wgmma"
                  : "this batch and state; docs/decisions_sequence.md#step-wgmma-auto",
              ")");
    return shape;
  }
  if (setting == "own" || setting == "tensor") {
    shape.tensor = setting == "tensor";
  } else {
    const bool tensor = tensor_fits && m <= 32 && m >= (backward ? 2 : 5);
    if (!tensor && !(backward && m >= 2 && m <= 64)) {
      plan_note("step product (", which, ", ", m, " x ", n, " x ", k,
                "): cuBLAS (this batch is outside our kernels' rule; "
                "docs/decisions_sequence.md#step-gemm-plan)");
      return shape;  // cuBLAS
    }
    shape.tensor = tensor;
  }
  shape.rows = step_gemm_rows(m, shape.tensor);
  TORCH_CHECK((m + shape.rows - 1) / shape.rows <= 65535,
              "lltm_ext.lltm_sequence: the step product through LLTM_EXT_SEQUENCE_STEP_GEMM=",
              shape.tensor ? "tensor" : "own", " takes batches of at most ",
              65535 * static_cast<int64_t>(shape.rows), " rows, but got ", m, ".");
  const int64_t tiles = step_gemm_tiles(m, n, shape.rows);
  const int64_t wanted = (2 * cuda::sm_count(device) + tiles - 1) / tiles;
  const int64_t most = std::max<int64_t>(1, std::min<int64_t>(k / 64, k / (2 * m)));
  int splits = static_cast<int>(std::clamp<int64_t>(wanted, 1, std::min<int64_t>(most, 64)));
  const int forced = env_number("LLTM_EXT_SEQUENCE_STEP_SPLITS");
  if (forced > 0) {
    splits = forced;
  }
  shape.splits = step_gemm_splits(k, splits, shape.tensor);
  plan_note("step product (", which, ", ", m, " x ", n, " x ", k, "): ours, ",
            shape.tensor ? "3xTF32 on the tensor cores" : "exact float32 on the SIMT cores", ", ",
            shape.splits, " splits of k (",
            setting == "auto" ? "docs/decisions_sequence.md#step-gemm-plan"
                              : "LLTM_EXT_SEQUENCE_STEP_GEMM",
            ")");
  return shape;
}

// Whether auto leaves the wide and tiled kernels to the step kernels or cuBLAS every step at
// batches of 40 to 128 rows and large states: with one-pass products (the half types, float32 where
// TF32 is allowed: autocast's float32 state then takes half-precision products on cuBLAS) at S >=
// 640, or S >= 512 from B = 72 on (the tiled kernels run these products in TF32, cuBLAS on the
// 16-bit tensor cores); and on a stream where LLTMSequence runs calls at once also float32 at S >=
// 640, where the tiled kernels' grid holds the GPU (or half of it, slowly) while cuBLAS's steps
// leave room for the other calls'. Where S is not a multiple of 8 the one-pass products leave the
// tiled kernels later: from S = 896 alone, from S = 640 on those streams, or below that for calls
// of fewer than 64 steps (a wavefront's chunks), over which the tiled kernels' set-up does not
// pay. That part was fitted where cuBLAS ran such half products on its slower sm_80 kernels, as
// it still runs the mixed loops' backward ones (autocast's); the half types' own and the mixed
// forward ones now run padded (cublas_gemm.h: padded_step), as fast as at S rounded up. Fitted
// again on those, the rule won by the sweep's timer (the host's time hidden) and lost in a loop
// of calls, where cuBLAS's steps cost the host more than the GPU. Figures:
// docs/decisions_sequence.md#mid-batch-steps.
// LLTM_EXT_SEQUENCE_MID_BATCH=off (settings.h) turns the rule off.
template <typename T>
bool mid_batch_steps(int device, int64_t steps, int64_t batch, int64_t state, bool tf32) {
  const bool off = env_choice("LLTM_EXT_SEQUENCE_MID_BATCH") == "off";  // read (checked) each time
  if (off || std::is_same_v<T, double> || batch < 40 || batch > 128 || state < 512) {
    return false;
  }
  const bool one_pass = !std::is_same_v<T, float> || tf32;
  const bool at_once = at_once_parts(device) > 0;
  if (!one_pass) {
    return at_once && state >= 640;
  }
  if (state % 8 != 0) {
    return at_once ? state >= 640 || steps < 64 : state >= 896;
  }
  return at_once || state >= 640 || batch >= 72;
}

// Auto's small-batch rule at min_batch <= B <= max_batch and S >= min_state, in calls not short
// (shorter ones take the cuBLAS path anyway); off where a path is forced or the mid-batch rule is.
bool small_batch_cublas(int64_t steps, int64_t batch, int64_t state, int64_t min_batch,
                        int64_t max_batch, int64_t min_state) {
  return steps >= short_steps(batch, state) && batch >= min_batch && batch <= max_batch &&
         state >= min_state && sequence_path_setting() == SequencePath::kAuto &&
         env_choice("LLTM_EXT_SEQUENCE_MID_BATCH") != "off";
}

}  // namespace

bool half_small_batch_cublas(int64_t steps, int64_t batch, int64_t state) {
  // From B = 40 on the mid-batch rule decides (mid_batch_steps); a mixed call in a short call
  // keeps float32's own step products where they are ours.
  return small_batch_cublas(steps, batch, state, 1, 39, 513);
}

bool float32_small_batch_cublas(int64_t steps, int64_t batch, int64_t state) {
  return small_batch_cublas(steps, batch, state, 2, kFloat32SmallBatch, kFloat32SmallBatchState);
}

bool input_gemm_tensor(int device, int64_t m, int64_t n, int64_t k) {
  const std::string setting = env_choice("LLTM_EXT_SEQUENCE_INPUT_GEMM");
  if (setting == "cublas" || m == 0 || n == 0 || k == 0) {
    plan_note("input products: cuBLAS (",
              setting == "cublas" ? "LLTM_EXT_SEQUENCE_INPUT_GEMM=cublas" : "nothing to multiply",
              ")");
    return false;
  }
  const int64_t tiles = ((m + 127) / 128) * ((n + 127) / 128);
  const bool runs = step_gemm_sm90_runs(device) && (m + 127) / 128 <= 65535;
  if (setting == "tensor") {
    TORCH_CHECK(runs,
                "lltm_ext.lltm_sequence: LLTM_EXT_SEQUENCE_INPUT_GEMM=tensor runs float32 on "
                "Hopper's tensor cores (a GPU of compute capability 9.0 running this module's "
                "sm_90a code, with ",
                step_gemm_sm90_smem_bytes(), " bytes of shared memory a block), but cuda:", device,
                " does not (or the product has more than 65535 x 128 rows).");
    plan_note(
        "input products: Hopper's 3xTF32 kernel, forced (LLTM_EXT_SEQUENCE_INPUT_GEMM=tensor)");
    return true;
  }
  const bool big = tiles >= int64_t{kInputGemmTensorWaves} * cuda::sm_count(device) && k >= 64;
  plan_note("input products (", m, " x ", n, " x ", k, "): ",
            runs && big ? "Hopper's 3xTF32 kernel"
                        : "cuBLAS (float32 at full precision; Hopper's 3xTF32 kernel ",
            runs && big ? ""
            : runs      ? "would have too few tiles or too short a k)"
                        : "does not run here)",
            "; docs/decisions_sequence.md#input-gemm-tensor");
  return runs && big;
}

template <typename T>
SequencePlan plan_sequence(int device, int64_t steps, int64_t batch, int64_t state, bool tf32) {
  SequencePlan plan;
  if (steps == 0 || batch == 0) {
    plan_note("no steps or no batch rows: no kernel runs the time loop");
  }
  // cuBLAS and the gate kernel every step, with the step products' plans.
  const auto take_cublas = [&] {
    plan.forward_gemm = step_gemm_plan<T>(device, batch, 3 * state, state, tf32, false);
    plan.backward_gemm = step_gemm_plan<T>(device, batch, state, 3 * state, tf32, true);
    return plan;
  };
  // All steps in one cooperative launch over the GPU, in the tiled kernels' tile.
  const auto take_tiled = [&plan](const TiledPlan& tiled) {
    plan.path = SequencePlan::Path::kTiled;
    plan.tiled = tiled.shape;
    plan.product = tiled.product;
    return plan;
  };
  if (steps > 0 && batch > 0) {
    plan.small_rows = small_plan<T>(device, batch, state);
    if (plan.small_rows > 0) {  // all steps in one launch, blocks independent
      plan.path = SequencePlan::Path::kSmall;
      return plan;
    }
    // Few steps: the cuBLAS path. The cluster, wide and tiled kernels' launch and set-up (a
    // cooperative grid, each block's slice of W_h into shared memory, the grid's barriers) cost
    // more than their steps save over cuBLAS's below kShortSteps steps, and below twice that at
    // large batches or states, where cuBLAS's step gains on theirs; such calls are mostly a packed
    // batch's stretches of one batch. Figures: docs/decisions_sequence.md#short-steps.
    const int64_t fewest = short_steps(batch, state);
    if (sequence_path_setting() == SequencePath::kAuto && state > 0 && steps < fewest) {
      plan_note(
          "cluster, wide, tiled, steps: no (", steps, " steps, fewer than ", fewest,
          ": their set-up costs more than the steps save; docs/decisions_sequence.md#short-steps)");
      return take_cublas();
    }
    // float32 at full precision on Hopper, large batches at 384 <= S <= 1024: the cuBLAS path with
    // Hopper's step products both ways (step_wgmma_mid_state).
    if (std::is_same_v<T, float> && !tf32 && sequence_path_setting() == SequencePath::kAuto &&
        step_gemm_setting() == "auto" && step_wgmma_mid_state(device, batch, state) &&
        (batch + 127) / 128 <= 65535 && step_gemm_sm90_runs(device)) {
      plan_note("cluster, wide, tiled: no (float32 at B = ", batch, ", S = ", state,
                ": the cuBLAS path with Hopper's step products costs less; "
                "docs/decisions_sequence.md#step-wgmma-auto)");
      return take_cublas();
    }
    // The half types at small batches past S = 512: the cuBLAS path (half_small_batch_cublas).
    if (!std::is_same_v<T, float> && !std::is_same_v<T, double> &&
        half_small_batch_cublas(steps, batch, state)) {
      plan_note("cluster, wide, tiled: no (a half type at B = ", batch, ", S = ", state,
                ": every step costs less on cuBLAS's half products; "
                "docs/decisions_sequence.md#half-small-batch-cublas)");
      return take_cublas();
    }
    // float32 at full precision at 2 <= B <= 16 from S = 512 on: the cuBLAS path
    // (float32_small_batch_cublas).
    if (std::is_same_v<T, float> && !tf32 && float32_small_batch_cublas(steps, batch, state)) {
      plan_note("cluster, wide, tiled: no (float32 at B = ", batch, ", S = ", state,
                ": every step costs less on the cuBLAS path's step products; "
                "docs/decisions_sequence.md#float32-small-batch-cublas)");
      return take_cublas();
    }
    // Mid batches at large states: the step kernels or cuBLAS every step (mid_batch_steps).
    const bool mid_steps = sequence_path_setting() == SequencePath::kAuto &&
                           mid_batch_steps<T>(device, steps, batch, state, tf32);
    if (mid_steps) {
      plan_note("wide, tiled: no (40 <= B <= 128 at S = ", state,
                ": every step costs less on cuBLAS's products; "
                "docs/decisions_sequence.md#mid-batch-steps)");
    }
    // Where the cluster kernels' clusters would take turns (each running all T steps), the tiled
    // kernels, where they apply, run the batch at once and cost less; where the clusters run at
    // once, the cluster kernels are the faster. Figures:
    // docs/decisions_sequence.md#cluster-or-tiled.
    const ClusterPlan cluster = cluster_plan<T>(device, batch, state, tf32);
    const TiledPlan instead = cluster.use && !cluster.at_once
                                  ? tiled_plan<T>(device, batch, state, tf32)
                                  : TiledPlan{TiledShape{}, Product::kSimt};
    if (cluster.use && instead.shape.mt == 0) {  // all steps in one launch of clusters (sm_90)
      plan.path = SequencePlan::Path::kCluster;
      plan.cluster = cluster.shape;
      return plan;
    }
    if (instead.shape.mt > 0) {
      return take_tiled(instead);
    }
    // The tiled kernels before the wide ones: the half types at mid states and batches (faster
    // from B = 11 on, about even at B = 4; past B = 44 up to S = 640, below the mid-batch rule),
    // and float32 where TF32 is allowed at S > 320 (past B = 44 below S = 640), where the tiled
    // kernels take one pass and the wide ones three up to 64 rows (sequence_product): faster at
    // most of the sweep's shapes there, slower at none by much. float32 at torch's default (three
    // passes in both) stays on the wide kernels: at the same shapes they were mostly the faster.
    // Figures: docs/decisions_sequence.md#half-tiled-before-wide.
    const bool half = !std::is_same_v<T, float> && !std::is_same_v<T, double>;
    const bool tiled_first =
        half ? batch >= 8 && state > 256 && (batch <= 44 ? state <= 512 : state < 640)
             : std::is_same_v<T, float> && tf32 && state > 320 && (batch <= 44 || state < 640);
    if (tiled_first && !mid_steps) {
      const TiledPlan tiled = tiled_plan<T>(device, batch, state, tf32);
      if (tiled.shape.mt > 0) {
        plan_note(half ? "tiled: before the wide kernels (the half types at 8 <= B <= 44, 256 < S "
                         "<= 512, or B >= 45, 256 < S < 640; "
                         "docs/decisions_sequence.md#half-tiled-before-wide)"
                       : "tiled: before the wide kernels (float32 with TF32 allowed at S > 320, "
                         "past B = 44 below S = 640; "
                         "docs/decisions_sequence.md#half-tiled-before-wide)");
        return take_tiled(tiled);
      }
    }
    const WidePlan wide = mid_steps ? WidePlan{} : wide_plan<T>(device, batch, state, tf32);
    if (wide.cols > 0) {  // all steps in one cooperative launch over the GPU
      plan.path = SequencePlan::Path::kWide;
      plan.wide_cols = wide.cols;
      plan.product = wide.product;
      // On a stream where LLTMSequence runs calls at once, the GPU shared `parts` ways, a wide
      // grid over more than its share cannot run beside the other calls'; the tiled kernels'
      // tile for the share (tiled_plan), where one applies and holds less of the GPU and at
      // most half, can. Figures: docs/decisions_sequence.md#layers-at-once.
      const int parts = at_once_parts(device);
      if (sequence_path_setting() == SequencePath::kAuto && parts > 0) {
        const double share = plan_grid_share<T>(device, plan, batch, state);
        const TiledPlan tiled =
            share > 1.0 / parts ? tiled_plan<T>(device, batch, state, tf32) : TiledPlan{};
        const double sms = cuda::sm_count(device);
        const double tiled_share =
            tiled.shape.mt > 0 ? tiled_flag_count(batch, state, tiled.shape) / sms : 1.0;
        if (tiled_share <= 0.5 && tiled_share < share) {
          plan_note("wide: no (a grid over more than 1 / ", parts,
                    " of the GPU, on a stream LLTMSequence runs calls at once on: the tiled "
                    "kernels' tile for that share instead)");
          return take_tiled(tiled);
        }
      }
      return plan;
    }
    const TiledPlan tiled = mid_steps ? TiledPlan{} : tiled_plan<T>(device, batch, state, tf32);
    if (tiled.shape.mt > 0) {
      return take_tiled(tiled);
    }
  }
  const StepPlan fused = step_plan(device, batch, state, static_cast<int64_t>(sizeof(T)));
  if (fused.fused && steps > 0) {  // the recurrent product and the gate math in one kernel
    plan.path = SequencePlan::Path::kSteps;
    plan.overlap = fused.overlap;
    C10_CUDA_CHECK(
        prepare_sequence_steps<T>(batch, state, cuda::sm_count(device), &plan.all_at_once));
    return plan;
  }
  if (steps > 0 && batch > 0 && state > 0) {  // cuBLAS, or our split product, every step
    return take_cublas();
  }
  return plan;
}

template <typename T>
double plan_grid_share(int device, const SequencePlan& plan, int64_t batch, int64_t state) {
  if (batch <= 0 || state <= 0) {
    return 0.0;
  }
  const double sms = cuda::sm_count(device);
  using Path = SequencePlan::Path;
  switch (plan.path) {
    case Path::kSmall:  // a block per small_rows batch rows, counted as a block an SM
      return std::min(1.0,
                      static_cast<double>((batch + plan.small_rows - 1) / plan.small_rows) / sms);
    case Path::kCluster: {
      const int64_t clusters = (batch + plan.cluster.rows - 1) / plan.cluster.rows;
      return std::min(1.0, static_cast<double>(clusters * plan.cluster.blocks) / sms);
    }
    case Path::kWide: {  // the kernels' occupancy, asked of CUDA once per device and shape
      static std::mutex mutex;
      static std::map<std::tuple<int, int64_t, int, Product>, int> occupancy;
      const std::lock_guard<std::mutex> lock(mutex);
      const auto key = std::make_tuple(device, state, plan.wide_cols, plan.product);
      auto it = occupancy.find(key);
      if (it == occupancy.end()) {
        int blocks_per_sm = 0;
        const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
        C10_CUDA_CHECK(wide_blocks_per_sm<T>(state, plan.wide_cols, plan.product,
                                             cuda::device_limits(device).smem_optin,
                                             &blocks_per_sm));
        it = occupancy.emplace(key, blocks_per_sm).first;
      }
      const int per_sm = it->second;
      return per_sm <= 0
                 ? 1.0
                 : std::min(1.0,
                            static_cast<double>(wide_flag_count(batch, state, plan.wide_cols)) /
                                (per_sm * sms));
    }
    case Path::kTiled:  // at most one block an SM
      return std::min(1.0, static_cast<double>(tiled_flag_count(batch, state, plan.tiled)) / sms);
    case Path::kSteps:
      return plan.all_at_once ? 1.0 : 0.0;
    case Path::kCublas:
      return 0.0;
  }
  return 1.0;
}

#define LLTM_EXT_INSTANTIATE(T)                                                 \
  template SequencePlan plan_sequence<T>(int, int64_t, int64_t, int64_t, bool); \
  template double plan_grid_share<T>(int, const SequencePlan&, int64_t, int64_t);
LLTM_EXT_FOR_FLOATING_TYPES(LLTM_EXT_INSTANTIATE)

}  // namespace lltm_ext::lltm
