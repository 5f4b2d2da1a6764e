"""ReLU, y = max(x, 0), on lltm_ext's vectorized element-wise kernels (CPU and CUDA).

Any shape; y has x's shape, dtype and device. Values and gradients are torch.relu's: NaN passes
through forward and backward, and the gradient at x == 0 is 0. Backward works from the saved
output y (as torch's does): dx = grad where y > 0, else 0.

The path of a call: ``relu(x)`` -> the operator ``torch.ops.lltm_ext.relu``, called through its
module's binding (``lltm_ext._relu.relu``: PyTorch's C++ dispatcher without ``torch.ops``'s Python
boxing; torch.compile sees the operator), registered by ``src/relu/relu.cpp`` with its autograd in
C++ (``src/common/elementwise_binding.h``: no Python runs in forward or backward) -> the operators
``relu_forward`` / ``relu_backward`` (checks and CPU/CUDA dispatch) -> the kernels in
``src/relu/``. Eager and compiled calls run the same path.
"""

from torch import Tensor, nn

from lltm_ext._extension import load_ops, operator_call, register_fake
from lltm_ext.ops._elementwise import fake_grad, fake_like

__all__ = ["ReLU", "ReLUFunction", "relu"]

_ops = load_ops("relu")
relu_op = _ops.relu.default
"""``relu(x) -> y``: the public operator, any layout, with its autograd in C++."""
relu_forward = _ops.relu_forward.default
"""``relu_forward(x) -> y``: max(x, 0) of a dense x (any shape), a new tensor laid out as x."""
relu_backward = _ops.relu_backward.default
"""``relu_backward(grad, y) -> dx``: grad where y > 0 (or NaN), else 0; one shape and layout."""
_relu_call = operator_call("relu", "relu", relu_op)

register_fake(_ops, "lltm_ext::relu")(fake_like)
register_fake(_ops, "lltm_ext::relu_forward")(fake_like)
register_fake(_ops, "lltm_ext::relu_backward")(fake_grad)


class ReLUFunction:
    """The name of ReLU's former autograd.Function: ``ReLUFunction.apply(x) -> y`` is
    :func:`relu` (the autograd is C++, in the operator ``torch.ops.lltm_ext.relu``)."""

    @staticmethod
    def apply(x: Tensor) -> Tensor:
        return relu(x)


def relu(x: Tensor) -> Tensor:
    """max(x, 0) element-wise, as torch.relu (NaN stays NaN; gradient 0 at x == 0).

    Args:
        x: any shape, float32, float64, float16 or bfloat16 (half types computed in float), on the
            CPU or a CUDA device.

    Returns:
        y, x's shape, dtype and device: a new tensor with x's strides where x is dense (a
        transposed or permuted view, as torch.relu keeps it), else contiguous. Differentiable
        (first order).
    """
    return _relu_call(x)


class ReLU(nn.Module):
    """``ReLU()(x) -> relu(x)``, x of any shape."""

    def forward(self, x: Tensor) -> Tensor:
        return relu(x)
