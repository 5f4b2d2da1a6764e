// The GEMM op's kernel entry points (CPU and CUDA) and the operand-layout description they share.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "gemm/cpu/api.h"
#include "gemm/gemm_heuristic.h"

namespace lltm_ext::gemm {

// How a 2-D operand (R x C) sits in memory. Row-major: element (r, c) at data[r * ld + c];
// otherwise column-major: at data[c * ld + r]. ld is the stride of the non-unit dimension.
struct Layout {
  bool row_major;
  int64_t ld;
};

// The layout of t if one dimension has unit stride and the other a stride that keeps rows (resp.
// columns) apart; nullopt for any other strides (those are made contiguous first). Dimensions of
// size <= 1 place no constraint on their stride; ld then rounds the other extent up to 4 (only
// alignment is read from it).
inline std::optional<Layout> layout_of(const at::Tensor& t) {
  const int64_t R = t.size(0), C = t.size(1);
  const int64_t sr = t.stride(0), sc = t.stride(1);
  const int64_t pad_c = (std::max<int64_t>(C, 1) + 3) / 4 * 4;
  const int64_t pad_r = (std::max<int64_t>(R, 1) + 3) / 4 * 4;
  if ((C <= 1 || sc == 1) && (R <= 1 || sr >= std::max<int64_t>(C, 1))) {
    return Layout{true, R <= 1 ? pad_c : sr};
  }
  if ((R <= 1 || sr == 1) && (C <= 1 || sc >= std::max<int64_t>(R, 1))) {
    return Layout{false, C <= 1 ? pad_r : sc};
  }
  return std::nullopt;
}

// c (M x N, written) = a (M x K) @ b (K x N); a, b and c with any strides (c's elements apart, not
// overlapping a's or b's), one dtype. Its kernels run the copy for cpu::isa() (common/cpu_isa.h),
// as the element-wise loops do.
void gemm_cpu(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c);

// The same on pointers and element strides (cpugemm::Problem; M, N, K >= 1) of one dtype (float32,
// float64, bfloat16, float16), for loops that multiply step after step (the sequence's CPU time
// loops), where a tensor view per operand and call would cost as much as a small product.
void gemm_cpu(at::ScalarType dtype, const cpugemm::Problem& p);

// The ISA name (cpu::isa_name()'s) of the kernel copy the last gemm_cpu call in this process ran,
// "" before the first: which copy LLTM_EXT_CPU_ISA and the CPU led to, for tests.
std::string cpu_kernel_isa();

// Test knobs of gemm_cpu (gemm/cpu/api.h's Knobs): the path ("auto", "packed", "rows", "dot"),
// the parts a product is cut into for threads (0: from the work), whether bfloat16 may use the
// AVX-512 BF16 kernels, the orientation (-1: the heuristic's; 0: C = A B; 1: C^T = B^T A^T),
// whether bfloat16's packed path may run on AMX tiles. Process-wide; tests set them and put them
// back.
void set_cpu_knobs(const std::string& path, int64_t parts, bool bf16_dot, int64_t transpose,
                   bool amx);

// What the last gemm_cpu call ran: (path, computed as C^T = B^T A^T, parts, bfloat16 on the
// AVX-512 BF16 kernels, bfloat16 on AMX tiles); ("", false, 0, false, false) before the first (or
// after one with K = 0).
std::tuple<std::string, bool, int64_t, bool, bool> cpu_last_run();

// c (M x N, contiguous, written) = a (M x K) @ b (K x N); a and b each with a layout_of().
// config < 0 and splits <= 0: chosen by the heuristic; otherwise (float32 only) that tile config
// and number of K splits, for tuning; with splits 1, tail_tiles > 0 and tail_splits > 1, the last
// tail_tiles tiles (in block order) are split along K into tail_splits parts ("tail split-K").
void gemm_cuda(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, int config = -1,
               int splits = 0, int tail_tiles = 0, int tail_splits = 0);

// c (M x N, contiguous, written) = a (M x K) @ b (K x N) on the short-K kernel whatever the
// shape (float32, float16, bfloat16; each operand with a layout_of()): kernel "simt", or "mma"
// (its tensor-core form: float16 / bfloat16, K <= 64) or "small" (the small-product kernel:
// float16 / bfloat16, K <= 512), both sm_80 or newer; anything else an error. Tuning and tests.
void gemm_cuda_short_k(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                       const std::string& kernel = "simt");

// c (M x N, contiguous, written) = a (M x K) @ b (K x N) on the skinny kernel (float16 /
// bfloat16, a side of at most 32, K a multiple of 8, both operands K-contiguous and 16-byte
// aligned, sm_80 or newer; anything else an error): warps per block (1 to 8, as shared memory
// allows), K splits, and the column kernel's block width (32 or 64 columns), each 0 for the
// kernel's own choice. Tuning and tests.
void gemm_cuda_skinny(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, int warps = 0,
                      int64_t splits = 0, int cols = 0);

// The largest small side (min(M, N)) that the auto path gives the skinny kernel, where it can run
// the product (0: never); process-wide, for tuning and tests.
int cuda_skinny_side();
void set_cuda_skinny_side(int side);

// c (M x N, contiguous, written) = a (M x K) @ b (K x N) on the wgmma kernel's narrow tiles
// (float16 / bfloat16, a side of at most 32, that side's operand K-contiguous, rows 16-byte
// aligned, a Hopper GPU; anything else an error), with `splits` K splits and tiles of `rows` rows
// of the large side, 64 or 128 (0: its own choice of each). Tuning and tests.
void gemm_cuda_narrow(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                      int64_t splits = 0, int rows = 0);

// The largest small side (min(M, N)) that the auto path gives the narrow tile, where it can run
// the product (0: never); process-wide, for tuning and tests.
int cuda_narrow_side();
void set_cuda_narrow_side(int side);

// Whether the kernels that stream a large operand (the skinny kernels' X; the wgmma kernel's B at
// up to 16 tile rows, its A at one tile column) load it under L2's evict-first policy: on by
// default; process-wide, for measurement.
bool cuda_l2_stream();
void set_cuda_l2_stream(bool on);

// Names of the float32 tile configs that gemm_cuda(..., config, splits) accepts, in index order.
std::vector<std::string> cuda_config_names();

// The float32 path on the current CUDA device: "async" (cp.async configs, sm_80 and newer) or
// "staged" (register-staged, any GPU); chosen by the GPU code the device runs, or forced by
// LLTM_EXT_GEMM_PATH / set_cuda_path("auto" | "async" | "staged").
std::string cuda_path();
void set_cuda_path(const std::string& path);

// The bfloat16 / float16 tensor-core kernels the current CUDA device runs, as one name: "wgmma"
// (the Hopper kernel's sm_90a code is loaded; the planner then picks wgmma or mma per call), "mma"
// (the sm_80+ mma.sync kernel's code, compiled for compute_80 or newer) or "simt" (neither: the
// tiled SIMT kernel); or as forced by LLTM_EXT_GEMM_HALF_PATH / set_cuda_half_path("auto" |
// "wgmma" | "mma" | "simt" | "wgmma64" | "wgmma128" | "wgmma192" | "wgmma256" | "mma64" | "mma128"
// | "mma256": the last seven force the block tile too: wgmma's width, or mma's 64 x 64, 128 x 128
// or 128 x 256).
// The same setting picks float32's kernel where TF32 is allowed (torch.mm's setting): wgmma or mma
// run it as tf32, simt as exact float32. Products with a side of at most 4 run on the
// matrix-vector kernels whatever this says, except a side of 2 to 4 over an M- / N-contiguous
// operand, which takes this path.
std::string cuda_half_path();
void set_cuda_half_path(const std::string& path);

// The wgmma kernel's switches, process-wide, for tuning and tests: whether its consumers keep one
// group in flight across K steps (default) or wait for each step's group; whether a product of
// M <= 64 loads stages of 64 rows of A (default) or 128; whether blocks run in clusters of two
// that share B's stages: as planned (0, the default; TcPlan::cluster), never (1) or wherever they
// can (2); whether the 256-wide tile's last, partial round runs as Stream-K: where the rule says
// (0, the default), never (1) or wherever it can (2) (gemm_launchers.h: kStreamK*); whether the
// planner may take the 256-row tiles (default) or 128-row ones only (unless forced); whether a
// 16-bit product of an M-major A and a K-major B runs as its transpose, stored transposed: where
// the rule says (0, the default), never (1) or always (2) (gemm_launchers.h: kSwap*); how many
// tile rows a group of the tile walk takes (16, the default).
void set_cuda_wgmma_knobs(bool overlap, bool short_a, int cluster, int stream_k, bool tall,
                          int swap, int group);

// How the wgmma kernel's 128 x 256 tiles of an M x N x K product (16-bit types, or TF32) run on
// `sms` SMs, blocks alone, K unsplit, under the Stream-K switch as set: (whole-tile tiles,
// Stream-K tiles, Stream-K blocks); (tiles, 0, 0) without Stream-K.
std::tuple<int64_t, int64_t, int64_t> cuda_stream_k_split(int64_t M, int64_t N, int64_t K,
                                                          bool tf32, int sms);

// What the tile heuristic is told about the current CUDA device: its SM count, its float32 path,
// the occupancy of each config (read once per device; 0 for configs its path does not run).
GpuFacts cuda_gpu_facts();

// The schedule the heuristic (gemm_heuristic.h) picks for float32 M x N x K on the current CUDA
// device, from cuda_gpu_facts(); b_k_contig: B is K-contiguous (a transposed row-major matrix).
Choice cuda_choose(int64_t M, int64_t N, int64_t K, bool b_k_contig = false);

}  // namespace lltm_ext::gemm
