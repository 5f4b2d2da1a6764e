"""What the element-wise ops (relu, sigmoid, round_ste) share: the autograd.Function of an op with
a saved-output backward, fake kernels."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from lltm_ext.ops._autograd import first_order
from lltm_ext.ops._checks import check_inputs


def saved_output_function(
    name: str,
    op: str,
    forward_op: Callable[[Tensor], Tensor],
    backward_op: Callable[[Tensor, Tensor], Tensor],
    doc: str,
    module: str,
) -> type[torch.autograd.Function]:
    """The autograd.Function of an op whose backward kernel works from the saved output y.

    forward(x) -> ``forward_op(x)`` (non-contiguous x is copied first); backward(grad) ->
    ``backward_op(grad, y)``. The ops are the operators ``torch.ops.lltm_ext.<op>_forward`` and
    ``_backward``; eager and compiled calls run this same Function. The backward kernel is not
    differentiable, so a second derivative raises.
    """

    class SavedOutputFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Tensor) -> Tensor:
            y = forward_op(x.contiguous())
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> Tensor:
            (y,) = ctx.saved_tensors
            (dx,) = first_order(op, (backward_op(grad.contiguous(), y),), y)
            return dx

    SavedOutputFunction.__name__ = SavedOutputFunction.__qualname__ = name
    SavedOutputFunction.__doc__ = doc
    SavedOutputFunction.__module__ = module
    return SavedOutputFunction


def fake_like(x: Tensor) -> Tensor:
    """What the kernels return for an input `x` of any shape: a new contiguous tensor like it."""
    check_inputs(x=x)
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def fake_grad(grad: Tensor, saved: Tensor) -> Tensor:
    """Fake backward kernel: the gradient wrt the input, shaped like the saved tensor."""
    check_inputs(output=saved, grad=grad)
    torch._check(
        grad.shape == saved.shape,
        lambda: f"`grad` must have the shape of the saved tensor {saved.shape}, got {grad.shape}",
    )
    return fake_like(saved)
