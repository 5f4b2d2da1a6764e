// The run-time settings: every LLTM_EXT_* environment variable the host code reads, in one table
// (its op, its values, when it is read, what each value forces). Code names a setting by its name,
// checked here at compile time: a name that is not in the table does not compile. The reads are
// in env_setting.h; Python's lltm_ext.settings() and docs/settings.md are this table.
#pragma once

#include <array>
#include <cstddef>
#include <stdexcept>
#include <string_view>

namespace lltm_ext::settings {

// kChoice: one of `values`, the first the default (unset or empty: the default). kNumber: an
// integer of `values` ("2|4|8|16") or in its range ("4..24"); unset or empty: the planner's own
// choice (read as 0).
enum class Kind { kChoice, kNumber };

struct Setting {
  std::string_view name;
  std::string_view op;  // the op its error messages name ("lltm_ext": several ops)
  Kind kind;
  std::string_view values;  // "auto|fused|cublas", "2|4|8|16" or "1..64"
  std::string_view read;    // when the environment is read
  std::string_view forces;  // what each value forces
};

inline constexpr std::array kSettings = {
    // ---- lltm ----
    Setting{"LLTM_EXT_CELL_PATH", "lltm_ext.lltm", Kind::kChoice, "auto|fused|cublas", "every call",
            "How a cell on CUDA runs. auto: the fused cell kernels (forward in one kernel, "
            "backward's products in one) where B <= 256, S + I <= 512 and B * 3S * (S + I) <= "
            "2^23, else cat + cuBLAS + the gate kernels; fused: the fused kernels at any size (an "
            "error where they cannot take the shape); cublas: never the fused kernels."},
    Setting{"LLTM_EXT_CUBLAS_UNSPLIT", "lltm_ext", Kind::kChoice, "auto|off", "every call",
            "The cuBLAS products of lltm and lltm_sequence on CUDA. auto: a product whose "
            "split-K pieces cuBLAS would cut shorter than kMinPieceDepth runs through cuBLASLt "
            "with split-K excluded; off: every product as cuBLAS picks it (for measurements and "
            "tests)."},
    // ---- lltm_sequence: the path ----
    Setting{"LLTM_EXT_SEQUENCE_PATH", "lltm_ext.lltm_sequence", Kind::kChoice,
            "auto|small|cluster|wide|tiled|grid|cublas", "every call",
            "The kernels that run the time steps on CUDA. auto: the small-state kernels where "
            "they apply, else the cluster kernels where they apply, else the wide-state kernels "
            "where they pay, else the tiled kernels where they apply, else the fused step kernels, "
            "else cuBLAS; small, cluster, wide, tiled: those kernels (an error where they do not "
            "apply: tests use it to know that they ran); grid: the fused step kernels where they "
            "apply, never the others; cublas: the recurrent product through cuBLAS and the gate "
            "kernel every step."},
    Setting{"LLTM_EXT_SEQUENCE_AT_ONCE", "lltm_ext.LLTMSequence", Kind::kChoice, "auto|off",
            "every forward",
            "Whether LLTMSequence runs calls at once on CUDA streams of its own (eager, outside "
            "CUDA graph capture). auto: both directions of a layer at once, and the layers of a "
            "one-directional model in a wavefront over chunks of at least 32 steps where one "
            "chunk's estimated GPU time covers its calls' host time and its step kernels hold "
            "at most about half the GPU (on those streams the tiled "
            "kernels planned for half the SMs at batches up to 128, also in place of a wide grid "
            "over more than half the GPU); off: one call after another "
            "on the current stream."},
    Setting{"LLTM_EXT_SEQUENCE_AT_ONCE_PARTS", "lltm_ext.LLTMSequence", Kind::kNumber, "2..4",
            "every forward",
            "How many of a wavefront's calls (its layers) LLTMSequence plans to run beside each "
            "other: on the streams of a wavefront of L layers, the tiled kernels' tiles for 1 / "
            "min(L, this) of the SMs (else the largest share that fits, down to a half). Unset: "
            "2; 3 and 4 measured no faster at four layers "
            "(docs/decisions_sequence.md#layers-at-once)."},
    Setting{"LLTM_EXT_SEQUENCE_AT_ONCE_CHUNKS", "lltm_ext.LLTMSequence", Kind::kNumber, "1..8",
            "every forward",
            "How many chunks of steps LLTMSequence's wavefront over a one-directional model's "
            "layers cuts: min(this, T / 32), 1 being no wavefront (still only where a chunk's step "
            "kernels hold at most about half the GPU). Unset: by time, the most (up to 8) whose "
            "estimated GPU time a layer is at least 500 us, so that each covers its calls' host "
            "time (docs/decisions_sequence.md#layers-at-once)."},
    Setting{
        "LLTM_EXT_SEQUENCE_SHORT_STEPS", "lltm_ext.lltm_sequence", Kind::kNumber, "1..64",
        "every call",
        "The fewest steps at which auto runs a call (or a packed batch's stretch of steps "
        "with one batch) on the cluster, wide-state, tiled or fused step kernels: fewer run the "
        "cuBLAS path, whose set-up costs less than those kernels' (the small-state kernels keep "
        "theirs); unset: 4, and 8 where the batch is at least 256 or the state at least 512; 1: "
        "the cuBLAS path is never taken for shortness."},
    Setting{
        "LLTM_EXT_SEQUENCE_MID_BATCH", "lltm_ext.lltm_sequence", Kind::kChoice, "auto|off",
        "every call",
        "Whether auto leaves the wide and tiled kernels for cuBLAS's products every step at 40 "
        "to 128 batch rows and large states (docs/decisions_sequence.md#mid-batch-steps), and "
        "the half types' (and autocast's float32 state's) cluster, wide and tiled kernels up to "
        "39 rows past S = 512 (docs/decisions_sequence.md#half-small-batch-cublas), and "
        "float32's at full precision at 2 to 16 rows from S = 512 on "
        "(docs/decisions_sequence.md#float32-small-batch-cublas). auto: "
        "where those rules say; off: never (the wide and tiled kernels where they apply and "
        "pay, as at other batches), for measuring the rules in a loop of calls, where "
        "cuBLAS's steps cost the host more."},
    Setting{"LLTM_EXT_SEQUENCE_GRAPHS", "lltm_ext.lltm_sequence", Kind::kChoice, "auto|off",
            "every call",
            "Whether the time loops that launch kernels every step (the cuBLAS path and the "
            "mixed-precision loops, 8 steps or more) run as CUDA graphs. auto: a loop seen before "
            "with the same sizes and memory is captured on its second call and replayed from then "
            "on, one launch for all steps (not while the caller's stream is being captured; each "
            "stream they replay on keeps a cuBLAS workspace of torch's size for them); off: every "
            "step launched from the host."},
    Setting{"LLTM_EXT_SEQUENCE_MIXED", "lltm_ext.lltm_sequence", Kind::kChoice, "auto|products|off",
            "every call",
            "A float32 state with float16 or bfloat16 products (the autocast kernel's call for a "
            "float32 state, or the operator's with half input, weights and bias and a float32 "
            "state). On the CPU every product in the half type (each rounded to it, as the "
            "loop's), the gate math and state in float32, which the autocast kernel takes where a "
            "step's product is at least 2^17 multiply-adds (a packed batch: at its mean rows per "
            "step; products: at every size; else the float32 sequence on operands rounded to the "
            "half type). On CUDA (unpacked; packed rows there: as off), auto: on the "
            "cuBLAS path past 32 batch rows, and below 40 rows "
            "past S = 512 (docs/decisions_sequence.md#half-small-batch-cublas), the step products "
            "in the half type with float32 sums and the gate math and state in float32; elsewhere "
            "the float32 time loop (TF32 step products) with the products outside it (input "
            "projections, d input, d W) in the half type, which the autocast kernel takes where "
            "they are large (else the float32 sequence on operands rounded to the half type); "
            "products: the autocast kernel takes it at every size; off: the float32 sequence "
            "with TF32 products on the operands in float32, everywhere."},
    Setting{"LLTM_EXT_SEQUENCE_PRODUCT", "lltm_ext.lltm_sequence", Kind::kChoice,
            "auto|simt|tensor|tf32", "every call",
            "Where the cluster, wide-state and tiled kernels' recurrent product runs. auto: on the "
            "tensor cores, one TF32 pass for the half types, and for float32 where TF32 is allowed "
            "(torch's float32 matmul precision, or the operator's tf32) in the tiled kernels and "
            "past 64 batch rows in the others, else float32 in three passes (3xTF32), float64 on "
            "the SIMT cores; simt: on the SIMT cores always; tensor: as auto (for measurements and "
            "tests); tf32: as auto, but float32 in one TF32 pass at every batch where TF32 is "
            "allowed (to measure)."},
    // ---- lltm_sequence: the kernels' shapes ----
    Setting{"LLTM_EXT_SEQUENCE_SMALL_ROWS", "lltm_ext.lltm_sequence", Kind::kNumber, "1|2|4",
            "every call",
            "Batch rows a block of the small-state kernels takes, where they apply (their blocks "
            "then may take turns); unset: the planner's. For tests and measurements."},
    Setting{"LLTM_EXT_SEQUENCE_CLUSTER_ROWS", "lltm_ext.lltm_sequence", Kind::kNumber, "2|4|8|16",
            "every call",
            "Batch rows per cluster of the cluster kernels; unset: the fewest whose clusters all "
            "run at once, else the most that fit. For measurements."},
    Setting{"LLTM_EXT_SEQUENCE_CLUSTER_BLOCKS", "lltm_ext.lltm_sequence", Kind::kNumber, "1|2|4|8",
            "every call",
            "Blocks per cluster of the cluster kernels; unset: the fewest whose clusters cover "
            "the SMs, with at most 36 state columns a block. For measurements."},
    Setting{"LLTM_EXT_SEQUENCE_WIDE_COLS", "lltm_ext.lltm_sequence", Kind::kNumber, "4|8|16",
            "every call",
            "State columns per block of the wide-state kernels, where those columns fit; unset: "
            "the planner's. For measurements."},
    Setting{"LLTM_EXT_SEQUENCE_TILED_TILES", "lltm_ext.lltm_sequence", Kind::kNumber, "1|2|4|8",
            "every call",
            "M-tiles of 16 batch rows in the tiled kernels' tile; unset: the planner's. For tests "
            "and measurements."},
    Setting{"LLTM_EXT_SEQUENCE_TILED_COLS", "lltm_ext.lltm_sequence", Kind::kNumber, "4..24",
            "every call",
            "State columns of the tiled kernels' tile; unset: the planner's. For tests and "
            "measurements."},
    Setting{"LLTM_EXT_SEQUENCE_TILED_STAGES", "lltm_ext.lltm_sequence", Kind::kNumber, "2..8",
            "every call",
            "Stages of the tiled kernels' ring of x (chunks of 256 / m-tiles k in flight: one "
            "less); unset: the planner's. For tests and measurements."},
    // ---- lltm_sequence: the cuBLAS path's step products, the weight gradients ----
    Setting{"LLTM_EXT_SEQUENCE_STEP_GEMM", "lltm_ext.lltm_sequence", Kind::kChoice,
            "auto|cublas|own|tensor|wgmma", "every call",
            "The step products of the cuBLAS path (float32; own, tensor and wgmma at full "
            "precision only; the other dtypes take cuBLAS's). auto: per product, by batch and "
            "device (with TF32 allowed, ours up to 32 rows, else cuBLAS); cublas: cuBLAS; own: our "
            "split SIMT kernel; tensor: our 3xTF32 kernel; wgmma: our 3xTF32 kernel on Hopper's "
            "tensor cores."},
    Setting{"LLTM_EXT_SEQUENCE_STEP_SPLITS", "lltm_ext.lltm_sequence", Kind::kNumber, "1..64",
            "every call",
            "K slices of our step-product kernels (LLTM_EXT_SEQUENCE_STEP_GEMM); unset: enough "
            "blocks to fill the GPU, each slice at least 64 deep."},
    Setting{
        "LLTM_EXT_SEQUENCE_INPUT_GEMM", "lltm_ext.lltm_sequence", Kind::kChoice,
        "auto|cublas|tensor", "every call",
        "float32's products outside the time loops at full precision (TF32 not allowed): the "
        "input projections of all steps and d input = dG W_i. auto: on Hopper's tensor cores in "
        "three TF32 passes where the product spans at least 4 waves of 128 x 128 tiles and "
        "64 k, else cuBLAS (exact float32 on the SIMT cores); cublas: cuBLAS; tensor: the "
        "Hopper kernel at every size (an error where the GPU does not run it)."},
    Setting{"LLTM_EXT_SEQUENCE_STEP_PAD", "lltm_ext.lltm_sequence", Kind::kChoice, "auto|off",
            "every call",
            "The half types' cuBLAS step products at a state that is not a multiple of 8 (and "
            "under autocast the float32 state's forward ones). auto: in calls of 4 or more steps, "
            "on copies of W_h, h_{t-1} and dG_t padded with zeros to multiples of 8 (cuBLAS runs "
            "its faster kernels there), into float32 sums that the gate kernels add; off: on the "
            "tensors as they are."},
    Setting{"LLTM_EXT_SEQUENCE_WGRAD", "lltm_ext.lltm_sequence", Kind::kChoice,
            "auto|fused|tensor|cublas", "every call",
            "How the weight gradients are computed on CUDA. auto: the fused kernel on the SIMT "
            "cores up to a work bound per dtype, past it float32 on Hopper's tensor cores where "
            "TF32 is not allowed, else cuBLAS; fused: the fused kernel always; tensor: the Hopper "
            "kernel always (float32 only); cublas: three cuBLAS products and a column sum."},
    // ---- gemm ----
    Setting{"LLTM_EXT_GEMM_PATH", "lltm_ext.gemm", Kind::kChoice, "auto|async|staged",
            "the first call (lltm_ext._gemm._set_gemm_path sets it after)",
            "The pipeline of float32's SIMT kernels on CUDA. auto: cp.async where the GPU code "
            "has it (compiled for sm_80 or newer), else register-staged; async: cp.async (an "
            "error where the code has none); staged: register-staged, any GPU."},
    Setting{"LLTM_EXT_GEMM_HALF_PATH", "lltm_ext.gemm", Kind::kChoice,
            "auto|wgmma|mma|simt|wgmma64|wgmma128|wgmma192|wgmma256|mma64|mma128|mma256",
            "the first call (lltm_ext._gemm._set_gemm_half_path sets it after)",
            "The kernel of bfloat16 / float16, and of float32 where TF32 is allowed. auto: the "
            "planner picks among those the device runs; wgmma: Hopper's kernel; mma: the sm_80+ "
            "mma.sync kernel; simt: the tiled SIMT kernel (exact float32); wgmma64/128/192/256: "
            "wgmma with that tile width; mma64/128/256: mma with a 64 x 64, 128 x 128 or 128 x 256 "
            "tile. A forced kernel the device cannot run is an error."},
    Setting{"LLTM_EXT_GEMM_F32", "lltm_ext.gemm", Kind::kChoice, "auto|simt|tensor", "every call",
            "Where exact float32 runs (TF32 not allowed). auto: on Hopper's tensor cores in three "
            "TF32 passes (operands split into tf32 big and small parts, each stage's sums added "
            "in float32) where the planner puts them ahead of the SIMT kernels, else the SIMT "
            "kernels; simt: the SIMT kernels; tensor: the tensor cores wherever the SIMT tiles "
            "would run (an error without Hopper's kernel)."},
    Setting{"LLTM_EXT_GEMM_TF32", "lltm_ext.gemm", Kind::kChoice, "1|0", "every call",
            "1: float32 products may run as TF32 exactly where torch's own float32 matmuls may "
            "(torch.backends.cuda.matmul.allow_tf32, set_float32_matmul_precision); 0: never "
            "(exact float32, for debugging). Any value but 0 reads as 1."},
    // ---- CPU ----
    Setting{"LLTM_EXT_CPU_ISA", "lltm_ext", Kind::kChoice, "auto|avx512|avx2|baseline",
            "the first CPU call that asks (once a process)",
            "The instruction set of the CPU loops (element-wise ops, GEMM). auto: the widest the "
            "CPU runs; avx512, avx2: at most that; baseline: the portable copy."},
};

#if defined(__cpp_consteval)
// C++20: the lookup is consteval, so a name that is not in the table (or of another kind) does
// not compile. These are not constexpr: a consteval lookup that reaches one fails, and the
// compiler's error names it.
#define LLTM_EXT_SETTINGS_CONSTEVAL consteval
void not_a_setting_of_src_common_settings_h();
void a_setting_of_another_kind();
#else
// C++17 (torch before 2.12 builds extensions so): the lookup is constexpr, and a wrong name
// throws where it is read; the C++20 builds of CI and the wheels refuse it when compiling.
#define LLTM_EXT_SETTINGS_CONSTEVAL constexpr
inline void not_a_setting_of_src_common_settings_h() {
  throw std::logic_error("lltm_ext: a setting that src/common/settings.h does not list");
}
inline void a_setting_of_another_kind() {
  throw std::logic_error("lltm_ext: a setting read as the other kind (choice / number)");
}
#endif

LLTM_EXT_SETTINGS_CONSTEVAL std::size_t index_of(std::string_view name, Kind kind) {
  for (std::size_t i = 0; i < kSettings.size(); ++i) {
    if (kSettings[i].name == name) {
      if (kSettings[i].kind != kind) {
        a_setting_of_another_kind();
      }
      return i;
    }
  }
  not_a_setting_of_src_common_settings_h();
  return 0;
}

// A setting named in code: Key<Kind::kChoice> k = "LLTM_EXT_CELL_PATH" compiles only for a name of
// the table, of that kind.
template <Kind K>
struct Key {
  std::size_t index;
  LLTM_EXT_SETTINGS_CONSTEVAL Key(const char* name)
      : index(index_of(name, K)) {}  // NOLINT: implicit on purpose
  constexpr const Setting& operator*() const { return kSettings[index]; }
  constexpr const Setting* operator->() const { return &kSettings[index]; }
};
using ChoiceKey = Key<Kind::kChoice>;
using NumberKey = Key<Kind::kNumber>;

// The i-th of a setting's '|'-separated values ("" past the last).
constexpr std::string_view value_at(const Setting& s, std::size_t i) {
  std::string_view rest = s.values;
  for (; i > 0; --i) {
    const std::size_t bar = rest.find('|');
    if (bar == std::string_view::npos) {
      return {};
    }
    rest.remove_prefix(bar + 1);
  }
  return rest.substr(0, rest.find('|'));
}

constexpr std::size_t value_count(const Setting& s) {
  std::size_t n = 1;
  for (const char c : s.values) {
    n += c == '|' ? 1 : 0;
  }
  return n;
}

// The table's own rules, checked when it compiles: names unique and LLTM_EXT_*, values not empty
// and distinct; a number setting's values (or its range's ends) integers in 1 .. 64, as
// env_number reads them.
constexpr bool is_int_in_1_64(std::string_view text) {
  int v = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') {
      return false;
    }
    v = v * 10 + (c - '0');
  }
  return !text.empty() && text[0] != '0' && v >= 1 && v <= 64;
}

constexpr bool table_is_well_formed() {
  for (std::size_t i = 0; i < kSettings.size(); ++i) {
    const Setting& s = kSettings[i];
    if (s.name.substr(0, 9) != "LLTM_EXT_" || s.op.empty() || s.read.empty() || s.forces.empty()) {
      return false;
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (kSettings[j].name == s.name) {
        return false;
      }
    }
    const std::size_t dots = s.values.find("..");
    if (dots != std::string_view::npos) {
      if (s.kind != Kind::kNumber || !is_int_in_1_64(s.values.substr(0, dots)) ||
          !is_int_in_1_64(s.values.substr(dots + 2))) {
        return false;
      }
      continue;
    }
    for (std::size_t a = 0; a < value_count(s); ++a) {
      if (value_at(s, a).empty() || (s.kind == Kind::kNumber && !is_int_in_1_64(value_at(s, a)))) {
        return false;
      }
      for (std::size_t b = 0; b < a; ++b) {
        if (value_at(s, a) == value_at(s, b)) {
          return false;
        }
      }
    }
  }
  return true;
}
static_assert(table_is_well_formed(), "settings.h: a setting breaks the table's rules (above)");

}  // namespace lltm_ext::settings
