"""Times the GEMM's skinny kernel (src/gemm/tiles/skinny_mma.cuh) at each of its block sizes and
K splits against cuBLAS and lltm_ext.gemm's auto path: the data its host rules (run_skinny and the
auto path's range in src/gemm/gemm_cuda_host.cpp) are set from.

Points: the linear layers of ``lltm-ext bench --linear`` (x @ W.T, W (N, K) as nn.Linear stores
it) at each M of --ms, and --random shapes with a small side of 1 to 32 (K a multiple of 8 from 64
to 16384, the large side 64 to 32768, either side small). At each point, in one interleaved
timing (``lltm_ext.cli.sweep.time_medians``: L2 flushed before every call): cuBLAS, the auto path,
the auto path without the skinny kernel ("before"), and the skinny kernel forced at every
(warps, splits) of the grid below (0: its own choice), each checked against float64
first. One JSON row per point, with the copy bandwidth of the run.

    python benchmarks/gemm_skinny/measure.py skinny.json --random 40
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

WARPS = (2, 4, 8)
SPLITS = (0, 1, 2, 4)


def variants() -> list[tuple[int, int]]:
    """(warps, splits) forced: the kernel's own choice, then the grid of fixed ones."""
    return [(0, 0)] + [(w, s) for w in WARPS for s in SPLITS]


def point(
    x: torch.Tensor, w: torch.Tensor, small_n: bool, budget_s: float, layout: str = "t"
) -> dict[str, object]:
    """x (S, K), w (L, K) (layout t) or (K, L) (layout n): the product x @ w.T (small M), or with
    small_n w @ x.T; layout n x @ w, or w.T @ x.T; timed."""
    gemm = load_extension("gemm")
    if layout == "n":
        a, b = (w.t(), x.t()) if small_n else (x, w)
    else:
        a, b = (w, x.t()) if small_n else (x, w.t())
    side = gemm._gemm_skinny_side()

    def before() -> torch.Tensor:  # the auto path without the skinny kernel
        gemm._set_gemm_skinny_side(0)
        try:
            return lltm_ext.gemm(a, b)
        finally:
            gemm._set_gemm_skinny_side(side)

    fns = {"cublas": lambda: a @ b, "auto": lambda: lltm_ext.gemm(a, b), "before": before}
    for wp, s in variants():
        fns[f"w{wp}s{s}"] = lambda wp=wp, s=s: gemm._gemm_skinny(a, b, warps=wp, splits=s)
    # A variant with more warps than the block's shared memory holds raises: left out.
    return timed_row(
        a,
        b,
        fns,
        budget_s,
        "write",
        tuple(fns)[3:],
        small_n=small_n,
        layout=layout,
        w_bytes=w.numel() * w.element_size(),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", help="where to write the rows")
    parser.add_argument("--ms", default="1,2,4,8,16,24,32")
    parser.add_argument("--random", type=int, default=40, help="random skinny shapes")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    parser.add_argument("--budget", type=float, default=0.2, help="seconds of samples per point")
    parser.add_argument(
        "--layout", default="t", choices=["t", "n"], help="the weight stored (N, K) or (K, N)"
    )
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    dev = torch.device("cuda")
    layers = LINEAR_LAYERS["cuda"]
    largest = max(k * n for k, n in layers) * 2
    copy = copy_bandwidth(largest, dev, 0.05)
    print(f"copy bandwidth {copy.gbps:.0f} GB/s", flush=True)
    rows: list[dict[str, object]] = []

    def record(row: dict[str, object], what: str) -> None:
        row["what"] = what
        row["copy_gbps"] = copy.gbps
        rows.append(row)
        us = row["us"]
        best = min((v, n) for n, v in us.items() if n.startswith("w"))
        print(
            f"{what} {row['M']}x{row['N']}x{row['K']}: cublas {us['cublas']:.1f} auto "
            f"{us['auto']:.1f} before {us['before']:.1f} skinny(auto) {us['w0s0']:.1f} "
            f"best {best[1]} {best[0]:.1f} us; "
            f"own bw {row['w_bytes'] / us['w0s0'] / 1e3 / copy.gbps:.2f}",
            flush=True,
        )
        with open(args.json, "w") as f:
            json.dump(rows, f)

    gen = torch.Generator(device=dev).manual_seed(0)
    ms = [int(m) for m in args.ms.split(",")]
    for k, n in layers:
        w = (torch.rand(n, k, device=dev, generator=gen) * 2 - 1).mul_(k**-0.5).to(dtype)
        if args.layout == "n":
            w = w.t().contiguous()
        x_all = torch.randn(max(ms), k, device=dev, generator=gen).to(dtype)
        for m in ms:
            record(point(x_all[:m], w, False, args.budget, args.layout), "linear")
        del w, x_all
    rng = random.Random(args.seed)
    for _ in range(args.random):
        s = rng.randint(1, 32)
        k = 8 * int(math.exp(rng.uniform(math.log(8), math.log(2048))))
        big = int(math.exp(rng.uniform(math.log(64), math.log(32768))))
        if args.layout == "n":  # the column kernel's side: a multiple of 8
            big = max(8, big // 8 * 8)
        w = torch.randn(big, k, device=dev, generator=gen).to(dtype)
        if args.layout == "n":
            w = w.t().contiguous()
        x = torch.randn(s, k, device=dev, generator=gen).to(dtype)
        record(point(x, w, rng.random() < 0.3, args.budget, args.layout), "random")
    print(f"wrote {len(rows)} rows to {args.json}")


if __name__ == "__main__":
    main()
