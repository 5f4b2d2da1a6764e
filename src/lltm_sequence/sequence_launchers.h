// The LLTM sequence's CUDA kernels as the host code calls them: launchers on raw pointers, sizes
// and a stream that return the launch's error, and what the planner (plan_cuda_host.cpp) asks of
// each kernel family. Defined in the family folders' .cu files, compiled by nvcc without ATen;
// included by those files and by the *_cuda_host.cpp files that call them.
//   steps/steps.cu                 the fused step kernels (any GPU; S <= 256)
//   steps/step_gemm.cu             the per-step recurrent product split over K (float32, any GPU)
//   steps/step_gemm_sm90.cu        the same product on Hopper's tensor cores (large batches)
//   wide/wide.cu                   the wide-state kernels (cooperative; S <= 1024)
//   tiled/tiled.cu                 the tiled kernels (cooperative, sm_90; many batch rows)
//   cluster/cluster.cu             the thread-block cluster kernels (sm_90; S <= 256)
//   small/small.cu                 the small-state kernels (any GPU; S <= 96 or 88)
//   weight_grad/weight_grad.cu     the weight and bias gradients in one kernel (any GPU)
//   weight_grad/weight_grad_sm90.cu  the same on Hopper's tensor cores (float32, long sequences)
//   sequence_wgmma.cuh             the 3xTF32 wgmma loop that the two Hopper kernels share
// The cell's gate kernels (lltm/lltm_launchers.h) run the steps of the cuBLAS path.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

#include "common/cuda_kernel.cuh"
#include "lltm/lltm_launchers.h"

namespace lltm_ext::lltm {

// How the sequence kernels' recurrent product runs (the cluster and wide-state kernels): on the
// SIMT cores; on the tensor cores with tf32 operands and float32 sums (one pass: float32 with TF32
// allowed, and the half types, whose values tf32 holds exactly); or on the tensor cores with each
// float32 operand split into two tf32 parts, big + small, summing small x big + big x small +
// big x big (three passes, "3xTF32": float32's accuracy, for float32 at torch's defaults).
enum class Product { kSimt, kTf32, kTf32x3 };

// The sequence's fused time steps (steps/steps.cu), for state sizes up to
// kFusedStepMaxState whose shared memory (sequence_step_smem_bytes) the GPU has: the recurrent
// product and the gate math in one kernel. prepare_sequence_steps sets the kernels' shared memory
// size on the current device and says whether the grid fits on the GPU at once (then one
// cooperative launch runs all steps, a grid-wide barrier between them; else one launch per step).
// Forward, steps t0 .. t0 + steps - 1: gates (T, B, 3S) holds the input projections and gets the
// pre-activations (without the bias); -> output, cells (T, B, S); h0, c0 (B, S) before step 0.
// Backward, steps t_hi down to t_hi - steps + 1 (`last` = T - 1): -> d_gates (T, B, 3S) and d_cell
// (2, B, S), step t's dL/dc_{t-1} in d_cell[t % 2]. w (3S, ld): W_h is its first S columns.
// Every family's kernels below read h0, c0, grad_h_n and grad_c_n as zeros where they are nullptr
// (the operator's None: no tensor of zeros made, nor a launch to fill it).
// `overlap` (sm_90+): per-step launches with programmatic stream serialization (a step copies its
// weights while the step before it runs).
constexpr int64_t kFusedStepMaxState = 256;
int64_t sequence_step_smem_bytes(int64_t state, int64_t element_size);
template <typename T>
cudaError_t prepare_sequence_steps(int64_t batch, int64_t state, int sm_count, bool* all_at_once);
template <typename T>
cudaError_t launch_sequence_forward_steps(T* gates, const T* bias, const T* h0, const T* c0,
                                          const T* w, int64_t ld, T* output, T* cells,
                                          int64_t batch, int64_t state, int64_t t0, int64_t steps,
                                          bool overlap, cudaStream_t stream);
template <typename T>
cudaError_t launch_sequence_backward_steps(T* d_gates, const T* w, int64_t ld, const T* grad_output,
                                           const T* grad_h_n, const T* grad_c_n, const T* cells,
                                           const T* gates, const T* bias, T* d_cell, int64_t batch,
                                           int64_t state, int64_t last, int64_t t_hi, int64_t steps,
                                           bool overlap, cudaStream_t stream);

// The sequence's time steps for wide states (wide/wide.cu), S <= kWideMaxState (rows of
// x read four elements at a time where S % 4 == 0, else element by element): a persistent
// cooperative kernel, each block kWideRows batch rows x `cols` state columns with its slice of W_h
// in shared memory for all T steps, a barrier per step over each row of blocks. The same inputs
// and outputs as the fused step kernels above over all T steps; flags: wide_flag_count(batch,
// state, cols) words of device memory for the barriers' step counters (the launch zeroes them
// first, on `stream`). wide_step_columns: on the current device, the fewest columns per block (4,
// 8 or 16) whose grid runs at once in max_smem per block, their shared memory set; 0 when none
// does (or S does not qualify); `only` (4, 8 or 16): those columns or none. product:
// Product::kSimt, or the tensor cores (float32 and the half types; kTf32x3 for float32 only; the
// kernels of wide_mma_loaded's answer, which needs this module's code for the device compiled for
// sm_80 or newer).
constexpr int64_t kWideMaxState = 1024;
constexpr int kWideRows = 16;
template <typename T>
cudaError_t wide_mma_loaded(bool* loaded);
template <typename T>
cudaError_t wide_step_columns(int64_t batch, int64_t state, int sm_count, int max_smem, int* cols,
                              int only, Product product);
int64_t wide_flag_count(int64_t batch, int64_t state, int cols);
// How many blocks of the wide kernels for `cols` columns fit an SM at once, forward and backward
// alike (the lesser), with max_smem per block allowed: 0 where there is no such kernel.
template <typename T>
cudaError_t wide_blocks_per_sm(int64_t state, int cols, Product product, int max_smem, int* per_sm);
template <typename T>
cudaError_t launch_wide_forward(T* gates, const T* bias, const T* h0, const T* c0, const T* w,
                                int64_t ld, T* output, T* cells, unsigned int* flags, int64_t batch,
                                int64_t state, int64_t steps, int cols, Product product,
                                cudaStream_t stream);
template <typename T>
cudaError_t launch_wide_backward(T* d_gates, const T* w, int64_t ld, const T* grad_output,
                                 const T* grad_h_n, const T* grad_c_n, const T* cells,
                                 const T* gates, const T* bias, T* d_cell, unsigned int* flags,
                                 int64_t batch, int64_t state, int64_t steps, int cols,
                                 Product product, cudaStream_t stream);

// The sequence's time steps on tiles of many batch rows (tiled/tiled.cu; code for sm_90
// only: the tensor cores, float32 and the half types): a persistent cooperative kernel, each block
// a tile of 16 mt batch rows x `cols` state columns with its slice of W_h in shared memory for all
// T steps, x read from xbuf, float rows that the gate math writes (a barrier per step over each row
// of blocks). The same inputs and outputs as the wide-state kernels, plus xbuf: (2, batch,
// tiled_x_ld(state, backward)) floats, zeros past the state's K (S forward, 3S backward), h0 in
// its first (batch, S) block before a forward launch; flags: tiled_flag_count words (the launch
// zeroes them, on `stream`). tiled_step_shape: on the current device, the tile (m-tiles, columns
// and cp.async stages) whose grid of at most one block per SM fits the state's slice in max_smem
// per block, the cheapest by the step's estimated cost; mt = 0 where none fits (or the dtype, the
// product or the state does not qualify); only_mt / only_cols / only_stages (non-zero) restrict
// the choice to those, for tests and measurements. tiled_image_loaded: whether the device runs the
// kernels' sm_90 code.
constexpr int64_t kTiledMaxState = 4096;
constexpr int kTiledMaxStages = 8;
struct TiledShape {
  int mt = 0;      // m-tiles of 16 batch rows per block: 1, 2, 4 or 8 (0: none)
  int cols = 0;    // state columns per block
  int stages = 0;  // cp.async stages of x's ring: 2 .. kTiledMaxStages (one less in flight)
};
template <typename T>
cudaError_t tiled_image_loaded(bool* loaded);
template <typename T>
cudaError_t tiled_step_shape(int64_t batch, int64_t state, int sm_count, int max_smem,
                             Product product, int only_mt, int only_cols, int only_stages,
                             TiledShape* shape);
int64_t tiled_flag_count(int64_t batch, int64_t state, const TiledShape& shape);
int64_t tiled_x_ld(int64_t state, bool backward);
template <typename T>
cudaError_t launch_tiled_forward(T* gates, const T* bias, const T* c0, const T* w, int64_t ld,
                                 T* output, T* cells, float* xbuf, unsigned int* flags,
                                 int64_t batch, int64_t state, int64_t steps,
                                 const TiledShape& shape, Product product, cudaStream_t stream);
template <typename T>
cudaError_t launch_tiled_backward(T* d_gates, const T* w, int64_t ld, const T* grad_output,
                                  const T* grad_h_n, const T* grad_c_n, const T* cells,
                                  const T* gates, const T* bias, T* d_cell, float* xbuf,
                                  unsigned int* flags, int64_t batch, int64_t state, int64_t steps,
                                  const TiledShape& shape, Product product, cudaStream_t stream);

// The kernels below that run all steps in one launch (the cluster and small-state kernels) are
// programmatic dependent launches (cuda_kernel.cuh) for at most kDependentMaxSteps steps, which
// hides the launch's latency between the few short kernels of a short sequence (figures:
// docs/decisions_sequence.md#dependent-launch). A longer sequence, whose time that latency hardly
// touches, is launched the ordinary way.
constexpr int64_t kDependentMaxSteps = 64;

// The sequence's time steps on sm_90 (cluster/cluster.cu): thread-block clusters of
// `blocks` blocks (1, 2, 4 or 8), each cluster a slice of `rows` batch rows and the whole state
// (block j: state columns [j * cols, (j + 1) * cols)), h (forward) or d_gates (backward) exchanged
// through distributed shared memory with one cluster barrier per step; all steps in one launch.
// The same inputs and outputs as the fused step kernels above over all T steps (backward: d_cell
// (B, S) gets dL/dc_0's gradient d c0); forward also writes the last step's h and c to h_n, c_n
// (B, S) where they are not nullptr (no copy of the final state after the kernel). For state sizes
// up to kClusterMaxState; cluster_shape_ok and the device's shared memory (cluster_smem_bytes) say
// which `rows` and `blocks` a state size takes.
constexpr int kClusterMaxBlocks = 8, kClusterThreads = 256;
constexpr int64_t kClusterMaxState = 256;
// A block's work: state S, blocks per cluster, columns per block, batch rows per cluster, and the
// product: on the tensor cores (`mma`: mma.sync with tf32 operands, float32 sums, in one pass or,
// with `split`, three: see Product), or on the SIMT cores split into `units` (a column x 2 rows)
// x `parts` (of K), units_pow2 * parts = kClusterThreads.
struct ClusterShape {
  int state, blocks, cols, rows, units, units_pow2, parts;
  bool mma, split;
};
ClusterShape cluster_shape(int64_t state, int blocks, int rows, Product product);
bool cluster_shape_ok(const ClusterShape& shape);
int64_t cluster_smem_bytes(const ClusterShape& shape, bool backward, int64_t element_size);
// Whether the current device runs this module's sm_90 code of the cluster kernels.
template <typename T>
cudaError_t cluster_image_loaded(bool* loaded);
// On the current device: the kernels' shared-memory limit set to max_smem, and the clusters of
// `shape` that run at once, forward and backward.
template <typename T>
cudaError_t prepare_cluster_steps(int max_smem, const ClusterShape& shape, int* forward_clusters,
                                  int* backward_clusters);
template <typename T>
cudaError_t launch_cluster_forward(T* gates, const T* bias, const T* h0, const T* c0, const T* w,
                                   int64_t ld, T* output, T* cells, T* h_n, T* c_n, int64_t batch,
                                   int64_t steps, const ClusterShape& shape, cudaStream_t stream);
template <typename T>
cudaError_t launch_cluster_backward(T* d_gates, const T* w, int64_t ld, const T* grad_output,
                                    const T* grad_h_n, const T* grad_c_n, const T* cells,
                                    const T* gates, const T* bias, T* d_cell, int64_t batch,
                                    int64_t steps, const ClusterShape& shape, cudaStream_t stream);

// The sequence's time steps for small states (small/small.cu), S <= small_max_state<T>()
// (96 for float32, 88 for the half types, whose 8 lanes a column take twice the threads; float64:
// cudaErrorNotSupported; at S = 128 float32's 4 lanes would hold 96 k of W_h each, 2 lanes 192,
// and the compiler put 96 in local memory): each block owns `rows` (1, 2 or 4) batch
// rows and the whole state, W_h in its threads' registers, blocks independent, all T steps in one
// launch. The same inputs and outputs as the cluster kernels (forward: h_n, c_n too).
// small_step_rows: the fewest rows per block whose grids (forward's, and either of backward's: the
// sequence's length picks its lanes a column) run at once on the current device, 0 where none
// does or the state or dtype does not apply.
// float32 at 88 < S <= 96 (k per lane 24) runs here: faster than the cluster kernels that ran
// there before at every shape measured. Figures: docs/decisions_sequence.md#small-max-state.
template <typename T>
constexpr int64_t small_max_state() {
  return std::is_same_v<T, float> ? 96 : 88;
}
template <typename T>
cudaError_t small_step_rows(int64_t batch, int64_t state, int sm_count, int* rows);
template <typename T>
cudaError_t launch_small_forward(T* gates, const T* bias, const T* h0, const T* c0, const T* w,
                                 int64_t ld, T* output, T* cells, T* h_n, T* c_n, int64_t batch,
                                 int64_t state, int64_t steps, int rows, cudaStream_t stream);
template <typename T>
cudaError_t launch_small_backward(T* d_gates, const T* w, int64_t ld, const T* grad_output,
                                  const T* grad_h_n, const T* grad_c_n, const T* cells,
                                  const T* gates, const T* bias, T* d_cell, int64_t batch,
                                  int64_t state, int64_t steps, int rows, cudaStream_t stream);

// The per-step recurrent product in float32 at full precision where cuBLAS would run it
// (steps/step_gemm.cu): c (m x n, row-major, ldc) = a (m x k, row-major, lda) op(w), op(w)
// w's transpose (w: n x k, ldw) where `transposed`, else w (k x n); w is read 16 bytes at a time:
// its base 16-byte aligned, ldw a multiple of 4, and where transposed the elements past k in each
// row, up to the next multiple of 4, zeros (step_weights). Exact on the SIMT cores, or where
// `tensor` as 3xTF32 on the tensor cores (sm_80+ code, step_gemm_tensor_loaded; and
// step_gemm_smem_bytes of dynamic shared memory).
// A block owns `rows` (16, 32, 64, or on the SIMT cores 128: step_gemm_rows(m, tensor)) rows x 128
// columns of c and k's split z of `splits`, each of step_gemm_k_split(k, splits, tensor) (a
// multiple of 16, or 32 on the tensor cores). One split: c = the product (+ c where accumulate).
// More: split z's partial sums go to partials + z m n (m x n each; c untouched), for the gate
// kernel to add (SplitSums); `splits` must be step_gemm_splits(k, wanted, tensor)'s.
// `wgmma` (with tensor, rows 128): Hopper's kernel (launch_step_gemm_sm90), transposed only.
struct StepGemmShape {
  int rows = 0;  // 0: cuBLAS
  int splits = 1;
  bool tensor = false;  // 3xTF32 on the tensor cores, else the SIMT cores
  bool wgmma = false;
};
int step_gemm_rows(int64_t m, bool tensor);
int64_t step_gemm_k_split(int64_t k, int splits, bool tensor);
int step_gemm_splits(int64_t k, int wanted, bool tensor);
int64_t step_gemm_tiles(int64_t m, int64_t n, int rows);
int step_gemm_smem_bytes(int rows, bool tensor);
// Whether the current device runs the tensor-core kernel's sm_80+ code (not an older image).
cudaError_t step_gemm_tensor_loaded(bool* loaded);
// w_early: no kernel that may still run when this one is launched writes w (the kernel before it
// on the stream does not, and every kernel before that one has ended by then: each waits for the
// kernel before it first); Hopper's kernel then copies w's first stages before that wait.
cudaError_t launch_step_gemm(const float* a, int64_t lda, const float* w, int64_t ldw,
                             bool transposed, float* c, int64_t ldc, bool accumulate,
                             float* partials, int64_t m, int64_t n, int64_t k,
                             const StepGemmShape& shape, bool w_early, cudaStream_t stream);
// The same product on Hopper's tensor cores (steps/step_gemm_sm90.cu): c = a w^T, w (n x
// k, ldw) K-contiguous as a is, blocks of 128 x 128 outputs, k split as step_gemm_k_split(k,
// splits, true) splits it; 3xTF32 in wgmma with float32 sums. The sm_90a code only
// (step_gemm_sm90_loaded), with step_gemm_sm90_smem_bytes of dynamic shared memory.
int step_gemm_sm90_smem_bytes();
cudaError_t step_gemm_sm90_loaded(bool* loaded);
cudaError_t launch_step_gemm_sm90(const float* a, int64_t lda, const float* w, int64_t ldw,
                                  float* c, int64_t ldc, bool accumulate, float* partials,
                                  int64_t m, int64_t n, int64_t k, int splits, int64_t k_split,
                                  bool w_early, cudaStream_t stream);

// The sequence's weight gradients in one product (weight_grad/weight_grad.cu), over its rows = T
// B rows k (contiguous tensors): d_weights (3S, S + I) = sum_k d_gates[k]^T [h_{k - B} | x_k] with
// h_{-B .. -1} = h0 (B, S) and h_0 .. = output (T, B, S); with cols = S + I + 1, also d_bias (3S)
// = sum_k d_gates[k] (cols = S + I: d_bias unused). Sums in the accumulate type, in a fixed order.
// A block owns 64 x 64 outputs (weight_grad_blocks(S, cols) blocks) and k's split z of `splits`,
// k_split rows each (k_split * splits >= rows); more than one split leaves their sums in partials
// (splits x 3S x cols, accumulate type) and a second kernel adds them in split order.
template <typename T>
struct WeightGradArgs {
  const T* d_gates;  // (rows, 3S)
  const T* h0;       // (B, S)
  const T* output;   // (T, B, S)
  const T* input;    // (rows, I)
  T* d_weights;      // (3S, S + I)
  T* d_bias;         // (3S), where cols = S + I + 1
  int64_t rows, batch, state, features, cols;
};
int64_t weight_grad_blocks(int64_t state, int64_t cols);
template <typename T>
cudaError_t launch_weight_grad(const WeightGradArgs<T>& p, cuda::opmath_t<T>* partials, int splits,
                               int64_t k_split, int sm_count, cudaStream_t stream);
// The splits' partial sums (splits x 3S x cols, accumulate type) added in split order into
// d_weights and d_bias: the second kernel of either launcher.
template <typename T>
cudaError_t launch_weight_grad_sum(const WeightGradArgs<T>& p, const cuda::opmath_t<T>* partials,
                                   int splits, int sm_count, cudaStream_t stream);
// The same for float32 on Hopper's tensor cores (weight_grad/weight_grad_sm90.cu: wgmma, three
// TF32 passes, float32 sums): blocks of 128 x 128 outputs (weight_grad_sm90_blocks),
// weight_grad_sm90_smem_bytes() of dynamic shared memory each; for devices that run this
// module's sm_90a image (weight_grad_sm90_loaded: elsewhere its body is empty).
int64_t weight_grad_sm90_blocks(int64_t state, int64_t cols);
int weight_grad_sm90_smem_bytes();
cudaError_t weight_grad_sm90_loaded(bool* loaded);
cudaError_t launch_weight_grad_sm90(const WeightGradArgs<float>& p, float* partials, int splits,
                                    int64_t k_split, int sm_count, cudaStream_t stream);

}  // namespace lltm_ext::lltm
