"""CPU GEMM: every path of lltm_ext's CPU kernels forced on given shapes, beside auto and torch.mm.

An experiment (not shipped), for the planner's rules (src/gemm/cpu/driver.h): for each shape, auto
and then each path forced through ``_set_cpu_knobs`` where it can run the shape (a forced path that
cannot falls back to packed and is not timed), each timed in one process beside ``torch.mm``
(``lltm_ext.cli.sweep.time_medians``: blocks of calls, interleaved, medians; torch.mm's time is
the one beside auto). Each row records what ran (the path, and whether as C^T = B^T A^T) and the
error of auto's result against float64. Shapes are ``--shapes`` (``MxNxK:layout``, layout as the
sweeps': "t" a transposed view of a row-major operand) and/or ``--linear`` (``x @ W.T`` with W
(N, K) as nn.Linear stores it, over the grid ``--ms`` x ``--ks`` x ``--ns``).

    python benchmarks/gemm_cpu_paths.py --threads 1 --linear --ms 9,16,32 --ks 128,1024 --ns 512
    python benchmarks/gemm_cpu_paths.py --shapes 245x10x614:nt,31x32x144:tt --json paths.json
"""

from __future__ import annotations

import argparse
import itertools
import sys
from typing import Any

import torch

from lltm_ext._extension import load_extension
from lltm_ext.cli.bench import write_json
from lltm_ext.cli.sweep import time_medians

PATHS = ("direct", "dot", "packed", "rows")
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}


def operands(m: int, n: int, k: int, layout: str, dtype: torch.dtype, seed: int = 0):
    """a (m, k) and b (k, n), normal values; "t" makes that operand a transposed view."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(k, m, generator=gen) if layout[0] == "t" else torch.randn(m, k, generator=gen)
    b = torch.randn(n, k, generator=gen) if layout[1] == "t" else torch.randn(k, n, generator=gen)
    a, b = a.to(dtype), b.to(dtype)
    return (a.t() if layout[0] == "t" else a), (b.t() if layout[1] == "t" else b)


def measure(
    ext: Any, m: int, n: int, k: int, layout: str, dtype: torch.dtype, budget: float
) -> dict[str, Any]:
    """One shape: auto's path and time, each forced path's, torch.mm's (us)."""
    a, b = operands(m, n, k, layout, dtype)
    ran: dict[str, list[Any]] = {}
    us: dict[str, float] = {}
    samples = 0
    for path in ("auto", *PATHS):
        ext._set_cpu_knobs(path=path)
        ext.gemm(a, b)
        what = ext._cpu_last_run()
        if path != "auto" and what[0] != path:
            continue
        ran[path] = [what[0], bool(what[1])]
        # (the knobs stay set while this path and torch.mm are timed in turn)
        (ours, ref), samples = time_medians(
            [lambda: ext.gemm(a, b), lambda: torch.mm(a, b)], torch.device("cpu"), budget
        )
        us[path] = round(ours * 1e6, 2)
        if path == "auto":
            us["torch"] = round(ref * 1e6, 2)
    ext._set_cpu_knobs(path="auto")
    c64 = a.double() @ b.double()
    err = float((ext.gemm(a, b).double() - c64).abs().max() / c64.abs().max().clamp_min(1e-300))
    return {
        "M": m,
        "N": n,
        "K": k,
        "layout": layout,
        "dtype": str(dtype)[6:],
        "auto": ran["auto"],
        "ran": ran,
        "us": us,
        "ratio_auto": round(us["torch"] / us["auto"], 3),
        "auto_err": err,
        "samples": samples,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default="", help="comma list of MxNxK:layout")
    p.add_argument("--linear", action="store_true", help="x @ W.T over --ms x --ks x --ns")
    p.add_argument("--ms", default="9,16,24,32", help="rows of x (default 9,16,24,32)")
    p.add_argument("--ks", default="24,64,128,256,512,1000,1024", help="K (in features)")
    p.add_argument("--ns", default="64,512", help="N (out features)")
    p.add_argument("--dtypes", default="float32", help="comma list of float32,float64,bfloat16")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    p.add_argument("--budget", type=float, default=0.3, help="seconds per shape (default 0.3)")
    p.add_argument("--json", help="write the rows and the environment here")
    args = p.parse_args(argv)

    torch.set_num_threads(args.threads)
    ext = load_extension("gemm")
    shapes = []
    for spec in filter(None, args.shapes.split(",")):
        dims, layout = spec.split(":")
        m, n, k = (int(v) for v in dims.split("x"))
        shapes.append((m, n, k, layout))
    if args.linear:
        ints = [[int(v) for v in s.split(",")] for s in (args.ms, args.ks, args.ns)]
        shapes += [(m, n, k, "nt") for m, k, n in itertools.product(*ints)]
    rows = []
    for dtype_name in args.dtypes.split(","):
        for m, n, k, layout in shapes:
            row = measure(ext, m, n, k, layout, DTYPES[dtype_name], args.budget)
            rows.append(row)
            paths = " ".join(f"{name} {t:9.1f}" for name, t in row["us"].items())
            auto = row["auto"][0] + (" C^T" if row["auto"][1] else "")
            print(f"{dtype_name:8s} {m}x{n}x{k} {layout}  auto={auto:10s} {paths}", flush=True)
    if args.json:
        write_json(args.json, rows, torch.device("cpu"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
