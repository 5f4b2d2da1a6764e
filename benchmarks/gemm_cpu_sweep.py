"""CPU GEMM at random shapes: lltm_ext's kernel against torch.mm, interleaved, per dtype.

An experiment (not shipped): shapes M, N, K each drawn log-uniformly in [1, --max-dim] (integers),
rejected above --flop-cap (2*M*N*K), in the four layouts (a @ b, a @ b.T, a.T @ b, a.T @ b.T: "t"
is a transposed view of a row-major matrix, read in place), from a fixed --seed. For each shape the
two calls are timed alternately in one process: a sample is the mean time per call over a block of
calls (the block sized to ~--block-ms), samples alternate ours / torch's after a warm-up, and each
side's time is the median of its samples. ratio = torch time / ours (> 1: ours is faster).

Prints, per dtype, the distribution of the ratios (geometric mean, 10th percentile, minimum,
median) and the worst shapes, and writes everything to --json. --call picks what is timed:
``op`` (default): ``ext.gemm(a, b)`` against ``torch.mm(a, b)`` (both allocate C); ``out``:
``ext.gemm_out(a, b, c)`` against ``torch.mm(a, b, out=c)``; ``api``: the public
``lltm_ext.gemm(a, b)`` (its Python autograd layer included) against ``torch.mm(a, b)``.

    python benchmarks/gemm_cpu_sweep.py --threads 1 --json sweep_t1.json
    taskset -c 0 python benchmarks/gemm_cpu_sweep.py --threads 1 --dtypes float32 --shapes 50
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

import lltm_ext
from lltm_ext._extension import load_extension

DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
LAYOUTS = ("nn", "nt", "tn", "tt")
LAYOUT_TEXT = {"nn": "a @ b", "nt": "a @ b.T", "tn": "a.T @ b", "tt": "a.T @ b.T"}


def draw_shapes(
    n: int, seed: int, max_dim: int, flop_cap: float
) -> list[tuple[int, int, int, str]]:
    """n shapes (M, N, K, layout): each dimension log-uniform in [1, max_dim], 2*M*N*K <= flop_cap
    (rejection), the layout uniform over the four."""
    rng = random.Random(seed)
    shapes: list[tuple[int, int, int, str]] = []
    while len(shapes) < n:
        m, n_, k = (round(math.exp(rng.uniform(0.0, math.log(max_dim)))) for _ in range(3))
        layout = rng.choice(LAYOUTS)
        if 2.0 * m * n_ * k <= flop_cap:
            shapes.append((m, n_, k, layout))
    return shapes


def operands(m: int, n: int, k: int, layout: str, dtype: torch.dtype, seed: int):
    """a (m, k) and b (k, n), uniform in [-1, 1): "t" makes that operand a transposed view."""
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape: int) -> torch.Tensor:
        return (torch.rand(*shape, generator=gen) * 2 - 1).to(dtype)

    a = rand(k, m).t() if layout[0] == "t" else rand(m, k)
    b = rand(n, k).t() if layout[1] == "t" else rand(k, n)
    return a, b


def block_size(fn: Callable[[], Any], block_s: float) -> int:
    """Calls per block so that a block takes about block_s seconds (at least 1)."""
    fn()
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t0
        if dt >= block_s / 4 or n >= 1 << 20:
            return max(1, round(n * block_s / max(dt, 1e-9)))
        n *= 4


def time_pair(
    ours: Callable[[], Any],
    ref: Callable[[], Any],
    block_s: float,
    budget_s: float,
    min_samples: int,
) -> tuple[list[float], list[float]]:
    """Per-call seconds of ours and ref: alternate blocks (ours first, then ref, swapping the order
    each round) until budget_s is spent and each side has min_samples samples."""
    t0 = time.perf_counter()
    n = max(block_size(ours, block_s), block_size(ref, block_s))
    slow = time.perf_counter() - t0 > budget_s  # calls of ~0.1 s or more: fewer samples
    for _ in range(1 if slow else 2):  # warm-up blocks
        for fn in (ours, ref):
            for _ in range(n):
                fn()
    if slow:
        min_samples, budget_s = min(min_samples, 3), 0.0
    s_ours: list[float] = []
    s_ref: list[float] = []
    start = time.perf_counter()
    r = 0
    while len(s_ours) < min_samples or time.perf_counter() - start < budget_s:
        order = ((ours, s_ours), (ref, s_ref)) if r % 2 == 0 else ((ref, s_ref), (ours, s_ours))
        for fn, out in order:
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            out.append((time.perf_counter() - t0) / n)
        r += 1
        if len(s_ours) >= 200:
            break
    return s_ours, s_ref


def calls(
    call: str, ext: Any, a: torch.Tensor, b: torch.Tensor
) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(ours, torch's) for --call: "op" ext.gemm / torch.mm, "out" into preallocated outputs,
    "api" the public lltm_ext.gemm."""
    if call == "out":
        c1 = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype)
        c2 = torch.empty_like(c1)
        return (lambda: ext.gemm_out(a, b, c1)), (lambda: torch.mm(a, b, out=c2))
    if call == "api":
        return (lambda: lltm_ext.gemm(a, b)), (lambda: torch.mm(a, b))
    return (lambda: ext.gemm(a, b)), (lambda: torch.mm(a, b))


def quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summary(ratios: list[float]) -> dict[str, float]:
    return {
        "geomean": math.exp(statistics.fmean(math.log(r) for r in ratios)),
        "p10": quantile(ratios, 0.10),
        "min": min(ratios),
        "median": statistics.median(ratios),
        "max": max(ratios),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--shapes", type=int, default=200, help="shapes per dtype (default 200)")
    p.add_argument("--seed", type=int, default=29, help="shape seed (default 29)")
    p.add_argument("--max-dim", type=int, default=12000, help="largest M, N, K (default 12000)")
    p.add_argument("--flop-cap", type=float, default=2e9, help="max 2*M*N*K (default 2e9)")
    p.add_argument("--dtypes", default="float32,float64,bfloat16,float16", help="comma list")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: default)")
    p.add_argument("--call", choices=("op", "out", "api"), default="op", help="what is timed")
    p.add_argument("--block-ms", type=float, default=2.0, help="target block time (default 2)")
    p.add_argument("--budget", type=float, default=0.4, help="seconds per shape (default 0.4)")
    p.add_argument("--min-samples", type=int, default=7, help="samples per side (default 7)")
    p.add_argument("--worst", type=int, default=10, help="worst shapes printed (default 10)")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    ext = load_extension("gemm")
    shapes = draw_shapes(args.shapes, args.seed, args.max_dim, args.flop_cap)
    dtypes = [DTYPES[d.strip()] for d in args.dtypes.split(",") if d.strip()]
    print(
        f"torch {torch.__version__}, lltm_ext {lltm_ext.__version__}, {threads} thread(s), "
        f"seed {args.seed}, {len(shapes)} shapes, dims log-uniform in [1, {args.max_dim}], "
        f"2*M*N*K <= {args.flop_cap:.3g}, call '{args.call}'",
        flush=True,
    )
    results: dict[str, Any] = {}
    for dtype in dtypes:
        name = str(dtype)[6:]
        rows = []
        t_start = time.perf_counter()
        for idx, (m, n, k, layout) in enumerate(shapes):
            a, b = operands(m, n, k, layout, dtype, args.seed * 1000003 + idx)
            ours, ref = calls(args.call, ext, a, b)
            with torch.no_grad():
                got, want = ext.gemm(a, b).double(), torch.mm(a.double(), b.double())
                denom = want.norm().item()
                err = (got - want).norm().item() / denom if denom > 0 else 0.0
                s_ours, s_ref = time_pair(
                    ours, ref, args.block_ms / 1e3, args.budget, args.min_samples
                )
            t_ours, t_ref = statistics.median(s_ours), statistics.median(s_ref)
            rows.append(
                dict(
                    m=m,
                    n=n,
                    k=k,
                    layout=layout,
                    ours_us=t_ours * 1e6,
                    torch_us=t_ref * 1e6,
                    ratio=t_ref / t_ours,
                    samples=len(s_ours),
                    rel_err=err,
                )
            )
            if (idx + 1) % 50 == 0:
                print(f"  {name}: {idx + 1}/{len(shapes)} shapes", flush=True)
        ratios = [r["ratio"] for r in rows]
        summ = summary(ratios)
        elapsed = time.perf_counter() - t_start
        print(
            f"\n{name}: {len(rows)} shapes, {threads} thread(s), {elapsed:.0f} s: geomean "
            f"{summ['geomean']:.3f}x  p10 {summ['p10']:.3f}x  min {summ['min']:.3f}x  median "
            f"{summ['median']:.3f}x  max {summ['max']:.3f}x  (largest rel. error "
            f"{max(r['rel_err'] for r in rows):.2e})"
        )
        print(f"  worst {args.worst}:")
        print("       M      N      K  layout       ours us   torch us   ratio")
        for r in sorted(rows, key=lambda r: r["ratio"])[: args.worst]:
            print(
                f"  {r['m']:>6} {r['n']:>6} {r['k']:>6}  {LAYOUT_TEXT[r['layout']]:<10}"
                f"{r['ours_us']:>11.1f} {r['torch_us']:>10.1f} {r['ratio']:>7.3f}"
            )
        sys.stdout.flush()
        results[name] = {"summary": summ, "shapes": rows}
    if args.json:
        meta = {
            "command": " ".join([sys.executable, *sys.argv]),
            "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "torch": torch.__version__,
            "lltm_ext": lltm_ext.__version__,
            "cpu": platform.processor() or platform.machine(),
            "cpu_isa": ext._cpu_kernel_isa(),
            "threads": threads,
            "seed": args.seed,
            "max_dim": args.max_dim,
            "flop_cap": args.flop_cap,
            "call": args.call,
        }
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
