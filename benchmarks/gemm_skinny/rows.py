"""One measured point as a JSON row, shared by this folder's scripts (run as scripts from here):
each function checked against float64, then all timed in one interleaved run."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from lltm_ext.cli.linear import LINEAR_LAYERS, copy_bandwidth
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


def weights_kn(
    points: list[tuple[int, int]], rows: int, dtype: torch.dtype, gen: torch.Generator
) -> Iterator[tuple[int, int, torch.Tensor, torch.Tensor]]:
    """For each (K, N) of `points`, as the linear bench draws them on gen's device: (K, N, W, x),
    W (K, N) uniform in +-K^-1/2 stored (K, N), x (rows, K) standard normal; one pair alive at a
    time."""
    for k, n in points:
        w = (torch.rand(k, n, device=gen.device, generator=gen) * 2 - 1).mul_(k**-0.5).to(dtype)
        x = torch.randn(rows, k, device=gen.device, generator=gen).to(dtype)
        yield k, n, w, x
        del w, x


def linear_setup() -> tuple[torch.device, list[tuple[int, int]], float]:
    """The CUDA device, the (K, N) of ``lltm-ext bench --linear``'s layers, and a copy's bandwidth
    in GB/s over the largest layer's bytes as that bench measures it (L2 emptied first; printed)."""
    dev = torch.device("cuda")
    layers = list(LINEAR_LAYERS["cuda"])
    gbps = copy_bandwidth(max(k * n for k, n in layers) * 2, dev, 0.05, flush="read").gbps
    print(f"copy bandwidth {gbps:.0f} GB/s", flush=True)
    return dev, layers, gbps
