// Host side of the LLTM cell's CUDA work (CUDA builds only): the gate kernels' launches and the
// small cell's (device guard, current stream, dtype dispatch, launch check).
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>

#include <string>

#include "common/checks.h"
#include "common/cuda_host.h"
#include "common/dispatch.h"
#include "common/env_setting.h"
#include "lltm/lltm.h"
#include "lltm/lltm_launchers.h"

namespace lltm_ext::lltm {

void forward_gates_cuda(const at::Tensor& gates, const at::Tensor& bias, const at::Tensor& old_cell,
                        const at::Tensor& new_h, const at::Tensor& new_cell) {
  const c10::cuda::CUDAGuard guard(old_cell.device());
  LLTM_EXT_DISPATCH_FLOATING(gates.scalar_type(), "lltm_forward_cuda", [&] {
    C10_CUDA_CHECK(launch_forward_gates(
        gates.const_data_ptr<scalar_t>(), data_or_null<scalar_t>(bias),
        old_cell.const_data_ptr<scalar_t>(), new_h.mutable_data_ptr<scalar_t>(),
        new_cell.mutable_data_ptr<scalar_t>(), old_cell.numel(), old_cell.size(1),
        cuda::sm_count(old_cell.get_device()), c10::cuda::getCurrentCUDAStream()));
  });
}

void backward_gates_cuda(const at::Tensor& grad_h, int64_t grad_h_ld,
                         const at::Tensor& grad_h_extra, const at::Tensor& grad_cell,
                         const at::Tensor& new_cell, const at::Tensor& gates,
                         const at::Tensor& bias, const at::Tensor& d_gates,
                         const at::Tensor& d_old_cell, const at::Tensor& d_bias) {
  const c10::cuda::CUDAGuard guard(new_cell.device());
  if (new_cell.numel() == 0) {
    if (d_bias.defined()) {
      d_bias.zero_();  // no rows: a zero gradient
    }
    return;
  }
  const int sms = cuda::sm_count(new_cell.get_device());
  const int64_t batch = new_cell.size(0);
  const int64_t state = new_cell.size(1);
  LLTM_EXT_DISPATCH_FLOATING(new_cell.scalar_type(), "lltm_backward_cuda", [&] {
    using acc_t = cuda::opmath_t<scalar_t>;
    // Scratch for the bias gradient's partial sums (one row per row of blocks), from the caching
    // allocator; a single row of blocks writes d_bias directly.
    const int64_t row_blocks =
        d_bias.defined() ? backward_row_blocks<scalar_t>(batch, state, sms, /*bias_grad=*/true) : 1;
    const at::Tensor bias_sums =
        row_blocks > 1
            ? at::empty({row_blocks, 3 * state},
                        new_cell.options().dtype(at::toOpMathType(new_cell.scalar_type())))
            : at::Tensor();
    C10_CUDA_CHECK(launch_backward_gates(
        grad_h.const_data_ptr<scalar_t>(), grad_h_ld, data_or_null<scalar_t>(grad_h_extra),
        grad_cell.const_data_ptr<scalar_t>(), new_cell.const_data_ptr<scalar_t>(),
        gates.const_data_ptr<scalar_t>(), data_or_null<scalar_t>(bias),
        d_gates.mutable_data_ptr<scalar_t>(), d_old_cell.mutable_data_ptr<scalar_t>(),
        bias_sums.defined() ? bias_sums.mutable_data_ptr<acc_t>() : nullptr,
        d_bias.defined() ? d_bias.mutable_data_ptr<scalar_t>() : nullptr, new_cell.numel(), state,
        sms, c10::cuda::getCurrentCUDAStream()));
  });
}

bool fused_cell_cuda(int64_t batch, int64_t state, int64_t features) {
  const std::string value = env_choice("LLTM_EXT_CELL_PATH");
  if (batch == 0 || state == 0) {
    return false;  // nothing to multiply: the general path's empty results
  }
  // The fused kernels' grid: batch rows in blocks of 8 along gridDim.y; int columns.
  const bool fits = batch <= int64_t{65535} * 8 && 3 * (state + features) <= int64_t{1} << 30;
  if (value == "fused") {
    TORCH_CHECK(fits,
                "lltm_ext.lltm: LLTM_EXT_CELL_PATH=fused, but the fused cell kernels do not "
                "take batch ",
                batch, ", state ", state, ", input_features ", features,
                " (they need batch <= 524280 and 3 * (state + input_features) < 2^30).");
    return true;
  }
  // Auto: where the kernels' serial sums stay short (a weight gradient's over B rows, a gate's over
  // K = S + I columns) and the work is small (fused_cell_cuda's rule, lltm.h).
  return value != "cublas" && fits && batch <= kFusedCellMaxBatch &&
         state + features <= kFusedCellMaxK &&
         batch * 3 * state * (state + features) <= kFusedCellMaxWork;
}

void fused_forward_cuda(const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
                        const at::Tensor& old_h, const at::Tensor& old_cell,
                        const at::Tensor& gates, const at::Tensor& X, const at::Tensor& new_h,
                        const at::Tensor& new_cell) {
  const c10::cuda::CUDAGuard guard(input.device());
  LLTM_EXT_DISPATCH_FLOATING(input.scalar_type(), "lltm_forward_cuda", [&] {
    C10_CUDA_CHECK(launch_fused_forward(
        input.const_data_ptr<scalar_t>(), weights.const_data_ptr<scalar_t>(),
        bias.const_data_ptr<scalar_t>(), old_h.const_data_ptr<scalar_t>(),
        old_cell.const_data_ptr<scalar_t>(), gates.mutable_data_ptr<scalar_t>(),
        X.mutable_data_ptr<scalar_t>(), new_h.mutable_data_ptr<scalar_t>(),
        new_cell.mutable_data_ptr<scalar_t>(), input.size(0), old_h.size(1), input.size(1),
        c10::cuda::getCurrentCUDAStream()));
  });
}

void fused_backward_products_cuda(const at::Tensor& d_gates, const at::Tensor& X,
                                  const at::Tensor& weights, const at::Tensor& d_X,
                                  const at::Tensor& d_weights, const at::Tensor& d_bias) {
  const c10::cuda::CUDAGuard guard(d_gates.device());
  const int64_t state = d_gates.size(1) / 3;
  LLTM_EXT_DISPATCH_FLOATING(d_gates.scalar_type(), "lltm_backward_cuda", [&] {
    C10_CUDA_CHECK(launch_fused_backward_products(
        d_gates.const_data_ptr<scalar_t>(), X.const_data_ptr<scalar_t>(),
        weights.const_data_ptr<scalar_t>(), d_X.mutable_data_ptr<scalar_t>(),
        d_weights.mutable_data_ptr<scalar_t>(), d_bias.mutable_data_ptr<scalar_t>(),
        d_gates.size(0), state, X.size(1) - state, c10::cuda::getCurrentCUDAStream()));
  });
}

}  // namespace lltm_ext::lltm
