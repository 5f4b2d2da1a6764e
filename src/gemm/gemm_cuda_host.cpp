// Host side of lltm_ext.gemm on CUDA: the entry point (gemm_cuda: the dtype's path under a device
// guard on the current stream) and the SIMT kernels of float32 / float64 (and of the half types
// where no tensor-core kernel runs), launched with the schedule the tile heuristic picks.
//
// The kernels live in gemm/tiles/ (shared with benchmarks/gemm_steps/) and are launched through
// gemm_launchers.h's launchers (gemm_kernels_*.cu, compiled by nvcc without ATen). This file gives
// the heuristic (gemm_heuristic.cpp) the device's facts, read once per device, and launches the
// chosen block-tile config and K split (split-K partials go through a float32 / float64 workspace
// and an ordered, deterministic reduction). The tensor-core paths (bfloat16 / float16, float32 as
// TF32) are gemm_tc_cuda_host.cpp's. C++ compiler, CUDA builds only (*_cuda_host.cpp).
#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <optional>
#include <string>
#include <type_traits>

#include "common/cuda_host.h"
#include "common/dispatch.h"
#include "common/env_setting.h"
#include "gemm/gemm.h"
#include "gemm/gemm_configs.h"
#include "gemm/gemm_cuda_host.h"
#include "gemm/gemm_heuristic.h"
#include "gemm/gemm_launchers.h"

namespace lltm_ext::gemm {

Operand operand_of(const at::Tensor& t, bool is_a) {
  const std::optional<Layout> layout = layout_of(t);
  TORCH_INTERNAL_ASSERT(layout.has_value(), "gemm_cuda: operand without a unit stride");
  const size_t vec_bytes = std::min<size_t>(16, 4 * t.element_size());
  Operand op;
  op.data = t.const_data_ptr();
  op.ld = layout->ld;
  op.k_contig = is_a ? layout->row_major : !layout->row_major;
  op.vec = op.ld % 4 == 0 && aligned(op.data, vec_bytes);
  return op;
}

namespace {

// Resident blocks per SM of config Cfg (float32, row-major A and B) on `device`, read once per
// device.
template <typename Cfg>
int f32_blocks_per_sm(int device) {
  static cuda::PerDevice<int> cache;
  return cache.get(device, [](int d) {
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(d));  // the query's device
    int n = 0;
    C10_CUDA_CHECK(blocks_per_sm<Cfg>(&n));
    return std::max(n, 1);
  });
}

// Calls f(std::integral_constant<int, i>) for the runtime index i < kNumF32Configs.
template <typename F, int I = 0>
void with_f32_config(int index, F&& f) {
  if constexpr (I < kNumF32Configs) {
    if (index == I) {
      f(std::integral_constant<int, I>{});
    } else {
      with_f32_config<F, I + 1>(index, std::forward<F>(f));
    }
  }
}

// Launches float32/float64/half GEMM with config Cfg and `splits` K splits.
// tail_tiles > 0 and tail_splits > 1 (float32 / float64, splits 1): tail split-K of the last
// tail_tiles tiles (capped at the tile count).
template <typename Cfg, typename T>
void run_config(const Operand& A, const Operand& B, const at::Tensor& c, int64_t M, int64_t N,
                int64_t K, int splits, cudaStream_t stream, int tail_tiles = 0,
                int tail_splits = 0) {
  using Acc = cuda::opmath_t<T>;
  const int64_t k_split = splits > 1 ? ((K + splits - 1) / splits + Cfg::BK - 1) / Cfg::BK * Cfg::BK
                                     : std::max<int64_t>(K, 1);
  if (splits > 1) splits = static_cast<int>((K + k_split - 1) / k_split);
  at::Tensor workspace;
  gt::Params<T, Acc> pw{};  // split-K: partial products in Acc
  gt::Params<T, T> pc{};    // direct: C in T
  auto fill = [&](auto& p) {
    p.a = static_cast<const T*>(A.data);
    p.b = static_cast<const T*>(B.data);
    p.M = static_cast<int>(M);
    p.N = static_cast<int>(N);
    p.K = static_cast<int>(K);
    p.lda = A.ld;
    p.ldb = B.ld;
    p.ldc = N;
    p.k_split = static_cast<int>(k_split);
    p.split_stride = M * N;
    p.vec_a = A.vec;
    p.vec_b = B.vec;
  };
  auto launch = [&](const auto& p) {
    C10_CUDA_CHECK(gemm::launch<Cfg>(p, A.k_contig, B.k_contig, splits, stream));
  };
  const int64_t tiles = gt::tile_count<Cfg>(static_cast<int>(M), static_cast<int>(N));
  int64_t tail_k_split = 0;
  if constexpr (std::is_same_v<T, Acc>) {
    if (splits <= 1 && tail_tiles > 0 && tail_splits > 1) {
      tail_tiles = static_cast<int>(std::min<int64_t>(tail_tiles, tiles));
      tail_k_split = round_k_split(K, tail_splits, Cfg::BK);
      tail_splits = static_cast<int>((K + tail_k_split - 1) / tail_k_split);
    }
  }
  if constexpr (std::is_same_v<T, Acc>) {  // tail split-K: float32 and float64 only
    if (splits <= 1 && tail_k_split > 0 && tail_splits > 1) {
      fill(pc);
      pc.c = c.data_ptr<T>();
      pc.vec_c = N % 4 == 0 && aligned(pc.c, std::min<size_t>(16, 4 * sizeof(T)));
      workspace = at::empty({static_cast<int64_t>(tail_splits) * tail_tiles * Cfg::BM * Cfg::BN},
                            c.options());
      pc.tail_c = workspace.data_ptr<T>();
      pc.main_tiles = static_cast<int>(tiles - tail_tiles);
      pc.tail_tiles = tail_tiles;
      pc.tail_splits = tail_splits;
      pc.tail_k_split = static_cast<int>(tail_k_split);
      launch(pc);
      const int64_t chunks = static_cast<int64_t>(tail_tiles) * Cfg::BM * Cfg::BN / 4;
      constexpr int threads = 256;
      const unsigned int blocks = cuda::grid_for(chunks, threads, c.get_device(), 4);
      C10_CUDA_CHECK(
          (launch_tail_reduce<Cfg, T>(pc.tail_c, pc.c, pc.M, pc.N, pc.ldc, pc.main_tiles,
                                      tail_tiles, tail_splits, pc.vec_c, blocks, threads, stream)));
      return;
    }
  }
  if (splits <= 1) {
    fill(pc);
    pc.c = c.data_ptr<T>();
    pc.vec_c = N % 4 == 0 && aligned(pc.c, std::min<size_t>(16, 4 * sizeof(T)));
    launch(pc);
    return;
  }
  if constexpr (std::is_same_v<T, Acc>) {
    workspace = at::empty({splits, M, N}, c.options());
    fill(pw);
    pw.c = workspace.data_ptr<Acc>();
    pw.vec_c = N % 4 == 0;
    launch(pw);
    reduce_splits<Acc, T>(workspace, c, splits, stream);
  } else {
    TORCH_INTERNAL_ASSERT(false, "gemm_cuda: split-K is only used for float32 and float64");
  }
}

// ------------------------------------------------------------------------------------------
// The path: the cp.async kernels (sm_80 and newer) or the register-staged ones (any GPU).
// ------------------------------------------------------------------------------------------

// LLTM_EXT_GEMM_PATH (settings.h; read at the first call) or set_cuda_path(): the index of its
// value, 0 auto, 1 async, 2 staged; -1: not read yet.
constexpr settings::ChoiceKey kPathSetting = "LLTM_EXT_GEMM_PATH";
static_assert(settings::value_at(*kPathSetting, 1) == "async" &&
              settings::value_at(*kPathSetting, 2) == "staged");
std::atomic<int> g_path{-1};

int parse_path(const std::string& value, const char* what) {
  return settings::choice_index(kPathSetting, value, what);
}

int path_setting() {
  int path = g_path.load();
  if (path < 0) {
    path = parse_path(settings::env_raw(kPathSetting), "LLTM_EXT_GEMM_PATH");
    g_path.store(path);
  }
  return path;
}

// The PTX version (90; or 75 when the driver compiled compute_75 PTX for a newer GPU) of the image
// of the cp.async kernel that `device` runs, read once per device. Below 80 that image is a trap
// (gemm/tiles/cp_async.cuh): the code was compiled for an older architecture than the GPU's.
int async_image_ptx(int device) {
  static cuda::PerDevice<int> cache;
  return cache.get(device, [](int d) {
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(d));  // the query's device
    int version = 0;
    C10_CUDA_CHECK((ptx_version<std::tuple_element_t<0, F32Configs>>(&version)));
    return version;
  });
}

// Whether float32 runs on the cp.async configs on the current device.
bool use_async() {
  const int setting = path_setting();
  if (setting == 2) return false;
  const int device = c10::cuda::current_device();
  const int ptx = async_image_ptx(device);
  TORCH_CHECK(setting == 0 || ptx >= 80,
              "lltm_ext.gemm: the cp.async path was asked for (LLTM_EXT_GEMM_PATH=async), but "
              "the GPU code running on cuda:",
              device, " was compiled for compute_", ptx,
              ", which has no cp.async (sm_80 and newer); use auto or staged.");
  return ptx >= 80;
}

bool config_is_async(int config) {
  bool async = false;
  with_f32_config(config, [&](auto I) {
    async = std::tuple_element_t<decltype(I)::value, F32Configs>::STAGES > 0;
  });
  return async;
}

// ------------------------------------------------------------------------------------------
// Products with a small side (M or N at most kGemvSide): the matrix-vector kernels.
// ------------------------------------------------------------------------------------------

constexpr int64_t kGemvSide = 4;

// The longest K the short-K kernel takes by itself: where it measured faster than the other
// kernels over random shapes on an H100 (docs/gemm_notes.md, "Short K"), for bfloat16 / float16,
// exact float32 and float32 with TF32 allowed (than the TF32 tensor cores, and exact); past those
// it lost. Figures: docs/decisions.md#short-k.
constexpr int64_t kShortKHalf = 8, kShortKFloat = 16, kShortKTf32 = 3;
// Exact float32 past kShortKFloat, up to kShortKFloatWide: the short-K kernel where its grid holds
// at least kShortKWideTilesPerSm tiles per SM (its persistent blocks then keep every SM busy);
// there it measured faster than the SIMT tiles on an H200 at every such shape, and slower on
// fewer tiles or, at some shapes, past a K of 64 (docs/decisions.md#short-k).
constexpr int64_t kShortKFloatWide = 64;
constexpr double kShortKWideTilesPerSm = 1.5;
// The longest K the mma short-K kernel takes (bfloat16 / float16; try_short_k_mma).
constexpr int64_t kShortKMma = 64;
// The small-product kernel's range in lltm_ext.gemm (bfloat16 / float16; try_small_mma): K up to
// kSmallK, outputs of at most kSmallOutput elements (kSmallOutputLongK past a K of 256).
constexpr int64_t kSmallK = 512, kSmallOutput = int64_t{1} << 17,
                  kSmallOutputLongK = int64_t{1} << 14;

// c = a @ b on the matrix-vector kernels (gemm/tiles/gemv.cuh) when M or N is at most kGemvSide,
// and true; else false, nothing launched. The large operand is read once, split over K between
// blocks when its rows are too few to fill the GPU (float partials, summed in split order).
// cols false: not where the column kernel (the large operand M- / N-contiguous) would run with a
// small side of 2 to 4, for the dtypes the tensor cores run: there the mma kernel's K splits
// measured faster, while with a side of 1 the column kernel was (figures:
// docs/decisions.md#gemv-cols).
template <typename T>
bool try_gemv(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, cudaStream_t stream,
              bool cols = true) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  const bool small_m = M <= kGemvSide && M <= N;
  if (!small_m && N > kGemvSide) return false;
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  GemvCall g;
  // X: the large operand as (l, k), Y: the small one as (k, s), out: c as (l, s).
  if (small_m) {  // l = n, s = m
    g.x = b.const_data_ptr(), g.xs_l = b.stride(1), g.xs_k = b.stride(0);
    g.y = a.const_data_ptr(), g.ys_k = a.stride(1), g.ys_s = a.stride(0);
    g.os_l = 1, g.os_s = N, g.L = N, g.S = static_cast<int>(M);
  } else {  // l = m, s = n
    g.x = a.const_data_ptr(), g.xs_l = a.stride(0), g.xs_k = a.stride(1);
    g.y = b.const_data_ptr(), g.ys_k = b.stride(0), g.ys_s = b.stride(1);
    g.os_l = N, g.os_s = 1, g.L = M, g.S = static_cast<int>(N);
  }
  g.out = c.data_ptr();
  g.K = K;
  // A size-1 dimension's stride is never stepped: call it unit where that picks a kernel.
  if (K == 1) g.xs_k = 1;
  if (g.L == 1 && g.xs_k != 1) g.xs_l = 1;
  const bool rows = g.xs_k == 1;
  TORCH_INTERNAL_ASSERT(rows || g.xs_l == 1,
                        "gemm_cuda: matrix-vector operand without unit stride");
  if (!rows && !cols && g.S > 1) return false;
  const int sms = cuda::sm_count(c.get_device());
  // Blocks of 8 warps: about 16 warps per SM for the row kernel; the column kernel's lanes each
  // wait on one element per load, so it takes four times as many blocks (shorter K splits).
  const int64_t want = (rows ? 2LL : 8LL) * sms;
  int64_t blocks;
  if (rows) {
    // Threads per row: a warp's lanes, fewer where the row is short (each thread two 16-byte
    // runs of X or more: a warp per row of 13 elements leaves most lanes idle and takes a block
    // per 8 rows), then more per row while the rows are too few for about 16 warps per SM, as
    // long as each thread keeps a run.
    const int64_t v = 16 / static_cast<int64_t>(sizeof(T));  // elements per 16-byte run
    const int64_t runs = (K + v - 1) / v;
    g.tpr = 1;
    while (g.tpr < 32 && 4 * g.tpr <= runs) g.tpr *= 2;
    while (g.tpr < 256 && 2 * g.tpr <= runs && g.L * g.tpr < 256 * want) g.tpr *= 2;
    const int64_t rows_per_block = 256 / g.tpr;
    blocks = (g.L + rows_per_block - 1) / rows_per_block;
  } else {
    blocks = (g.L + 31) / 32;
  }
  // K splits: fill the GPU, each split at least 2048 elements (rows: a lane's 16-byte loads
  // several times over) or 64 (columns: 8 per thread) long.
  const int64_t min_split = rows ? 2048 : 64;
  int64_t splits = std::min<int64_t>({(want + blocks - 1) / blocks, K / min_split, 128});
  splits = std::max<int64_t>(splits, 1);
  // Splits of whole minimum lengths (the row kernel cuts each row at its own 16-byte boundaries).
  const int64_t unit = rows ? 2048 : 64;
  g.k_split = splits > 1 ? ((K + splits - 1) / splits + unit - 1) / unit * unit : K;
  splits = (K + g.k_split - 1) / g.k_split;
  at::Tensor workspace;
  if (splits > 1) {
    workspace = at::empty({splits, M * N}, c.options().dtype(c10::CppTypeToScalarType<Acc>()));
    g.partial = workspace.data_ptr();
    g.slice = M * N;
  }
  C10_CUDA_CHECK(launch_gemv<T>(g, stream));
  if (splits > 1) reduce_splits<Acc, T>(workspace, c, static_cast<int>(splits), stream);
  return true;
}

// ------------------------------------------------------------------------------------------
// Products with a side of at most kSkinnySide, both operands K-contiguous: the skinny kernel.
// ------------------------------------------------------------------------------------------

constexpr int64_t kSkinnySide = 32;
// The largest small side the auto path gives the skinny kernel (set_cuda_skinny_side: tuning).
std::atomic<int> g_skinny_side{static_cast<int>(kSkinnySide)};

// The largest small side the auto path gives the wgmma kernel's narrow tile (set_cuda_narrow_side:
// tuning).
std::atomic<int> g_narrow_side{static_cast<int>(kNarrowSide)};

// Whether streamed operands pass through L2 as evict-first (set_cuda_l2_stream: measurement).
std::atomic<bool> g_l2_stream{true};

// *slot = side, a path's largest small side for the auto path (0, never, to `most`), else an error
// naming the path (`what`).
void set_side(std::atomic<int>* slot, int side, int64_t most, const char* what) {
  TORCH_CHECK(side >= 0 && side <= most, "lltm_ext.gemm: ", what, "'s side is 0 (never) to ", most,
              ", but got ", side, ".");
  slot->store(side);
}

// Whether the auto path runs a @ b, its small side at most the narrow side, on the narrow tiles
// (where run_narrow can), as measured (docs/decisions.md#narrow-tile): a large operand contiguous
// along its side L (x @ W with W stored (K, N)) from L = 1024 on, past a small side of 8 or below
// K = 2048 (where the column kernel does not run), and past 16 only where the tiles' blocks (K
// splits counted) fill 3/4 to all of one wave of the `sms` SMs; one K-contiguous (x @ W.T) from
// L = 8192 on, past a small side of 8 (up to 16) or up to K = 1024. Never below K = 128 (the
// short-K kernels).
bool narrow_auto_takes(const at::Tensor& a, const at::Tensor& b, int sms) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  const int64_t S = std::min(M, N), L = std::max(M, N);
  const at::Tensor& big = M <= N ? b : a;
  const bool l_contig = M <= N ? big.stride(1) == 1 && N > 1 : big.stride(0) == 1 && M > 1;
  if (K < 128) return false;
  if (l_contig && S > 16) {
    const int rows = narrow_rows(L, K, sms);
    const int64_t tiles = (L + rows - 1) / rows;
    const int64_t blocks = tiles * narrow_splits(tiles, K, sms);
    return L >= 1024 && 4 * blocks >= 3 * sms && blocks <= sms;
  }
  if (l_contig) return L >= 1024 && (S > 8 || K < 2048);
  return S <= 16 && L >= 8192 && (S > 8 || K <= 1024);
}

// Whether an operand's rows (rows of `elems` K-contiguous 16-bit elements, `ld` apart) suit the
// skinny kernel's 16-byte loads: a 16-byte aligned base and a row stride of whole 16 bytes.
bool skinny_rows(const void* data, int64_t ld, int64_t rows) {
  return aligned(data, 16) && (rows <= 1 || ld % 8 == 0);
}

// c = a @ b as the skinny kernel's call (X the large operand, Y the small one, K-contiguous; X
// K-contiguous, or L-contiguous for the column kernel), or nullopt where the kernels cannot run it:
// a side past kSkinnySide, K not a multiple of 8, Y not K-contiguous, X neither or (L-contiguous)
// with L not a multiple of 8, an operand not 16-byte aligned, or no mma.sync here.
std::optional<SkinnyCall> skinny_call(const at::Tensor& a, const at::Tensor& b,
                                      const at::Tensor& c) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  if (std::min(M, N) > kSkinnySide || K % 8 != 0 || K == 0) return std::nullopt;
  SkinnyCall g;
  // K >= 8: a K-contiguous operand has unit stride along K; X's other layout, unit stride along L
  // (L >= 8 where it is a multiple of 8).
  const at::Tensor& x = M <= N ? b : a;
  const int64_t x_k = M <= N ? x.stride(0) : x.stride(1), x_l = M <= N ? x.stride(1) : x.stride(0);
  if (M <= N) {  // l = n, s = m: X = b as (n, k), Y = a as (m, k)
    if (a.stride(1) != 1) return std::nullopt;
    g.y = a.const_data_ptr(), g.ys_s = M <= 1 ? 0 : a.stride(0);
    g.L = N, g.S = static_cast<int>(M), g.os_l = 1, g.os_s = N;
  } else {  // l = m, s = n: X = a as (m, k), Y = b as (n, k)
    if (b.stride(0) != 1) return std::nullopt;
    g.y = b.const_data_ptr(), g.ys_s = N <= 1 ? 0 : b.stride(1);
    g.L = M, g.S = static_cast<int>(N), g.os_l = N, g.os_s = 1;
  }
  g.x = x.const_data_ptr();
  if (x_k == 1) {
    g.xs_l = g.L <= 1 ? 0 : x_l;
    if (!skinny_rows(g.x, g.xs_l, g.L)) return std::nullopt;
  } else if (x_l == 1 && g.L % 8 == 0 && x_k % 8 == 0 && aligned(g.x, 16)) {
    g.l_contig = true;
    g.xs_k = x_k;
  } else {
    return std::nullopt;
  }
  if (!skinny_rows(g.y, g.ys_s, g.S) || !mma_runs_here()) return std::nullopt;
  g.out = c.data_ptr();
  g.K = K;
  return g;
}

// Whether the auto path runs g on the skinny kernel rather than the paths after it, as measured
// (docs/decisions.md#skinny-tiles): the column kernel for a side of at most 16 from a large side
// and K of 2048 on; the row kernel at any K for a side of at most 16, from K = 1024 on past that;
// neither past a side of 16 at a large side of 8192 or more where the wgmma kernel runs (its one
// row of tiles, 64-row A stages at such M, fills the SMs there and reads the weight faster), nor
// the column kernel past 16 there but in one wave (skinny_cols_one_wave, asked first).
bool skinny_auto_takes(const SkinnyCall& g) {
  if (g.S > 16 && (g.L >= 8192 || g.l_contig) && wgmma_runs_here()) return false;
  if (g.l_contig) return g.L >= 2048 && g.K >= 2048;
  return g.S <= 16 || g.K >= 1024;
}

// Whether the auto path runs g on the column kernel ahead of the narrow tile and the wgmma kernel:
// a large operand contiguous along L, past a side of 8, where blocks of 32 columns fill at most one
// wave of the SMs (L from 2048 to 32 x SMs), from K = 2048, and past a side of 16 only below
// K = 8192 (docs/decisions.md#skinny-tiles). Those kernels need K splits and a second launch to
// fill the SMs there, which long K amortizes; the column kernel does not, but its blocks each
// read all of Y, which costs more the wider Y is.
bool skinny_cols_one_wave(const SkinnyCall& g, int sms) {
  return g.l_contig && g.S > 8 && g.L >= 2048 && g.K >= 2048 && (g.S <= 16 || g.K < 8192) &&
         (g.L + 31) / 32 <= sms;
}

// Runs g (from skinny_call) into c with `warps` warps per block, `splits` K splits and (the
// column kernel) blocks of `cols` columns, each chosen here where <= 0 (the rules measured best
// over the linear layers and random skinny products: docs/decisions.md#skinny-tiles).
template <typename T>
void run_skinny(SkinnyCall g, const at::Tensor& c, cudaStream_t stream, int warps = 0,
                int64_t splits = 0, int cols = 0) {
  const int sms = cuda::sm_count(c.get_device());
  // The column kernel's blocks: 32 columns where 64-column ones would fill at most half the SMs
  // (H100: 32 won at 64 blocks of 64, lost at 128).
  if (g.l_contig) g.cols = cols > 0 ? cols : 2 * ((g.L + 63) / 64) <= sms ? 32 : 64;
  const int64_t rows = g.l_contig ? g.cols : 16;  // of X per block
  const int64_t blocks = (g.L + rows - 1) / rows;
  // K splits only where the blocks would leave most SMs idle and K is long: a split costs a
  // second launch, which the short products cannot hide. The column kernel's blocks split in two
  // only for a side past 16 at a long K with at most half the SMs busy.
  if (splits <= 0 && g.l_contig) {
    splits = g.S > 16 && 2 * blocks <= sms && g.K >= 8192 ? 2 : 1;
  } else if (splits <= 0) {
    splits = 4 * blocks >= sms ? 1 : std::min<int64_t>((sms + blocks - 1) / blocks, g.K / 2048);
  }
  splits = std::clamp<int64_t>(splits, 1, std::max<int64_t>(g.K / 8, 1));
  g.k_split = ((g.K + splits - 1) / splits + 7) / 8 * 8;
  splits = (g.K + g.k_split - 1) / g.k_split;
  // Warps: 8 for a side of at most 8, else 4 (whose rings hold the wider Y rows at more blocks
  // per SM), within what shared memory holds. The column kernel: 8 while its blocks leave SMs
  // idle, 2 for a side of at most 8 over three rounds of blocks, else 4.
  const int max_warps = skinny_max_warps(g);
  int auto_warps = g.S <= 8 ? 8 : 4;
  if (g.l_contig) auto_warps = blocks < sms ? 8 : g.S <= 8 && blocks >= 3 * sms ? 2 : 4;
  g.warps = warps > 0 ? warps : std::min(auto_warps, max_warps);
  TORCH_CHECK(g.warps <= max_warps, "lltm_ext.gemm: the skinny kernel runs at most ", max_warps,
              " warps per block with a small side of ", g.S, " on this device, but got ", g.warps,
              ".");
  // Every element of X is read by one block.
  g.stream_x = 2 * g.L * g.K <= l2_stream_limit(c.get_device());
  at::Tensor workspace;
  if (splits > 1) {
    workspace = at::empty({splits, c.numel()}, c.options().dtype(at::kFloat));
    g.partial = workspace.data_ptr();
    g.slice = c.numel();
  }
  C10_CUDA_CHECK(launch_skinny<T>(g, stream));
  if (splits > 1) reduce_splits<float, T>(workspace, c, static_cast<int>(splits), stream);
}

// The kernels that take a ShortKCall: the short-K kernel (gemm/tiles/short_k.cuh), its mma form
// (gemm/tiles/short_k_mma.cuh; float16 / bfloat16, K <= 64) and the small-product kernel
// (gemm/tiles/small_mma.cuh; float16 / bfloat16, K <= 512), the last two sm_80 on.
enum class ShortKKernel { kSimt, kMma, kSmall };

// c = a @ b on one of those: M, N, K > 0, each operand with a layout_of().
template <typename T>
void run_short_k(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, cudaStream_t stream,
                 ShortKKernel kernel = ShortKKernel::kSimt) {
  ShortKCall g;
  g.a = a.const_data_ptr();
  g.b = b.const_data_ptr();
  g.c = c.data_ptr();
  g.M = a.size(0);
  g.K = a.size(1);
  g.N = b.size(1);
  g.as_m = a.stride(0);
  g.as_k = a.stride(1);
  g.bs_k = b.stride(0);
  g.bs_n = b.stride(1);
  g.ldc = g.N;
  g.a_kcontig = layout_of(a)->row_major;
  g.b_kcontig = !layout_of(b)->row_major;
  g.sms = cuda::sm_count(a.get_device());
  if constexpr (std::is_same_v<T, float>) {
    TORCH_INTERNAL_ASSERT(kernel == ShortKKernel::kSimt, "gemm_cuda: a 16-bit kernel for float32");
    C10_CUDA_CHECK(launch_short_k<T>(g, stream));
  } else {
    C10_CUDA_CHECK(kernel == ShortKKernel::kMma     ? launch_short_k_mma<T>(g, stream)
                   : kernel == ShortKKernel::kSmall ? launch_small_mma<T>(g, stream)
                                                    : launch_short_k<T>(g, stream));
  }
}

// Runs the short-K kernel for c = a @ b when the product suits it (K at most k_max, or at most
// k_wide with an output of at least kShortKWideTilesPerSm of its tiles per SM; both sides past the
// matrix-vector kernels'), and says whether it did.
template <typename T>
bool try_short_k(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, cudaStream_t stream,
                 int64_t k_max, int64_t k_wide = 0) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  if (M <= kGemvSide || N <= kGemvSide) return false;
  if (K > k_max) {
    const int64_t tiles =
        (M + kShortKTileM - 1) / kShortKTileM * ((N + kShortKTileN - 1) / kShortKTileN);
    if (K > k_wide ||
        static_cast<double>(tiles) < kShortKWideTilesPerSm * cuda::sm_count(a.get_device())) {
      return false;
    }
  }
  run_short_k<T>(a, b, c, stream);
  return true;
}

// The same for the mma short-K kernel (float16 / bfloat16, K <= kShortKMma) where it measured
// faster than the other kernels (docs/gemm_notes.md, "Short K on the tensor cores"): outputs of
// 2^20 elements and more (2^24 at K <= 3, where the SIMT short-K kernel keeps up), except at K > 16
// with A, B and C's rows all 16-byte aligned, where the planner's 16-byte copies win.
template <typename T>
bool try_short_k_mma(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                     cudaStream_t stream) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  if (M <= kGemvSide || N <= kGemvSide || K > kShortKMma) return false;
  if (M * N < (K <= 3 ? int64_t{1} << 24 : int64_t{1} << 20)) return false;
  if (K > 16) {
    const Operand A = operand_of(a, /*is_a=*/true), B = operand_of(b, /*is_a=*/false);
    const int elem = static_cast<int>(sizeof(T));
    if (rows_aligned(A.data, A.ld, A.k_contig ? M : K, elem, 16) &&
        rows_aligned(B.data, B.ld, B.k_contig ? N : K, elem, 16) &&
        rows_aligned(c.data_ptr(), N, M, elem, 16)) {
      return false;
    }
  }
  if (!mma_runs_here()) return false;
  run_short_k<T>(a, b, c, stream, ShortKKernel::kMma);
  return true;
}

// The same for the small-product kernel (float16 / bfloat16) where it measured faster than the
// planner's kernels (docs/gemm_notes.md, "Small products"): outputs of at most 2^17 elements from
// a K past kShortKHalf up to 256, 2^14 from a K up to 512.
template <typename T>
bool try_small_mma(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                   cudaStream_t stream) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  if (M <= kGemvSide || N <= kGemvSide || K <= kShortKHalf || K > kSmallK) return false;
  if (M * N > (K <= 256 ? kSmallOutput : kSmallOutputLongK) || !mma_runs_here()) return false;
  run_short_k<T>(a, b, c, stream, ShortKKernel::kSmall);
  return true;
}

// bfloat16 / float16 c = a @ b: on the short-K kernels or the small-product kernel where the
// product suits one (unless a half path is forced), else on the tensor cores (run_tensor_core), or
// where none runs here, on the SIMT kernel (computed in float).
template <typename T>
void run_half(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, int64_t M, int64_t N,
              int64_t K, cudaStream_t stream) {
  if (!half_path_forced() &&
      (try_short_k_mma<T>(a, b, c, stream) || try_short_k<T>(a, b, c, stream, kShortKHalf) ||
       try_small_mma<T>(a, b, c, stream))) {
    return;
  }
  if (run_tensor_core(a, b, c, stream)) return;
  if (try_gemv<T>(a, b, c, stream)) return;  // the column kernel, which gemm_cuda left to these
  run_config<HalfConfig, T>(operand_of(a, /*is_a=*/true), operand_of(b, /*is_a=*/false), c, M, N, K,
                            1, stream);
}

// Whether float32 may run as tf32: exactly when PyTorch's own float32 matmuls (torch.mm on cuBLAS)
// may, i.e. torch.backends.cuda.matmul.allow_tf32, or set_float32_matmul_precision "high" /
// "medium" ("highest", the default: exact float32 on the SIMT kernels). LLTM_EXT_GEMM_TF32=0 in
// the environment (settings.h; read at each call) turns tf32 off for debugging.
bool tf32_allowed() {
  if (!at::globalContext().allowTF32CuBLAS()) return false;
  return settings::env_raw(settings::ChoiceKey("LLTM_EXT_GEMM_TF32")) != "0";
}

}  // namespace

std::string cuda_path() {
  return use_async() ? "async" : "staged";
}

void set_cuda_path(const std::string& path) {
  g_path.store(parse_path(path, "the GEMM path"));
}

std::vector<std::string> cuda_config_names() {
  return std::vector<std::string>(kF32ConfigNames.begin(), kF32ConfigNames.end());
}

GpuFacts cuda_gpu_facts() {
  const int device = c10::cuda::current_device();
  GpuFacts gpu{cuda::sm_count(device), use_async() ? TilePath::kAsync : TilePath::kStaged, {}};
  for (const int config : candidate_configs(gpu.path)) {
    with_f32_config(config, [&](auto I) {
      using Cfg = std::tuple_element_t<decltype(I)::value, F32Configs>;
      gpu.blocks_per_sm[config] = f32_blocks_per_sm<Cfg>(device);
    });
  }
  return gpu;
}

Choice cuda_choose(int64_t M, int64_t N, int64_t K, bool b_k_contig) {
  return choose_tiles(M, N, K, b_k_contig, cuda_gpu_facts());
}

void gemm_cuda_short_k(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                       const std::string& kernel) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  TORCH_CHECK(kernel == "simt" || kernel == "mma" || kernel == "small",
              "lltm_ext.gemm: _gemm_short_k's kernel is 'simt', 'mma' or 'small', but got '",
              kernel, "'.");
  const ShortKKernel which = kernel == "mma"     ? ShortKKernel::kMma
                             : kernel == "small" ? ShortKKernel::kSmall
                                                 : ShortKKernel::kSimt;
  const c10::cuda::CUDAGuard guard(a.device());
  if (which != ShortKKernel::kSimt) {
    const char* name = which == ShortKKernel::kMma ? "mma short-K" : "small-product";
    const int64_t k_max = which == ShortKKernel::kMma ? kShortKMma : kSmallK;
    TORCH_CHECK(a.scalar_type() != at::kFloat, "lltm_ext.gemm: the ", name,
                " kernel takes float16 or bfloat16, but got float32.");
    TORCH_CHECK(K <= k_max, "lltm_ext.gemm: the ", name, " kernel takes K up to ", k_max,
                ", but got K = ", K, ".");
    TORCH_CHECK(mma_runs_here(), "lltm_ext.gemm: the ", name,
                " kernel needs mma.sync (sm_80 or newer, and this module's code for it), which "
                "cuda:",
                c.get_device(), " does not run.");
  }
  if (M == 0 || N == 0) return;
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  if (K == 0) {
    C10_CUDA_CHECK(cudaMemsetAsync(c.data_ptr(), 0, c.nbytes(), stream));
    return;
  }
  switch (a.scalar_type()) {
    case at::kFloat:
      run_short_k<float>(a, b, c, stream);
      break;
    case at::kHalf:
      run_short_k<at::Half>(a, b, c, stream, which);
      break;
    case at::kBFloat16:
      run_short_k<at::BFloat16>(a, b, c, stream, which);
      break;
    default:
      TORCH_CHECK(false,
                  "lltm_ext.gemm: the short-K kernel takes float32, float16 or bfloat16, "
                  "but got ",
                  a.scalar_type(), ".");
  }
}

int cuda_skinny_side() {
  return g_skinny_side.load();
}

void set_cuda_skinny_side(int side) {
  set_side(&g_skinny_side, side, kSkinnySide, "the skinny kernel");
}

void gemm_cuda_skinny(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, int warps,
                      int64_t splits, int cols) {
  const int64_t M = a.size(0), N = b.size(1);
  TORCH_CHECK(a.scalar_type() == at::kHalf || a.scalar_type() == at::kBFloat16,
              "lltm_ext.gemm: the skinny kernel takes float16 or bfloat16, but got ",
              a.scalar_type(), ".");
  TORCH_CHECK(warps >= 0 && warps <= 8,
              "lltm_ext.gemm: _gemm_skinny's warps is 0 (auto) to 8, but got ", warps, ".");
  const c10::cuda::CUDAGuard guard(a.device());
  if (M == 0 || N == 0) return;
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  if (a.size(1) == 0) {
    C10_CUDA_CHECK(cudaMemsetAsync(c.data_ptr(), 0, c.nbytes(), stream));
    return;
  }
  const std::optional<SkinnyCall> g = skinny_call(a, b, c);
  TORCH_CHECK(g.has_value(), "lltm_ext.gemm: the skinny kernel needs a side of at most ",
              kSkinnySide,
              ", K a multiple of 8, the small operand K-contiguous and the large one K-contiguous "
              "or (its side a multiple of 8) contiguous along its side, with 16-byte aligned data "
              "and rows, and mma.sync (sm_80 or newer); got a ",
              M, " x ", a.size(1), " by ", a.size(1), " x ", N, " product with strides (",
              a.stride(0), ", ", a.stride(1), ") and (", b.stride(0), ", ", b.stride(1), ").");
  if (a.scalar_type() == at::kHalf) {
    run_skinny<at::Half>(*g, c, stream, warps, splits, cols);
  } else {
    run_skinny<at::BFloat16>(*g, c, stream, warps, splits, cols);
  }
}

void gemm_cuda_narrow(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, int64_t splits,
                      int rows) {
  const int64_t M = a.size(0), N = b.size(1);
  const c10::cuda::CUDAGuard guard(a.device());
  if (M == 0 || N == 0) return;
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  if (a.size(1) == 0) {
    C10_CUDA_CHECK(cudaMemsetAsync(c.data_ptr(), 0, c.nbytes(), stream));
    return;
  }
  TORCH_CHECK(run_narrow(a, b, c, stream, splits, rows),
              "lltm_ext.gemm: the narrow tile needs float16 or bfloat16, a side of at most ",
              kNarrowSide,
              ", that side's operand K-contiguous, 16-byte aligned data and rows, and a GPU that "
              "runs this module's sm_90a code; got a ",
              M, " x ", a.size(1), " by ", a.size(1), " x ", N, " ", a.scalar_type(),
              " product with strides (", a.stride(0), ", ", a.stride(1), ") and (", b.stride(0),
              ", ", b.stride(1), ").");
}

int cuda_narrow_side() {
  return g_narrow_side.load();
}

void set_cuda_narrow_side(int side) {
  set_side(&g_narrow_side, side, kNarrowSide, "the narrow tile");
}

bool cuda_l2_stream() {
  return g_l2_stream.load();
}

void set_cuda_l2_stream(bool on) {
  g_l2_stream.store(on);
}

// Three L2s: the hint saved 1-20% at 32-141 MB weights (2.8 L2s of the H100's 50 MB) under the
// dirty L2 the linear bench leaves, but cost 3-10% at 470 MB (8192 x 28672), where L2 clean
// it lost 5% too (docs/decisions.md#l2-stream).
int64_t l2_stream_limit(int device) {
  constexpr int64_t kL2StreamL2s = 3;
  return g_l2_stream.load() ? kL2StreamL2s * cuda::l2_bytes(device) : 0;
}

void gemm_cuda(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, int config,
               int splits, int tail_tiles, int tail_splits) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  if (M == 0 || N == 0) return;  // nothing to write
  const c10::cuda::CUDAGuard guard(a.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  if (K == 0) {  // an empty sum; the operands have no elements, so any strides (an expanded
                 // empty tensor counts as contiguous and keeps its stride 0)
    C10_CUDA_CHECK(cudaMemsetAsync(c.data_ptr(), 0, c.nbytes(), stream));
    return;
  }
  const Operand A = operand_of(a, /*is_a=*/true);
  const Operand B = operand_of(b, /*is_a=*/false);
  if (config < 0 && splits <= 0) {  // not the tuning entry point, which names a float32 config
    bool done = false;
    const bool half = a.scalar_type() == at::kHalf || a.scalar_type() == at::kBFloat16;
    std::optional<SkinnyCall> g;
    if (half && std::min(M, N) <= g_skinny_side.load() && !half_path_forced()) {
      g = skinny_call(a, b, c);
    }
    const auto skinny = [&] {
      if (a.scalar_type() == at::kHalf) {
        run_skinny<at::Half>(*g, c, stream);
      } else {
        run_skinny<at::BFloat16>(*g, c, stream);
      }
    };
    if (g && skinny_cols_one_wave(*g, cuda::sm_count(a.get_device()))) {
      skinny();
      return;
    }
    if (half && std::min(M, N) <= g_narrow_side.load() &&
        narrow_auto_takes(a, b, cuda::sm_count(a.get_device())) && !half_path_forced() &&
        run_narrow(a, b, c, stream)) {
      return;
    }
    if (g && skinny_auto_takes(*g)) {
      skinny();
      return;
    }
    switch (a.scalar_type()) {
      case at::kFloat:
        done = try_gemv<float>(a, b, c, stream, /*cols=*/!tf32_allowed());
        break;
      case at::kDouble:
        done = try_gemv<double>(a, b, c, stream);
        break;
      case at::kHalf:
        done = try_gemv<at::Half>(a, b, c, stream, /*cols=*/false);
        break;
      case at::kBFloat16:
        done = try_gemv<at::BFloat16>(a, b, c, stream, /*cols=*/false);
        break;
      default:
        break;
    }
    if (done) return;
  }
  switch (a.scalar_type()) {
    case at::kFloat: {
      if (config < 0 && splits <= 0) {  // exact float32 on the short-K kernel, TF32 or not
        const bool tf32 = tf32_allowed();
        if ((!tf32 || !half_path_forced()) &&
            try_short_k<float>(a, b, c, stream, tf32 ? kShortKTf32 : kShortKFloat,
                               tf32 ? 0 : kShortKFloatWide)) {
          break;
        }
      }
      // TF32 on the tensor cores when PyTorch allows it for torch.mm (not for the tuning entry
      // point, which names a config), on the kernel the planner picks among those the device
      // runs (or LLTM_EXT_GEMM_HALF_PATH forces); where none runs (or simt), exact float32 below.
      if (config < 0 && splits <= 0 && tf32_allowed()) {
        if (run_tensor_core(a, b, c, stream)) break;
        if (try_gemv<float>(a, b, c, stream)) break;  // the column kernel, left to tf32 above
      }
      if (config < 0 || splits <= 0) {
        const Choice choice = cuda_choose(M, N, K, B.k_contig);
        // Exact float32 on Hopper's tensor cores in three tf32 passes where the planner puts
        // them ahead of the SIMT schedule (LLTM_EXT_GEMM_F32), not for the tuning entry point.
        if (config < 0 && splits <= 0 && !tf32_allowed() &&
            run_exact_tensor_core(a, b, c, stream, choice.cost / kSimtUnitsPerUs)) {
          break;
        }
        if (config < 0) config = choice.config;
        if (splits <= 0) {
          splits = choice.splits;
          tail_tiles = choice.tail_tiles;
          tail_splits = choice.tail_splits;
        }
      }
      TORCH_CHECK(config < kNumF32Configs, "lltm_ext: gemm config must be < ", kNumF32Configs,
                  ", but got ", config, ".");
      TORCH_CHECK(!config_is_async(config) || use_async(), "lltm_ext.gemm: config ", config, " (",
                  kF32ConfigNames[config],
                  ") uses cp.async, which the GEMM path on cuda:", c10::cuda::current_device(),
                  " (", cuda_path(), ") does not run.");
      with_f32_config(config, [&](auto I) {
        using Cfg = std::tuple_element_t<decltype(I)::value, F32Configs>;
        run_config<Cfg, float>(A, B, c, M, N, K, splits, stream, tail_tiles, tail_splits);
      });
      break;
    }
    case at::kDouble: {
      const int64_t tiles =
          ((M + F64Config::BM - 1) / F64Config::BM) * ((N + F64Config::BN - 1) / F64Config::BN);
      const int sms = cuda::sm_count(a.get_device());
      int s = 1;  // split K while the grid is under two blocks per SM and K is long
      while (tiles * s < 2 * sms && K / (2 * s) >= 16 * F64Config::BK && s < 16) s *= 2;
      run_config<F64Config, double>(A, B, c, M, N, K, s, stream);
      break;
    }
    case at::kHalf:
      run_half<at::Half>(a, b, c, M, N, K, stream);
      break;
    case at::kBFloat16:
      run_half<at::BFloat16>(a, b, c, M, N, K, stream);
      break;
    default:
      TORCH_CHECK(false, "lltm_ext.gemm: no CUDA kernel for dtype ", a.scalar_type(), ".");
  }
}

}  // namespace lltm_ext::gemm
