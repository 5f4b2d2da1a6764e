"""One measured point as a JSON row, shared by this folder's scripts (run as scripts from here):
each function checked against float64, then all timed in one interleaved run."""

from __future__ import annotations

from collections.abc import Callable

import torch

from lltm_ext.cli.sweep import time_medians


def rel_err(c: torch.Tensor, c64: torch.Tensor) -> float:
    """||c - c64|| / ||c64||, in float64."""
    return float((c.double() - c64).norm() / c64.norm().clamp_min(1e-300))


def timed_row(
    a: torch.Tensor,
    b: torch.Tensor,
    fns: dict[str, Callable[[], torch.Tensor]],
    budget_s: float,
    flush: str = "read",
    optional: tuple[str, ...] = (),
    **extra: object,
) -> dict[str, object]:
    """The row of a @ b (a (M, K), b (K, N)): each of `fns` (name -> a function computing a @ b)
    checked against float64, then timed with ``time_medians`` (`flush` as there). A function named
    in `optional` that raises RuntimeError (a variant the shape does not allow) is left out of the
    row; any other raises. `extra` goes into the row as given."""
    c64 = a.double() @ b.double()
    errs: dict[str, float] = {}
    kept: dict[str, Callable[[], torch.Tensor]] = {}
    for name, fn in fns.items():
        try:
            errs[name] = rel_err(fn(), c64)
        except RuntimeError:
            if name not in optional:
                raise
            continue
        kept[name] = fn
    times, samples = time_medians(list(kept.values()), a.device, budget_s, flush=flush)
    return {
        "M": a.size(0),
        "N": b.size(1),
        "K": a.size(1),
        **extra,
        "samples": samples,
        "us": {n: t * 1e6 for n, t in zip(kept, times, strict=True)},
        "err": errs,
    }
