"""What every op's autograd.Function shares: a clear error for second derivatives, and arguments
passed twice (``h = c = torch.zeros(...)``) made distinct for torch.compile."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


class _FirstOrderOnly(torch.autograd.Function):
    """Identity on gradients whose own backward raises: marks a backward as first-order only."""

    @staticmethod
    def forward(ctx: Any, op: str, count: int, *tensors: Tensor | None) -> Any:
        ctx.op = op
        return tuple(None if g is None else g.view_as(g) for g in tensors[:count])

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        raise RuntimeError(
            f"lltm_ext.{ctx.op}: second derivatives are not supported: its backward kernels are "
            "first-order only. The gradients from torch.autograd.grad(..., create_graph=True) "
            f"cannot be differentiated again through lltm_ext.{ctx.op}; use a pure-PyTorch "
            "version of the op where a higher-order derivative is needed."
        )


def first_order(op: str, grads: tuple[Tensor | None, ...], *saved: Tensor) -> Any:
    """`grads` as they are, from a backward whose kernels are not differentiable.

    Only under ``create_graph=True`` (grad mode on inside backward) is more done: the gradients
    then depend on the forward's inputs through `saved`, and differentiating them again raises a
    RuntimeError that says the op is first-order only (instead of torch's generic "element 0 of
    tensors does not require grad", or a silently missing term).
    """
    if not torch.is_grad_enabled():
        return grads
    return _FirstOrderOnly.apply(op, len(grads), *grads, *saved)


def distinct(first: Tensor, *others: Tensor) -> tuple[Tensor, ...]:
    """The tensors, with any that is the same object as an earlier one replaced by a view of it.

    autograd.Function accepts one tensor passed as several arguments, but torch.compile does not
    ("duplicate tensor input"); a view is another tensor with the same values, and its gradient
    flows back to the original.
    """
    out = [first]
    for t in others:
        if any(t is seen for seen in out):
            t = t.view_as(t)
        out.append(t)
    return tuple(out)
