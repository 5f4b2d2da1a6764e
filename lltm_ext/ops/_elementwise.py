"""What the element-wise ops (relu, sigmoid, round_ste) share: eager/compiled dispatch, fake kernels,
bench cases."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from lltm_ext._extension import load_extension


def dispatch(op: str, custom_op: Callable[..., Tensor], name: str, *args: Tensor) -> Tensor:
    """Call `op`'s kernel `name` on `args`.

    Under torch.compile this goes through `custom_op` (the torch.library op the graph records,
    with its fake kernel); eagerly it calls the compiled module ``lltm_ext._<op>`` directly, without
    the dispatcher round trip.
    """
    if torch.compiler.is_compiling():
        return custom_op(*args)
    return getattr(load_extension(op), name)(*args)


def saved_output_function(
    name: str,
    op: str,
    forward_op: Callable[..., Tensor],
    backward_op: Callable[..., Tensor],
    doc: str,
    module: str,
) -> type[torch.autograd.Function]:
    """The autograd.Function of an op whose backward kernel works from the saved output y.

    forward(x) -> y (non-contiguous x is copied first); backward(grad) -> the backward kernel of
    (grad, y). The backward kernel is not differentiable, so a second derivative raises.
    """

    class SavedOutputFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x: Tensor) -> Tensor:
            y = dispatch(op, forward_op, "forward", x.contiguous())
            ctx.save_for_backward(y)
            return y

        @staticmethod
        @once_differentiable
        def backward(ctx, grad: Tensor) -> Tensor:
            (y,) = ctx.saved_tensors
            return dispatch(op, backward_op, "backward", grad.contiguous(), y)

    SavedOutputFunction.__name__ = SavedOutputFunction.__qualname__ = name
    SavedOutputFunction.__doc__ = doc
    SavedOutputFunction.__module__ = module
    return SavedOutputFunction


def fake_like(x: Tensor) -> Tensor:
    """What the kernels return for an input `x` of any shape: a new contiguous tensor like it."""
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def fake_grad(grad: Tensor, saved: Tensor) -> Tensor:
    """Fake backward kernel: the gradient wrt the input, shaped like the saved tensor."""
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
    backward: Callable[[Tensor, Tensor, Tensor], Tensor] | None = None,
    ref_backward: Callable[[Tensor, Tensor, Tensor], Tensor] | None = None,
    ref_backward_name: str = "",
    notes: str = "",
) -> list:
    """Forward (and backward) BenchCases of one element-wise op, in float32 and (CUDA) bfloat16.

    Sizes: 2^28 elements on CUDA, 2^24 on the CPU (2^24 and 2^22 with `quick`); inputs from
    torch.randn. `backward(grad, x, y)` and `ref_backward(grad, x, y)` get the incoming gradient,
    the input and PyTorch's output. Bytes per call: forward reads x and writes y (2 n elements),
    backward reads two tensors and writes one (3 n).
    """
    from lltm_ext._bench import BenchCase

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
                ours=lambda x=x: forward(x),
                ref=lambda x=x: ref_forward(x),
                ref_name=ref_forward_name,
                bytes=2 * nbytes,
                notes=notes,
            )
        )
        if backward is None or ref_backward is None:
            continue
        grad, y = torch.randn_like(x), ref_forward(x)
        cases.append(
            BenchCase(
                op=op,
                case="backward",
                dtype=dtype,
                size=size,
                ours=lambda g=grad, x=x, y=y: backward(g, x, y),
                ref=lambda g=grad, x=x, y=y: ref_backward(g, x, y),
                ref_name=ref_backward_name,
                bytes=3 * nbytes,
                notes="the backward kernels alone",
            )
        )
    return cases
