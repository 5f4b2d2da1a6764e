// CPU kernel of round_ste's forward: a vectorized, parallel element-wise loop.
#include "common/elementwise_cpu.h"
#include "round/round.h"

namespace lltm_ext::round {

void forward_cpu(const at::Tensor& x, const at::Tensor& y) {
  cpu::elementwise::launch(y, Forward<cpu::elementwise::Math>{}, x);
}

}  // namespace lltm_ext::round
