"""Sigmoid, y = 1 / (1 + exp(-x)), on lltm_ext's vectorized element-wise kernels (CPU and CUDA).

Any shape; y has x's shape, dtype and device. Numerically stable: for large |x| the result
saturates to exactly 0 or 1, never inf or NaN (x = +-1000 in every dtype). Backward works from the
saved output y: dx = grad * y * (1 - y), as torch.sigmoid's.

The path of a call: ``sigmoid(x)`` -> the operator ``torch.ops.lltm_ext.sigmoid``, called through
its module's binding (``lltm_ext._sigmoid.sigmoid``: PyTorch's C++ dispatcher without
``torch.ops``'s Python boxing; torch.compile sees the operator), registered by
``src/sigmoid/sigmoid.cpp`` with its autograd in C++ (``src/common/elementwise_binding.h``: no
Python runs in forward or backward) -> the operators ``sigmoid_forward`` / ``sigmoid_backward``
(checks and CPU/CUDA dispatch) -> the kernels in ``src/sigmoid/``. Eager and compiled calls run
the same path.
"""

from torch import Tensor, nn

from lltm_ext._extension import load_ops, operator_call, register_fake
from lltm_ext.ops._elementwise import fake_grad, fake_like

__all__ = ["Sigmoid", "SigmoidFunction", "sigmoid"]

_ops = load_ops("sigmoid")
sigmoid_op = _ops.sigmoid.default
"""``sigmoid(x) -> y``: the public operator, any layout, with its autograd in C++ (saves y)."""
sigmoid_forward = _ops.sigmoid_forward.default
"""``sigmoid_forward(x) -> y``: 1 / (1 + exp(-x)) of a dense x, a new tensor laid out as x."""
sigmoid_backward = _ops.sigmoid_backward.default
"""``sigmoid_backward(grad, y) -> dx``: grad * y * (1 - y); one shape and layout."""
_sigmoid_call = operator_call("sigmoid", "sigmoid", sigmoid_op)

register_fake(_ops, "lltm_ext::sigmoid")(fake_like)
register_fake(_ops, "lltm_ext::sigmoid_forward")(fake_like)
register_fake(_ops, "lltm_ext::sigmoid_backward")(fake_grad)


class SigmoidFunction:
    """The name of sigmoid's former autograd.Function: ``SigmoidFunction.apply(x) -> y`` is
    :func:`sigmoid` (the autograd is C++, in the operator ``torch.ops.lltm_ext.sigmoid``)."""

    @staticmethod
    def apply(x: Tensor) -> Tensor:
        return sigmoid(x)


def sigmoid(x: Tensor) -> Tensor:
    """1 / (1 + exp(-x)) element-wise, as torch.sigmoid, stable for any x.

    Args:
        x: any shape, float32, float64, float16 or bfloat16 (half types computed in float), on the
            CPU or a CUDA device.

    Returns:
        y, x's shape, dtype and device: a new tensor with x's strides where x is dense (a
        transposed or permuted view, as torch.sigmoid keeps it), else contiguous. Differentiable
        (first order).
    """
    return _sigmoid_call(x)


class Sigmoid(nn.Module):
    """``Sigmoid()(x) -> sigmoid(x)``, x of any shape."""

    def forward(self, x: Tensor) -> Tensor:
        return sigmoid(x)
