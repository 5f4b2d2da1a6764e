"""What the element-wise ops (relu, sigmoid, round_ste) share: the autograd.Function of an op with
a saved-output backward, fake kernels, bench cases."""

from __future__ import annotations

import functools
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


def bench_cases(
    op: str,
    device: torch.device,
    quick: bool,
    *,
    forward: Callable[[Tensor], Tensor],
    ref_forward: Callable[[Tensor], Tensor],
    ref_forward_name: str,
    ref_backward: Callable[[Tensor, Tensor, Tensor], Tensor] | None = None,
    ref_backward_name: str = "",
    notes: str = "",
) -> list:
    """Forward (and backward) BenchCases of one element-wise op, in float32 and (CUDA) bfloat16.

    Sizes: 2^28 elements on CUDA, 2^24 on the CPU (2^24 and 2^22 with `quick`); inputs x (n,) from
    torch.randn. With `ref_backward`, backward cases time the op's backward kernel alone,
    ``lltm_ext._<op>.backward(grad, y)``, against ``ref_backward(grad, x, y)``: the incoming
    gradient, the input and PyTorch's output y, each (n,). Bytes per call: forward reads x and
    writes y (2 n elements), backward reads two tensors and writes one (3 n).
    """
    from lltm_ext._bench import BenchCase
    from lltm_ext._extension import load_extension

    cuda = device.type == "cuda"
    log2n = (24 if quick else 28) if cuda else (22 if quick else 24)
    n = 1 << log2n
    dtypes = (torch.float32, torch.bfloat16) if cuda else (torch.float32,)
    cases = []
    for dtype in dtypes:
        x = torch.randn(n, device=device, dtype=dtype)
        size = f"{n} (2^{log2n})"
        nbytes = n * x.element_size()
        cases.append(
            BenchCase(
                op=op,
                case="forward",
                dtype=dtype,
                size=size,
                ours=functools.partial(forward, x),
                ref=functools.partial(ref_forward, x),
                ref_name=ref_forward_name,
                bytes=2 * nbytes,
                notes=notes,
            )
        )
        if ref_backward is None:
            continue
        grad, y = torch.randn_like(x), ref_forward(x)
        cases.append(
            BenchCase(
                op=op,
                case="backward",
                dtype=dtype,
                size=size,
                ours=functools.partial(load_extension(op).backward, grad, y),
                ref=functools.partial(ref_backward, grad, x, y),
                ref_name=ref_backward_name,
                bytes=3 * nbytes,
                notes="the backward kernels alone",
            )
        )
    return cases
