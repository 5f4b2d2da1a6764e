"""Times the wgmma kernel with its blocks alone and in clusters of two that share B's stages (TMA
multicast, `_set_gemm_wgmma_knobs(cluster=2)`), at the planner's tile width and K splits and at
the widths 128, 192 and 256, beside the planner's call and cuBLAS, interleaved, each checked
against float64.

Shapes: the linear layers of `lltm-ext bench --linear` at M = 256, 512, 2048 and 8192 (x @ W.T,
"nt", and x @ W, "nn"; bfloat16), 3000x5000x2000 in every layout and type, products whose B rows
start inside 32-byte sectors ("sectors": a side of 8 mod 16 elements, bfloat16), and random shapes
(M, N, K of 256-8192, `a @ b.T`, bfloat16).

    python benchmarks/gemm_tc_plan/measure_clusters.py clusters.json [--random 24 --seed 5]
        [--only uneven,sectors]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from typing import Any

import torch
from measure_tile_widths import DTYPES, operands  # this folder's (run as a script from here)

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
        runs += [(f"plan{c}", int(plan[1]), int(plan[3]), c) for c in (1, 2)]
    runs += [(f"w{w}c{c}", w, 1, c) for w in (128, 192, 256) for c in (1, 2)]

    def forced(tile: int, splits: int, cluster: int) -> torch.Tensor:
        ext._set_gemm_wgmma_knobs(cluster=cluster)
        try:
            return ext._gemm_tensor_core(a, b, "wgmma", tile=tile, splits=splits)
        finally:
            ext._set_gemm_wgmma_knobs()

    fns, names = [], []
    for name, tile, splits, cluster in runs:
        c = forced(tile, splits, cluster)
        err = float((c.double() - ref).norm() / ref.norm())
        assert err < 1e-2, (m, n, k, layout, dtype, name, err)
        fns.append(lambda t=tile, s=splits, c=cluster: forced(t, s, c))
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
            "plan": list(plan[:4]), "us": us, "samples": samples}  # fmt: skip


def points(n_random: int, seed: int) -> list[tuple[str, int, int, int, str, str]]:
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
    rng = random.Random(seed)
    for _ in range(n_random):
        m, n, k = (int(math.exp(rng.uniform(math.log(256), math.log(8192)))) for _ in range(3))
        out.append(("random", m, n, k - k % 8, "nt", "bfloat16"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", help="where to write the rows")
    parser.add_argument("--random", type=int, default=24, help="random shapes")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--budget", type=float, default=0.1, help="seconds of samples a point")
    parser.add_argument("--limit-s", type=float, default=1e9, help="stop after this long")
    parser.add_argument("--only", default="", help="comma-separated kinds of point to keep")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("measure_clusters.py: times CUDA kernels, but torch sees no GPU")
    ext = load_extension("gemm")
    start, rows = time.monotonic(), []
    for what, m, n, k, layout, dtype in points(args.random, args.seed):
        if time.monotonic() - start > args.limit_s:
            break
        if args.only and what not in args.only.split(","):
            continue
        rows.append(measure(ext, m, n, k, layout, dtype, args.budget, what))
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
