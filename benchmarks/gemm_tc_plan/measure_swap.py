"""Times 16-bit products of an M-major A and a K-major B (layout tt: `a.T @ b.T` of row-major
matrices) on the wgmma path as given and as their transpose (`_set_gemm_wgmma_knobs(swap="on")`:
C^T = b^T a^T, A K-major and B N-major, C stored transposed by TMA, or by each thread directly
into an output TMA cannot store to), beside cuBLAS, interleaved, each checked against float64;
with the planner's plan of each orientation.

Shapes: 3000x5000x2000 ("uneven", both 16-bit types), square and linear-layer-sized products
("large"), and random ones (M, N, K log-uniform in 256-8192, K a multiple of 8, bfloat16).

    python benchmarks/gemm_tc_plan/measure_swap.py swap.json [--random 24 --seed 5]
"""

from __future__ import annotations

import math
import random
from typing import Any

import torch
from measure_tile_widths import (  # this folder's (run as a script from here)
    DTYPES,
    operands,
    parse_args,
    run_points,
)

import lltm_ext
from lltm_ext._extension import load_extension
from lltm_ext.cli.sweep import time_medians

LARGE = [(4096, 4096, 4096), (2048, 8192, 4096), (8192, 2048, 4096), (4096, 11008, 4096),
         (11008, 4096, 2048), (1000, 3000, 5000), (5000, 3000, 2000)]  # fmt: skip


def measure(ext: Any, m: int, n: int, k: int, layout: str, dtype: str, budget: float,
            what: str) -> dict[str, Any]:  # fmt: skip
    """One point: the auto path without the swap and with it, and cuBLAS."""
    a, b = operands(m, n, k, layout, DTYPES[dtype])
    ref = a.double() @ b.double()

    def run(swap: str) -> torch.Tensor:
        ext._set_gemm_wgmma_knobs(swap=swap)
        try:
            return lltm_ext.gemm(a, b)
        finally:
            ext._set_gemm_wgmma_knobs()

    for swap in ("off", "on"):
        c = run(swap)
        err = float((c.double() - ref).norm() / ref.norm())
        assert err < 1e-2, (m, n, k, layout, dtype, swap, err)
    plans = {"off": list(ext._cuda_tc_plan(a, b)), "on": list(ext._cuda_tc_plan(b.t(), a.t()))}
    # "on_direct": into an output whose base is off 16 bytes, which TMA cannot store: C^T's
    # elements stored by each thread directly.
    shifted = torch.empty(m * n + 1, dtype=a.dtype, device=a.device)[1:].view(m, n)

    def run_direct() -> torch.Tensor:
        ext._set_gemm_wgmma_knobs(swap="on")
        try:
            return lltm_ext.gemm(a, b, out=shifted)
        finally:
            ext._set_gemm_wgmma_knobs()

    names = ["off", "on", "on_direct", "ref"]
    fns = [lambda: run("off"), lambda: run("on"), run_direct, lambda: a @ b]
    times, samples = time_medians(fns, torch.device("cuda"), budget)
    us = {name: t * 1e6 for name, t in zip(names, times, strict=True)}
    print(
        f"{what:8s} {m}x{n}x{k} {layout} {dtype:8s} "
        + " ".join(f"{key}={v:.1f}" for key, v in us.items())
        + f"  ref/off {us['ref'] / us['off']:.3f} ref/on {us['ref'] / us['on']:.3f}"
        + f"  plans {plans['off'][:4]} / {plans['on'][:4]}",
        flush=True,
    )
    return {"what": what, "M": m, "N": n, "K": k, "layout": layout, "dtype": dtype,
            "plans": plans, "us": us, "samples": samples}  # fmt: skip


def points(n_random: int, seed: int) -> list[tuple[str, int, int, int, str, str]]:
    """(what, M, N, K, layout, dtype) of every point."""
    out = [("uneven", 3000, 5000, 2000, "tt", dt) for dt in ("bfloat16", "float16")]
    out += [("large", m, n, k, "tt", "bfloat16") for m, n, k in LARGE]
    rng = random.Random(seed)
    for _ in range(n_random):
        m, n, k = (int(math.exp(rng.uniform(math.log(256), math.log(8192)))) for _ in range(3))
        out.append(("random", m, n, k - k % 8, "tt", "bfloat16"))
    return out


def main() -> None:
    args = parse_args(__doc__, 0.1)
    ext = load_extension("gemm")

    def one(what: str, m: int, n: int, k: int, layout: str, dtype: str) -> dict[str, Any]:
        return measure(ext, m, n, k, layout, dtype, args.budget, what)

    run_points(args, points(args.random, args.seed), one, {})


if __name__ == "__main__":
    main()
