// CPU kernels of the LLTM cell: the gate math fused into one loop, parallel across the batch.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>

#include "common/dispatch.h"
#include "lltm/lltm.h"

namespace lltm_ext::lltm {

namespace {
// Rows per parallel task: about 32K elements of work each.
int64_t grain(int64_t state) {
  return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, state));
}
}  // namespace

void forward_gates_cpu(const at::Tensor& gates, const at::Tensor& old_cell, const at::Tensor& new_h,
                       const at::Tensor& new_cell, const at::Tensor& input_gate,
                       const at::Tensor& output_gate, const at::Tensor& candidate_cell) {
  const int64_t batch = old_cell.size(0);
  const int64_t state = old_cell.size(1);
  if (batch * state == 0) {
    return;
  }
  LLTM_EXT_DISPATCH_FLOATING(gates.scalar_type(), "lltm_forward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* g = gates.const_data_ptr<scalar_t>();
    const scalar_t* c = old_cell.const_data_ptr<scalar_t>();
    scalar_t* h_out = new_h.data_ptr<scalar_t>();
    scalar_t* c_out = new_cell.data_ptr<scalar_t>();
    scalar_t* i_out = input_gate.data_ptr<scalar_t>();
    scalar_t* o_out = output_gate.data_ptr<scalar_t>();
    scalar_t* z_out = candidate_cell.data_ptr<scalar_t>();
    at::parallel_for(0, batch, grain(state), [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        const scalar_t* gb = g + b * 3 * state;
        for (int64_t s = 0; s < state; ++s) {
          const int64_t i = b * state + s;
          const auto r = forward_element<acc_t>(gb[s], gb[state + s], gb[2 * state + s], c[i]);
          h_out[i] = r.new_h;
          c_out[i] = r.new_cell;
          i_out[i] = r.input_gate;
          o_out[i] = r.output_gate;
          z_out[i] = r.candidate_cell;
        }
      }
    });
  });
}

void backward_gates_cpu(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                        const at::Tensor& new_cell, const at::Tensor& input_gate,
                        const at::Tensor& output_gate, const at::Tensor& candidate_cell,
                        const at::Tensor& d_gates, const at::Tensor& d_old_cell) {
  const int64_t batch = new_cell.size(0);
  const int64_t state = new_cell.size(1);
  if (batch * state == 0) {
    return;
  }
  LLTM_EXT_DISPATCH_FLOATING(new_cell.scalar_type(), "lltm_backward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* gh = grad_h.const_data_ptr<scalar_t>();
    const scalar_t* gc = grad_cell.const_data_ptr<scalar_t>();
    const scalar_t* nc = new_cell.const_data_ptr<scalar_t>();
    const scalar_t* ig = input_gate.const_data_ptr<scalar_t>();
    const scalar_t* og = output_gate.const_data_ptr<scalar_t>();
    const scalar_t* cc = candidate_cell.const_data_ptr<scalar_t>();
    scalar_t* dg = d_gates.data_ptr<scalar_t>();
    scalar_t* dc = d_old_cell.data_ptr<scalar_t>();
    at::parallel_for(0, batch, grain(state), [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        scalar_t* dgb = dg + b * 3 * state;
        for (int64_t s = 0; s < state; ++s) {
          const int64_t i = b * state + s;
          const auto r = backward_element<acc_t>(gh[i], gc[i], nc[i], ig[i], og[i], cc[i]);
          dc[i] = r.d_old_cell;
          dgb[s] = r.d_z_i;
          dgb[state + s] = r.d_z_o;
          dgb[2 * state + s] = r.d_z_c;
        }
      }
    });
  });
}

}  // namespace lltm_ext::lltm
