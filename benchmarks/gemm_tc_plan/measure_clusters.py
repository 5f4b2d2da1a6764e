"""Times the wgmma kernel with its blocks alone and in clusters of two that share B's stages (TMA
multicast, `_set_gemm_wgmma_knobs(cluster=2)`), at the planner's tile width and K splits and at
the widths 128, 192 and 256, beside the planner's call and cuBLAS, interleaved, each checked
against float64.

Shapes: the linear layers of `lltm-ext bench --linear` at M = 256, 512, 2048 and 8192 (x @ W.T,
"nt", and x @ W, "nn"; bfloat16), 3000x5000x2000 in every layout and type, products whose B rows
start inside 32-byte sectors ("sectors": a side of 8 mod 16 elements, bfloat16), random shapes
(M, N, K of 256-8192, `a @ b.T`, bfloat16), and ("tall") those of `--large` more such shapes that
the planner gives 256-row tiles (their plan's runs keep its 256 rows; the widths' are 128-row).

    python benchmarks/gemm_tc_plan/measure_clusters.py clusters.json [--random 24 --seed 5]
        [--only uneven,sectors,tall --large 4000]
"""

from __future__ import annotations

from typing import Any

import torch
from measure_tall import large_tall  # this folder's (run as a script from here)
from measure_tile_widths import (  # this folder's (run as a script from here)
    DTYPES,
    operands,
    parse_args,
    random_points,
    run_points,
)

import lltm_ext
from lltm_ext._extension import load_extension
from lltm_ext.cli.linear import LINEAR_LAYERS
from lltm_ext.cli.sweep import time_medians

# (M, N, K) whose B rows start inside sectors in layout nn (N = 8 mod 16) or nt (K = 8 mod 16).
SECTOR_NN = [(2048, 4104, 4096), (1032, 4104, 1032), (4096, 11016, 4096), (600, 2056, 3000)]
SECTOR_NT = [(2048, 4096, 4104), (2056, 2056, 1032), (8192, 4096, 1800), (300, 6000, 2216)]


def measure(ext: Any, m: int, n: int, k: int, layout: str, dtype: str, budget: float,
            what: str) -> dict[str, Any]:  # fmt: skip
    """One point: each (width, splits, cluster) forced, the planner's call and cuBLAS."""
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    a, b = operands(m, n, k, layout, DTYPES[dtype])
    ref = a.double() @ b.double()
    plan = ext._cuda_tc_plan(a, b)
    runs = []
    if plan[0] == "wgmma":
        runs += [(f"plan{c}", int(plan[1]), int(plan[3]), c, int(plan[10])) for c in (1, 2)]
    runs += [(f"w{w}c{c}", w, 1, c, 128) for w in (128, 192, 256) for c in (1, 2)]

    def forced(tile: int, splits: int, cluster: int, rows: int) -> torch.Tensor:
        ext._set_gemm_wgmma_knobs(cluster=cluster)
        try:
            return ext._gemm_tensor_core(a, b, "wgmma", tile=tile, splits=splits, tile_m=rows)
        finally:
            ext._set_gemm_wgmma_knobs()

    fns, names = [], []
    for name, tile, splits, cluster, rows in runs:
        c = forced(tile, splits, cluster, rows)
        err = float((c.double() - ref).norm() / ref.norm())
        assert err < 1e-2, (m, n, k, layout, dtype, name, err)
        fns.append(lambda t=tile, s=splits, c=cluster, r=rows: forced(t, s, c, r))
        names.append(name)
    fns += [lambda: lltm_ext.gemm(a, b), lambda: a @ b]
    names += ["auto", "ref"]
    times, samples = time_medians(fns, torch.device("cuda"), budget)
    us = {name: t * 1e6 for name, t in zip(names, times, strict=True)}
    print(
        f"{what:8s} {m}x{n}x{k} {layout} {dtype:8s} plan {plan[0]}{plan[1]}/{plan[3]}: "
        + " ".join(f"{key}={v:.1f}" for key, v in us.items()),
        flush=True,
    )
    return {"what": what, "M": m, "N": n, "K": k, "layout": layout, "dtype": dtype,
            "plan": list(plan[:4]) + [plan[10]], "us": us, "samples": samples}  # fmt: skip


def points(
    ext: Any, n_random: int, seed: int, n_large: int
) -> list[tuple[str, int, int, int, str, str]]:
    """(what, M, N, K, layout, dtype) of every point."""
    out = []
    for m in (512, 2048):
        for layout in ("nt", "nn"):
            out += [("linear", m, n, k, layout, "bfloat16") for k, n in LINEAR_LAYERS["cuda"]]
    out += [
        ("uneven", 3000, 5000, 2000, lay, dt) for dt in DTYPES for lay in ("nn", "nt", "tn", "tt")
    ]
    # B's rows 16- but not 32-byte aligned: N-major B of N = 8 mod 16, K-major B of K = 8 mod 16.
    out += [("sectors", m, n, k, "nn", "bfloat16") for m, n, k in SECTOR_NN]
    out += [("sectors", m, n, k, "nt", "bfloat16") for m, n, k in SECTOR_NT]
    for m in (256, 8192):
        for layout in ("nt", "nn"):
            out += [("linear", m, n, k, layout, "bfloat16") for k, n in LINEAR_LAYERS["cuda"]]
    out += random_points(n_random, seed)
    return out + [("tall", *p[1:]) for p in large_tall(ext, n_large, seed)]


def main() -> None:
    args = parse_args(__doc__, 0.1, large=True)
    ext = load_extension("gemm")

    def one(what: str, m: int, n: int, k: int, layout: str, dtype: str) -> dict[str, Any]:
        return measure(ext, m, n, k, layout, dtype, args.budget, what)

    run_points(args, points(ext, args.random, args.seed, args.large), one, {})


if __name__ == "__main__":
    main()
