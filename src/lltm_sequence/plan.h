// Which kernels run the LLTM sequence's time steps on CUDA: the planner
// (plan_cuda_host.cpp), from the device, the dtype, the shape and the
// LLTM_EXT_SEQUENCE_* settings; sequence_cuda_host.cpp runs its plan (CUDA builds only).
#pragma once

#include <c10/core/ScalarType.h>
#include <c10/util/StringUtil.h>

#include <cstdint>
#include <string>
#include <vector>

#include "lltm_sequence/sequence_launchers.h"

namespace lltm_ext::lltm {

// The kernels of one call, forward or backward: the small-state kernels, the thread-block cluster
// kernels (sm_90), the wide-state kernels, the tiled kernels (sm_90), the fused step kernels, or
// cuBLAS and the gate kernel every step.
struct SequencePlan {
  enum class Path { kSmall, kCluster, kWide, kTiled, kSteps, kCublas };
  Path path = Path::kCublas;
  int small_rows = 0;                // kSmall: batch rows per block (1, 2 or 4)
  ClusterShape cluster{};            // kCluster: the clusters' shape
  int wide_cols = 0;                 // kWide: state columns per block (4, 8 or 16)
  TiledShape tiled{};                // kTiled: the blocks' tile
  Product product = Product::kSimt;  // kWide, kTiled: how the recurrent product runs
  bool overlap = false;              // kSteps: per-step launches overlap the previous step (sm_90+)
  bool all_at_once = false;  // kSteps: one cooperative launch for all steps, else one per step
  // kCublas: the step's product through launch_step_gemm rather than cuBLAS (rows > 0): forward's
  // B x 3S x S, backward's B x S x 3S.
  StepGemmShape forward_gemm{}, backward_gemm{};
};

// The plan for T = `steps` steps of (batch, state) in dtype T on `device` (the current device),
// with `tf32` saying whether float32 products may use TF32 (torch's float32 matmul precision, as
// a loop of lltm cells follows it). In order: the small-state kernels where they apply and their
// grid runs at once, else the cluster kernels where they apply, else the wide-state kernels where
// they apply and pay, else the tiled kernels where they apply and pay, else the fused step kernels
// where they apply (their shared-memory size set on the device), else cuBLAS.
// On the cuBLAS path, float32 at full precision runs its step products through our kernels split
// over K (launch_step_gemm: 3xTF32 on the tensor cores, or the SIMT cores) at small batches, where
// that pays (step_gemm_plan has the rule). The LLTM_EXT_SEQUENCE_* settings (settings.h: what
// each forces; read at every call) force the path, the product, the kernels' shapes and the step
// products.
template <typename T>
SequencePlan plan_sequence(int device, int64_t steps, int64_t batch, int64_t state, bool tf32);

// Whether auto runs the half types' time loop on the cuBLAS path, ahead of the cluster, wide and
// tiled kernels, at these sizes: calls not short (the short-steps rule) of small batches (B < 40)
// past S = 512, where cuBLAS's half step products and the gate kernels cost less per step than
// those kernels' steps. A mixed call (float32 state, half products) takes that path there too,
// with cuBLAS's half step products (mixed_takes_cublas). Never where LLTM_EXT_SEQUENCE_PATH forces
// a path; LLTM_EXT_SEQUENCE_MID_BATCH=off turns it off with the mid-batch rule. Figures:
// docs/decisions_sequence.md#half-small-batch-cublas.
bool half_small_batch_cublas(int64_t steps, int64_t batch, int64_t state);

// Whether auto runs float32's time loop at full precision (not TF32) on the cuBLAS path, ahead of
// the cluster, wide and tiled kernels: calls not short of batches 2 <= B <= 16 from S = 512 on,
// where the cuBLAS path's step products (step_gemm_plan's) and the gate kernels cost less per
// step than those kernels' three-pass steps. Off as half_small_batch_cublas is.
// Figures: docs/decisions_sequence.md#float32-small-batch-cublas.
bool float32_small_batch_cublas(int64_t steps, int64_t batch, int64_t state);

// The share of the GPU (0 to 1) that `plan`'s step kernels for (batch, state) in dtype T hold
// while they run: their blocks over what the SMs hold at once for the persistent kernels (the
// wide kernels' occupancy counted; the others at a block an SM), 1 for the fused steps' one
// cooperative launch, 0 where each step is its own short launches (the cuBLAS path, the fused
// steps a launch each). Another call's kernels run beside them where it is at most 1/2: what the
// layers of LLTMSequence run at once on (lltm_ext/ops/lltm_sequence.py).
template <typename T>
double plan_grid_share(int device, const SequencePlan& plan, int64_t batch, int64_t state);

// The streams LLTMSequence runs calls at once on (lltm_ext/ops/lltm_sequence.py), each marked with
// how many calls share the GPU there (2 .. kAtOnceMostParts): a call whose current stream is one
// of them plans the tiled kernels for that share of the SMs where their grid fits (tiled_plan;
// plan_grid_share counts the whole GPU). at_once_parts: the device's current stream's mark, 0
// where it has none.
constexpr int kAtOnceMostParts = 4;
void mark_at_once_stream(int device, cudaStream_t stream, int parts);
int at_once_parts(int device);

// How the weight gradient d W (3S, S + I) (and d b) of a call is computed: cuBLAS's products and a
// column sum, the fused kernel on the SIMT cores, or the Hopper kernel (float32); splits of the
// T B rows, k_split rows each. LLTM_EXT_SEQUENCE_WGRAD forces it (sequence_cuda_host.cpp, where
// sequence_weight_grad_cuda runs it; lltm_sequence.h has the rule).
struct WeightGradPlan {
  enum class Kind { kCublas, kFused, kTensor };
  Kind kind = Kind::kCublas;
  int splits = 1;
  int64_t k_split = 0;
};
WeightGradPlan plan_weight_grad(int device, at::ScalarType dtype, int64_t steps, int64_t batch,
                                int64_t features, int64_t state, bool bias, bool tf32);

// Whether a float32 product at full precision outside the time loops (the input projections of
// all steps, backward's d input), c (m x n) = a (m x k) b (k x n), runs on Hopper's tensor cores in
// three TF32 passes (the step product's kernel) instead of cuBLAS's exact float32 kernels, which
// are SIMT ones: LLTM_EXT_SEQUENCE_INPUT_GEMM; on auto, a GPU that runs that kernel and a product
// of at least kInputGemmTensorWaves waves of its 128 x 128 tiles, at least 64 deep.
// Figures: docs/decisions_sequence.md#input-gemm-tensor.
constexpr int kInputGemmTensorWaves = 4;
bool input_gemm_tensor(int device, int64_t m, int64_t n, int64_t k);

// The planner's reasons, for lltm_ext.explain: while a PlanNotes lives on a thread, the planners
// above add a line for each kernel family they take or pass over, and why (plan_note). Ordinary
// calls have none: a rule then costs the test of a thread-local pointer.
class PlanNotes {
 public:
  PlanNotes();
  ~PlanNotes();
  PlanNotes(const PlanNotes&) = delete;
  PlanNotes& operator=(const PlanNotes&) = delete;
  static PlanNotes* active();
  std::vector<std::string> lines;

 private:
  PlanNotes* previous_;
};
template <typename... Args>
void plan_note(const Args&... args) {
  if (PlanNotes* notes = PlanNotes::active()) {
    notes->lines.push_back(c10::str(args...));
  }
}

// Names for explain: "small", "cluster", "wide", "tiled", "steps", "cublas"; "simt", "tf32",
// "3xtf32".
const char* path_name(SequencePlan::Path path);
const char* product_name(Product product);

}  // namespace lltm_ext::lltm
