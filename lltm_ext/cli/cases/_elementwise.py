"""What the element-wise ops' (relu, sigmoid, round_ste) ``lltm-ext bench`` cases share: forward
and backward against PyTorch's own kernels, on large 1-D tensors."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import Tensor

from lltm_ext.cli.bench import BenchCase


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
) -> list[BenchCase]:
    """Forward (and backward) BenchCases of one element-wise op, in float32 and (CUDA) bfloat16.

    Sizes: 2^28 elements on CUDA, 2^24 on the CPU (2^24 and 2^22 with `quick`); inputs x (n,) from
    torch.randn. With `ref_backward`, backward cases time the op's backward kernel alone, the
    operator ``torch.ops.lltm_ext.<op>_backward(grad, y)``, against ``ref_backward(grad, x, y)``:
    the incoming gradient, the input and PyTorch's output y, each (n,). Bytes per call: forward
    reads x and writes y (2 n elements), backward reads two tensors and writes one (3 n).
    """
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
                ours=functools.partial(getattr(torch.ops.lltm_ext, f"{op}_backward"), grad, y),
                ref=functools.partial(ref_backward, grad, x, y),
                ref_name=ref_backward_name,
                bytes=3 * nbytes,
                notes="the backward kernels alone",
            )
        )
    return cases
