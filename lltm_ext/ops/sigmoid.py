"""Sigmoid, y = 1 / (1 + exp(-x)), on lltm_ext's vectorized element-wise kernels (CPU and CUDA).

Any shape; y has x's shape, dtype and device. Numerically stable: for large |x| the result
saturates to exactly 0 or 1, never inf or NaN (x = +-1000 in every dtype). Backward works from the
saved output y: dx = grad * y * (1 - y), as torch.sigmoid's.
"""

# No `from __future__ import annotations` here: torch.library reads the annotations at runtime.

import torch
from torch import Tensor, nn

from lltm_ext._extension import load_extension
from lltm_ext.ops._elementwise import bench_cases, fake_grad, fake_like, saved_output_function

__all__ = ["Sigmoid", "SigmoidFunction", "sigmoid"]


# ----------------------------------------------------------------------------------------------
# torch.library ops: what torch.compile sees (no graph break), checked by opcheck.
# ----------------------------------------------------------------------------------------------


@torch.library.custom_op("lltm_ext::sigmoid_forward", mutates_args=(), device_types=("cpu", "cuda"))
def sigmoid_forward(x: Tensor) -> Tensor:
    """1 / (1 + exp(-x)) of a contiguous x (any shape): a new contiguous tensor."""
    return load_extension("sigmoid").forward(x)


@torch.library.custom_op(
    "lltm_ext::sigmoid_backward", mutates_args=(), device_types=("cpu", "cuda")
)
def sigmoid_backward(grad: Tensor, output: Tensor) -> Tensor:
    """grad * output * (1 - output); grad and output contiguous, one shape."""
    return load_extension("sigmoid").backward(grad, output)


sigmoid_forward.register_fake(fake_like)
sigmoid_backward.register_fake(fake_grad)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(output)


def _op_backward(ctx, grad):
    (output,) = ctx.saved_tensors
    return sigmoid_backward(grad.contiguous(), output)


sigmoid_forward.register_autograd(_op_backward, setup_context=_setup_context)


# ----------------------------------------------------------------------------------------------
# The public API: eagerly the compiled module directly, under torch.compile the ops above.
# ----------------------------------------------------------------------------------------------


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
        y, x's shape, dtype and device (a new contiguous tensor). Differentiable.
    """
    return SigmoidFunction.apply(x)


class Sigmoid(nn.Module):
    """``Sigmoid()(x) -> sigmoid(x)``, x of any shape."""

    def forward(self, x: Tensor) -> Tensor:
        return sigmoid(x)


def benchmarks(device: torch.device, quick: bool) -> list:
    """sigmoid vs torch.sigmoid; the backward kernel vs aten.sigmoid_backward(grad, y)."""
    return bench_cases(
        "sigmoid",
        device,
        quick,
        forward=sigmoid,
        ref_forward=torch.sigmoid,
        ref_forward_name="torch.sigmoid",
        backward=lambda grad, x, y: load_extension("sigmoid").backward(grad, y),
        ref_backward=lambda grad, x, y: torch.ops.aten.sigmoid_backward(grad, y),
        ref_backward_name="aten.sigmoid_backward",
    )
