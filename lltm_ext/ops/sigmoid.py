"""Sigmoid, y = 1 / (1 + exp(-x)), on lltm_ext's vectorized element-wise kernels (CPU and CUDA).

Any shape; y has x's shape, dtype and device. Numerically stable: for large |x| the result
saturates to exactly 0 or 1, never inf or NaN (x = +-1000 in every dtype). Backward works from the
saved output y: dx = grad * y * (1 - y), as torch.sigmoid's.

The path of a call: ``sigmoid(x)`` -> ``SigmoidFunction`` -> the operators
``torch.ops.lltm_ext.sigmoid_forward`` / ``sigmoid_backward``, registered by
``src/sigmoid/sigmoid.cpp`` (checks and CPU/CUDA dispatch) -> the kernels in ``src/sigmoid/``.
Eager and compiled calls run the same path.
"""

from torch import Tensor, nn

from lltm_ext._extension import load_ops, register_fake
from lltm_ext.ops._elementwise import fake_grad, fake_like, saved_output_function

__all__ = ["Sigmoid", "SigmoidFunction", "sigmoid"]

_ops = load_ops("sigmoid")
sigmoid_forward = _ops.sigmoid_forward.default
"""``sigmoid_forward(x) -> y``: 1 / (1 + exp(-x)) of a contiguous x, a new contiguous tensor."""
sigmoid_backward = _ops.sigmoid_backward.default
"""``sigmoid_backward(grad, y) -> dx``: grad * y * (1 - y); contiguous, one shape."""

register_fake(_ops, "lltm_ext::sigmoid_forward")(fake_like)
register_fake(_ops, "lltm_ext::sigmoid_backward")(fake_grad)

SigmoidFunction = saved_output_function(
    "SigmoidFunction",
    "sigmoid",
    sigmoid_forward,
    sigmoid_backward,
    """Autograd for sigmoid: ``SigmoidFunction.apply(x) -> y``, any shape (non-contiguous x is
    copied); saves y for backward.""",
    __name__,
)


def sigmoid(x: Tensor) -> Tensor:
    """1 / (1 + exp(-x)) element-wise, as torch.sigmoid, stable for any x.

    Args:
        x: any shape, float32, float64, float16 or bfloat16 (half types computed in float), on the
            CPU or a CUDA device.

    Returns:
        y, x's shape, dtype and device (a new contiguous tensor). Differentiable (first order).
    """
    return SigmoidFunction.apply(x)


class Sigmoid(nn.Module):
    """``Sigmoid()(x) -> sigmoid(x)``, x of any shape."""

    def forward(self, x: Tensor) -> Tensor:
        return sigmoid(x)
