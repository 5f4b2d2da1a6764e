// The GEMM operators c = a @ b: schema, input checks, operand layouts, CPU/CUDA dispatch,
// registered as torch.ops.lltm_ext.gemm (with its autograd in C++: both gradients are gemm calls)
// and gemm_out (not differentiable), and bound in Python.
#include "gemm/gemm.h"

#include <ATen/MemoryOverlap.h>
#include <c10/util/StringUtil.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "common/autocast.h"
#include "common/module.h"
#include "gemm/gemm_heuristic.h"
#include "gemm/gemm_tc_plan.h"
#ifdef WITH_CUDA
#include "common/cuda_host.h"
#include "gemm/gemm_cuda_host.h"
#endif

namespace lltm_ext::gemm {
namespace {

constexpr int64_t kMaxDim = std::numeric_limits<int32_t>::max();

// a (M, K) and b (K, N): defined, floating, one device and dtype, 2-D, matching K, each size <
// 2^31.
void check_operands(const at::Tensor& a, const at::Tensor& b) {
  check_defined(a, "a");
  check_defined(b, "b");
  check_device_type(a, "a");
  check_device_type(b, "b");
  check_floating(a, "a");
  check_floating(b, "b");
  CHECK_DIM(a, 2);
  CHECK_DIM(b, 2);
  CHECK_LIKE(b, a);
  check_backend(a, "gemm");
  TORCH_CHECK(b.size(0) == a.size(1), "lltm_ext.gemm: `b` must have a.size(1) = ", a.size(1),
              " rows (a is M x K, b is K x N), but got a ", describe(b), " for a ", describe(a),
              ".");
  for (const at::Tensor* t : {&a, &b}) {
    TORCH_CHECK(t->size(0) <= kMaxDim && t->size(1) <= kMaxDim, "lltm_ext.gemm: each of M, N and K",
                " must be below 2^31, but got a ", describe(a), " and a ", describe(b), ".");
  }
}

void check_out(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
  check_defined(out, "out");
  CHECK_LIKE(out, a);
  CHECK_SHAPE(out, a.size(0), b.size(1));
  TORCH_CHECK(at::has_internal_overlap(out) != at::MemOverlap::Yes,
              "lltm_ext.gemm: `out` must not have elements that share memory (an expanded or ",
              "otherwise self-overlapping view), but got a ", describe(out), " with strides ",
              out.strides(), ".");
  for (const auto& [in, name] : {std::pair{&a, "a"}, std::pair{&b, "b"}}) {
    const at::MemOverlapStatus overlap = at::get_overlap_status(out, *in);
    TORCH_CHECK(overlap != at::MemOverlapStatus::Full && overlap != at::MemOverlapStatus::Partial,
                "lltm_ext.gemm: `out` must not share memory with `", name, "`, but it does (got a ",
                describe(out), ").");
  }
}

#ifdef WITH_CUDA
// Operands as the CUDA kernels read them: one unit-stride dimension (views such as a.t() pass
// as they are; other strides are copied to contiguous memory).
at::Tensor cuda_operand(const at::Tensor& t) {
  return layout_of(t) ? t : t.contiguous();
}
#endif

// c (contiguous, M x N) = a @ b on the inputs' device.
void compute(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
  if (a.is_cuda()) {
#ifdef WITH_CUDA
    gemm_cuda(cuda_operand(a), cuda_operand(b), c);
#else
    fail_not_compiled_with_cuda("gemm");
#endif
  } else {
    gemm_cpu(a, b, c);
  }
}

// c = a @ b, a new contiguous (M, N) tensor.
at::Tensor gemm(const at::Tensor& a, const at::Tensor& b) {
  check_operands(a, b);
  at::Tensor c = at::empty({a.size(0), b.size(1)}, a.options());
  compute(a, b, c);
  return c;
}

// out = a @ b, written in place (any strides); returns out.
at::Tensor gemm_out(const at::Tensor& a, const at::Tensor& b, at::Tensor out) {
  check_operands(a, b);
  check_out(out, a, b);
  if (out.is_contiguous()) {
    compute(a, b, out);
  } else {
    at::Tensor c = at::empty({a.size(0), b.size(1)}, a.options());
    compute(a, b, c);
    out.copy_(c);
  }
  return out;
}

// Tuning and test entry point (CUDA; float32, float16, bfloat16): c = a @ b on the short-K kernel
// whatever the shape: kernel "simt", or "mma" (its tensor-core form: float16 / bfloat16, K <= 64),
// or "small" (the small-product kernel: float16 / bfloat16, K <= 512).
// out: contiguous, written (else a new tensor).
at::Tensor gemm_short_k(const at::Tensor& a, const at::Tensor& b,
                        const std::optional<at::Tensor>& out, const std::string& kernel) {
  check_operands(a, b);
  TORCH_CHECK(a.is_cuda() && (a.scalar_type() == at::kFloat || a.scalar_type() == at::kHalf ||
                              a.scalar_type() == at::kBFloat16),
              "lltm_ext.gemm: _gemm_short_k takes float32, float16 or bfloat16 CUDA tensors, but "
              "got a ",
              describe(a), ".");
  at::Tensor c;
  if (out.has_value()) {
    check_out(*out, a, b);
    TORCH_CHECK(out->is_contiguous(), "lltm_ext.gemm: _gemm_short_k's `out` must be contiguous.");
    c = *out;
  } else {
    c = at::empty({a.size(0), b.size(1)}, a.options());
  }
#ifdef WITH_CUDA
  gemm_cuda_short_k(cuda_operand(a), cuda_operand(b), c, kernel);
#else
  fail_not_compiled_with_cuda("gemm");
#endif
  return c;
}

// Tuning and test entry point (CUDA; float16, bfloat16): c = a @ b on the skinny kernel (a side
// of at most 32, K a multiple of 8, both operands K-contiguous and 16-byte aligned), with its
// warps, K splits and the column kernel's block width (32 or 64 columns), 0 for its own choice.
// out: contiguous, written (else a new tensor).
at::Tensor gemm_skinny(const at::Tensor& a, const at::Tensor& b,
                       const std::optional<at::Tensor>& out, int64_t warps, int64_t splits,
                       int64_t cols) {
  check_operands(a, b);
  TORCH_CHECK(a.is_cuda() && (a.scalar_type() == at::kHalf || a.scalar_type() == at::kBFloat16),
              "lltm_ext.gemm: _gemm_skinny takes float16 or bfloat16 CUDA tensors, but got a ",
              describe(a), ".");
  at::Tensor c;
  if (out.has_value()) {
    check_out(*out, a, b);
    TORCH_CHECK(out->is_contiguous(), "lltm_ext.gemm: _gemm_skinny's `out` must be contiguous.");
    c = *out;
  } else {
    c = at::empty({a.size(0), b.size(1)}, a.options());
  }
#ifdef WITH_CUDA
  TORCH_CHECK(cols == 0 || cols == 32 || cols == 64,
              "lltm_ext.gemm: _gemm_skinny's cols is 0 (auto), 32 or 64, but got ", cols, ".");
  gemm_cuda_skinny(a, b, c, static_cast<int>(warps), splits, static_cast<int>(cols));
#else
  fail_not_compiled_with_cuda("gemm");
#endif
  return c;
}

// Tuning and test entry point (CUDA; float16, bfloat16): c = a @ b on the wgmma kernel's narrow
// tiles with `splits` K splits and tiles of `rows` rows (64 or 128), 0 for its own choice of each.
// out: contiguous, written (else a new tensor).
at::Tensor gemm_narrow(const at::Tensor& a, const at::Tensor& b,
                       const std::optional<at::Tensor>& out, int64_t splits, int64_t rows) {
  check_operands(a, b);
  TORCH_CHECK(a.is_cuda() && (a.scalar_type() == at::kHalf || a.scalar_type() == at::kBFloat16),
              "lltm_ext.gemm: _gemm_narrow takes float16 or bfloat16 CUDA tensors, but got a ",
              describe(a), ".");
  TORCH_CHECK(splits >= 0, "lltm_ext.gemm: _gemm_narrow's splits is 0 (auto) or more, but got ",
              splits, ".");
  TORCH_CHECK(rows == 0 || rows == 64 || rows == 128,
              "lltm_ext.gemm: _gemm_narrow's rows is 0 (auto), 64 or 128, but got ", rows, ".");
  at::Tensor c;
  if (out.has_value()) {
    check_out(*out, a, b);
    TORCH_CHECK(out->is_contiguous(), "lltm_ext.gemm: _gemm_narrow's `out` must be contiguous.");
    c = *out;
  } else {
    c = at::empty({a.size(0), b.size(1)}, a.options());
  }
#ifdef WITH_CUDA
  gemm_cuda_narrow(a, b, c, splits, static_cast<int>(rows));
#else
  fail_not_compiled_with_cuda("gemm");
#endif
  return c;
}

// The operator's form of gemm_out: returns nothing (a mutating custom operator may not return an
// alias of its input).
void gemm_into(const at::Tensor& a, const at::Tensor& b, at::Tensor out) {
  gemm_out(a, b, std::move(out));
}

// The operator lltm_ext::gemm as the dispatcher has it: its autograd calls it through the
// dispatcher (not as a C++ function) so that torch.compile's tracing, which runs below autograd on
// fake tensors, records the products, and so that under create_graph=True they are differentiable
// themselves.
const auto& gemm_op() {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("lltm_ext::gemm", "").typed<decltype(gemm)>();
  return op;
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Autograd for c = a @ b: grad_a = grad_c @ b^T (M, K) and grad_b = a^T @ grad_c (K, N), each one
// gemm on transposed views (no copies). Under create_graph=True (grad mode on in backward) these
// go through the operator's Autograd kernel, this Function again: higher-order gradients work.
struct Product : torch::autograd::Function<Product> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b) {
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    ctx->save_for_backward({a, b});
    return gemm_op().call(a, b);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& a = saved[0];
    const at::Tensor& b = saved[1];
    const at::Tensor& grad_c = grads[0];
    const bool create_graph = at::GradMode::is_enabled();
    const auto mm = [&](const at::Tensor& x, const at::Tensor& y) {
      if (create_graph) {
        return gemm_op().call(x, y);
      }
      const at::AutoDispatchBelowADInplaceOrView below_autograd;
      return gemm_op().call(x, y);
    };
    at::Tensor grad_a = ctx->needs_input_grad(0) ? mm(grad_c, b.t()) : at::Tensor();
    at::Tensor grad_b = ctx->needs_input_grad(1) ? mm(a.t(), grad_c) : at::Tensor();
    return {grad_a, grad_b};
  }
};

// The Autograd kernel of lltm_ext::gemm: Product where a gradient is wanted, else straight on to
// the kernel below autograd (no graph node made, no Function's cost: most of a small product's
// time on the CPU).
at::Tensor gemm_autograd(c10::DispatchKeySet ks, const at::Tensor& a, const at::Tensor& b) {
  const bool wanted = at::GradMode::is_enabled() && (a.requires_grad() || b.requires_grad());
  if (!wanted && !a._fw_grad(/*level=*/0).defined() && !b._fw_grad(/*level=*/0).defined()) {
    return gemm_op().redispatch(ks & c10::after_ADInplaceOrView_keyset, a, b);
  }
  return Product::apply(a, b);
}

// lltm_ext::gemm under torch.autocast on `device`: as torch.mm there (autocast's lower-precision
// list): both operands in the autocast dtype, and so the product; float64 and the like pass
// through.
template <c10::DeviceType device>
at::Tensor gemm_autocast(const at::Tensor& a, const at::Tensor& b) {
  const autocast::Below<device> below;
  if (!autocast::all_eligible<device>({&a, &b})) {
    return gemm_op().call(a, b);
  }
  const at::ScalarType lower = autocast::lower_dtype<device>();
  return gemm_op().call(autocast::to_lower<device>(a, lower), autocast::to_lower<device>(b, lower));
}

// Tuning entry point (float32 CUDA only): c = a @ b with tile config `config` and `splits` K
// splits (see cuda_config_names()).
// tail_tiles / tail_splits: tail split-K (splits 1 only; see gemm_cuda).
at::Tensor gemm_with_config(const at::Tensor& a, const at::Tensor& b, int64_t config,
                            int64_t splits, int64_t tail_tiles, int64_t tail_splits) {
  check_operands(a, b);
  TORCH_CHECK(a.is_cuda() && a.scalar_type() == at::kFloat,
              "lltm_ext.gemm: _gemm_with_config takes float32 CUDA tensors, but got a ",
              describe(a), ".");
  TORCH_CHECK(config >= 0 && splits >= 1, "lltm_ext.gemm: config must be >= 0 and splits >= 1, ",
              "but got config ", config, " and splits ", splits, ".");
  TORCH_CHECK(tail_tiles >= 0 && tail_splits >= 0 && (tail_splits == 0 || splits == 1),
              "lltm_ext.gemm: tail_tiles and tail_splits must be >= 0, and splits 1 with a tail "
              "split, but got ",
              tail_tiles, ", ", tail_splits, " and splits ", splits, ".");
  at::Tensor c = at::empty({a.size(0), b.size(1)}, a.options());
#ifdef WITH_CUDA
  gemm_cuda(cuda_operand(a), cuda_operand(b), c, static_cast<int>(config), static_cast<int>(splits),
            static_cast<int>(tail_tiles), static_cast<int>(tail_splits));
#else
  fail_not_compiled_with_cuda("gemm");
#endif
  return c;
}

// A tensor-core plan as Python sees it: (kernel, tile, aligned, splits, k_split, copy_a, copy_b,
// modelled microseconds, words, cluster, tile_m); kernel "wgmma", "mma" or "none".
using PlanTuple =
    std::tuple<std::string, int, bool, int, int64_t, bool, bool, double, bool, int, int>;

PlanTuple plan_tuple(const TcPlan& p) {
  const char* kernel = p.kernel == TcKernel::kWgmma ? "wgmma"
                       : p.kernel == TcKernel::kMma ? "mma"
                                                    : "none";
  return {kernel,   p.tile, p.aligned, p.splits,  p.k_split, p.copy_a,
          p.copy_b, p.us,   p.words,   p.cluster, p.tile_m};
}

TcForce parse_force(const std::string& kernel, int64_t tile, int64_t splits, bool unaligned,
                    bool registers, bool copy, int64_t tile_m) {
  TcForce f;
  TORCH_CHECK(kernel == "auto" || kernel == "wgmma" || kernel == "mma",
              "lltm_ext.gemm: kernel must be 'auto', 'wgmma' or 'mma', but got '", kernel, "'.");
  const bool wide =
      std::find(kWgmmaWideTiles.begin(), kWgmmaWideTiles.end(), tile) != kWgmmaWideTiles.end();
  TORCH_CHECK(tile == 0 || tile == 64 || tile == 128 || tile == 256 ||
                  (wide && kernel == "wgmma") || (tile_m == 256 && kernel == "wgmma"),
              "lltm_ext.gemm: tile must be 0 (any), 64, 128 or 256, or for kernel 'wgmma' one of ",
              c10::Join(", ", kWgmmaWideTiles), ", but got ", tile, ".");
  TORCH_CHECK(splits >= 0 && splits <= 128,
              "lltm_ext.gemm: splits must be 0 (any) .. 128, but got ", splits, ".");
  const bool tall_width =
      std::find(kWgmmaTallTiles.begin(), kWgmmaTallTiles.end(), tile) != kWgmmaTallTiles.end();
  TORCH_CHECK(tile_m == 0 || tile_m == 128 || (tile_m == 256 && kernel == "wgmma"),
              "lltm_ext.gemm: tile_m must be 0 (any) or 128, or 256 for kernel 'wgmma', but got ",
              tile_m, ".");
  TORCH_CHECK(tile_m != 256 || tile == 0 || tall_width, "lltm_ext.gemm: 256-row tiles are ",
              c10::Join(", ", kWgmmaTallTiles), " wide, but got tile ", tile, ".");
  f.kernel = kernel == "wgmma" ? TcKernel::kWgmma
             : kernel == "mma" ? TcKernel::kMma
                               : TcKernel::kNone;
  f.tile = static_cast<int>(tile);
  f.tile_m = static_cast<int>(tile_m);
  f.splits = static_cast<int>(splits);
  f.unaligned = unaligned;
  f.registers = registers;
  f.copy = copy;
  return f;
}

// Tuning and test entry point (CUDA; bfloat16 / float16, or float32 as TF32): c = a @ b on the
// tensor-core plan with the forced choices; an error when no such plan runs on this device.
at::Tensor gemm_tensor_core(const at::Tensor& a, const at::Tensor& b, const std::string& kernel,
                            int64_t tile, int64_t splits, bool unaligned, bool copy,
                            const std::optional<at::Tensor>& out, bool registers, int64_t tile_m) {
  check_operands(a, b);
  if (out.has_value()) {
    check_out(*out, a, b);
    TORCH_CHECK(out->is_contiguous(),
                "lltm_ext.gemm: _gemm_tensor_core's `out` must be contiguous");
  }
  TORCH_CHECK(a.is_cuda() && a.scalar_type() != at::kDouble,
              "lltm_ext.gemm: _gemm_tensor_core takes bfloat16, float16 or float32 CUDA tensors, "
              "but got a ",
              describe(a), ".");
  [[maybe_unused]] const TcForce force =
      parse_force(kernel, tile, splits, unaligned, registers, copy, tile_m);
  at::Tensor c = out.has_value() ? *out : at::empty({a.size(0), b.size(1)}, a.options());
#ifdef WITH_CUDA
  if (c.numel() == 0) return c;
  if (a.size(1) == 0) return c.zero_();
  const c10::cuda::CUDAGuard guard(a.device());
  TORCH_CHECK(run_tensor_core(cuda_operand(a), cuda_operand(b), c,
                              c10::cuda::getCurrentCUDAStream(), force),
              "lltm_ext.gemm: no tensor-core plan with kernel '", kernel, "', tile ", tile,
              (tile_m > 0 ? " x " + std::to_string(tile_m) + " rows" : std::string()), ", splits ",
              splits, (unaligned ? ", unaligned" : ""), (registers ? ", registers" : ""),
              " runs on this device for these operands.");
#else
  fail_not_compiled_with_cuda("gemm");
#endif
  return c;
}

}  // namespace
}  // namespace lltm_ext::gemm

TORCH_LIBRARY_FRAGMENT(lltm_ext, m) {
  m.def("gemm(Tensor a, Tensor b) -> Tensor");
  m.def("gemm_out(Tensor a, Tensor b, Tensor(a!) out) -> ()");
  m.impl("gemm", torch::dispatch(c10::DispatchKey::CPU, TORCH_FN(lltm_ext::gemm::gemm)));
  m.impl("gemm", torch::dispatch(c10::DispatchKey::CUDA, TORCH_FN(lltm_ext::gemm::gemm)));
  m.impl("gemm",
         torch::dispatch(c10::DispatchKey::Autograd, TORCH_FN(lltm_ext::gemm::gemm_autograd)));
  m.impl("gemm", torch::dispatch(c10::DispatchKey::AutocastCPU,
                                 TORCH_FN(lltm_ext::gemm::gemm_autocast<c10::DeviceType::CPU>)));
  m.impl("gemm", torch::dispatch(c10::DispatchKey::AutocastCUDA,
                                 TORCH_FN(lltm_ext::gemm::gemm_autocast<c10::DeviceType::CUDA>)));
  lltm_ext::impl_cpu_cuda(m, "gemm_out", TORCH_FN(lltm_ext::gemm::gemm_into), /*mutates=*/true);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "GEMM c = a @ b: own CPU (blocked, parallel) and CUDA (tiled SIMT) kernels.";
  lltm_ext::bind_operator<at::Tensor(const at::Tensor&, const at::Tensor&)>(
      m, "gemm", "gemm(a, b) -> c: the operator lltm_ext::gemm, c (M, N) = a (M, K) @ b (K, N)");
  lltm_ext::bind_operator<void(const at::Tensor&, const at::Tensor&, at::Tensor)>(
      m, "gemm_out", "gemm_out(a, b, out) -> None: the operator lltm_ext::gemm_out, out = a @ b");
  m.def("_gemm_with_config", &lltm_ext::gemm::gemm_with_config,
        "float32 CUDA GEMM with a given tile config index and number of K splits; tail_tiles > 0 "
        "and tail_splits > 1 (splits 1): the last tail_tiles tiles split along K (tuning)",
        py::arg("a"), py::arg("b"), py::arg("config"), py::arg("splits"), py::arg("tail_tiles") = 0,
        py::arg("tail_splits") = 0);
  m.def("_gemm_short_k", &lltm_ext::gemm::gemm_short_k,
        "CUDA GEMM on the short-K kernel whatever the shape (float32, float16, bfloat16; tuning, "
        "tests); kernel 'simt', 'mma' (its tensor-core form: float16 / bfloat16, K <= 64) or "
        "'small' (the small-product kernel: float16 / bfloat16, K <= 512); out: contiguous, "
        "written (else a new tensor)",
        py::arg("a"), py::arg("b"), py::arg("out") = py::none(), py::arg("kernel") = "simt");
  m.def("_gemm_skinny", &lltm_ext::gemm::gemm_skinny,
        "CUDA GEMM on the skinny kernel (float16 / bfloat16, a side of at most 32, K a multiple of "
        "8, both operands K-contiguous and 16-byte aligned; tuning, tests): warps (1 to 8), "
        "splits and the column kernel's block width cols (32 or 64), 0 for its own choice; out: "
        "contiguous, written (else a new tensor)",
        py::arg("a"), py::arg("b"), py::arg("out") = py::none(), py::arg("warps") = 0,
        py::arg("splits") = 0, py::arg("cols") = 0);
  m.def(
      "_cuda_configs",
      [] {
#ifdef WITH_CUDA
        return lltm_ext::gemm::cuda_config_names();
#else
        return std::vector<std::string>{};
#endif
      },
      "Names of the float32 CUDA tile configs, by index");
  m.def(
      "_gemm_path",
      [] {
#ifdef WITH_CUDA
        return lltm_ext::gemm::cuda_path();
#else
        TORCH_CHECK(false, "lltm_ext.gemm: this build has no CUDA kernels.");
        return std::string();
#endif
      },
      "The float32 CUDA path on the current device: 'async' (cp.async, sm_80+) or 'staged'");
  m.def(
      "_set_gemm_path",
      [](const std::string& path) {
#ifdef WITH_CUDA
        lltm_ext::gemm::set_cuda_path(path);
#else
        TORCH_CHECK(false, "lltm_ext.gemm: this build has no CUDA kernels.");
#endif
      },
      "Force the float32 CUDA path: 'auto' (default: by the GPU code the device runs), 'async' or "
      "'staged' (as LLTM_EXT_GEMM_PATH does)",
      py::arg("path"));
  m.def("_gemm_narrow", &lltm_ext::gemm::gemm_narrow,
        "CUDA GEMM on the wgmma kernel's narrow tiles (float16 / bfloat16, a side of at most 32, "
        "that side's operand K-contiguous, rows 16-byte aligned, a Hopper GPU; tuning, tests): "
        "splits and rows (of the large side a tile takes, 64 or 128), 0 for its own choice; out: "
        "contiguous, written (else a new tensor)",
        py::arg("a"), py::arg("b"), py::arg("out") = py::none(), py::arg("splits") = 0,
        py::arg("rows") = 0);
  m.def(
      "_gemm_narrow_side",
      [] {
#ifdef WITH_CUDA
        return lltm_ext::gemm::cuda_narrow_side();
#else
        TORCH_CHECK(false, "lltm_ext.gemm: this build has no CUDA kernels.");
        return 0;
#endif
      },
      "The largest small side (min(M, N)) the bfloat16 / float16 auto path gives the wgmma "
      "kernel's narrow tile (0: never)");
  m.def(
      "_set_gemm_narrow_side",
      [](int side) {
#ifdef WITH_CUDA
        lltm_ext::gemm::set_cuda_narrow_side(side);
#else
        TORCH_CHECK(false, "lltm_ext.gemm: this build has no CUDA kernels.");
#endif
      },
      "Set the largest small side the bfloat16 / float16 auto path gives the narrow tile, 0 "
      "(never) to 32 (tuning, tests; process-wide)",
      py::arg("side"));
  m.def(
      "_gemm_l2_stream",
      [] {
#ifdef WITH_CUDA
        return lltm_ext::gemm::cuda_l2_stream();
#else
        TORCH_CHECK(false, "lltm_ext.gemm: this build has no CUDA kernels.");
        return false;
#endif
      },
      "Whether the CUDA kernels that stream a large operand load it under L2's evict-first "
      "policy");
  m.def(
      "_set_gemm_l2_stream",
      [](bool on) {
#ifdef WITH_CUDA
        lltm_ext::gemm::set_cuda_l2_stream(on);
#else
        TORCH_CHECK(false, "lltm_ext.gemm: this build has no CUDA kernels.");
#endif
      },
      "Set whether the CUDA kernels that stream a large operand load it under L2's evict-first "
      "policy (measurement; process-wide)",
      py::arg("on"));
  m.def(
      "_gemm_skinny_side",
      [] {
#ifdef WITH_CUDA
        return lltm_ext::gemm::cuda_skinny_side();
#else
        TORCH_CHECK(false, "lltm_ext.gemm: this build has no CUDA kernels.");
        return 0;
#endif
      },
      "The largest small side (min(M, N)) the bfloat16 / float16 auto path gives the skinny "
      "kernel (0: never)");
  m.def(
      "_set_gemm_skinny_side",
      [](int side) {
#ifdef WITH_CUDA
        lltm_ext::gemm::set_cuda_skinny_side(side);
#else
        TORCH_CHECK(false, "lltm_ext.gemm: this build has no CUDA kernels.");
#endif
      },
      "Set the largest small side the bfloat16 / float16 auto path gives the skinny kernel, 0 "
      "(never) to 32 (tuning, tests; process-wide)",
      py::arg("side"));
  m.def(
      "_gemm_half_path",
      [] {
#ifdef WITH_CUDA
        return lltm_ext::gemm::cuda_half_path();
#else
        TORCH_CHECK(false, "lltm_ext.gemm: this build has no CUDA kernels.");
        return std::string();
#endif
      },
      "The bfloat16 / float16 CUDA path on the current device: 'wgmma' (Hopper tensor cores, "
      "sm_90a code loaded), 'mma' (mma.sync tensor cores, code for sm_80 or newer loaded) or "
      "'simt'");
  m.def(
      "_set_gemm_half_path",
      [](const std::string& path) {
#ifdef WITH_CUDA
        lltm_ext::gemm::set_cuda_half_path(path);
#else
        TORCH_CHECK(false, "lltm_ext.gemm: this build has no CUDA kernels.");
#endif
      },
      "Force the bfloat16 / float16 (and float32-with-TF32) CUDA path: 'auto' (default), "
      "'wgmma', 'mma', 'simt', "
      "'wgmma64' / 'wgmma128' / 'wgmma192' / 'wgmma256' (wgmma with that block tile width), or "
      "'mma64' / "
      "'mma128' / 'mma256' (mma.sync with 64 x 64, 128 x 128 or 128 x 256 block tiles), as "
      "LLTM_EXT_GEMM_HALF_PATH does",
      py::arg("path"));
  m.def(
      "_set_gemm_wgmma_knobs",
      [](bool overlap, bool short_a, int64_t cluster, const std::string& stream_k, bool tall,
         const std::string& swap, int64_t group) {
        TORCH_CHECK(cluster >= 0 && cluster <= 2, "lltm_ext.gemm: cluster is 0, 1 or 2, not ",
                    cluster, ".");
        TORCH_CHECK(group >= 1 && group <= 1024,
                    "lltm_ext.gemm: group is 1 to 1024 tile rows, not ", group, ".");
        // The order of gemm_launchers.h's kStreamKAuto, kStreamKOff, kStreamKOn.
        const int sk = stream_k == "auto" ? 0 : stream_k == "off" ? 1 : stream_k == "on" ? 2 : -1;
        TORCH_CHECK(sk >= 0, "lltm_ext.gemm: stream_k is 'auto', 'off' or 'on', not '", stream_k,
                    "'.");
        // The order of gemm_launchers.h's kSwapAuto, kSwapOff, kSwapOn.
        const int sw = swap == "auto" ? 0 : swap == "off" ? 1 : swap == "on" ? 2 : -1;
        TORCH_CHECK(sw >= 0, "lltm_ext.gemm: swap is 'auto', 'off' or 'on', not '", swap, "'.");
#ifdef WITH_CUDA
        lltm_ext::gemm::set_cuda_wgmma_knobs(overlap, short_a, static_cast<int>(cluster), sk, tall,
                                             sw, static_cast<int>(group));
#else
        TORCH_CHECK(false, "lltm_ext.gemm: this build has no CUDA kernels.");
#endif
      },
      "The wgmma kernel's switches (tuning, tests; process-wide): overlap, one group of "
      "tensor-core ops in flight across K steps (else it waits for each step's); short_a, stages "
      "of 64 rows of A where M <= 64 (else 128, the rows past M filled with zeros); cluster, 2: "
      "blocks in clusters of two on neighbouring tile rows, B's stages multicast to both (where "
      "M spans two tile rows and the tile is 64 or more wide, whole 64-column atoms where B is "
      "N-major), 1: never, 0: as planned; "
      "stream_k, the 256-wide tile's last, partial round as Stream-K: 'auto' (the rule), 'off', "
      "'on' (wherever it can); tall, the planner may take the 256-row tiles (else 128-row "
      "tiles only, unless forced); swap, a 16-bit product of an M-major A and a K-major B as its "
      "transpose (b^T a^T, stored transposed): 'auto' (the rule), 'off', 'on'; group, the tile "
      "walk's groups of tile rows (16)",
      py::arg("overlap") = true, py::arg("short_a") = true, py::arg("cluster") = 0,
      py::arg("stream_k") = "auto", py::arg("tall") = true, py::arg("swap") = "auto",
      py::arg("group") = lltm_ext::gemm::kWgmmaGroup);
  m.def(
      "_cuda_choose",
      [](int64_t M, int64_t N, int64_t K, bool b_k_contig) {
#ifdef WITH_CUDA
        const lltm_ext::gemm::Choice ch = lltm_ext::gemm::cuda_choose(M, N, K, b_k_contig);
        return std::make_tuple(ch.config, ch.splits, ch.tail_tiles, ch.tail_splits);
#else
        TORCH_CHECK(false, "lltm_ext.gemm: this build has no CUDA kernels.");
        return std::make_tuple(0, 0, 0, 0);
#endif
      },
      "(config, splits, tail_tiles, tail_splits) the heuristic picks for float32 M x N x K on the "
      "current CUDA device (b_k_contig: B is a transposed row-major matrix)",
      py::arg("M"), py::arg("N"), py::arg("K"), py::arg("b_k_contig") = false);
  // The tile heuristic with the GPU's facts as arguments (plain C++: CPU builds have it too), the
  // facts the current CUDA device gives it, and the CPU micro-kernel's ISA: for tests.
  m.def(
      "_choose_tiles",
      [](int64_t M, int64_t N, int64_t K, int64_t sms, bool b_k_contig, const std::string& path,
         const std::vector<int64_t>& blocks_per_sm) {
        const lltm_ext::gemm::Choice ch =
            lltm_ext::gemm::choose_tiles(M, N, K, sms, b_k_contig, path, blocks_per_sm);
        return std::make_tuple(ch.config, ch.splits, ch.tail_tiles, ch.tail_splits);
      },
      "(config, splits, tail_tiles, tail_splits) the heuristic picks for float32 M x N x K on a "
      "GPU with `sms` SMs running the 'async' or 'staged' path, whose float32 configs (by index) "
      "keep blocks_per_sm[i] blocks resident per SM (b_k_contig: B is a transposed row-major "
      "matrix)",
      py::arg("M"), py::arg("N"), py::arg("K"), py::arg("sms"), py::arg("b_k_contig"),
      py::arg("path"), py::arg("blocks_per_sm"));
  m.def(
      "_cuda_blocks_per_sm",
      [] {
#ifdef WITH_CUDA
        const lltm_ext::gemm::GpuFacts gpu = lltm_ext::gemm::cuda_gpu_facts();
        return std::vector<int>(gpu.blocks_per_sm.begin(), gpu.blocks_per_sm.end());
#else
        TORCH_CHECK(false, "lltm_ext.gemm: this build has no CUDA kernels.");
        return std::vector<int>();
#endif
      },
      "Resident blocks per SM of each float32 config on the current CUDA device, as _cuda_choose "
      "gives them to the heuristic (0 for configs its path does not run)");
  m.def("_gemm_tensor_core", &lltm_ext::gemm::gemm_tensor_core,
        "CUDA GEMM on the tensor cores with forced choices (tuning, tests): kernel 'auto' / "
        "'wgmma' / 'mma', tile (0: the planner's), splits (0: the planner's), unaligned (mma: "
        "not the 16-byte copies even for aligned operands: the 4-byte ones where the operands "
        "allow, else register-staged loads), copy (wgmma: copy both operands first), out "
        "(contiguous, written; else a new tensor), registers (mma: the register-staged loads), "
        "tile_m (wgmma: block tile rows, 0: the planner's, 128, or 256 at the widths of "
        "kWgmmaTallTiles, 16-bit types with B K-major)",
        py::arg("a"), py::arg("b"), py::arg("kernel") = "auto", py::arg("tile") = 0,
        py::arg("splits") = 0, py::arg("unaligned") = false, py::arg("copy") = false,
        py::arg("out") = py::none(), py::arg("registers") = false, py::arg("tile_m") = 0);
  m.def(
      "_tc_plan",
      [](int64_t M, int64_t N, int64_t K, bool tf32, bool a_kcontig, bool b_kcontig, bool a_aligned,
         bool b_aligned, int sms, bool wgmma, bool mma, bool a_words, bool b_words, bool a_sectors,
         bool b_sectors, bool x3) {
        lltm_ext::gemm::TcProblem p;
        p.M = M, p.N = N, p.K = K, p.tf32 = tf32 || x3, p.x3 = x3;
        p.a_kcontig = a_kcontig, p.b_kcontig = b_kcontig;
        p.a_aligned = a_aligned, p.b_aligned = b_aligned;
        p.a_words = a_words, p.b_words = b_words;
        p.a_sectors = a_sectors, p.b_sectors = b_sectors;
        lltm_ext::gemm::TcDevice dev;
        dev.sms = sms, dev.wgmma = wgmma, dev.mma = mma;
        return lltm_ext::gemm::plan_tuple(lltm_ext::gemm::plan_tensor_core(p, dev));
      },
      "The tensor-core plan (kernel, tile, aligned, splits, k_split, copy_a, copy_b, modelled us, "
      "words, cluster, tile_m) "
      "for M x N x K on a GPU with `sms` SMs running the wgmma / mma kernels as given (tests); "
      "x3: exact float32 in three tf32 passes",
      py::arg("M"), py::arg("N"), py::arg("K"), py::arg("tf32"), py::arg("a_kcontig"),
      py::arg("b_kcontig"), py::arg("a_aligned"), py::arg("b_aligned"), py::arg("sms"),
      py::arg("wgmma"), py::arg("mma"), py::arg("a_words") = true, py::arg("b_words") = true,
      py::arg("a_sectors") = true, py::arg("b_sectors") = true, py::arg("x3") = false);
  m.def(
      "_cuda_exact_plan",
      [](const at::Tensor& a, const at::Tensor& b) {
#ifdef WITH_CUDA
        const c10::cuda::CUDAGuard guard(a.device());
        const at::Tensor ca = lltm_ext::gemm::cuda_operand(a), cb = lltm_ext::gemm::cuda_operand(b);
        const lltm_ext::gemm::Choice ch =
            lltm_ext::gemm::cuda_choose(ca.size(0), cb.size(1), ca.size(1),
                                        lltm_ext::gemm::operand_of(cb, /*is_a=*/false).k_contig);
        const lltm_ext::gemm::ExactPlan e =
            lltm_ext::gemm::cuda_exact_plan(ca, cb, ch.cost / lltm_ext::gemm::kSimtUnitsPerUs);
        return std::make_tuple(e.tensor, e.simt_us, lltm_ext::gemm::plan_tuple(e.plan));
#else
        TORCH_CHECK(false, "lltm_ext.gemm: this build has no CUDA kernels.");
        return std::make_tuple(false, 0.0, lltm_ext::gemm::plan_tuple({}));
#endif
      },
      "Exact float32 a @ b on the current CUDA device where the SIMT tiles would run: (whether it "
      "takes the tensor cores in three tf32 passes, the SIMT schedule's modelled microseconds, "
      "the tensor-core plan) (a, b float32 CUDA tensors; LLTM_EXT_GEMM_F32 applies)",
      py::arg("a"), py::arg("b"));
  m.def(
      "_cuda_stream_k",
      [](int64_t M, int64_t N, int64_t K, bool tf32, int64_t sms) {
        TORCH_CHECK(M >= 0 && N >= 0 && K >= 0 && sms > 0 && sms <= 4096,
                    "lltm_ext.gemm: _cuda_stream_k takes sizes >= 0 and 1-4096 SMs.");
#ifdef WITH_CUDA
        return lltm_ext::gemm::cuda_stream_k_split(M, N, K, tf32, static_cast<int>(sms));
#else
        TORCH_CHECK(false, "lltm_ext.gemm: this build has no CUDA kernels.");
        return std::tuple<int64_t, int64_t, int64_t>{};
#endif
      },
      "How the wgmma kernel's 128 x 256 tiles of an M x N x K product (16-bit, or TF32 where tf32 "
      "is true) run on `sms` SMs under the Stream-K switch as set: (whole-tile tiles, Stream-K "
      "tiles, Stream-K blocks)",
      py::arg("M"), py::arg("N"), py::arg("K"), py::arg("tf32"), py::arg("sms"));
  m.def(
      "_cuda_wgmma_swaps",
      [](const at::Tensor& a, const at::Tensor& b, const std::optional<at::Tensor>& out) {
#ifdef WITH_CUDA
        const c10::cuda::CUDAGuard guard(a.device());
        const at::Tensor ca = lltm_ext::gemm::cuda_operand(a), cb = lltm_ext::gemm::cuda_operand(b);
        const at::Tensor c = out ? *out : at::empty({ca.size(0), cb.size(1)}, ca.options());
        return lltm_ext::gemm::wgmma_swaps(ca, cb, c) &&
               lltm_ext::gemm::cuda_tc_plan(cb.t(), ca.t()).kernel ==
                   lltm_ext::gemm::TcKernel::kWgmma;
#else
        TORCH_CHECK(false, "lltm_ext.gemm: this build has no CUDA kernels.");
        return false;
#endif
      },
      "Whether gemm(a, b, out=out) on the tensor cores runs as its transpose on the wgmma kernel "
      "(_set_gemm_wgmma_knobs' swap; a, b CUDA tensors; out: a contiguous output, else a new one)",
      py::arg("a"), py::arg("b"), py::arg("out") = py::none());
  m.def(
      "_cuda_tc_plan",
      [](const at::Tensor& a, const at::Tensor& b) {
#ifdef WITH_CUDA
        const c10::cuda::CUDAGuard guard(a.device());
        return lltm_ext::gemm::plan_tuple(lltm_ext::gemm::cuda_tc_plan(
            lltm_ext::gemm::cuda_operand(a), lltm_ext::gemm::cuda_operand(b)));
#else
        TORCH_CHECK(false, "lltm_ext.gemm: this build has no CUDA kernels.");
        return lltm_ext::gemm::plan_tuple({});
#endif
      },
      "The tensor-core plan gemm(a, b) runs on the current CUDA device (a, b CUDA tensors; kernel "
      "'none': the SIMT kernels)",
      py::arg("a"), py::arg("b"));
  m.def("_cpu_kernel_isa", &lltm_ext::gemm::cpu_kernel_isa,
        "The ISA of the kernel copy the last CPU GEMM ran ('' before the first)");
  m.def("_set_cpu_knobs", &lltm_ext::gemm::set_cpu_knobs,
        "Force the CPU GEMM's path ('auto', 'packed', 'rows', 'dot', 'direct'), the parts a "
        "product is cut "
        "into for threads (0: from the work), whether bfloat16 may use the AVX-512 BF16 kernels, "
        "the orientation (-1: the heuristic's, 0: C = A B, 1: C^T = B^T A^T) and whether "
        "bfloat16's packed path may run on AMX tiles (tests)",
        py::arg("path") = "auto", py::arg("parts") = 0, py::arg("bf16_dot") = true,
        py::arg("transpose") = -1, py::arg("amx") = true);
  m.def("_cpu_last_run", &lltm_ext::gemm::cpu_last_run,
        "(path, transposed, parts, bf16_dot, amx) of the last CPU GEMM ('' before the first): its "
        "path ('packed', 'rows', 'dot'), whether it computed C^T = B^T A^T, the parts it was cut "
        "into, whether bfloat16 ran on the AVX-512 BF16 kernels, on the AMX tiles");
  lltm_ext::bind_build_info(m);
}
