// The bindings of the element-wise ops, written once: input checks, output allocation, dispatch,
// the public operator with its C++ autograd, and the Python binding.
#pragma once

#include <torch/csrc/autograd/custom_function.h>

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/first_order.h"
#include "common/module.h"
#include "common/strided_rows.h"

// The CUDA launcher of an op (a template over the dtype, defined in its .cu file:
// cudaError_t fn(T* out, const T* in..., int64_t n, cudaStream_t)) as a generic callable where this
// build compiles CUDA kernels, else nullptr (check_backend has rejected CUDA tensors before then).
#ifdef WITH_CUDA
#include "common/cuda_host.h"
#define LLTM_EXT_CUDA_LAUNCH(fn) [](auto... args) { return fn(args...); }
#else
#define LLTM_EXT_CUDA_LAUNCH(fn) nullptr
#endif

namespace lltm_ext::elementwise {

// CPU kernels write every element of their last argument; all tensors dense and laid out alike
// (check_dense, check_same_strides), one shape: the kernels run over numel() elements in memory
// order, whatever order that is. Forward's x may instead be read as strided rows (x_rows), y
// contiguous.
using ForwardKernel = void (*)(const at::Tensor& x, const at::Tensor& y, StridedRows x_rows);
using BackwardKernel = void (*)(const at::Tensor& grad, const at::Tensor& output,
                                const at::Tensor& grad_input);

#ifdef WITH_CUDA
// out = op(inputs...) on out's GPU through `launch` (LLTM_EXT_CUDA_LAUNCH): device guard, current
// stream, dtype dispatch, launch check.
template <typename Launch, typename... Inputs>
void run_cuda(const Launch& launch, const at::Tensor& out, const Inputs&... inputs) {
  const int64_t n = out.numel();
  if (n == 0) {
    return;
  }
  const c10::cuda::CUDAGuard guard(out.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  LLTM_EXT_DISPATCH_FLOATING(out.scalar_type(), "lltm_ext_elementwise", [&] {
    C10_CUDA_CHECK(launch(out.mutable_data_ptr<scalar_t>(),
                          inputs.template const_data_ptr<scalar_t>()..., n, stream));
  });
}
#endif

// The least a row of strided rows holds for the rows kernel: half its block's threads.
constexpr int64_t kMinStridedCols = 128;

// x (not dense) as strided rows (common/strided_rows.h): its dimensions of size 1 dropped, each
// merged into the one before where that one's stride steps over it whole; what is left of at
// most two dimensions, with rows of at least kMinStridedCols whose stride is the smaller (or the
// rows' 0: an expanded row), so that a warp's reads share sectors. Else none (rows 0).
inline StridedRows strided_rows(const at::Tensor& x) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (size, stride), outermost first
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (x.size(d) == 1) {
      continue;
    }
    if (!dims.empty() && dims.back().second == x.stride(d) * x.size(d)) {
      dims.back() = {dims.back().first * x.size(d), x.stride(d)};
    } else {
      dims.emplace_back(x.size(d), x.stride(d));
    }
  }
  if (dims.empty() || dims.size() > 2 || dims.back().first < kMinStridedCols) {
    return {};
  }
  const auto [cols, col_stride] = dims.back();
  if (dims.size() == 2 && dims[0].second != 0 && dims[0].second < col_stride) {
    return {};
  }
  return dims.size() == 1 ? StridedRows{1, cols, 0, col_stride}
                          : StridedRows{dims[0].first, cols, dims[0].second, col_stride};
}

// y = op(x) for x of any shape and layout: a new tensor laid out as x (x's strides) where x is
// dense, as PyTorch's element-wise ops lay out theirs, else contiguous. A dense x runs in memory
// order; one that is not, where it reads as strided rows (strided_rows), in place, else from a
// contiguous copy.
template <typename CudaLaunch>
at::Tensor forward(const char* op, const at::Tensor& x, ForwardKernel cpu,
                   [[maybe_unused]] const CudaLaunch& cuda) {
  check_operand(x, "x");
  check_backend(x, op);
  StridedRows rows;
  if (!x.is_non_overlapping_and_dense()) {
    rows = strided_rows(x);
    if (rows.rows == 0) {
      return forward(op, x.contiguous(), cpu, cuda);
    }
  }
  at::Tensor y = rows.rows == 0 ? at::empty_like(x) : at::empty(x.sizes(), x.options());
  if (x.is_cuda()) {
#ifdef WITH_CUDA
    run_cuda([&](auto... args) { return cuda(args..., rows); }, y, x);
#else
    fail_not_compiled_with_cuda(op);
#endif
  } else {
    cpu(x, y, rows);
  }
  return y;
}

// The gradient wrt x from the incoming gradient and the saved output (one shape, dtype, device,
// layout), laid out as they are.
template <typename CudaLaunch>
at::Tensor backward(const char* op, const at::Tensor& grad, const at::Tensor& output,
                    BackwardKernel cpu, [[maybe_unused]] const CudaLaunch& cuda) {
  check_operand(grad, "grad");
  check_operand(output, "output");
  CHECK_LIKE(grad, output);
  CHECK_SAME_SIZES(grad, output);
  check_dense(output, "output");
  check_same_strides(grad, "grad", output, "output");
  check_backend(output, op);
  at::Tensor grad_input = at::empty_like(output);
  if (output.is_cuda()) {
#ifdef WITH_CUDA
    run_cuda(cuda, grad_input, grad, output);
#else
    fail_not_compiled_with_cuda(op);
#endif
  } else {
    cpu(grad, output, grad_input);
  }
  return grad_input;
}

// ---------------------------------------------------------------------------------------------
// The operators of an element-wise op, from its description `Op`:
//   struct Op {
//     static constexpr const char* kName = "relu";  // lltm_ext::relu, relu_forward, ...
//     static at::Tensor forward(const at::Tensor& x);  // the forward kernel (checks x)
//     // Either a backward kernel from the saved output y (relu, sigmoid):
//     static at::Tensor backward(const at::Tensor& grad, const at::Tensor& y);
//     // or none, for a straight-through gradient (round_ste):
//     static constexpr bool kStraightThrough = true;
//   };
// ---------------------------------------------------------------------------------------------

// Whether Op declares kStraightThrough = true (C++17's detection: torch before 2.12 builds
// extensions as C++17).
template <typename Op, typename = void>
struct StraightThrough : std::false_type {};
template <typename Op>
struct StraightThrough<Op, std::void_t<decltype(Op::kStraightThrough)>>
    : std::bool_constant<Op::kStraightThrough> {};

template <typename Op>
constexpr bool straight_through() {
  return StraightThrough<Op>::value;
}

using Unary = at::Tensor(const at::Tensor&);
using Binary = at::Tensor(const at::Tensor&, const at::Tensor&);

// The operators of an op, looked up once each: the public `<op>`, `<op>_forward`, `<op>_backward`.
enum class Operator { kPublic, kForward, kBackward };

template <typename Op, Operator which>
const auto& find_operator() {
  using Sig = std::conditional_t<which == Operator::kBackward, Binary, Unary>;
  constexpr const char* suffix = which == Operator::kPublic    ? ""
                                 : which == Operator::kForward ? "_forward"
                                                               : "_backward";
  static const c10::TypedOperatorHandle<Sig> op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow((std::string("lltm_ext::") + Op::kName + suffix).c_str(), "")
          .template typed<Sig>();
  return op;
}

// The incoming gradient laid out as the saved output y (usually it is already).
inline at::Tensor laid_out_as(const at::Tensor& grad, const at::Tensor& y) {
  if (grad.strides() == y.strides() && grad.sizes() == y.sizes()) {
    return grad;
  }
  return at::empty_like(y).copy_(grad);
}

// The public operator's CPU and CUDA kernel, the forward without autograd: any layout in, y laid
// out as forward lays it out.
template <typename Op>
at::Tensor public_kernel(const at::Tensor& x) {
  return Op::forward(x);
}

// Autograd of the public operator: forward calls `<op>_forward` and saves its output y; backward
// calls `<op>_backward(grad, y)` (first order only), or passes the gradient through unchanged
// (straight-through). Both operators are called through the dispatcher, not as C++ functions, so
// that torch.compile's tracing, which runs below autograd on fake tensors, records them.
template <typename Op>
struct AutogradFunction : torch::autograd::Function<AutogradFunction<Op>> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x) {
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    at::Tensor y = find_operator<Op, Operator::kForward>().call(x);
    if constexpr (!straight_through<Op>()) {
      ctx->save_for_backward({y});
    }
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    if constexpr (straight_through<Op>()) {
      return grads;  // the same tensor: no kernel, no copy
    } else {
      const at::Tensor y = ctx->get_saved_variables()[0];
      at::Tensor dx;
      {
        const at::AutoDispatchBelowADInplaceOrView below_autograd;
        dx = find_operator<Op, Operator::kBackward>().call(laid_out_as(grads[0], y), y);
      }
      return first_order_only(Op::kName, {dx}, {y});
    }
  }
};

// The public operator's Autograd kernel: the Function where a gradient is wanted, else straight
// on to the kernel below autograd (no graph node made, no Function's cost).
template <typename Op>
at::Tensor autograd_kernel(c10::DispatchKeySet ks, const at::Tensor& x) {
  if (!(at::GradMode::is_enabled() && x.requires_grad()) && !x._fw_grad(/*level=*/0).defined()) {
    return find_operator<Op, Operator::kPublic>().redispatch(ks & c10::after_ADInplaceOrView_keyset,
                                                             x);
  }
  return AutogradFunction<Op>::apply(x);
}

// Defines and registers the operators of `Op`: `lltm_ext::<op>(Tensor x) -> Tensor`, the public
// one (CPU/CUDA kernel, C++ Autograd kernel), and those below it, `<op>_forward(Tensor x)` and
// (unless straight-through) `<op>_backward(Tensor grad, Tensor output)` (CPU/CUDA kernels, not
// differentiable themselves).
template <typename Op>
void define_operators(torch::Library& m) {
  const std::string name = Op::kName;
  m.def((name + "(Tensor x) -> Tensor").c_str());
  m.def((name + "_forward(Tensor x) -> Tensor").c_str());
  impl_cpu_cuda(m, (name + "_forward").c_str(), TORCH_FN(Op::forward));
  if constexpr (!straight_through<Op>()) {
    m.def((name + "_backward(Tensor grad, Tensor output) -> Tensor").c_str());
    impl_cpu_cuda(m, (name + "_backward").c_str(), TORCH_FN(Op::backward));
  }
  m.impl(name.c_str(), torch::dispatch(c10::DispatchKey::CPU, TORCH_FN(public_kernel<Op>)));
  m.impl(name.c_str(), torch::dispatch(c10::DispatchKey::CUDA, TORCH_FN(public_kernel<Op>)));
  m.impl(name.c_str(), torch::dispatch(c10::DispatchKey::Autograd, TORCH_FN(autograd_kernel<Op>)));
}

// The Python module's one function: `<op>(x)`, the public operator through the dispatcher
// (bind_operator), with `doc`.
template <typename Op>
void bind(pybind11::module_& m, const char* doc) {
  bind_operator<Unary>(m, Op::kName, doc);
  bind_build_info(m);
}

}  // namespace lltm_ext::elementwise
