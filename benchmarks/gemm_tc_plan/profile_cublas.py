"""Which cuBLAS kernels torch.mm runs, with their grids and times (torch.profiler's CUDA trace),
at the linear layers of `lltm-ext bench --linear` (bfloat16, x @ W.T "t" and x @ W "n", M = 16 to
2048) and at 3000x5000x2000 in every layout (bfloat16, float16): the tile shapes and cluster
shapes that cuBLAS's kernel names carry (nvjet_sm90_..._<tile>_<k>x<stages>_<cluster>_...).

    python benchmarks/gemm_tc_plan/profile_cublas.py cublas_kernels.json
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import tempfile
from collections.abc import Callable
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from lltm_ext.cli.linear import LINEAR_LAYERS

MS = (16, 32, 128, 512, 2048)


def kernels(fn: Callable[[], Any], reps: int = 5) -> list[dict[str, Any]]:
    """The CUDA kernels of `reps` calls of fn after warm-up: name, grid, block, shared memory,
    registers, the median time (us) and how many ran."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            trace = json.load(f)
    finally:
        os.remove(path)
    found: dict[str, dict[str, Any]] = {}
    for e in trace["traceEvents"]:
        if e.get("cat") != "kernel":
            continue
        a = e.get("args", {})
        k = found.setdefault(e["name"], {
            "grid": a.get("grid"), "block": a.get("block"), "smem": a.get("shared memory"),
            "regs": a.get("registers per thread"), "dur": [],
        })  # fmt: skip
        k["dur"].append(e["dur"])
    return [
        {"name": name, **{k: v for k, v in d.items() if k != "dur"},
         "us": sorted(d["dur"])[len(d["dur"]) // 2], "count": len(d["dur"])}
        for name, d in found.items()
    ]  # fmt: skip


def record(rows: list[dict[str, Any]], what: dict[str, Any], fn: Callable[[], Any]) -> None:
    """Appends `what` with fn's kernels to rows, and prints them."""
    rows.append({**what, "kernels": kernels(fn)})
    found = [(q["name"][:100], q["grid"], q["us"]) for q in rows[-1]["kernels"]]
    print(what, found, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", help="where to write the rows")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("profile_cublas.py: profiles CUDA kernels, but torch sees no GPU")
    dev, rows = torch.device("cuda"), []
    bf16 = torch.bfloat16
    for layout in ("t", "n"):
        for k, n in LINEAR_LAYERS["cuda"]:
            w = torch.randn(*((n, k) if layout == "t" else (k, n)), device=dev, dtype=bf16)
            wt = w.t() if layout == "t" else w  # (K, N)
            for m in MS:
                x = torch.randn(m, k, device=dev, dtype=bf16)
                what = {"dtype": str(bf16), "layout": layout, "M": m, "K": k, "N": n}
                record(rows, what, functools.partial(torch.matmul, x, wt))
    m, n, k = 3000, 5000, 2000
    for dtype in (torch.bfloat16, torch.float16):
        for la, lb in itertools.product("nt", "nt"):
            a = torch.randn(m, k, device=dev) if la == "n" else torch.randn(k, m, device=dev).t()
            b = torch.randn(k, n, device=dev) if lb == "n" else torch.randn(n, k, device=dev).t()
            what = {"dtype": str(dtype), "layout": la + lb, "M": m, "K": k, "N": n}
            record(rows, what, functools.partial(torch.matmul, a.to(dtype), b.to(dtype)))
    with open(args.json, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
