// Host side of lltm_ext.gemm on the tensor cores (bfloat16 / float16, float32 as TF32, and float32
// at full precision in three TF32 passes on Hopper): which
// kernels the device runs, the plan (gemm_tc_plan.cpp) for each call, and its execution: operand
// copies for the Hopper wgmma kernel where TMA cannot read an operand, the mma.sync kernel aligned
// or register-staged, split-K partials and their reduction; all on the current stream under the
// caller's device guard. C++ compiler, CUDA builds only (setup.py's *_cuda_host.cpp).
#include <ATen/ATen.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <string>
#include <tuple>

#include "common/cuda_host.h"
#include "common/env_setting.h"
#include "gemm/gemm.h"
#include "gemm/gemm_cuda_host.h"
#include "gemm/gemm_launchers.h"
#include "gemm/gemm_tc_plan.h"

namespace lltm_ext::gemm {
namespace {

// ------------------------------------------------------------------------------------------
// The kernels the device runs, and LLTM_EXT_GEMM_HALF_PATH.
// ------------------------------------------------------------------------------------------

enum class HalfKernel { kSimt, kWgmma, kMma };

// The settings of LLTM_EXT_GEMM_HALF_PATH / set_cuda_half_path() (settings.h: what each forces),
// in the table's order: the kernel each forces, and its block tile (0: the planner's). They pick
// the kernel of bfloat16 / float16, and of float32 where TF32 is allowed (tf32_allowed(): wgmma or
// mma as tf32, simt exact float32); float32 with TF32 off is exact on SIMT whatever this says.
struct HalfPathSetting {
  const char* name;
  bool forced;
  HalfKernel kernel;
  int tile;  // wgmma: the tile width (64, 128, 192, 256); mma: 256 (128 x 256), 128 or 64 (square)
};
constexpr std::array<HalfPathSetting, 11> kHalfPaths = {{
    {"auto", false, HalfKernel::kSimt, 0},
    {"wgmma", true, HalfKernel::kWgmma, 0},
    {"mma", true, HalfKernel::kMma, 0},
    {"simt", true, HalfKernel::kSimt, 0},
    {"wgmma64", true, HalfKernel::kWgmma, 64},
    {"wgmma128", true, HalfKernel::kWgmma, 128},
    {"wgmma192", true, HalfKernel::kWgmma, 192},
    {"wgmma256", true, HalfKernel::kWgmma, 256},
    {"mma64", true, HalfKernel::kMma, 64},
    {"mma128", true, HalfKernel::kMma, 128},
    {"mma256", true, HalfKernel::kMma, 256},
}};
constexpr settings::ChoiceKey kHalfPathSetting = "LLTM_EXT_GEMM_HALF_PATH";

// Whether kHalfPaths names the table's values, in its order.
constexpr bool half_paths_match_the_table() {
  if (settings::value_count(*kHalfPathSetting) != kHalfPaths.size()) return false;
  for (size_t i = 0; i < kHalfPaths.size(); ++i) {
    if (settings::value_at(*kHalfPathSetting, i) != kHalfPaths[i].name) return false;
  }
  return true;
}
static_assert(half_paths_match_the_table(),
              "kHalfPaths must name LLTM_EXT_GEMM_HALF_PATH's values (settings.h), in its order");

// LLTM_EXT_GEMM_HALF_PATH (read at the first call) or set_cuda_half_path(): an index into
// kHalfPaths; -1: not read yet.
std::atomic<int> g_half_path{-1};

// set_cuda_wgmma_knobs(): the wgmma kernel's Sm90Gemm::overlap, ::short_a, ::cluster_m,
// ::group and ::stream_k, and whether the planner may take the 256-row tiles.
std::atomic<bool> g_wgmma_overlap{true}, g_wgmma_short_a{true}, g_wgmma_tall{true};
std::atomic<int> g_wgmma_cluster{0};  // 0: the plan's
std::atomic<int> g_wgmma_group{kWgmmaGroup};
std::atomic<int> g_wgmma_stream_k{kStreamKAuto};
// set_cuda_wgmma_knobs(): whether a product of an M-major A and a K-major B runs as its transpose
// (kSwapAuto: where the rule says; kSwapOff; kSwapOn: wherever it can).
std::atomic<int> g_wgmma_swap{kSwapAuto};

int parse_half_path(const std::string& value, const char* what) {
  return settings::choice_index(kHalfPathSetting, value, what);
}

const HalfPathSetting& half_path_setting() {
  int path = g_half_path.load();
  if (path < 0) {
    path = parse_half_path(settings::env_raw(kHalfPathSetting), "LLTM_EXT_GEMM_HALF_PATH");
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

// What the current device runs, as the setting allows: both tensor-core kernels under auto; a
// forced kernel that cannot run here is an error. *force gets the setting's kernel and tile.
TcDevice device_facts(TcForce* force) {
  const HalfPathSetting& setting = half_path_setting();
  const int device = c10::cuda::current_device();
  TcDevice dev;
  dev.sms = cuda::sm_count(device);
  if (setting.forced && setting.kernel == HalfKernel::kSimt) return dev;
  if (!setting.forced || setting.kernel == HalfKernel::kWgmma) {
    dev.wgmma = sm90_loaded(device);
    TORCH_CHECK(!setting.forced || dev.wgmma, "lltm_ext.gemm: the wgmma path was asked for (",
                setting.name, "), but cuda:", device,
                " does not run this module's sm_90a code (a Hopper GPU and a build whose "
                "architectures include 9.0a are needed); use auto, mma or simt.");
  }
  if (!setting.forced || setting.kernel == HalfKernel::kMma) {
    const int ptx = mma_ptx(device);
    dev.mma = ptx >= 80;
    TORCH_CHECK(!setting.forced || dev.mma, "lltm_ext.gemm: the mma path was asked for (",
                setting.name, "), but ",
                ptx > 0 ? "the GPU code running on cuda:" + std::to_string(device) +
                              " was compiled for compute_" + std::to_string(ptx)
                        : "this module has no GPU code for cuda:" + std::to_string(device),
                ", and mma.sync with bfloat16 and cp.async need sm_80 or newer; use auto or "
                "simt.");
  }
  // The 256-row tiles off (set_cuda_wgmma_knobs): 128-row ones unless forced.
  if (!g_wgmma_tall.load() && force->tile_m == 0) force->tile_m = 128;
  if (setting.forced && force->kernel == TcKernel::kNone) {
    force->kernel = setting.kernel == HalfKernel::kWgmma ? TcKernel::kWgmma : TcKernel::kMma;
    if (force->tile <= 0) force->tile = setting.tile;
  }
  return dev;
}

// ------------------------------------------------------------------------------------------
// Operand copies for the wgmma kernel, whose TMA loads need 16-byte aligned rows (tf32: K-major).
// ------------------------------------------------------------------------------------------

// A copy of operand t (2-D, with a layout_of) in the same layout whose rows start whole 128 bytes
// apart (padded; the padding is never read: TMA's maps end at the matrix), from the caching
// allocator, written by lltm_ext's row copy on `stream`: TMA reads rows 16-byte aligned only, and
// rows that start inside a 32-byte sector slowly (docs/decisions.md#mid-sector-rows). The returned
// view keeps the copy alive.
at::Tensor aligned_copy(const at::Tensor& t, cudaStream_t stream) {
  const int64_t elem = static_cast<int64_t>(t.element_size());
  const int64_t per128 = 128 / elem;
  const bool row_major = layout_of(t)->row_major;
  const at::Tensor rows = row_major ? t : t.t();  // the storage's row-major view
  const int64_t cols = rows.size(1);
  at::Tensor buf = at::empty({rows.size(0), (cols + per128 - 1) / per128 * per128}, t.options());
  C10_CUDA_CHECK(launch_copy_rows(rows.const_data_ptr(), buf.data_ptr(), rows.size(0), cols * elem,
                                  rows.stride(0) * elem, buf.stride(0) * elem, stream));
  const at::Tensor view = buf.narrow(1, 0, cols);
  return row_major ? view : view.t();
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

// Float32 operand `op` (element (r, k) of its `rows` x K at data[r * ld + k] where K-major, else
// data[k * ld + r]) split into tf32 big and small parts for the exact float32 GEMM, into a scratch
// tensor from the caching allocator: 2 rows x round_up(K, 4), K-major, the big parts in the first
// rows (rows 16-byte aligned, as TMA needs), written by lltm_ext's split copy on `stream`.
// *scratch keeps the copy alive until after the launch (freed stream-ordered).
Operand split_copy(const Operand& op, int64_t K, int64_t rows, const at::Tensor& like,
                   cudaStream_t stream, at::Tensor* scratch) {
  const int64_t ld = (K + 3) / 4 * 4;
  *scratch = at::empty({2 * rows, ld}, like.options());
  const int64_t in_rows = op.k_contig ? rows : K, in_cols = op.k_contig ? K : rows;
  const bool vec = aligned(op.data, 16) && (in_rows <= 1 || op.ld % 4 == 0);
  C10_CUDA_CHECK(launch_split_tf32(static_cast<const float*>(op.data), scratch->data_ptr<float>(),
                                   in_rows, in_cols, op.ld, ld, /*transposed=*/!op.k_contig, vec,
                                   cuda::sm_count(like.get_device()), stream));
  return Operand{scratch->data_ptr(), ld, /*k_contig=*/true, /*vec=*/true};
}

// The problem the planner sees for a @ b: sizes, type, layouts, and whether each operand suits
// TMA and the 16-byte cp.async copies (one rule: rows_aligned(..., 16)), and TMA at full speed
// (rows_aligned(..., 32)).
TcProblem problem_of(const at::Tensor& a, const at::Tensor& b) {
  const Operand A = operand_of(a, /*is_a=*/true);
  const Operand B = operand_of(b, /*is_a=*/false);
  TcProblem p;
  p.M = a.size(0);
  p.K = a.size(1);
  p.N = b.size(1);
  p.tf32 = a.scalar_type() == at::kFloat;
  const int elem = static_cast<int>(a.element_size());
  p.a_kcontig = A.k_contig;
  p.b_kcontig = B.k_contig;
  // Rows along each operand's non-unit dimension: A K-major has M rows of K, else K rows of M.
  p.a_aligned = rows_aligned(A.data, A.ld, A.k_contig ? p.M : p.K, elem, 16);
  p.b_aligned = rows_aligned(B.data, B.ld, B.k_contig ? p.N : p.K, elem, 16);
  p.a_words = rows_aligned(A.data, A.ld, A.k_contig ? p.M : p.K, elem, 4);
  p.b_words = rows_aligned(B.data, B.ld, B.k_contig ? p.N : p.K, elem, 4);
  p.a_sectors = rows_aligned(A.data, A.ld, A.k_contig ? p.M : p.K, elem, 32);
  p.b_sectors = rows_aligned(B.data, B.ld, B.k_contig ? p.N : p.K, elem, 32);
  return p;
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

// Where the plan splits K: the float32 partials (splits x M x N) its kernel writes, pointed at by
// *g's split fields; else an undefined tensor.
template <typename G>
at::Tensor split_workspace(const TcPlan& plan, const at::Tensor& c, G* g) {
  if (plan.splits <= 1) return {};
  at::Tensor workspace = at::empty({plan.splits, g->M, g->N}, c.options().dtype(at::kFloat));
  g->splits = plan.splits;
  g->k_split = plan.k_split;
  g->partial = workspace.data_ptr<float>();
  return workspace;
}

// c = the sum of the workspace's slices in split order (the split-K reduction), in c's type.
void reduce_workspace(const at::Tensor& workspace, const at::Tensor& c, int splits,
                      cudaStream_t stream) {
  switch (c.scalar_type()) {
    case at::kFloat:
      reduce_splits<float, float>(workspace, c, splits, stream);
      break;
    case at::kBFloat16:
      reduce_splits<float, at::BFloat16>(workspace, c, splits, stream);
      break;
    default:
      reduce_splits<float, at::Half>(workspace, c, splits, stream);
  }
}

// c = a @ b on the wgmma kernel with block tile width plan.tile, after the plan's copies (tf32
// operands that are not K-major through lltm_ext's transpose kernel, others through aligned_copy;
// x3, float32 at full precision: both split by split_copy).
// c_trans: the product is c's transpose (a and b swapped, C^T = b^T a^T), stored transposed.
void run_wgmma(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, const TcPlan& plan,
               cudaStream_t stream, bool x3 = false, bool c_trans = false) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  const bool tf32 = a.scalar_type() == at::kFloat;
  // An operand as wgmma reads it: in place, or copied (`keep` holds the copy until after the
  // launch; rows: its M or N).
  auto prepare = [&](const at::Tensor& t, bool is_a, bool copy, int64_t rows, at::Tensor* keep) {
    const Operand op = operand_of(t, is_a);
    if (x3) return split_copy(op, K, rows, t, stream, keep);
    if (!copy) return op;
    if (tf32 && !op.k_contig) return k_major_copy(op, K, rows, t, stream, keep);
    *keep = aligned_copy(t, stream);
    return operand_of(*keep, is_a);
  };
  at::Tensor a_copy, b_copy;
  const Operand A = prepare(a, /*is_a=*/true, plan.copy_a, M, &a_copy);
  const Operand B = prepare(b, /*is_a=*/false, plan.copy_b, N, &b_copy);
  const int elem = static_cast<int>(a.element_size());
  TORCH_INTERNAL_ASSERT(rows_aligned(A.data, A.ld, A.k_contig ? M : K, elem, 16) &&
                        rows_aligned(B.data, B.ld, B.k_contig ? N : K, elem, 16) &&
                        (!tf32 || (A.k_contig && B.k_contig)));
  Sm90Gemm g;
  fill_problem(&g, A, B, c, M, N, K);
  if (c_trans) {  // c: N x M, row-major; the kernel's M x N product stored transposed
    g.ldc = M;
    g.c_trans = true;
  }
  g.type = x3     ? kSm90F32x3
           : tf32 ? kSm90Tf32
                  : (a.scalar_type() == at::kBFloat16 ? kSm90BFloat16 : kSm90Half);
  if (x3) {  // the operands as given, for the outputs that come out non-finite
    const Operand A0 = operand_of(a, /*is_a=*/true), B0 = operand_of(b, /*is_a=*/false);
    g.exact_a = static_cast<const float*>(A0.data);
    g.exact_b = static_cast<const float*>(B0.data);
    g.a_rs = A0.k_contig ? A0.ld : 1;
    g.a_ks = A0.k_contig ? 1 : A0.ld;
    g.b_ks = B0.k_contig ? 1 : B0.ld;
    g.b_cs = B0.k_contig ? B0.ld : 1;
  }
  g.sms = cuda::sm_count(c.get_device());
  g.bn = plan.tile;
  g.bm = plan.tile_m;
  g.overlap = g_wgmma_overlap.load();
  g.group = g_wgmma_group.load();
  g.short_a = g_wgmma_short_a.load();
  const int cluster = g_wgmma_cluster.load();
  g.cluster_m = cluster == 0 ? plan.cluster : cluster;
  const at::Tensor workspace = split_workspace(plan, c, &g);
  // Stream-K over a last, partial round: its flags and partial sums.
  g.stream_k = g_wgmma_stream_k.load();
  const int64_t sk_floats = sm90_stream_k(g).floats();
  at::Tensor sk_space;
  if (sk_floats > 0) {
    sk_space = at::empty({sk_floats}, c.options().dtype(at::kFloat));
    g.sk_space = sk_space.data_ptr<float>();
  }
  const char* step = "";
  const cudaError_t err = launch_sm90(g, stream, &step);
  TORCH_CHECK(err == cudaSuccess, "lltm_ext.gemm: the wgmma GEMM (", M, " x ", N, " x ", K,
              ", block tile ", g.bm, " x ", g.bn, ", ", plan.splits, " K splits",
              sk_floats > 0 ? ", Stream-K" : "", ") failed at ", step, ": ",
              cudaGetErrorString(err), ".");
  if (plan.splits > 1) reduce_workspace(workspace, c, plan.splits, stream);
}

// c = a @ b on the mma.sync kernel as planned: block tile, stages copied 16 or 4 bytes at a time
// (cp.async) or register-staged, and K splits, whose float32 partials the split-K reduction sums
// into c in split order.
void run_mma(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, const TcPlan& plan,
             cudaStream_t stream) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  MmaGemm g;
  fill_problem(&g, operand_of(a, /*is_a=*/true), operand_of(b, /*is_a=*/false), c, M, N, K);
  g.type = a.scalar_type() == at::kFloat      ? kMmaTf32
           : a.scalar_type() == at::kBFloat16 ? kMmaBFloat16
                                              : kMmaHalf;
  g.tile = plan.tile;
  const at::Tensor workspace = split_workspace(plan, c, &g);
  const cudaError_t err = plan.aligned ? launch_mma(g, stream)
                          : plan.words ? launch_mma_words(g, stream)
                                       : launch_mma_unaligned(g, stream);
  TORCH_CHECK(err == cudaSuccess, "lltm_ext.gemm: the mma GEMM (", M, " x ", N, " x ", K,
              ", block tile ", g.tile, ", ",
              plan.aligned ? "16-byte copies"
              : plan.words ? "4-byte copies"
                           : "register-staged",
              ", ", plan.splits, " K splits) failed to launch: ", cudaGetErrorString(err), ".");
  if (plan.splits > 1) reduce_workspace(workspace, c, plan.splits, stream);
}

// Exact float32 goes to the tensor cores (auto) where the planner's time for the three passes,
// times kExactTensorScale, plus kExactTensorUs and kExactTensorRoundUs per round of the plan's
// blocks over the SMs, is below the SIMT schedule's estimate: fitted to both paths' measured times
// on an H200 (benchmarks/gemm_f32_plan/measure_f32_tensor.py, 50 shapes of the sweep's seed 2 and
// 16 large ones), where the planner's tf32 rates put the large products over twice as slow as they
// run, and the copies, launches and each round's start and stores too cheap
// (docs/decisions.md#exact-f32-tensor).
constexpr double kExactTensorScale = 0.4, kExactTensorUs = 8.0, kExactTensorRoundUs = 6.0;

// Which path exact float32 takes (LLTM_EXT_GEMM_F32): 0 auto, 1 simt, 2 tensor.
int exact_f32_setting() {
  const std::string value = env_choice(settings::ChoiceKey("LLTM_EXT_GEMM_F32"));
  return value == "simt" ? 1 : value == "tensor" ? 2 : 0;
}

}  // namespace

ExactPlan cuda_exact_plan(const at::Tensor& a, const at::Tensor& b, double simt_us) {
  ExactPlan e;
  e.simt_us = simt_us;
  const int setting = exact_f32_setting();
  if (setting == 1) return e;
  TcForce force;
  force.kernel = TcKernel::kWgmma;
  const int device = c10::cuda::current_device();
  TcDevice dev;
  dev.sms = cuda::sm_count(device);
  dev.wgmma = sm90_loaded(device);
  TORCH_CHECK(setting != 2 || dev.wgmma,
              "lltm_ext.gemm: LLTM_EXT_GEMM_F32=tensor runs exact float32 on Hopper's wgmma "
              "kernel, but cuda:",
              device,
              " does not run this module's sm_90a code (a Hopper GPU and a build whose "
              "architectures include 9.0a are needed); use auto or simt.");
  if (!dev.wgmma) return e;
  TcProblem p = problem_of(a, b);
  p.x3 = true;
  e.plan = plan_tensor_core(p, dev, force);
  const int64_t items = (p.M + 127) / 128 * ((p.N + e.plan.tile - 1) / std::max(e.plan.tile, 1)) *
                        std::max(e.plan.splits, 1);
  const double rounds = static_cast<double>((items + dev.sms - 1) / std::max(dev.sms, 1));
  e.tensor =
      e.plan.kernel == TcKernel::kWgmma &&
      (setting == 2 ||
       e.plan.us * kExactTensorScale + kExactTensorUs + rounds * kExactTensorRoundUs < simt_us);
  return e;
}

bool run_exact_tensor_core(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                           cudaStream_t stream, double simt_us) {
  const ExactPlan e = cuda_exact_plan(a, b, simt_us);
  if (!e.tensor) return false;
  run_wgmma(a, b, c, e.plan, stream, /*x3=*/true);
  return true;
}

TcPlan cuda_tc_plan(const at::Tensor& a, const at::Tensor& b, const TcForce& force) {
  TcForce f = force;
  const TcDevice dev = device_facts(&f);
  return plan_tensor_core(problem_of(a, b), dev, f);
}

// Swapped, the product reads both operands as the kernel's fastest layout does, A K-major and B
// N-major (docs/decisions.md#wgmma-swap). Auto: the planner's choices only (a forced kernel, tile,
// rows, splits or copy, as in tests and tuning, runs the layout as given), and not where C^T would
// be stored element by element (c's rows not 16-byte aligned, so not by TMA) while both operands'
// rows are aligned: that store measured slower than the unswapped product at large sizes. On:
// wherever the layout allows, forced choices applied to the transpose. Never on a GPU without the
// wgmma kernel (the transpose would be planned, then the product as given).
bool wgmma_swaps(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                 const TcForce& force) {
  const int swap = g_wgmma_swap.load();
  if (swap == kSwapOff || a.scalar_type() == at::kFloat || !wgmma_runs_here()) return false;
  const Operand A = operand_of(a, /*is_a=*/true), B = operand_of(b, /*is_a=*/false);
  if (A.k_contig || !B.k_contig) return false;
  if (swap == kSwapOn) return true;
  const bool forced = force.kernel != TcKernel::kNone || force.tile > 0 || force.tile_m > 0 ||
                      force.splits > 0 || force.unaligned || force.registers || force.copy;
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  const bool direct_store = !rows_aligned(c.data_ptr(), N, M, 2, 16);
  return !forced && !(direct_store && rows_aligned(A.data, A.ld, K, 2, 16) &&
                      rows_aligned(B.data, B.ld, N, 2, 16));
}

bool run_tensor_core(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                     cudaStream_t stream, const TcForce& force) {
  if (wgmma_swaps(a, b, c, force)) {
    const at::Tensor a_t = b.t(), b_t = a.t();
    const TcPlan plan = cuda_tc_plan(a_t, b_t, force);
    if (plan.kernel == TcKernel::kWgmma) {
      run_wgmma(a_t, b_t, c, plan, stream, /*x3=*/false, /*c_trans=*/true);
      return true;
    }
  }
  const TcPlan plan = cuda_tc_plan(a, b, force);
  switch (plan.kernel) {
    case TcKernel::kWgmma:
      run_wgmma(a, b, c, plan, stream);
      return true;
    case TcKernel::kMma:
      run_mma(a, b, c, plan, stream);
      return true;
    default:
      return false;
  }
}

int64_t narrow_splits(int64_t tiles, int64_t K, int sms) {
  // The split-K reduction costs more than splitting saves unless the tiles leave most SMs idle
  // (docs/decisions.md#narrow-tile): only tiles on at most a third of the SMs split, into one
  // round of items, each at least kNarrowMinSplitSteps K steps.
  if (3 * tiles > sms) return 1;
  const int64_t steps = (K + 63) / 64;
  return std::clamp<int64_t>(
      std::min<int64_t>(sms / std::max<int64_t>(tiles, 1), steps / kNarrowMinSplitSteps), 1,
      kNarrowMaxSplits);
}

int narrow_rows(int64_t L, int64_t K, int sms) {
  // (docs/decisions.md#narrow-tile) Blocks of 64 rows leave the second consumer warpgroup idle,
  // which costs little in a product bound by reading the large operand, and twice the blocks read
  // it faster. Not where 128-row tiles split K: 64-row ones, unsplit on half the SMs, lost there.
  const int64_t tiles = (L + 127) / 128;
  return 2 * tiles <= sms && narrow_splits(tiles, K, sms) == 1 ? 64 : 128;
}

bool run_narrow(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, cudaStream_t stream,
                int64_t splits, int rows) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  if ((a.scalar_type() != at::kHalf && a.scalar_type() != at::kBFloat16) ||
      std::min(M, N) > kNarrowSide || K == 0 || !wgmma_runs_here()) {
    return false;
  }
  // The large side as A (tiles of 128 or 64 rows), the small one as B (16 or 32 columns,
  // K-major): swapped, C^T = b^T a^T, where M is the small side.
  const bool swap = M <= N;
  const at::Tensor big = swap ? b.t() : a, small = swap ? a.t() : b;
  const int64_t L = swap ? N : M, S = swap ? M : N;
  const Operand A = operand_of(big, /*is_a=*/true);
  Operand B = operand_of(small, /*is_a=*/false);
  if (S == 1 &&
      (K == 1 || small.stride(0) == 1)) {  // one K-contiguous row (layout_of says N-major)
    B.k_contig = true;
    B.ld = (K + 7) / 8 * 8;
  }
  const int elem = 2;
  if (!B.k_contig || !rows_aligned(A.data, A.ld, A.k_contig ? L : K, elem, 16) ||
      !rows_aligned(B.data, B.ld, S, elem, 16)) {
    return false;
  }
  Sm90Gemm g;
  fill_problem(&g, A, B, c, L, S, K);
  g.ldc = N;  // c: M x N, row-major; swapped, the kernel's (L x S) product stored transposed
  g.c_trans = swap;
  g.type = a.scalar_type() == at::kBFloat16 ? kSm90BFloat16 : kSm90Half;
  g.sms = cuda::sm_count(c.get_device());
  g.bn = S <= 16 ? 16 : 32;
  g.overlap = g_wgmma_overlap.load();
  g.group = g_wgmma_group.load();
  g.short_a = g_wgmma_short_a.load();
  if (rows <= 0) rows = narrow_rows(L, K, g.sms);
  g.rows64 = rows == 64;
  const int64_t tiles = (L + rows - 1) / rows;
  if (splits <= 0) splits = narrow_splits(tiles, K, g.sms);
  // Splits of whole K steps (64), every split at least one step.
  const int64_t k_split = ((K + splits - 1) / splits + 63) / 64 * 64;
  splits = (K + k_split - 1) / k_split;
  TcPlan plan;
  plan.splits = static_cast<int>(splits);
  plan.k_split = k_split;
  at::Tensor workspace = split_workspace(plan, c, &g);
  const char* step = "";
  const cudaError_t err = launch_sm90(g, stream, &step);
  TORCH_CHECK(err == cudaSuccess, "lltm_ext.gemm: the wgmma GEMM's narrow tile (", M, " x ", N,
              " x ", K, ", ", splits, " K splits) failed at ", step, ": ", cudaGetErrorString(err),
              ".");
  if (splits > 1) reduce_workspace(workspace, c, static_cast<int>(splits), stream);
  return true;
}

bool half_path_forced() {
  return half_path_setting().forced;
}

bool mma_runs_here() {
  return mma_ptx(c10::cuda::current_device()) >= 80;
}

bool wgmma_runs_here() {
  return sm90_loaded(c10::cuda::current_device());
}

std::string cuda_half_path() {
  TcForce force;
  const TcDevice dev = device_facts(&force);
  if (force.kernel == TcKernel::kWgmma || (force.kernel == TcKernel::kNone && dev.wgmma)) {
    return "wgmma";
  }
  return dev.mma ? "mma" : "simt";
}

void set_cuda_half_path(const std::string& path) {
  g_half_path.store(parse_half_path(path, "the half-precision GEMM path"));
}

std::tuple<int64_t, int64_t, int64_t> cuda_stream_k_split(int64_t M, int64_t N, int64_t K,
                                                          bool tf32, int sms) {
  Sm90Gemm g;
  g.M = M, g.N = N, g.K = K;
  g.type = tf32 ? kSm90Tf32 : kSm90BFloat16;
  g.bn = 256;
  g.sms = sms;
  g.stream_k = g_wgmma_stream_k.load();
  const Sm90StreamK sk = sm90_stream_k(g);
  return std::make_tuple(sk.dp_tiles, sk.sk_tiles, sk.blocks);
}

void set_cuda_wgmma_knobs(bool overlap, bool short_a, int cluster, int stream_k, bool tall,
                          int swap, int group) {
  g_wgmma_group.store(group);
  g_wgmma_swap.store(swap);
  g_wgmma_tall.store(tall);
  g_wgmma_overlap.store(overlap);
  g_wgmma_short_a.store(short_a);
  g_wgmma_cluster.store(cluster);
  g_wgmma_stream_k.store(stream_k);
}

}  // namespace lltm_ext::gemm
