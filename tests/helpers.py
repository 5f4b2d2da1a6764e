"""Shared test helpers: device x dtype parameters, float64 references, per-dtype tolerances, and
losses with their gradients compared (torch.compile against eager)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

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


def assert_same_loss_and_grads(
    fn: Callable[..., torch.Tensor],
    ref: Callable[..., torch.Tensor],
    inputs: Sequence[torch.Tensor],
    wrt: Sequence[torch.Tensor] | None = None,
) -> None:
    """fn(*inputs) and ref(*inputs), each a scalar loss (0-dim), and their gradients wrt `wrt`
    (default: the inputs; each gradient has its tensor's shape) agree at
    torch.testing.assert_close's default tolerances. fn runs first, loss then gradients; e.g. fn
    is torch.compile(ref, fullgraph=True)."""
    wrt = tuple(inputs if wrt is None else wrt)
    loss = fn(*inputs)
    grads = torch.autograd.grad(loss, wrt)
    ref_loss = ref(*inputs)
    ref_grads = torch.autograd.grad(ref_loss, wrt)
    torch.testing.assert_close(loss, ref_loss)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r)


def assert_compiled_matches_eager(
    step: Callable[..., torch.Tensor],
    inputs: Sequence[torch.Tensor],
    backend: str,
    wrt: Sequence[torch.Tensor] | None = None,
) -> None:
    """torch.compile(step, fullgraph=True, backend=backend), compiled afresh (dynamo's caches reset;
    fullgraph: any graph break fails), gives eager step's scalar loss and gradients wrt `wrt`
    (default: the inputs), as :func:`assert_same_loss_and_grads` compares them."""
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend=backend)
    assert_same_loss_and_grads(compiled, step, inputs, wrt)
