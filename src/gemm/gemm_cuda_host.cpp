// Host side of lltm_ext.gemm on CUDA: launches the kernels with the schedule the tile heuristic
// picks for the current device.
//
// The kernels live in gemm/tiles/ (shared with benchmarks/gemm_steps/) and are launched through
// gemm_launchers.h's launchers (gemm_kernels_*.cu, compiled by nvcc without ATen). This file gives
// the heuristic (gemm_heuristic.cpp) the device's facts, read once per device, and launches the
// chosen block-tile config and K split on the current stream under a device guard (split-K
// partials go through a float32 / float64 workspace and an ordered, deterministic reduction).
// C++ compiler, CUDA builds only (setup.py's *_cuda_host.cpp).
#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <string>

#include "common/cuda_host.h"
#include "common/dispatch.h"
#include "gemm/gemm.h"
#include "gemm/gemm_configs.h"
#include "gemm/gemm_heuristic.h"
#include "gemm/gemm_launchers.h"

namespace lltm_ext::gemm {
namespace {

// One operand as the kernels read it.
struct Operand {
  const void* data;
  int64_t ld;
  bool k_contig;  // K is the unit-stride dimension
  bool vec;       // 4-element vector loads allowed
};

bool aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// is_a: the operand is A (M x K), whose rows are m; else B (K x N), whose rows are k.
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
    const int64_t n = M * N;
    const bool vec = n % 4 == 0 && aligned(c.data_ptr<T>(), 16);
    constexpr int threads = 256;
    const unsigned int blocks =
        cuda::grid_for(vec ? n / 4 : n, threads, c.get_device(), /*blocks_per_sm=*/4);
    C10_CUDA_CHECK((launch_splitk_reduce<Acc, T>(workspace.data_ptr<Acc>(), c.data_ptr<T>(), n,
                                                 splits, vec, blocks, threads, stream)));
  } else {
    TORCH_INTERNAL_ASSERT(false, "gemm_cuda: split-K is only used for float32 and float64");
  }
}

// ------------------------------------------------------------------------------------------
// The path: the cp.async kernels (sm_80 and newer) or the register-staged ones (any GPU).
// ------------------------------------------------------------------------------------------

// LLTM_EXT_GEMM_PATH (read at the first call) or set_cuda_path(): 0 auto, 1 async, 2 staged;
// -1: not read yet.
std::atomic<int> g_path{-1};

int parse_path(const std::string& value, const char* what) {
  if (value.empty() || value == "auto") return 0;
  if (value == "async") return 1;
  if (value == "staged") return 2;
  TORCH_CHECK(false, "lltm_ext.gemm: ", what, " must be auto, async or staged, but got '", value,
              "'.");
  return 0;
}

int path_setting() {
  int path = g_path.load();
  if (path < 0) {
    const char* env = std::getenv("LLTM_EXT_GEMM_PATH");
    path = parse_path(env ? env : "", "LLTM_EXT_GEMM_PATH");
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

// The problem a tensor-core kernel is launched for: c (M x N, contiguous) = A B.
void fill_problem(GemmProblem* g, const Operand& A, const Operand& B, const at::Tensor& c,
                  int64_t M, int64_t N, int64_t K) {
  g->a = A.data;
  g->b = B.data;
  g->c = c.data_ptr();
  g->M = M;
  g->N = N;
  g->K = K;
  g->lda = A.ld;
  g->ldb = B.ld;
  g->ldc = N;
  g->a_kcontig = A.k_contig;
  g->b_kcontig = B.k_contig;
}

// ------------------------------------------------------------------------------------------
// bfloat16 / float16: the Hopper tensor-core kernel (sm_90a image loaded), the sm_80+ tensor-core
// kernel (mma.sync; its image compiled for compute_80 or newer), or the SIMT one.
// ------------------------------------------------------------------------------------------

enum class HalfKernel { kSimt, kWgmma, kMma };

// The settings of LLTM_EXT_GEMM_HALF_PATH / set_cuda_half_path(): "auto" picks the kernel by the
// GPU code the device runs; the others force a kernel, and some its block tile (0: the heuristic).
// They pick the kernel of bfloat16 / float16, and of float32 where TF32 is allowed (tf32_allowed():
// wgmma or mma as tf32, simt exact float32); float32 with TF32 off is exact on SIMT whatever this
// says.
struct HalfPathSetting {
  const char* name;
  bool forced;
  HalfKernel kernel;
  int tile;  // wgmma: the tile width (64, 128, 256); mma: 256 (128 x 256), 128 or 64 (square)
};
constexpr std::array<HalfPathSetting, 10> kHalfPaths = {{
    {"auto", false, HalfKernel::kSimt, 0},
    {"wgmma", true, HalfKernel::kWgmma, 0},
    {"simt", true, HalfKernel::kSimt, 0},
    {"wgmma64", true, HalfKernel::kWgmma, 64},
    {"wgmma128", true, HalfKernel::kWgmma, 128},
    {"wgmma256", true, HalfKernel::kWgmma, 256},
    {"mma", true, HalfKernel::kMma, 0},
    {"mma64", true, HalfKernel::kMma, 64},
    {"mma128", true, HalfKernel::kMma, 128},
    {"mma256", true, HalfKernel::kMma, 256},
}};
// LLTM_EXT_GEMM_HALF_PATH (read at the first call) or set_cuda_half_path(): an index into
// kHalfPaths; -1: not read yet.
std::atomic<int> g_half_path{-1};

int parse_half_path(const std::string& value, const char* what) {
  if (value.empty()) return 0;
  for (size_t i = 0; i < kHalfPaths.size(); ++i) {
    if (value == kHalfPaths[i].name) return static_cast<int>(i);
  }
  TORCH_CHECK(false, "lltm_ext.gemm: ", what,
              " must be auto, wgmma, mma, simt, wgmma64, wgmma128, wgmma256, mma64, mma128 or "
              "mma256, "
              "but got '",
              value, "'.");
  return 0;
}

const HalfPathSetting& half_path_setting() {
  int path = g_half_path.load();
  if (path < 0) {
    const char* env = std::getenv("LLTM_EXT_GEMM_HALF_PATH");
    path = parse_half_path(env ? env : "", "LLTM_EXT_GEMM_HALF_PATH");
    g_half_path.store(path);
  }
  return kHalfPaths[path];
}

// Whether `device` runs the sm_90a image of the tensor-core kernel, read once per device.
bool sm90_loaded(int device) {
  static cuda::PerDevice<int> cache;
  return cache.get(device, [](int d) {
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(d));  // the query's device
    bool loaded = false;
    C10_CUDA_CHECK(sm90_image_loaded(&loaded));
    return loaded ? 1 : 0;
  }) != 0;
}

// The PTX version of the image of the mma.sync kernel that `device` runs (0: none), read once per
// device. Below 80 that image is a trap (gemm/tiles/kernel_sm80.cuh): the module's code for this
// GPU was compiled for an older architecture. Decided from the loaded image, not from the
// device's compute capability: a 7.5+PTX-only build on an A100 runs compute_75 code.
int mma_ptx(int device) {
  static cuda::PerDevice<int> cache;
  return cache.get(device, [](int d) {
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(d));  // the query's device
    int version = 0;
    C10_CUDA_CHECK(mma_image_ptx(&version));
    return version;
  });
}

// The kernel half types (and tf32) run on the current device, operands permitting: auto takes
// wgmma where the sm_90a image is loaded, else mma where its image has PTX >= 80, else SIMT; a
// forced kernel that cannot run here is an error.
HalfKernel half_kernel() {
  const HalfPathSetting& setting = half_path_setting();
  if (setting.forced && setting.kernel == HalfKernel::kSimt) return HalfKernel::kSimt;
  const int device = c10::cuda::current_device();
  if (!setting.forced || setting.kernel == HalfKernel::kWgmma) {
    const bool loaded = sm90_loaded(device);
    TORCH_CHECK(!setting.forced || loaded, "lltm_ext.gemm: the wgmma path was asked for (",
                setting.name, "), but cuda:", device,
                " does not run this module's sm_90a code (a Hopper GPU and a build whose "
                "architectures include 9.0a are needed); use auto, mma or simt.");
    if (loaded) return HalfKernel::kWgmma;
  }
  const int ptx = mma_ptx(device);
  TORCH_CHECK(!setting.forced || ptx >= 80, "lltm_ext.gemm: the mma path was asked for (",
              setting.name, "), but ",
              ptx > 0 ? "the GPU code running on cuda:" + std::to_string(device) +
                            " was compiled for compute_" + std::to_string(ptx)
                      : "this module has no GPU code for cuda:" + std::to_string(device),
              ", and mma.sync with bfloat16 and cp.async need sm_80 or newer; use auto or simt.");
  return ptx >= 80 ? HalfKernel::kMma : HalfKernel::kSimt;
}

bool use_wgmma() {
  return half_kernel() == HalfKernel::kWgmma;
}

// The block tile width for M x N: the one whose tiles take the SMs the fewest rounds, a round of
// 128- / 64-wide tiles costing 0.55 / 0.3 of a 256-wide round (their rate per element is lower);
// or as forced.
int wgmma_tile_n(int64_t M, int64_t N, int sms) {
  const HalfPathSetting& setting = half_path_setting();
  if (setting.kernel == HalfKernel::kWgmma && setting.tile > 0) return setting.tile;
  const int64_t tiles_m = (M + 127) / 128;
  auto rounds = [&](int64_t bn) { return (tiles_m * ((N + bn - 1) / bn) + sms - 1) / sms; };
  const int64_t cost256 = rounds(256) * 100, cost128 = rounds(128) * 55, cost64 = rounds(64) * 30;
  if (cost64 < cost128 && cost64 < cost256) return 64;
  return cost128 < cost256 ? 128 : 256;
}

// A K-major copy of tf32 operand `op` (not K-major: element (k, r) at data[k * ld + r], k < K,
// r < rows) into a scratch tensor from the caching allocator: rows x round_up(K, 4) float32, its
// rows 16-byte aligned as TMA needs (the padding columns zeros, outside the tensor map), written by
// lltm_ext's transpose kernel on `stream`. *scratch keeps the copy alive until after the launch
// (freed stream-ordered).
Operand k_major_copy(const Operand& op, int64_t K, int64_t rows, const at::Tensor& like,
                     cudaStream_t stream, at::Tensor* scratch) {
  const int64_t ld = (K + 3) / 4 * 4;
  *scratch = at::empty({rows, ld}, like.options());
  const bool vec = aligned(op.data, 16) && (K <= 1 || op.ld % 4 == 0);
  C10_CUDA_CHECK(launch_transpose_f32(static_cast<const float*>(op.data),
                                      scratch->data_ptr<float>(), K, rows, op.ld, ld, vec,
                                      cuda::sm_count(like.get_device()), stream));
  return Operand{scratch->data_ptr(), ld, /*k_contig=*/true, /*vec=*/true};
}

// Runs c = a @ b on the tensor-core kernel and returns true, or returns false (nothing launched)
// when it does not apply: the SIMT path, or operands TMA cannot read. float32 runs as tf32, whose
// wgmma form reads K-major operands only: an operand of the other layout is first copied K-major
// (k_major_copy: twice its bytes of DRAM traffic, ~40 us for 64 MB on an H200).
bool try_wgmma(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, int64_t M, int64_t N,
               int64_t K, cudaStream_t stream) {
  if (!use_wgmma()) return false;
  const bool tf32 = a.scalar_type() == at::kFloat;
  const int elem = static_cast<int>(a.element_size());
  Operand A = operand_of(a, /*is_a=*/true);
  Operand B = operand_of(b, /*is_a=*/false);
  // Rows along each operand's non-unit dimension: A K-major has M rows of K, else K rows of M.
  // (An operand that tf32 copies is checked after the copy, which TMA can always read.)
  if ((!(tf32 && !A.k_contig) && !sm90_operand_ok(A.data, A.ld, A.k_contig ? M : K, elem)) ||
      (!(tf32 && !B.k_contig) && !sm90_operand_ok(B.data, B.ld, B.k_contig ? N : K, elem))) {
    return false;
  }
  at::Tensor a_copy, b_copy;
  if (tf32 && !A.k_contig) A = k_major_copy(A, K, M, a, stream, &a_copy);
  if (tf32 && !B.k_contig) B = k_major_copy(B, K, N, b, stream, &b_copy);
  TORCH_INTERNAL_ASSERT(sm90_operand_ok(A.data, A.ld, A.k_contig ? M : K, elem) &&
                        sm90_operand_ok(B.data, B.ld, B.k_contig ? N : K, elem));
  Sm90Gemm g;
  fill_problem(&g, A, B, c, M, N, K);
  g.type = tf32 ? kSm90Tf32 : a.scalar_type() == at::kBFloat16 ? kSm90BFloat16 : kSm90Half;
  g.sms = cuda::sm_count(c.get_device());
  g.bn = wgmma_tile_n(M, N, g.sms);
  const char* step = "";
  const cudaError_t err = launch_sm90(g, stream, &step);
  TORCH_CHECK(err == cudaSuccess, "lltm_ext.gemm: the wgmma GEMM (", M, " x ", N, " x ", K,
              ", block tile 128 x ", g.bn, ") failed at ", step, ": ", cudaGetErrorString(err),
              ".");
  return true;  // the copies (if any) go back to the caching allocator, stream-ordered
}

// The mma kernel's block tile for M x N: the one whose tiles finish first, counted in rounds of
// tiles over the SMs (4, 2 or 1 resident per SM for 64 x 64, 128 x 128 and 128 x 256) times the
// time of one such round, i.e. the resident tiles' work over their rate; or as forced. The rates
// are the H200's with full waves (docs/gemm_notes.md, TFLOP/s): 64 x 64 ~250, 128 x 128 ~380,
// 128 x 256 ~305 (slower than 128 x 128 there, so auto leaves it out on Hopper; its rate on
// sm_80-sm_89, where it may differ, has not been measured). E.g. 1024^3 on 132 SMs: one round
// either way, 64 x 64 (256 tiles) costs 4 / 250 < 8 / 380 of 128 x 128 (64 tiles). tf32 has its
// own rates, measured the same way on the H200 (the path forced, 4096^3 and 8192^3, all four
// layouts): 64 x 64 ~100, 128 x 128 ~141, 128 x 256 ~139 (near 128 x 128, unlike bf16), the
// same picks at the shapes measured (64 x 64 at 1024^3, 128 x 128 at 4096^3 and 8192^3).
int mma_tile(int64_t M, int64_t N, int sms, bool tf32) {
  const HalfPathSetting& setting = half_path_setting();
  if (setting.kernel == HalfKernel::kMma && setting.tile > 0) return setting.tile;
  auto rounds = [&](int64_t bm, int64_t bn, int64_t resident) {
    const int64_t tiles = ((M + bm - 1) / bm) * ((N + bn - 1) / bn);
    return (tiles + sms * resident - 1) / (sms * resident);
  };
  // A round's time in units of 1e-6: 4 / 250, 8 / 380 and 8 / 305 (64 x 64 tiles: a quarter of
  // the work of 128 x 128, four resident instead of two); tf32: 4 / 100, 8 / 141 and 8 / 139.
  const int64_t cost64 = rounds(64, 64, 4) * (tf32 ? 40000 : 16000);
  const int64_t cost128 = rounds(128, 128, 2) * (tf32 ? 56740 : 21050);
  const int64_t cost256 = rounds(128, 256, 1) * (tf32 ? 57550 : 26230);
  if (cost64 < cost128 && cost64 < cost256) return 64;
  return cost128 <= cost256 ? 128 : 256;
}

// Runs c = a @ b (bfloat16 / float16, or float32 as tf32) on the mma.sync kernel and returns true,
// or returns false (nothing launched) when its 16-byte copies cannot read an operand (a base not
// 16-byte aligned, a leading dimension not a multiple of 16 bytes): the caller runs the SIMT
// kernel then (exact float32 for float32). Every layout is read in place (no copies).
bool try_mma(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, int64_t M, int64_t N,
             int64_t K, cudaStream_t stream) {
  const Operand A = operand_of(a, /*is_a=*/true);
  const Operand B = operand_of(b, /*is_a=*/false);
  const int elem = static_cast<int>(a.element_size());
  // Rows along each operand's non-unit dimension: A K-major has M rows of K, else K rows of M.
  if (!mma_operand_ok(A.data, A.ld, A.k_contig ? M : K, elem) ||
      !mma_operand_ok(B.data, B.ld, B.k_contig ? N : K, elem)) {
    return false;
  }
  MmaGemm g;
  fill_problem(&g, A, B, c, M, N, K);
  g.type = a.scalar_type() == at::kFloat      ? kMmaTf32
           : a.scalar_type() == at::kBFloat16 ? kMmaBFloat16
                                              : kMmaHalf;
  g.tile = mma_tile(M, N, cuda::sm_count(c.get_device()), g.type == kMmaTf32);
  const cudaError_t err = launch_mma(g, stream);
  TORCH_CHECK(err == cudaSuccess, "lltm_ext.gemm: the mma GEMM (", M, " x ", N, " x ", K,
              ", block tile ", g.tile, " x ", g.tile,
              ") failed to launch: ", cudaGetErrorString(err), ".");
  return true;
}

// bfloat16 / float16 c = a @ b on the kernel half_kernel() picks: wgmma, mma, or (also for
// operands the tensor-core kernels cannot read) SIMT.
template <typename T>
void run_half(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, int64_t M, int64_t N,
              int64_t K, cudaStream_t stream) {
  const HalfKernel kernel = half_kernel();
  if (kernel == HalfKernel::kWgmma && try_wgmma(a, b, c, M, N, K, stream)) return;
  if (kernel == HalfKernel::kMma && try_mma(a, b, c, M, N, K, stream)) return;
  run_config<HalfConfig, T>(operand_of(a, /*is_a=*/true), operand_of(b, /*is_a=*/false), c, M, N, K,
                            1, stream);
}

// Whether float32 may run as tf32: exactly when PyTorch's own float32 matmuls (torch.mm on cuBLAS)
// may, i.e. torch.backends.cuda.matmul.allow_tf32, or set_float32_matmul_precision "high" /
// "medium" ("highest", the default: exact float32 on the SIMT kernels). LLTM_EXT_GEMM_TF32=0 in
// the environment (read at each call) turns tf32 off for debugging.
bool tf32_allowed() {
  if (!at::globalContext().allowTF32CuBLAS()) return false;
  const char* opt_out = std::getenv("LLTM_EXT_GEMM_TF32");
  return opt_out == nullptr || std::string(opt_out) != "0";
}

}  // namespace

std::string cuda_half_path() {
  switch (half_kernel()) {
    case HalfKernel::kWgmma:
      return "wgmma";
    case HalfKernel::kMma:
      return "mma";
    default:
      return "simt";
  }
}

void set_cuda_half_path(const std::string& path) {
  g_half_path.store(parse_half_path(path, "the half-precision GEMM path"));
}

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
  switch (a.scalar_type()) {
    case at::kFloat: {
      // TF32 on the tensor cores when PyTorch allows it for torch.mm (not for the tuning entry
      // point, which names a config): wgmma where the sm_90a image runs, else mma.sync where the
      // mma image has PTX >= 80 (A100, RTX 30xx / 40xx, a 9.0-only build), as half_kernel()
      // picks (or LLTM_EXT_GEMM_HALF_PATH forces); operands neither can read, and simt, run exact
      // float32 below.
      if (config < 0 && splits <= 0 && tf32_allowed()) {
        const HalfKernel kernel = half_kernel();
        if (kernel == HalfKernel::kWgmma && try_wgmma(a, b, c, M, N, K, stream)) break;
        if (kernel == HalfKernel::kMma && try_mma(a, b, c, M, N, K, stream)) break;
      }
      if (config < 0 || splits <= 0) {
        const Choice choice = cuda_choose(M, N, K, B.k_contig);
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
