"""ReLU, y = max(x, 0), on lltm_ext's vectorized element-wise kernels (CPU and CUDA).

Any shape; y has x's shape, dtype and device. Values and gradients are torch.relu's: NaN passes
through forward and backward, and the gradient at x == 0 is 0. Backward works from the saved
output y (as torch's does): dx = grad where y > 0, else 0.
"""

# No `from __future__ import annotations` here: torch.library reads the annotations at runtime.

import torch
from torch import Tensor, nn

from lltm_ext._extension import load_extension
from lltm_ext.ops._elementwise import bench_cases, fake_grad, fake_like, saved_output_function

__all__ = ["ReLU", "ReLUFunction", "relu"]


# ----------------------------------------------------------------------------------------------
# torch.library ops: what torch.compile sees (no graph break), checked by opcheck.
# ----------------------------------------------------------------------------------------------


@torch.library.custom_op("lltm_ext::relu_forward", mutates_args=(), device_types=("cpu", "cuda"))
def relu_forward(x: Tensor) -> Tensor:
    """max(x, 0) of a contiguous x (any shape): a new contiguous tensor."""
    return load_extension("relu").forward(x)


@torch.library.custom_op("lltm_ext::relu_backward", mutates_args=(), device_types=("cpu", "cuda"))
def relu_backward(grad: Tensor, output: Tensor) -> Tensor:
    """grad where output > 0 (or NaN), else 0; grad and output contiguous, one shape."""
    return load_extension("relu").backward(grad, output)


relu_forward.register_fake(fake_like)
relu_backward.register_fake(fake_grad)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(output)


def _op_backward(ctx, grad):
    (output,) = ctx.saved_tensors
    return relu_backward(grad.contiguous(), output)


relu_forward.register_autograd(_op_backward, setup_context=_setup_context)


# ----------------------------------------------------------------------------------------------
# The public API: eagerly the compiled module directly, under torch.compile the ops above.
# ----------------------------------------------------------------------------------------------


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
        y, x's shape, dtype and device (a new contiguous tensor). Differentiable.
    """
    return ReLUFunction.apply(x)


class ReLU(nn.Module):
    """``ReLU()(x) -> relu(x)``, x of any shape."""

    def forward(self, x: Tensor) -> Tensor:
        return relu(x)


def benchmarks(device: torch.device, quick: bool) -> list:
    """relu vs torch.relu; the backward kernel vs aten.threshold_backward(grad, x, 0)."""
    return bench_cases(
        "relu",
        device,
        quick,
        forward=relu,
        ref_forward=torch.relu,
        ref_forward_name="torch.relu",
        backward=lambda grad, x, y: load_extension("relu").backward(grad, y),
        ref_backward=lambda grad, x, y: torch.ops.aten.threshold_backward(grad, x, 0),
        ref_backward_name="aten.threshold_backward",
    )
