// The launchers of the GEMM's CUDA kernels: what the host code (gemm_cuda_host.cpp, C++ compiler)
// calls and the kernel files (gemm_kernels_*.cu, nvcc) define. Plain C++ with CUDA runtime types:
// no device code here (the kernels are in gemm/tiles/).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gemm/gemm_configs.h"
#include "gemm/gemm_tc_plan.h"  // kWgmmaGroup

namespace lltm_ext::gemm {

// Whether a matrix with base `data`, leading dimension `ld` (elements of elem_bytes) and `outer`
// rows along its non-unit dimension can be copied in `bytes`-byte pieces along its rows: a base
// aligned to `bytes` and (when there is more than one row) a row stride of a multiple of `bytes`.
// 16: what TMA and the mma kernel's 16-byte cp.async copies need (ld % 8 == 0 for 16-bit types,
// ld % 4 == 0 for float32); 4: the 4-byte cp.async copies' (float32 always where the base is,
// 16-bit types with an even ld).
inline bool rows_aligned(const void* data, int64_t ld, int64_t outer, int elem_bytes, int bytes) {
  return reinterpret_cast<uintptr_t>(data) % bytes == 0 &&
         (outer <= 1 || ld * elem_bytes % bytes == 0);
}

// Launchers, defined in gemm_kernels.cuh and instantiated in the gemm_kernels_*.cu files for the
// configs of gemm_configs.h. Each returns the CUDA error of its launch (or query).

// C = A B with config Cfg on `stream` (see gemm_tiles::launch_tiles), for either layout of A and
// of B (a_kcontig: A is row-major; b_kcontig: B is a transposed row-major matrix).
template <typename Cfg, typename T, typename OutT>
cudaError_t launch(const gt::Params<T, OutT>& p, bool a_kcontig, bool b_kcontig, int splits,
                   cudaStream_t stream);

// Resident blocks per SM of config Cfg's float32 kernel (row-major A and B) on the current device,
// its dynamic shared memory allowed first.
template <typename Cfg>
cudaError_t blocks_per_sm(int* blocks);

// The PTX version the loaded image of config Cfg's float32 kernel was compiled from on the current
// device (e.g. 90; 75 when the driver compiled compute_75 PTX for a newer GPU).
template <typename Cfg>
cudaError_t ptx_version(int* version);

// c[i] = sum over s < splits of partial[s * n + i] (gemm_tiles::splitk_reduce_kernel).
template <typename Acc, typename OutT>
cudaError_t launch_splitk_reduce(const Acc* partial, OutT* c, int64_t n, int splits, bool vec,
                                 unsigned int blocks, int threads, cudaStream_t stream);

// The same sum in 256-thread blocks, each warp over an eighth of the splits
// (gemm_tiles::splitk_reduce_grouped_kernel): for many splits over few outputs.
template <typename Acc, typename OutT>
cudaError_t launch_splitk_reduce_grouped(const Acc* partial, OutT* c, int64_t n, int splits,
                                         bool vec, unsigned int blocks, cudaStream_t stream);

// Tail split-K's reduction into C (gemm_tiles::tail_reduce_kernel) for config Cfg's tiles.
template <typename Cfg, typename T>
cudaError_t launch_tail_reduce(const T* partial, T* c, int M, int N, int64_t ldc, int main_tiles,
                               int tail_tiles, int splits, bool vec_c, unsigned int blocks,
                               int threads, cudaStream_t stream);

// ---- The matrix-vector kernels (gemm_kernels_gemv.cu; products with a side of at most 4) ----

// out[l, s] = sum over k of X[l, k] Y[k, s] (l < L, s < S, k < K; see gemm/tiles/gemv.cuh), every
// matrix by element strides into its tensor, all of type T, accumulated in float (double for
// double). X K-contiguous (xs_k == 1) runs the row kernel with tpr threads per row (a power of two
// from 1 to 256: lanes of one warp up to 32, whole warps past it), else X is L-contiguous
// (xs_l == 1). k_split: K elements per split; more than one split writes
// float (double) partials into `partial`, one `slice`-element slice per split, indexed as out.
struct GemvCall {
  const void* x;
  const void* y;
  void* out;
  void* partial = nullptr;
  int64_t L, K, k_split;
  int S;
  int64_t xs_l, xs_k, ys_k, ys_s, os_l, os_s;
  int64_t slice = 0;
  int tpr = 32;
};

template <typename T>
cudaError_t launch_gemv(const GemvCall& g, cudaStream_t stream);

// The largest operand, in bytes, that the kernels streaming it load under L2's evict-first
// policy on `device` (cuda::l2_evict_first_policy), 0 where set_cuda_l2_stream turned that off
// (gemm_cuda_host.cpp).
int64_t l2_stream_limit(int device);

// ---- The skinny kernel (gemm_kernels_skinny.cu; float16, bfloat16, sm_80 on) ----

// out[l, s] = sum over k of X[l, k] Y[s, k] (l < L, s < S <= 32, k < K; see
// gemm/tiles/skinny_mma.cuh), Y K-contiguous, X K-contiguous (row stride xs_l) or, with
// l_contig, L-contiguous (X[l, k] at x + k xs_k + l; L a multiple of 8), all bases 16-byte aligned
// and strides multiples of 8 elements, K a multiple of 8; a block per 16 rows of X (`cols`, 32
// or 64, with l_contig) and K split, `warps` warps per block (1 to skinny_max_warps). k_split (a
// multiple of 8): K elements per split; more than one split writes float partials into `partial`,
// one `slice`-element slice per split, indexed as out (os_l, os_s).
struct SkinnyCall {
  const void* x;
  const void* y;
  void* out;
  void* partial = nullptr;
  int64_t L, K, k_split;
  int S;
  int64_t xs_l, ys_s, os_l, os_s;
  int64_t slice = 0;
  int warps = 8;
  bool l_contig = false;
  int64_t xs_k = 0;
  int cols = 64;          // the column kernel's block: 32 or 64 columns of X
  bool stream_x = false;  // X (read once) loaded under L2's evict-first policy
};

template <typename T>
cudaError_t launch_skinny(const SkinnyCall& g, cudaStream_t stream);

// The most warps per block whose shared memory (each warp's ring, for g's S and X's layout) the
// current device holds, at most 8.
int skinny_max_warps(const SkinnyCall& g);

// ---- The short-K kernel (gemm_kernels_short_k.cu; float32, float16, bfloat16) ----

// c (M x N, row-major, ldc) = a (M x K) b (K x N), every operand by element strides (as_m, as_k;
// bs_k, bs_n), computed in float FMAs in k order (gemm/tiles/short_k.cuh): for a short K beside a
// large output. a_kcontig / b_kcontig: which of an operand's strides is the unit one (its loads
// follow it). M, N, K > 0.
struct ShortKCall {
  const void* a;
  const void* b;
  void* c;
  int64_t M, N, K;
  int64_t as_m, as_k, bs_k, bs_n, ldc;
  bool a_kcontig, b_kcontig;
  int sms;  // the device's SMs: the short-K kernel's persistent grid is sized by them
};

// The short-K kernel's tile of C, rows x columns (the host sizes its choice by it).
inline constexpr int kShortKTileM = 64, kShortKTileN = 128;

template <typename T>
cudaError_t launch_short_k(const ShortKCall& g, cudaStream_t stream);

// The same product on the tensor cores (gemm/tiles/short_k_mma.cuh; float16, bfloat16, K at most
// 64, sm_80 or newer): mma.sync over all of K staged once, C written in 16-byte chunks cut at each
// row's own 16-byte boundaries.
template <typename T>
cudaError_t launch_short_k_mma(const ShortKCall& g, cudaStream_t stream);

// The same product for small outputs on the tensor cores (gemm/tiles/small_mma.cuh; float16,
// bfloat16, K at most 512, sm_80 or newer): a 32 x 32 tile per block, its 8 warps splitting K and
// reading their fragments straight from global memory, summed in warp order.
template <typename T>
cudaError_t launch_small_mma(const ShortKCall& g, cudaStream_t stream);

// ---- The Hopper tensor-core GEMM (gemm_kernels_sm90.cu; bf16 / fp16 / tf32, sm_90a) ----

// Element types of Sm90Gemm::type (float32 operands are read as tf32; kSm90F32x3: float32 at full
// precision, in three tf32 passes over operands split by launch_split_tf32).
enum Sm90Type : int { kSm90Half = 0, kSm90BFloat16 = 1, kSm90Tf32 = 2, kSm90F32x3 = 3 };

// One call of a tensor-core kernel: C (M x N, row-major, ldc) = A (M x K) B (K x N). An operand
// is K-major (A row-major, B a transposed row-major matrix) or not; ld is the stride of its
// non-unit dimension in elements. Sm90Gemm and MmaGemm add their kernel's own choices.
struct GemmProblem {
  const void* a;
  const void* b;
  void* c;
  int64_t M, N, K;
  int64_t lda, ldb, ldc;
  bool a_kcontig, b_kcontig;
};

// One wgmma call, all of one type (tf32: both operands K-major). The caller checks what TMA needs
// (rows_aligned(..., 16)) and M, N, K > 0.
struct Sm90Gemm : GemmProblem {
  Sm90Type type;
  int bn;   // block tile width: 64, 128, 256 or one of kWgmmaWideTiles; 16 or 32 (the narrow
            // tiles) for 16-bit types, B K-major
  int sms;  // the device's SM count (the persistent grid's upper bound)
  // Split-K: splits > 1 splits K into parts of k_split elements (a multiple of 64, and
  // splits = ceil(K / k_split)); each writes its float32 partial products to `partial`, splits
  // row-major M x N slices, instead of C (summed into C by launch_splitk_reduce).
  int splits = 1;
  int64_t k_split = 0;
  float* partial = nullptr;
  bool overlap = true;  // one wgmma group left in flight across K steps (else none)
  // Tiles walked in groups of this many tile rows (Sm90Params::group).
  int group = kWgmmaGroup;
  bool short_a = true;  // M <= 64: stages of 64 rows of A (Sm90Params::a_rows), else 128
  bool rows64 = false;  // block tiles of 64 rows at any M (a_rows 64, the second consumer idle)
  // Block tile rows: 128, or 256 (16-bit types, bn one of kWgmmaTallTiles, no Stream-K; short_a
  // and rows64 do not apply).
  int bm = 128;
  // C (and the partials) stored transposed: element (m, n) at c[n * ldc + m] (Sm90Params::c_trans).
  bool c_trans = false;
  // 2: clusters of two blocks on neighbouring tile rows, B multicast (Sm90Params::cluster_m),
  // where the tiles are 64 or more wide (whole 64-column atoms where B is N-major) and M takes
  // two tile rows or more (else 1).
  int cluster_m = 1;
  // kSm90F32x3 (tiles 64 or 128 wide, no clusters): a and b are the split copies (2 M, resp. 2 N
  // rows of K, big parts first), and exact_a / exact_b the operands as given, A (r, k) at
  // exact_a[r * a_rs + k * a_ks], B (k, c) at exact_b[k * b_ks + c * b_cs] (the outputs that come
  // out non-finite are recomputed from them).
  const float* exact_a = nullptr;
  const float* exact_b = nullptr;
  int64_t a_rs = 0, a_ks = 0, b_ks = 0, b_cs = 0;
  // Stream-K over a last, partial round (sm90_stream_k): kStreamK* (auto: the rule's), and its
  // workspace of Sm90StreamK::floats() float32 where it runs.
  int stream_k = 0;
  float* sk_space = nullptr;
};

// Stream-K for g (docs/decisions.md#stream-k): the whole-tile kernel runs dp_tiles tiles (whole
// rounds of the persistent grid), the Stream-K kernel the last sk_tiles over `blocks` blocks; none
// (sk_tiles 0) but for 128 x 256 tiles of 16-bit or TF32 types, blocks alone, no K splits, rows of
// 128. Auto: where the tiles fill the last round to at most kStreamKTail of the SMs and K times the
// share of them left idle is kStreamKMinIdleK or more (gemm_kernels_sm90.cu); on: wherever it can
// (the last round, or all the tiles where they are fewer than the SMs); off: never.
inline constexpr int kStreamKAuto = 0, kStreamKOff = 1, kStreamKOn = 2;
// The wgmma path's operand swap (set_cuda_wgmma_knobs): as the rule says, never, wherever it can.
inline constexpr int kSwapAuto = 0, kSwapOff = 1, kSwapOn = 2;
// dp_tiles: the whole-tile kernel's 128 x 256 tiles (all of them where Stream-K takes none);
// sk_tiles: Stream-K's, over `blocks` blocks.
struct Sm90StreamK {
  int64_t dp_tiles = 0, sk_tiles = 0, blocks = 0;
  // The workspace: a flag a block (rounded up to 64), then a 128 x 256 float32 slice a block.
  int64_t flag_floats() const { return (blocks + 63) / 64 * 64; }
  int64_t floats() const { return sk_tiles > 0 ? flag_floats() + blocks * 128 * 256 : 0; }
};
Sm90StreamK sm90_stream_k(const Sm90Gemm& g);

// Launches the kernel for g on `stream`; returns the launch's error, or cudaErrorNotSupported
// when the driver has no cuTensorMapEncodeTiled, or cudaErrorInvalidValue when it refuses a map;
// *step names the step that failed.
cudaError_t launch_sm90(const Sm90Gemm& g, cudaStream_t stream, const char** step);

// out (C x ld_out, row-major) = in (R x C, row-major, leading dimension ld_in) transposed, the
// columns R .. round_up(R, 4) - 1 of out written as zeros (gemm_tiles::transpose_f32_kernel): a
// K-major copy of a tf32 operand. ld_out % 4 == 0, ld_out >= round_up(R, 4), out 16-byte aligned;
// vec: in 16-byte aligned and ld_in % 4 == 0 (or R == 1). R, C > 0; at most 16 blocks per SM.
cudaError_t launch_transpose_f32(const float* in, float* out, int64_t R, int64_t C, int64_t ld_in,
                                 int64_t ld_out, bool vec, int sms, cudaStream_t stream);

// The exact float32 GEMM's operand copy (gemm_tiles::split_rows_tf32_kernel, or with `transposed`
// transpose_f32_kernel's split form): out gets the tf32 big parts of the R x C matrix `in` (row
// r at in + r * ld_in), K-major, then as many rows of the small parts. Not transposed: in's rows
// are out's, R rows of C (out 2 R x ld_out); transposed: in's columns are out's rows (out 2 C x
// ld_out). The padding columns zeros; ld_out % 4 == 0, out 16-byte aligned; vec: in 16-byte
// aligned and ld_in % 4 == 0 (or R == 1). R, C > 0.
cudaError_t launch_split_tf32(const float* in, float* out, int64_t R, int64_t C, int64_t ld_in,
                              int64_t ld_out, bool transposed, bool vec, int sms,
                              cudaStream_t stream);

// dst's rows = src's rows, each row_bytes long, src_pitch and dst_pitch bytes apart
// (gemm_tiles::copy_rows_kernel): the wgmma kernel's copies of operands whose rows TMA cannot read,
// or reads slowly. dst 16-byte aligned, dst_pitch a multiple of 16 and at least row_bytes; src,
// src_pitch (rows > 1) and row_bytes multiples of 2 bytes. Nothing to do where rows or row_bytes
// is 0.
cudaError_t launch_copy_rows(const void* src, void* dst, int64_t rows, int64_t row_bytes,
                             int64_t src_pitch, int64_t dst_pitch, cudaStream_t stream);

// *loaded: whether the current device runs the sm_90a image of the kernel (a Hopper GPU and a
// module compiled for sm_90a), not another architecture's empty stub.
cudaError_t sm90_image_loaded(bool* loaded);

// ---- The sm_80+ tensor-core GEMM (gemm_kernels_sm80.cu; bf16 / fp16 / tf32; cp.async, mma.sync)

// Element types of MmaGemm::type (float32 operands are read as tf32; C is float32 then).
enum MmaType : int { kMmaHalf = 0, kMmaBFloat16 = 1, kMmaTf32 = 2 };

// One mma.sync call, all of one type, float32 accumulation. The caller checks M, N, K > 0, and
// rows_aligned(..., 16) for launch_mma.
struct MmaGemm : GemmProblem {
  MmaType type;
  int tile;  // block tile: 256 (128 x 256), 128 (128 x 128) or 64 (64 x 64)
  // Split-K: splits > 1 splits K into parts of k_split elements (a multiple of 32, and
  // splits = ceil(K / k_split)); each writes its float32 partial products to `partial`, splits
  // row-major M x N slices, instead of C (summed into C by launch_splitk_reduce).
  int splits = 1;
  int64_t k_split = 0;
  float* partial = nullptr;
};

// Launches the kernel for g on `stream` (one block per tile and K split); returns the launch's
// error.
cudaError_t launch_mma(const MmaGemm& g, cudaStream_t stream);

// The same for operands of any alignment (register-staged loads; gemm_kernels_sm80_any.cu): block
// tile 64 only.
cudaError_t launch_mma_unaligned(const MmaGemm& g, cudaStream_t stream);

// The same for operands whose rows_aligned(..., 4) holds (4-byte cp.async copies): block tile 64
// or 128.
cudaError_t launch_mma_words(const MmaGemm& g, cudaStream_t stream);

// *version: the PTX version the current device's loaded image of the kernel was compiled from
// (80 and up: the tensor-core body; below 80 a trap; 0 when the module has no image for it).
cudaError_t mma_image_ptx(int* version);

}  // namespace lltm_ext::gemm
