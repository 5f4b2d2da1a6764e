"""ReLU, y = max(x, 0), on lltm_ext's vectorized element-wise kernels (CPU and CUDA).

Any shape; y has x's shape, dtype and device. Values and gradients are torch.relu's: NaN passes
through forward and backward, and the gradient at x == 0 is 0. Backward works from the saved
output y (as torch's does): dx = grad where y > 0, else 0.

The path of a call: ``relu(x)`` -> ``ReLUFunction`` -> the operators
``torch.ops.lltm_ext.relu_forward`` / ``relu_backward``, registered by ``src/relu/relu.cpp`` (checks
and CPU/CUDA dispatch) -> the kernels in ``src/relu/``. Eager and compiled calls run the same path.
"""

from torch import Tensor, nn

from lltm_ext._extension import load_ops, register_fake
from lltm_ext.ops._elementwise import fake_grad, fake_like, saved_output_function

__all__ = ["ReLU", "ReLUFunction", "relu"]

_ops = load_ops("relu")
relu_forward = _ops.relu_forward.default
"""``relu_forward(x) -> y``: max(x, 0) of a contiguous x (any shape), a new contiguous tensor."""
relu_backward = _ops.relu_backward.default
"""``relu_backward(grad, y) -> dx``: grad where y > 0 (or NaN), else 0; contiguous, one shape."""

register_fake(_ops, "lltm_ext::relu_forward")(fake_like)
register_fake(_ops, "lltm_ext::relu_backward")(fake_grad)

ReLUFunction = saved_output_function(
    "ReLUFunction",
    "relu",
    relu_forward,
    relu_backward,
    """Autograd for ReLU: ``ReLUFunction.apply(x) -> y``, any shape (non-contiguous x copied).""",
    __name__,
)


def relu(x: Tensor) -> Tensor:
    """max(x, 0) element-wise, as torch.relu (NaN stays NaN; gradient 0 at x == 0).

    Args:
        x: any shape, float32, float64, float16 or bfloat16 (half types computed in float), on the
            CPU or a CUDA device.

    Returns:
        y, x's shape, dtype and device (a new contiguous tensor). Differentiable (first order).
    """
    return ReLUFunction.apply(x)


class ReLU(nn.Module):
    """``ReLU()(x) -> relu(x)``, x of any shape."""

    def forward(self, x: Tensor) -> Tensor:
        return relu(x)
