"""Shared test helpers: device x dtype parameters, float64 references, per-dtype tolerances."""

from __future__ import annotations

import pytest
import torch

CPU_DTYPES = (torch.float32, torch.float64)
CUDA_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)

# Tolerances against a float64 reference, for results computed in each dtype.
TOLERANCES = {
    torch.float64: dict(rtol=1e-10, atol=1e-12),
    torch.float32: dict(rtol=1e-5, atol=1e-6),
    torch.float16: dict(rtol=5e-3, atol=1e-3),
    torch.bfloat16: dict(rtol=3e-2, atol=1e-2),
}


def devices() -> list:
    """["cpu", "cuda"], the CUDA one marked so that it skips without a GPU."""
    return ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def device_dtypes(cpu=CPU_DTYPES, cuda=CUDA_DTYPES) -> list:
    """(device, dtype) pairs for parametrize; CUDA pairs carry the `cuda` marker."""
    params = [pytest.param("cpu", d, id=f"cpu-{str(d)[6:]}") for d in cpu]
    params += [
        pytest.param("cuda", d, id=f"cuda-{str(d)[6:]}", marks=pytest.mark.cuda) for d in cuda
    ]
    return params


def assert_close(
    actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, scale: float = 1.0
):
    """Compare a result computed in `dtype` with a float64 reference at `dtype`'s tolerance."""
    tol = TOLERANCES[dtype]
    torch.testing.assert_close(
        actual.double().cpu(),
        expected.double().cpu(),
        rtol=tol["rtol"] * scale,
        atol=tol["atol"] * scale,
        equal_nan=True,
    )
