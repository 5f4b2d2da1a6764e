// Pieces every op binding shares: dispatch macros, the CPU-only-build error, build info for Python.
#pragma once

// Not <torch/extension.h>, which brings all of torch's C++ API: ATen, pybind11 with torch's tensor
// conversions and torch's version are what a binding needs, in half the parse time
// (docs/build_notes.md).
#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>
#include <torch/version.h>

#include <string>
#include <utility>

#include "common/checks.h"
#include "common/cpu_isa.h"
#include "common/dispatch.h"
#include "common/settings.h"

#define LLTM_EXT_STR_(...) #__VA_ARGS__
#define LLTM_EXT_STR(...) LLTM_EXT_STR_(__VA_ARGS__)

namespace lltm_ext {

constexpr bool kBuiltWithCuda =
#ifdef WITH_CUDA
    true;
#else
    false;
#endif

// Raised when a CUDA tensor reaches an op whose CUDA kernels were not compiled.
[[noreturn]] inline void fail_not_compiled_with_cuda(const char* op) {
  TORCH_CHECK(false, "lltm_ext.", op,
              " got CUDA tensors, but this lltm_ext build has no CUDA kernels (it was built "
              "without CUDA support). Rebuild it where nvcc and a CUDA build of torch are "
              "installed: LLTM_EXT_CUDA=1 pip install --no-build-isolation --force-reinstall "
              "--no-deps lltm_ext (or install a CUDA wheel of lltm_ext).");
  __builtin_unreachable();
}

// Fails before any work when `t` is a CUDA tensor and this build has no CUDA kernels.
inline void check_backend(const at::Tensor& t, const char* op) {
  if (t.is_cuda() && !kBuiltWithCuda) {
    fail_not_compiled_with_cuda(op);
  }
}

// Registers `kernel` for the operator `lltm_ext::<name>` (declared with m.def in the op's
// TORCH_LIBRARY_FRAGMENT) on CPU and CUDA tensors: the kernel checks its inputs and dispatches on
// their device itself. The operators are differentiated only by the C++ Autograd kernel of the
// op's public operator that calls them (lltm_ext::relu over relu_forward / relu_backward, say);
// called directly on tensors that require grad, backward through them raises ("not implemented")
// instead of silently dropping the gradient. `mutates` marks an
// operator with a `Tensor(a!)` argument, whose version counter must be bumped.
template <typename Kernel>
void impl_cpu_cuda(torch::Library& m, const char* name, Kernel kernel, bool mutates = false) {
  m.impl(name, torch::dispatch(c10::DispatchKey::CPU, kernel));
  m.impl(name, torch::dispatch(c10::DispatchKey::CUDA, kernel));
  m.impl(name, torch::dispatch(c10::DispatchKey::Autograd,
                               torch::autograd::autogradNotImplementedFallback()));
  if (mutates) {
    m.impl(name, torch::dispatch(c10::DispatchKey::ADInplaceOrView,
                                 torch::autograd::autogradNotImplementedInplaceOrViewFallback()));
  }
}

// A call of the registered operator `lltm_ext::<name>` (C++ signature `Sig`, as its kernel is
// registered) through torch's C++ dispatcher.
template <typename Sig>
struct OperatorCall;

template <typename Ret, typename... Args>
struct OperatorCall<Ret(Args...)> {
  c10::TypedOperatorHandle<Ret(Args...)> op;
  Ret operator()(Args... args) const { return op.call(std::forward<Args>(args)...); }
};

// Binds `name` in Python to the operator `lltm_ext::<name>` as torch.ops.lltm_ext.<name> runs it,
// through every dispatch key (autograd's fallback, tensor subclasses and dispatch modes, fake
// tensors, the profiler, the tracer) with the GIL released, but without torch.ops's boxing of the
// Python arguments against the schema, which costs as much a call as a small product itself
// (figures: docs/decisions.md#bind-operator). lltm_ext/_extension.py's operator_call() tells
// torch.compile that a call of it is a call of the operator.
template <typename Sig>
void bind_operator(pybind11::module_& m, const char* name, const char* doc) {
  const std::string qualified = std::string("lltm_ext::") + name;
  OperatorCall<Sig> call{
      c10::Dispatcher::singleton().findSchemaOrThrow(qualified.c_str(), "").template typed<Sig>()};
  m.def(name, std::move(call), doc, pybind11::call_guard<pybind11::gil_scoped_release>());
}

// `_settings()`: settings.h's table, one dict a setting (name, op, kind "choice" or "number",
// values as the table writes them, when it is read, what each value forces), for
// lltm_ext.settings() and docs/settings.md. Every module has it (bind_build_info binds it).
inline void bind_settings(pybind11::module_& m) {
  m.def(
      "_settings",
      [] {
        pybind11::list table;
        for (const settings::Setting& s : settings::kSettings) {
          pybind11::dict row;
          row["name"] = std::string(s.name);
          row["op"] = std::string(s.op);
          row["kind"] = s.kind == settings::Kind::kChoice ? "choice" : "number";
          row["values"] = std::string(s.values);
          row["read"] = std::string(s.read);
          row["forces"] = std::string(s.forces);
          table.append(row);
        }
        return table;
      },
      "The LLTM_EXT_* settings the compiled code reads from the environment (src/common/"
      "settings.h): name, op, kind, values, when read, what each value forces.");
}

// `_build_info()`: what this module was compiled with, read by `python -m lltm_ext info`; and
// `_settings()` (bind_settings).
inline void bind_build_info(pybind11::module_& m) {
  bind_settings(m);
  m.def(
      "_build_info",
      [] {
        pybind11::dict info;
        info["op"] = LLTM_EXT_STR(LLTM_EXT_OP);
        info["cuda"] = kBuiltWithCuda;
#ifdef WITH_CUDA
        info["cuda_targets"] = std::string(LLTM_EXT_STR(LLTM_EXT_CUDA_ARCHS));
#else
        info["cuda_targets"] = std::string();
#endif
        info["torch_version"] = std::string(TORCH_VERSION);
        try {
          info["cpu_isa"] = std::string(cpu::isa_name());
        } catch (const c10::Error& e) {  // a bad LLTM_EXT_CPU_ISA: report it, don't fail `info`
          info["cpu_isa"] = std::string("error: ") + e.what_without_backtrace();
        }
        return info;
      },
      "What this module was compiled with (op name, CUDA kernels or not, their targets), and the "
      "ISA its CPU element-wise loops run with here.");
}

}  // namespace lltm_ext
