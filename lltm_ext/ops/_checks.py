"""The input checks of ``src/common/checks.h`` for the fake kernels, with the same messages.

A fake kernel runs for FakeTensors (torch.compile's tracing, opcheck) and for ``meta`` tensors,
also when a meta tensor is mixed with CPU or CUDA tensors (the Meta kernel wins the dispatch).
Without these checks such a call returned tensors of the wrong dtype, or uninitialized CPU
tensors, instead of the error the compiled kernel raises for the same arguments.
"""

from __future__ import annotations

import torch
from torch import Tensor

_FLOATING = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def describe(t: Tensor) -> str:
    """``float32 tensor of shape [4, 5] on cpu``."""
    return f"{str(t.dtype).removeprefix('torch.')} tensor of shape {list(t.shape)} on {t.device}"


def check_floating(t: Tensor, name: str) -> None:
    """``check_floating``: one of the four floating dtypes the kernels dispatch on."""
    torch._check(
        t.dtype in _FLOATING,
        lambda: (
            f"lltm_ext: `{name}` must have a floating-point dtype (float32, float64, float16 or "
            f"bfloat16), but got a {describe(t)}."
        ),
    )


def check_like(t: Tensor, name: str, ref: Tensor, ref_name: str) -> None:
    """``CHECK_LIKE(t, ref)``: the device, then the dtype of `ref`."""
    torch._check(
        t.device == ref.device,
        lambda: (
            f"lltm_ext: all tensors must be on one device, but `{name}` is on {t.device} and "
            f"`{ref_name}` is on {ref.device}."
        ),
    )
    torch._check(
        t.dtype == ref.dtype,
        lambda: (
            f"lltm_ext: all tensors must have one dtype, but `{name}` is "
            f"{str(t.dtype).removeprefix('torch.')} and `{ref_name}` is "
            f"{str(ref.dtype).removeprefix('torch.')}."
        ),
    )


def check_inputs(**tensors: Tensor) -> None:
    """Each tensor floating, then each like the first (the order of the C++ checks)."""
    (ref_name, ref), *others = tensors.items()
    for name, t in tensors.items():
        check_floating(t, name)
    for name, t in others:
        check_like(t, name, ref, ref_name)
