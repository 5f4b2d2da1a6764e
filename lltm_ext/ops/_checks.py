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

# c10's names of the dtypes (``ScalarType``), as the C++ messages print them.
_SCALAR_TYPE_NAMES = {
    torch.float32: "Float",
    torch.float64: "Double",
    torch.float16: "Half",
    torch.bfloat16: "BFloat16",
    torch.complex32: "ComplexHalf",
    torch.complex64: "ComplexFloat",
    torch.complex128: "ComplexDouble",
    torch.bool: "Bool",
    torch.uint8: "Byte",
    torch.int8: "Char",
    torch.int16: "Short",
    torch.int32: "Int",
    torch.int64: "Long",
}


def dtype_name(dtype: torch.dtype) -> str:
    """The dtype as the C++ checks name it: ``Float``, ``Double``, ``Int``... (c10's
    ``ScalarType``; torch's own name, ``float8_e4m3fn`` say, for the rarer ones)."""
    return _SCALAR_TYPE_NAMES.get(dtype, str(dtype).removeprefix("torch."))


def describe(t: Tensor) -> str:
    """``Float tensor of shape [4, 5] on cpu``, as ``describe`` in ``src/common/checks.h``."""
    return f"{dtype_name(t.dtype)} tensor of shape {list(t.shape)} on {t.device}"


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
            f"lltm_ext: all tensors must have one dtype, but `{name}` is {dtype_name(t.dtype)} "
            f"and `{ref_name}` is {dtype_name(ref.dtype)}."
        ),
    )


def check_dim(t: Tensor, name: str, dim: int) -> None:
    """``CHECK_DIM(t, dim)``."""
    torch._check(
        t.dim() == dim,
        lambda: f"lltm_ext: `{name}` must be {dim}-D, but got a {describe(t)}.",
    )


def check_shape(t: Tensor, name: str, shape: tuple[int, ...]) -> None:
    """``CHECK_SHAPE(t, sizes...)``: exactly `shape` (a size -1: any)."""
    torch._check(
        t.dim() == len(shape) and all(s < 0 or t.shape[i] == s for i, s in enumerate(shape)),
        lambda: (
            f"lltm_ext: `{name}` must have shape "
            f"[{', '.join('*' if s < 0 else str(s) for s in shape)}], but got a {describe(t)}."
        ),
    )


def check_same_sizes(t: Tensor, name: str, ref: Tensor, ref_name: str) -> None:
    """``CHECK_SAME_SIZES(t, ref)``: an incoming gradient and the tensor it belongs to."""
    torch._check(
        t.shape == ref.shape,
        lambda: (
            f"lltm_ext: `{name}` must have the shape of `{ref_name}` {list(ref.shape)}, but got "
            f"a {describe(t)}."
        ),
    )


def check_inputs(**tensors: Tensor) -> None:
    """Each tensor floating, then each like the first (the order of the C++ checks)."""
    (ref_name, ref), *others = tensors.items()
    for name, t in tensors.items():
        check_floating(t, name)
    for name, t in others:
        check_like(t, name, ref, ref_name)
