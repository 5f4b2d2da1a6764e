// CPU kernel of round_ste's forward: a vectorized, parallel element-wise loop.
#include "common/elementwise_cpu.h"
#include "round_ste/round_ste.h"

namespace lltm_ext::round_ste {

void forward_cpu(const at::Tensor& x, const at::Tensor& y, elementwise::StridedRows x_rows) {
  cpu::elementwise::launch_unary(y, Forward<cpu::elementwise::Math>{}, x, x_rows);
}

}  // namespace lltm_ext::round_ste
