// CPU entry of lltm_ext.gemm: tensors to a cpugemm::Problem, the ISA copy that runs it, and the
// knobs and record of the last call that the tests use.
//
// The kernels (gemm/cpu/*.h) are compiled three times, for the baseline ISA, AVX2 + FMA + F16C
// and AVX-512 (gemm_cpu_baseline.cpp, gemm_cpu_avx2.cpp, gemm_cpu_avx512.cpp); cpu::isa() (the
// CPU, capped by LLTM_EXT_CPU_ISA) picks the copy, as for the element-wise loops. docs/gemm_cpu.md
// describes the paths and how they were chosen.
#include <ATen/ATen.h>

#include <atomic>
#include <string>
#include <tuple>

#include "common/cpu_isa.h"
#include "gemm/cpu/api.h"
#include "gemm/gemm.h"

namespace lltm_ext::gemm {
namespace {

using cpugemm::Path;

// The ISA of the copy the last GEMM ran (cpu::Isa as an int; -1: none yet), for cpu_kernel_isa().
std::atomic<int> g_last_isa{-1};

// Test knobs (cpugemm::Knobs), and the last call's cpugemm::Report packed into an int (-1: none).
std::atomic<int> g_knob_path{static_cast<int>(Path::kAuto)};
std::atomic<int> g_knob_parts{0};
std::atomic<bool> g_knob_bf16_dot{true};
std::atomic<int> g_knob_transpose{-1};
std::atomic<bool> g_knob_amx{true};
std::atomic<int64_t> g_last_report{-1};

int64_t pack_report(const cpugemm::Report& r) {
  return static_cast<int64_t>(r.path) | (int64_t{r.transposed} << 4) | (int64_t{r.bf16_dot} << 5) |
         (int64_t{r.amx} << 6) | (static_cast<int64_t>(r.parts) << 8);
}

cpugemm::Dtype dtype_of(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return cpugemm::Dtype::kFloat;
    case at::kDouble:
      return cpugemm::Dtype::kDouble;
    case at::kBFloat16:
      return cpugemm::Dtype::kBFloat16;
    case at::kHalf:
      return cpugemm::Dtype::kHalf;
    default:
      TORCH_CHECK(false, "lltm_ext.gemm: no CPU kernel for dtype ", t, ".");
  }
}

// The copy for cpu::isa(); the AVX2 copy also needs F16C (every AVX2 CPU known has it).
cpu::Isa kernel_isa() {
  static const cpu::Isa chosen = [] {
    const cpu::Isa isa = cpu::isa();
#if LLTM_EXT_CPU_X86_COPIES
    if (isa != cpu::Isa::kBaseline && !__builtin_cpu_supports("f16c")) return cpu::Isa::kBaseline;
#endif
    return isa;
  }();
  return chosen;
}

}  // namespace

const char* cpugemm::path_name(Path path) {
  switch (path) {
    case Path::kPacked:
      return "packed";
    case Path::kRows:
      return "rows";
    case Path::kDot:
      return "dot";
    case Path::kDirect:
      return "direct";
    default:
      return "auto";
  }
}

std::string cpu_kernel_isa() {
  const int isa = g_last_isa.load(std::memory_order_relaxed);
  return isa < 0 ? "" : cpu::isa_name(static_cast<cpu::Isa>(isa));
}

void gemm_cpu(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
  if (c.numel() == 0) return;
  if (a.size(1) == 0) {
    c.zero_();
    return;
  }
  gemm_cpu(a.scalar_type(),
           cpugemm::Problem{a.size(0), b.size(1), a.size(1), a.const_data_ptr(), a.stride(0),
                            a.stride(1), b.const_data_ptr(), b.stride(0), b.stride(1), c.data_ptr(),
                            c.stride(0), c.stride(1)});
}

void gemm_cpu(at::ScalarType dtype_in, const cpugemm::Problem& p) {
  cpugemm::Knobs knobs;
  knobs.path = static_cast<Path>(g_knob_path.load(std::memory_order_relaxed));
  knobs.parts = g_knob_parts.load(std::memory_order_relaxed);
  knobs.bf16_dot = g_knob_bf16_dot.load(std::memory_order_relaxed);
  knobs.transpose = g_knob_transpose.load(std::memory_order_relaxed);
  knobs.amx = g_knob_amx.load(std::memory_order_relaxed);
  const cpugemm::Dtype dtype = dtype_of(dtype_in);
  const cpu::Isa isa = kernel_isa();
  g_last_isa.store(static_cast<int>(isa), std::memory_order_relaxed);
  cpugemm::Report report;
  switch (isa) {
    case cpu::Isa::kAvx512:
      report = cpugemm::run_avx512(dtype, p, knobs);
      break;
    case cpu::Isa::kAvx2:
      report = cpugemm::run_avx2(dtype, p, knobs);
      break;
    default:
      report = cpugemm::run_baseline(dtype, p, knobs);
  }
  g_last_report.store(pack_report(report), std::memory_order_relaxed);
}

void set_cpu_knobs(const std::string& path, int64_t parts, bool bf16_dot, int64_t transpose,
                   bool amx) {
  Path which = Path::kAuto;
  if (path == "packed") {
    which = Path::kPacked;
  } else if (path == "rows") {
    which = Path::kRows;
  } else if (path == "dot") {
    which = Path::kDot;
  } else if (path == "direct") {
    which = Path::kDirect;
  } else {
    TORCH_CHECK(path == "auto", "lltm_ext.gemm: the CPU path must be 'auto', 'packed', 'rows', ",
                "'dot' or 'direct', not '", path, "'.");
  }
  TORCH_CHECK(parts >= 0 && parts <= 4096, "lltm_ext.gemm: parts must be in [0, 4096], not ", parts,
              ".");
  g_knob_path.store(static_cast<int>(which));
  g_knob_parts.store(static_cast<int>(parts));
  TORCH_CHECK(transpose >= -1 && transpose <= 1,
              "lltm_ext.gemm: transpose must be -1, 0 or 1, not ", transpose, ".");
  g_knob_bf16_dot.store(bf16_dot);
  g_knob_transpose.store(static_cast<int>(transpose));
  g_knob_amx.store(amx);
}

std::tuple<std::string, bool, int64_t, bool, bool> cpu_last_run() {
  const int64_t r = g_last_report.load(std::memory_order_relaxed);
  if (r < 0) return {"", false, 0, false, false};
  return {cpugemm::path_name(static_cast<Path>(r & 15)), ((r >> 4) & 1) != 0, r >> 8,
          ((r >> 5) & 1) != 0, ((r >> 6) & 1) != 0};
}

}  // namespace lltm_ext::gemm
