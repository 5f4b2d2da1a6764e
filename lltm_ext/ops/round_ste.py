"""round_ste: rounding with a straight-through gradient, on lltm_ext's element-wise kernels.

Forward rounds halves up, y = floor(x + 1/2), computed exactly (0.49999997 -> 0, although
0.49999997 + 0.5 rounds to 1 in float32). torch.round instead rounds halves to even: 0.5 -> 0,
1.5 -> 2, 2.5 -> 2, -0.5 -> -0, where round_ste gives 1, 2, 3, 0. For x in (0, 1) this is
``1 if x >= 0.5 else 0``. Integral values (every |x| >= 2^23 in float32), +-inf and NaN pass
through.

Backward is the straight-through estimator: rounding is treated as the identity, so the incoming
gradient is returned as it is (the same tensor: no kernel, no copy).

The path of a call: ``round_ste(x)`` -> the operator ``torch.ops.lltm_ext.round_ste``, called
through its module's binding (``lltm_ext._round_ste.round_ste``: PyTorch's C++ dispatcher without
``torch.ops``'s Python boxing; torch.compile sees the operator), registered by
``src/round_ste/round_ste.cpp`` with its autograd in C++ (``src/common/elementwise_binding.h``) ->
the operator ``round_ste_forward`` (checks and CPU/CUDA dispatch) -> the kernels in
``src/round_ste/``. Eager and compiled calls run the same path.
"""

from torch import Tensor, nn

from lltm_ext._extension import load_ops, operator_call, register_fake
from lltm_ext.ops._elementwise import fake_like

__all__ = ["RoundSTE", "RoundSTEFunction", "round_ste"]

_ops = load_ops("round_ste")
round_ste_op = _ops.round_ste.default
"""``round_ste(x) -> y``: the public operator, any layout, with its straight-through autograd in
C++."""
round_ste_forward = _ops.round_ste_forward.default
"""``round_ste_forward(x) -> y``: floor(x + 1/2), exactly, of a dense x; a new tensor like x."""
_round_ste_call = operator_call("round_ste", "round_ste", round_ste_op)

register_fake(_ops, "lltm_ext::round_ste")(fake_like)
register_fake(_ops, "lltm_ext::round_ste_forward")(fake_like)


class RoundSTEFunction:
    """The name of round_ste's former autograd.Function: ``RoundSTEFunction.apply(x) -> y`` is
    :func:`round_ste` (the autograd is C++, in the operator ``torch.ops.lltm_ext.round_ste``:
    backward returns the incoming gradient unchanged)."""

    @staticmethod
    def apply(x: Tensor) -> Tensor:
        return round_ste(x)


def round_ste(x: Tensor) -> Tensor:
    """floor(x + 1/2) element-wise (halves round up), with a straight-through gradient.

    Args:
        x: any shape, float32, float64, float16 or bfloat16, on the CPU or a CUDA device.

    Returns:
        y, x's shape, dtype and device: a new tensor with x's strides where x is dense (a
        transposed or permuted view), else contiguous. Its gradient wrt x is the
        incoming gradient, unchanged (the same tensor).

    Unlike torch.round, which rounds halves to even (2.5 -> 2), halves round up (2.5 -> 3,
    -2.5 -> -2).
    """
    return _round_ste_call(x)


class RoundSTE(nn.Module):
    """``RoundSTE()(x) -> round_ste(x)``, x of any shape."""

    def forward(self, x: Tensor) -> Tensor:
        return round_ste(x)
