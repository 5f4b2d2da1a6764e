"""Times the skinny column kernel (src/gemm/tiles/skinny_mma.cuh: x @ W with W stored (K, N)) at
a small side past 8, over its block widths, K splits and warps, against cuBLAS, the auto path and
the kernels it runs there otherwise (the wgmma kernel's narrow tile up to a side of 16, then the
tensor-core planner's choice): the data skinny_cols_one_wave (src/gemm/gemm_cuda_host.cpp) is set
from.

Points: the linear layers of ``lltm-ext bench --linear`` in layout n (x @ W, W (K, N)) at each M
of --ms, and with --ls and --ks, x @ W at each large side L and K of those at each M. At each
point, one interleaved timing (``lltm_ext.cli.sweep.time_medians``, flush="read", as the linear
bench) of cuBLAS, the auto path, "other" (the narrow tile or the planner's tensor-core kernel) and
the column kernel at each of cols x splits x warps (a variant the kernel refuses, too many warps
for shared memory, left out; --cols "" for none), each checked against float64 first. One JSON
row per point, with the copy bandwidth of the run.

    python benchmarks/gemm_skinny/measure_side.py side.json            # h100_side_variants.json
    python benchmarks/gemm_skinny/measure_side.py grid.json --cols "" --ms 9,12,16,20,24,32 \
        --ls 2048,2560,3072,3584,4096,4224 --ks 2048,4096,8192          # h100_one_wave.json

(benchmarks/results/gemm_skinny; in h100_one_wave.json "auto" is the column kernel at every
one-wave point, the rule before its bound on K; h100_one_wave_final.json, the rule as it is:
--ms 9,16,20,24,32 --ls 2048,4096 --ks 4096,8192; h100_one_wave_flush.json, two runs' rows, each
row's flush_mode: --cols "" --ms 20,32 --ls 2048,3072,4096 --ks 2048,4096 --budget 0.08 with
--flush write, then read.)
"""

from __future__ import annotations

import argparse
import itertools
import json

import torch
from rows import linear_setup, timed_row, weights_kn  # this folder's (run as a script from here)

import lltm_ext
from lltm_ext._extension import load_extension


def variants(a: torch.Tensor, b: torch.Tensor, grid: list[tuple[int, int, int]]) -> dict:
    """cuBLAS, the auto path, the kernel it runs otherwise and the column kernel at each
    (cols, splits, warps) of `grid`."""
    gemm = load_extension("gemm")
    side = min(a.size(0), b.size(1))
    fns = {
        "cublas": lambda: a @ b,
        "auto": lambda: lltm_ext.gemm(a, b),
        "other": (lambda: gemm._gemm_narrow(a, b))
        if side <= 16
        else (lambda: gemm._gemm_tensor_core(a, b)),
    }
    for cols, splits, warps in grid:
        fns[f"c{cols}s{splits}w{warps}"] = lambda c=cols, s=splits, w=warps: gemm._gemm_skinny(
            a, b, cols=c, splits=s, warps=w
        )
    return fns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", help="where to write the rows")
    parser.add_argument("--ms", default="12,16,20,24,28,32")
    parser.add_argument("--cols", default="32,64")
    parser.add_argument("--splits", default="1,2,4")
    parser.add_argument("--warps", default="4,8")
    parser.add_argument("--ls", default="", help="large sides of x @ W points (with --ks)")
    parser.add_argument("--ks", default="", help="K of those points")
    parser.add_argument("--dtypes", default="bfloat16")
    parser.add_argument("--budget", type=float, default=0.1, help="seconds of samples per point")
    parser.add_argument(
        "--flush",
        default="read",
        choices=["read", "write"],
        help="how L2 is emptied before each sample (time_medians): read leaves it clean, write "
        "(the linear bench's ratios) full of dirty lines",
    )
    args = parser.parse_args()
    dev, layers, copy_gbps = linear_setup()
    ints = [[int(v) for v in s.split(",") if v] for s in (args.cols, args.splits, args.warps)]
    grid = list(itertools.product(*ints))
    points = list(layers) + [
        (int(k), int(n)) for n in args.ls.split(",") if n for k in args.ks.split(",") if k
    ]
    names = [f"c{c}s{s}w{w}" for c, s, w in grid]
    rows: list[dict[str, object]] = []
    gen = torch.Generator(device=dev).manual_seed(0)
    ms = [int(m) for m in args.ms.split(",")]
    for name in args.dtypes.split(","):
        dtype = getattr(torch, name)
        for k, n, w, x_all in weights_kn(points, max(ms), dtype, gen):
            for m in ms:
                a = x_all[:m]
                row = timed_row(
                    a,
                    w,
                    variants(a, w, grid),
                    args.budget,
                    optional=tuple(names),
                    flush=args.flush,
                    what="linear" if (k, n) in layers else "grid",
                    dtype=name,
                    copy_gbps=copy_gbps,
                    w_bytes=w.numel() * 2,
                    flush_mode=args.flush,
                )
                rows.append(row)
                us = row["us"]
                line = " ".join(
                    f"{v} {t:.1f}" for v, t in us.items() if v[0] != "c" or v == "cublas"
                )
                cols = [v for v in us if v[0] == "c" and v != "cublas"]
                best = min(cols, key=us.get) if cols else None
                tail = f" best {best} {us[best]:.1f}" if best else ""
                print(f"{name} {m}x{n}x{k}: {line}{tail} us", flush=True)
                with open(args.json, "w") as f:
                    json.dump(rows, f)
    print(f"wrote {len(rows)} rows to {args.json}")


if __name__ == "__main__":
    main()
