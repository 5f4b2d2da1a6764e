"""What the element-wise ops (relu, sigmoid, round_ste) share in Python: fake kernels (their
bench cases are in ``lltm_ext/cli/cases/_elementwise.py``).

Their autograd is C++ (``src/common/elementwise_binding.h``): the Autograd kernel of each public
operator ``torch.ops.lltm_ext.<op>``, which calls ``<op>_forward`` and ``<op>_backward``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lltm_ext.ops._checks import (
    check_floating,
    check_inputs,
    check_like,
    check_same_sizes,
    describe,
)


def is_dense(t: Tensor) -> bool:
    """Whether `t`'s elements fill one block of memory, each once (contiguous, or a permutation of
    contiguous dimensions such as ``x.t()``): c10's ``is_non_overlapping_and_dense``."""
    if t.is_contiguous():
        return True
    expected = 1
    for d in sorted((d for d in range(t.dim()) if t.shape[d] != 1), key=t.stride):
        if t.stride(d) != expected:
            return False
        expected *= t.shape[d]
    return True


def check_dense(t: Tensor, name: str) -> None:
    """``check_dense`` of ``src/common/checks.h``, with its message."""
    torch._check(
        is_dense(t),
        lambda: (
            f"lltm_ext: `{name}` must be dense (contiguous, or a permutation of contiguous "
            f"dimensions such as x.t()), but got a {describe(t)} with strides {list(t.stride())} "
            "(call .contiguous() first; the Python API does this for you)."
        ),
    )


def fake_like(x: Tensor) -> Tensor:
    """What the public operator and ``<op>_forward`` return for an input `x` of any layout: a new
    tensor with x's strides where x is dense, else contiguous (the kernels read x in place as
    strided rows where they can, else a contiguous copy)."""
    check_inputs(x=x)
    if is_dense(x):
        return torch.empty_like(x)
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def fake_grad(grad: Tensor, output: Tensor) -> Tensor:
    """Fake backward kernel: the gradient wrt the input, shaped like the saved output (the checks
    of ``elementwise::backward``, in its order)."""
    check_floating(grad, "grad")
    check_floating(output, "output")
    check_like(grad, "grad", output, "output")
    check_same_sizes(grad, "grad", output, "output")
    check_dense(output, "output")
    torch._check(
        grad.stride() == output.stride(),
        lambda: (
            f"lltm_ext: `grad` must have the strides of `output` {list(output.stride())}, but got "
            f"strides {list(grad.stride())}."
        ),
    )
    return torch.empty_like(output)
