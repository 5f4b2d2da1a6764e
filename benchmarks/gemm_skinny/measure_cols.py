"""Times the skinny column kernel (src/gemm/tiles/skinny_mma.cuh: x @ W with W stored (K, N)) in
blocks of 64 and of 32 columns against cuBLAS and the auto path: the data run_skinny's block
width rule (src/gemm/gemm_cuda_host.cpp) is set from.

Points: the linear layers of ``lltm-ext bench --linear`` at each M of --ms in layout n (x @ W,
W (K, N)), and --random shapes with a small side of 1 to 16 (K a multiple of 8 from 64 to 16384,
the large side 64 to 32768, a multiple of 8), x @ W or its mirror W.T @ x.T. At each point, one
interleaved timing (``lltm_ext.cli.sweep.time_medians``, flush="read", as the linear bench):
cuBLAS, the auto path, the column kernel at 64 and at 32 columns (its own warps and splits), each
checked against float64 first. One JSON row per point, with the copy bandwidth of the run.

    python benchmarks/gemm_skinny/measure_cols.py cols.json --random 40
"""

from __future__ import annotations

import argparse
import json
import math
import random

import torch
from rows import linear_setup, timed_row, weights_kn  # this folder's (run as a script from here)

import lltm_ext
from lltm_ext._extension import load_extension


def point(a: torch.Tensor, b: torch.Tensor, w_bytes: int, budget_s: float) -> dict[str, object]:
    """a @ b timed: cuBLAS, the auto path, the column kernel at 64 and 32 columns."""
    gemm = load_extension("gemm")
    fns = {
        "cublas": lambda: a @ b,
        "auto": lambda: lltm_ext.gemm(a, b),
        "c64": lambda: gemm._gemm_skinny(a, b, cols=64),
        "c32": lambda: gemm._gemm_skinny(a, b, cols=32),
    }
    return timed_row(a, b, fns, budget_s, w_bytes=w_bytes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", help="where to write the rows")
    parser.add_argument("--ms", default="1,4,8,12,16,24,32")
    parser.add_argument("--random", type=int, default=40, help="random shapes, a side <= 16")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--dtypes", default="bfloat16,float16")
    parser.add_argument("--budget", type=float, default=0.1, help="seconds of samples per point")
    args = parser.parse_args()
    dev, layers, copy_gbps = linear_setup()
    rows: list[dict[str, object]] = []

    def record(row: dict[str, object], what: str, dtype: str) -> None:
        row["what"] = what
        row["dtype"] = dtype
        row["copy_gbps"] = copy_gbps
        rows.append(row)
        us = row["us"]
        print(
            f"{what} {dtype} {row['M']}x{row['N']}x{row['K']}: cublas {us['cublas']:.1f} auto "
            f"{us['auto']:.1f} c64 {us['c64']:.1f} c32 {us['c32']:.1f} us",
            flush=True,
        )
        with open(args.json, "w") as f:
            json.dump(rows, f)

    gen = torch.Generator(device=dev).manual_seed(0)
    ms = [int(m) for m in args.ms.split(",")]
    for name in args.dtypes.split(","):
        dtype = getattr(torch, name)
        for _, _, w, x_all in weights_kn(layers, max(ms), dtype, gen):
            for m in ms:
                record(point(x_all[:m], w, w.numel() * 2, args.budget), "linear", name)
        rng = random.Random(args.seed)
        for _ in range(args.random):
            s = rng.randint(1, 16)
            k = 8 * int(math.exp(rng.uniform(math.log(8), math.log(2048))))
            big = max(8, int(math.exp(rng.uniform(math.log(64), math.log(32768)))) // 8 * 8)
            w = torch.randn(k, big, device=dev, generator=gen).to(dtype)
            x = torch.randn(s, k, device=dev, generator=gen).to(dtype)
            a, b = (w.t(), x.t()) if rng.random() < 0.3 else (x, w)
            record(point(a, b, w.numel() * 2, args.budget), "random", name)
    print(f"wrote {len(rows)} rows to {args.json}")


if __name__ == "__main__":
    main()
