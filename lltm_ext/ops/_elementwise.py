"""What the element-wise ops (relu, sigmoid, round_ste) share in Python: fake kernels (their
bench cases are in ``lltm_ext/cli/cases/_elementwise.py``).

Their autograd is C++ (``src/common/elementwise_binding.h``): the Autograd kernel of each public
operator ``torch.ops.lltm_ext.<op>``, which calls ``<op>_forward`` and ``<op>_backward``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lltm_ext.ops._checks import check_floating, check_inputs, check_like, check_same_sizes


def fake_like(x: Tensor) -> Tensor:
    """What the kernels return for an input `x` of any shape: a new contiguous tensor like it."""
    check_inputs(x=x)
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def fake_grad(grad: Tensor, output: Tensor) -> Tensor:
    """Fake backward kernel: the gradient wrt the input, shaped like the saved output (the checks
    of ``elementwise::backward``, in its order)."""
    check_floating(grad, "grad")
    check_floating(output, "output")
    check_like(grad, "grad", output, "output")
    check_same_sizes(grad, "grad", output, "output")
    return torch.empty(output.shape, dtype=output.dtype, device=output.device)
