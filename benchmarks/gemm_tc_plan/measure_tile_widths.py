"""Times the wgmma kernel at every block tile width (64, 128, 256 and gemm_tc_plan.h's
kWgmmaWideTiles) and its 256-row tile ("256x152": kWgmmaTallTiles, 16-bit with B K-major), each
forced (`_gemm_tensor_core`, the planner's K splits at that width), beside
the planner's pick (`lltm_ext.gemm`) and cuBLAS, interleaved, each checked against float64: the
measurements behind the planner's width rule (docs/decisions.md#wgmma-width).

Shapes: 3000x5000x2000 in every layout and type, the linear layers of `lltm-ext bench --linear`
at M = 512, 2048 and 8192 (x @ W.T, bfloat16), a few products whose grids end in a partial round,
and random ones (M, N of 256-8192, K of 256-8192, `a @ b.T`, bfloat16).

    python benchmarks/gemm_tc_plan/measure_tile_widths.py widths.json [--random 24 --seed 5]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from collections.abc import Callable
from typing import Any

import torch

import lltm_ext
from lltm_ext._extension import load_extension
from lltm_ext.cli.linear import LINEAR_LAYERS
from lltm_ext.cli.sweep import time_medians

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "tf32": torch.float32}


def widths(ext: Any) -> list[int]:
    """64, 128, 256 and the wide widths the build has (from the forcing check's error text)."""
    a = torch.ones(8, 8, dtype=torch.bfloat16, device="cuda")
    out = [64, 128, 256]
    for w in range(136, 256, 8):
        try:
            ext._gemm_tensor_core(a, a.t(), "wgmma", tile=w)  # B K-major: every width runs
        except RuntimeError:
            continue
        out.append(w)
    return sorted(out)


def operands(m: int, n: int, k: int, layout: str, dtype: torch.dtype):
    """a (m x k) and b (k x n); layout "nt": b a transposed view of a row-major (n, k)."""
    dev = torch.device("cuda")
    a = torch.randn(k, m, device=dev).t() if layout[0] == "t" else torch.randn(m, k, device=dev)
    b = torch.randn(n, k, device=dev).t() if layout[1] == "t" else torch.randn(k, n, device=dev)
    return a.to(dtype), b.to(dtype)


def measure(ext: Any, ws: list[int], m: int, n: int, k: int, layout: str, dtype: str,
            budget: float, what: str) -> dict[str, Any]:  # fmt: skip
    """One point: each width forced, the planner's pick and cuBLAS."""
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    a, b = operands(m, n, k, layout, DTYPES[dtype])
    ref = a.double() @ b.double()
    fns, names = [], []
    for w in ws:
        try:
            c = ext._gemm_tensor_core(a, b, "wgmma", tile=w)
        except RuntimeError:
            continue
        err = float((c.double() - ref).norm() / ref.norm())
        assert err < 1e-2, (m, n, k, layout, dtype, w, err)
        fns.append(lambda w=w: ext._gemm_tensor_core(a, b, "wgmma", tile=w))
        names.append(str(w))
    try:
        c = ext._gemm_tensor_core(a, b, "wgmma", tile_m=256)
        err = float((c.double() - ref).norm() / ref.norm())
        assert err < 1e-2, (m, n, k, layout, dtype, "tall", err)
        fns.append(lambda: ext._gemm_tensor_core(a, b, "wgmma", tile_m=256))
        names.append("256x152")
    except RuntimeError:
        pass  # no 256-row tile for this type or layout (or in this build)
    fns += [lambda: lltm_ext.gemm(a, b), lambda: a @ b]
    names += ["auto", "ref"]
    times, samples = time_medians(fns, torch.device("cuda"), budget)
    us = {name: t * 1e6 for name, t in zip(names, times, strict=True)}
    plan = ext._cuda_tc_plan(a, b)
    best = min((v, key) for key, v in us.items() if key not in ("auto", "ref"))
    print(
        f"{what:8s} {m}x{n}x{k} {layout} {dtype:8s} plan {plan[0]}{plan[1]}/{plan[3]}"
        f"{'x256' if plan[10:11] == (256,) else ''}: "
        + " ".join(f"{key}={v:.1f}" for key, v in us.items())
        + f"  best {best[1]} ({us['ref'] / best[0]:.2f}x, auto {us['ref'] / us['auto']:.2f}x)",
        flush=True,
    )
    return {"what": what, "M": m, "N": n, "K": k, "layout": layout, "dtype": dtype,
            "plan": list(plan[:4]) + list(plan[10:11]), "us": us,
            "samples": samples}  # fmt: skip


def points(n_random: int, seed: int) -> list[tuple[str, int, int, int, str, str]]:
    """(what, M, N, K, layout, dtype) of every point."""
    out = [
        ("uneven", 3000, 5000, 2000, lay, dt) for dt in DTYPES for lay in ("nn", "nt", "tn", "tt")
    ]
    for m in (512, 2048, 8192):
        out += [("linear", m, n, k, "nt", "bfloat16") for k, n in LINEAR_LAYERS["cuda"]]
    out += [("linear", 512, n, k, "nn", "bfloat16") for k, n in LINEAR_LAYERS["cuda"]]
    for m, n, k in [(1000, 3000, 5000), (4096, 4104, 2048), (2056, 8200, 1032), (5000, 3000, 2000)]:
        out.append(("uneven", m, n, k, "nt", "bfloat16"))
    return out + random_points(n_random, seed)


def random_points(n_random: int, seed: int) -> list[tuple[str, int, int, int, str, str]]:
    """Random `a @ b.T` points in bfloat16: M, N, K log-uniform in 256-8192 (K a multiple of 8)."""
    rng, out = random.Random(seed), []
    for _ in range(n_random):
        m, n, k = (int(math.exp(rng.uniform(math.log(256), math.log(8192)))) for _ in range(3))
        out.append(("random", m, n, k - k % 8, "nt", "bfloat16"))
    return out


def parse_args(doc: str, budget: float, large: bool = False) -> argparse.Namespace:
    """This folder's measurement scripts' arguments: the JSON path, random shapes (and with
    `large`, --large: more of them, M, N, K of 256-8192), the time per point and in all, the kinds
    of point kept; exits where torch sees no GPU."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("json", help="where to write the rows")
    parser.add_argument("--random", type=int, default=24, help="random shapes")
    parser.add_argument("--seed", type=int, default=5)
    if large:
        parser.add_argument("--large", type=int, default=0, help="large random shapes")
    parser.add_argument("--budget", type=float, default=budget, help="seconds of samples a point")
    parser.add_argument("--limit-s", type=float, default=1e9, help="stop after this long")
    parser.add_argument("--only", default="", help="comma-separated kinds of point to keep")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit(f"{parser.prog}: times CUDA kernels, but torch sees no GPU")
    return args


def run_points(
    args: argparse.Namespace,
    points_: list[tuple[str, int, int, int, str, str]],
    measure_one: Callable[..., dict[str, Any] | None],
    header: dict[str, Any],
) -> None:
    """measure_one(what, m, n, k, layout, dtype) at each point of the kinds args.only keeps,
    until args.limit_s has passed; after each, {"device", **header, "rows"} to args.json (a point
    it returns None for is left out)."""
    start, rows = time.monotonic(), []
    for what, m, n, k, layout, dtype in points_:
        if time.monotonic() - start > args.limit_s:
            break
        if args.only and what not in args.only.split(","):
            continue
        row = measure_one(what, m, n, k, layout, dtype)
        if row is None:
            continue
        rows.append(row)
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), **header, "rows": rows}, f, indent=1)


def main() -> None:
    args = parse_args(__doc__, 0.15)
    ext = load_extension("gemm")
    ws = widths(ext)
    print("widths:", ws, flush=True)

    def one(what: str, m: int, n: int, k: int, layout: str, dtype: str) -> dict[str, Any]:
        return measure(ext, ws, m, n, k, layout, dtype, args.budget, what)

    run_points(args, points(args.random, args.seed), one, {"widths": ws})


if __name__ == "__main__":
    main()
