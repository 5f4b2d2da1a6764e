"""Times the wgmma kernel's narrow tiles (128 x 16 and 128 x 32, src/gemm/tiles/kernel_sm90.cuh
with BN = 16 and 32) at each K split count against cuBLAS and the auto path without them: the data
run_narrow's split rule and the auto path's range (narrow_splits, narrow_auto_takes in src/gemm/)
are set from.

Points: the linear layers of ``lltm-ext bench --linear`` at each M of --ms, in layout t (x @ W.T,
W (N, K)) and n (x @ W, W (K, N)), and --random shapes with a small side of 1 to --max-side (K a
multiple of 8 from 64 to 16384, the large side 64 to 32768, a multiple of 8). At each point, one
interleaved timing (``lltm_ext.cli.sweep.time_medians``, flush="read": L2 emptied of W's lines, no
dirty lines left to write back, as the linear bench times bandwidth): cuBLAS, the auto path, the
auto path without the narrow tiles ("before"), the narrow tile with its own choices and at each of
--splits in tiles of each of --rows, each checked against float64 first. One JSON row per point,
with the copy bandwidth of the run.

    python benchmarks/gemm_skinny/measure_narrow.py narrow.json --random 40
    python benchmarks/gemm_skinny/measure_narrow.py rows.json --ms 9,16,20,32 --random 16 \
        --max-side 32 --seed 5 --rows 128,64 --splits 1,2,4        # h100_narrow_rows.json

(benchmarks/results/gemm_skinny; in h100_narrow_rows.json "auto" is a build with the 32-wide tile
at every side of 17-32 for x @ W and 128-row tiles only, before the rules took their bounds.)
"""

from __future__ import annotations

import argparse
import json
import math
import random

import torch
from rows import timed_row  # this folder's (run as a script from here)

import lltm_ext
from lltm_ext._extension import load_extension
from lltm_ext.cli.linear import LINEAR_LAYERS, copy_bandwidth

SPLITS = (1, 2, 3, 4, 6, 8)


def point(
    a: torch.Tensor,
    b: torch.Tensor,
    w_bytes: int,
    budget_s: float,
    splits: tuple[int, ...] = SPLITS,
    rows: tuple[int, ...] = (128,),
) -> dict[str, object]:
    """a @ b timed: cuBLAS, the auto path, the auto path without the narrow tiles, the narrow tile
    with its own choices ("narrow"), and at each of `splits` ("s2": 128-row tiles; "r64s2": 64-row
    ones; "r64": 64-row ones, its own splits) in tiles of each of `rows`."""
    gemm = load_extension("gemm")
    side = gemm._gemm_narrow_side()

    def before() -> torch.Tensor:
        gemm._set_gemm_narrow_side(0)
        try:
            return lltm_ext.gemm(a, b)
        finally:
            gemm._set_gemm_narrow_side(side)

    fns = {
        "cublas": lambda: a @ b,
        "auto": lambda: lltm_ext.gemm(a, b),
        "before": before,
        "narrow": lambda: gemm._gemm_narrow(a, b),
    }
    for r in rows:
        tag = "" if r == 128 else f"r{r}"
        if tag:
            fns[tag] = lambda r=r: gemm._gemm_narrow(a, b, rows=r)
        for s in splits:
            fns[f"{tag}s{s}"] = lambda s=s, r=r: gemm._gemm_narrow(a, b, splits=s, rows=r)
    return timed_row(a, b, fns, budget_s, w_bytes=w_bytes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", help="where to write the rows")
    parser.add_argument("--ms", default="1,8,16")
    parser.add_argument("--layouts", default="t,n")
    parser.add_argument("--random", type=int, default=40, help="random shapes, a side <= 16")
    parser.add_argument("--max-side", type=int, default=16, help="the random shapes' largest side")
    parser.add_argument("--splits", default=",".join(map(str, SPLITS)), help="forced K splits")
    parser.add_argument("--rows", default="128", help="tile rows to time (64, 128)")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    parser.add_argument("--budget", type=float, default=0.1, help="seconds of samples per point")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    splits = tuple(int(v) for v in args.splits.split(",") if v)
    tile_rows = tuple(int(v) for v in args.rows.split(",") if v)
    dev = torch.device("cuda")
    layers = LINEAR_LAYERS["cuda"]
    copy = copy_bandwidth(max(k * n for k, n in layers) * 2, dev, 0.05, flush="read")
    print(f"copy bandwidth {copy.gbps:.0f} GB/s", flush=True)
    rows: list[dict[str, object]] = []

    def record(row: dict[str, object], what: str) -> None:
        row["what"] = what
        row["copy_gbps"] = copy.gbps
        rows.append(row)
        us = row["us"]
        best = min((v, n) for n, v in us.items() if n not in ("cublas", "auto", "before"))
        bw = row["w_bytes"] / us["narrow"] / 1e3 / copy.gbps
        print(
            f"{what} {row.get('layout')} {row['M']}x{row['N']}x{row['K']}: cublas "
            f"{us['cublas']:.1f} auto {us['auto']:.1f} before {us['before']:.1f} narrow "
            f"{us['narrow']:.1f} (bw {bw:.2f}) best {best[1]} {best[0]:.1f} us",
            flush=True,
        )
        with open(args.json, "w") as f:
            json.dump(rows, f)

    gen = torch.Generator(device=dev).manual_seed(0)
    ms = [int(m) for m in args.ms.split(",")]
    for layout in args.layouts.split(","):
        for k, n in layers:
            w = (torch.rand(n, k, device=dev, generator=gen) * 2 - 1).mul_(k**-0.5).to(dtype)
            wv = w.t() if layout == "t" else w.t().contiguous()  # (K, N)
            x_all = torch.randn(max(ms), k, device=dev, generator=gen).to(dtype)
            for m in ms:
                row = point(x_all[:m], wv, w.numel() * 2, args.budget, splits, tile_rows)
                row["layout"] = layout
                record(row, "linear")
            del w, wv, x_all
    rng = random.Random(args.seed)
    for _ in range(args.random):
        s = rng.randint(1, args.max_side)
        k = 8 * int(math.exp(rng.uniform(math.log(8), math.log(2048))))
        big = max(8, int(math.exp(rng.uniform(math.log(64), math.log(32768)))) // 8 * 8)
        layout = rng.choice("tn")
        w = torch.randn(big, k, device=dev, generator=gen).to(dtype)
        wv = w.t() if layout == "t" else w.t().contiguous()
        x = torch.randn(s, k, device=dev, generator=gen).to(dtype)
        a, b = (wv.t(), x.t()) if rng.random() < 0.3 else (x, wv)
        row = point(a, b, w.numel() * 2, args.budget, splits, tile_rows)
        row["layout"] = layout
        record(row, "random")
    print(f"wrote {len(rows)} rows to {args.json}")


if __name__ == "__main__":
    main()
