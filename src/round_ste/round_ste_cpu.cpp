// CPU kernel of round_ste's forward: a vectorized, parallel element-wise loop.
#include "common/elementwise_cpu.h"
#include "round_ste/round_ste.h"

namespace lltm_ext::round_ste {

void forward_cpu(const at::Tensor& x, const at::Tensor& y) {
  cpu::elementwise::launch(y, Forward<cpu::elementwise::Math>{}, x);
}

}  // namespace lltm_ext::round_ste
