"""The wgmma kernel's tiles of a width that is not whole 64-column atoms (144 or 168, B K-major):
forced, checked against float64 beside forced 192-wide tiles (NaN-poisoned outputs, K splits,
tiles cut by M and N); then, at every shape where the planner on this GPU picks that width (the
linear layers x @ W.T at M = 256-8192, the bench's sweep of seed 1 and 2000 random shapes of seed
7), auto timed beside each width forced (128, 144, 168, 192, 256) and cuBLAS, interleaved: whether
the pick was right, and what it gains over the best of the other widths. bfloat16, and TF32 at
the sweep's shapes.

    python benchmarks/gemm_tc_plan/measure_wide_tile.py tile_168.json --width 168
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

import torch

import lltm_ext
from lltm_ext._extension import load_extension
from lltm_ext.cli.linear import LINEAR_LAYERS
from lltm_ext.cli.sweep import gemm_shapes, time_medians

SHAPES = [
    (128, 144, 64),
    (128, 168, 64),
    (136, 3 * 168 - 5, 1000),
    (8, 264, 40),
    (1000, 3000, 200),
    (200, 344, 2120),
]


def rel_err(c: torch.Tensor, ref: torch.Tensor) -> float:
    return float((c.double() - ref).norm() / ref.norm())


def check(ext: Any, width: int) -> list[dict[str, Any]]:
    """Forced `width` against float64, next to forced 192's error, every dtype, A either way."""
    rows = []
    for dt in (torch.bfloat16, torch.float16, torch.float32):
        torch.backends.cuda.matmul.allow_tf32 = dt == torch.float32
        for (m, n, k), ta in ((s, ta) for s in SHAPES for ta in (False, True)):
            if dt == torch.float32 and ta:
                continue
            a = torch.randn(k, m, device="cuda").t() if ta else torch.randn(m, k, device="cuda")
            a, b = a.to(dt), torch.randn(n, k, device="cuda").to(dt).t()
            ref = a.double() @ b.double()
            for splits in (1, 3):
                out = torch.full((m, n), math.nan, device="cuda", dtype=dt)
                ext._gemm_tensor_core(a, b, "wgmma", tile=width, splits=splits, out=out)
                err = rel_err(out, ref)
                e192 = rel_err(ext._gemm_tensor_core(a, b, "wgmma", tile=192, splits=splits), ref)
                ok = math.isfinite(err) and err <= 1.5 * e192 + 1e-7
                rows.append(dict(dt=str(dt), m=m, n=n, k=k, ta=ta, splits=splits, err=err,
                                 e192=e192, ok=ok))  # fmt: skip
    torch.backends.cuda.matmul.allow_tf32 = False
    return rows


WIDTHS = (128, 144, 168, 192, 256)


def operands(m: int, n: int, k: int, layout: str, dt: torch.dtype) -> tuple[torch.Tensor, ...]:
    """a (m, k), b (k, n) as the sweep makes them: "t", a transposed view of a row-major matrix."""
    a = (
        torch.randn(k, m, device="cuda").t()
        if layout[0] == "t"
        else torch.randn(m, k, device="cuda")
    )
    b = (
        torch.randn(n, k, device="cuda").t()
        if layout[1] == "t"
        else torch.randn(k, n, device="cuda")
    )
    return a.to(dt), b.to(dt)


def candidates() -> list[tuple[str, int, int, int, str]]:
    """(source, M, N, K, layout): the linear layers (x @ W.T), the sweep's seed 1, seed 7's 2000."""
    out = [("linear", m, n, k, "nt") for m in (256, 512, 1024, 2048, 4096, 8192)
           for k, n in LINEAR_LAYERS["cuda"]]  # fmt: skip
    for source, count, seed in (("sweep", 100, 1), ("random", 2000, 7)):
        out += [
            (source, s["M"], s["N"], s["K"], s["layout"]) for s in gemm_shapes(count, seed, "cuda")
        ]
    return out


def time_shape(ext: Any, a: torch.Tensor, b: torch.Tensor) -> dict[str, float]:
    """us of auto, each width forced and cuBLAS, sampled in turn."""
    fns = [lambda: lltm_ext.gemm(a, b)]
    fns += [lambda w=w: ext._gemm_tensor_core(a, b, "wgmma", tile=w) for w in WIDTHS]
    fns.append(lambda: a @ b)
    t, _ = time_medians(fns, torch.device("cuda"), 0.06)
    names = ["auto"] + [f"t{w}" for w in WIDTHS] + ["ref"]
    return {name: round(x * 1e6, 2) for name, x in zip(names, t, strict=True)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", help="where to write the rows")
    parser.add_argument("--width", type=int, default=168, help="the tile width checked and timed")
    args = parser.parse_args()
    width = args.width
    ext = load_extension("gemm")
    out: dict[str, Any] = {"width": width, "check": check(ext, width), "rows": []}
    print("checks", len(out["check"]), "bad", sum(not c["ok"] for c in out["check"]), flush=True)
    for source, m, n, k, layout in candidates():
        for dt in (torch.bfloat16, torch.float32):
            if dt == torch.float32 and source != "sweep":
                continue
            torch.backends.cuda.matmul.allow_tf32 = dt == torch.float32
            a, b = operands(m, n, k, layout, dt)
            if ext._cuda_tc_plan(a, b)[1] != width:
                continue
            r = dict(source=source, dtype="tf32" if dt == torch.float32 else "bfloat16", M=m,
                     N=n, K=k, layout=layout, **time_shape(ext, a, b))  # fmt: skip
            others = min(r[f"t{w}"] for w in WIDTHS if w != width)
            r["best_other_over_width"] = round(others / r[f"t{width}"], 3)
            r["ref_over_auto"] = round(r["ref"] / r["auto"], 3)
            out["rows"].append(r)
            print(" ".join(f"{key} {val}" for key, val in r.items()), flush=True)
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)
    torch.backends.cuda.matmul.allow_tf32 = False
    ratios = [r["best_other_over_width"] for r in out["rows"]]
    if ratios:
        gm = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        print(
            f"{len(ratios)} shapes: best other width / {width} geomean {gm:.3f}, min {min(ratios)}"
        )
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
