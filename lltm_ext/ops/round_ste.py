"""round_ste: rounding with a straight-through gradient, on lltm_ext's element-wise kernels.

Forward rounds halves up, y = floor(x + 1/2), computed exactly (0.49999997 -> 0, although
0.49999997 + 0.5 rounds to 1 in float32). torch.round instead rounds halves to even: 0.5 -> 0,
1.5 -> 2, 2.5 -> 2, -0.5 -> -0, where round_ste gives 1, 2, 3, 0. For x in (0, 1) this is
``1 if x >= 0.5 else 0``. Integral values (every |x| >= 2^23 in float32), +-inf and NaN pass
through.

Backward is the straight-through estimator: rounding is treated as the identity, so the incoming
gradient is returned as it is (the same tensor: no kernel, no copy).

The path of a call: ``round_ste(x)`` -> ``RoundSTEFunction`` -> the operator
``torch.ops.lltm_ext.round_ste_forward``, registered by ``src/round_ste/round_ste.cpp`` (checks and
CPU/CUDA dispatch) -> the kernels in ``src/round_ste/``. Eager and compiled calls run the same path.
"""

import torch
from torch import Tensor, nn

from lltm_ext._extension import load_ops, register_fake
from lltm_ext.ops._elementwise import fake_like

__all__ = ["RoundSTE", "RoundSTEFunction", "round_ste"]

_ops = load_ops("round_ste")
round_ste_forward = _ops.round_ste_forward.default
"""``round_ste_forward(x) -> y``: floor(x + 1/2), exactly, of a contiguous x; a new tensor."""

register_fake(_ops, "lltm_ext::round_ste_forward")(fake_like)


class RoundSTEFunction(torch.autograd.Function):
    """Autograd for round_ste: ``RoundSTEFunction.apply(x) -> y``, any shape (non-contiguous x is
    copied); backward returns the incoming gradient unchanged."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        return round_ste_forward(x.contiguous())

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        return grad


def round_ste(x: Tensor) -> Tensor:
    """floor(x + 1/2) element-wise (halves round up), with a straight-through gradient.

    Args:
        x: any shape, float32, float64, float16 or bfloat16, on the CPU or a CUDA device.

    Returns:
        y, x's shape, dtype and device (a new contiguous tensor). Its gradient wrt x is the
        incoming gradient, unchanged (the same tensor).

    Unlike torch.round, which rounds halves to even (2.5 -> 2), halves round up (2.5 -> 3,
    -2.5 -> -2).
    """
    return RoundSTEFunction.apply(x)


class RoundSTE(nn.Module):
    """``RoundSTE()(x) -> round_ste(x)``, x of any shape."""

    def forward(self, x: Tensor) -> Tensor:
        return round_ste(x)
