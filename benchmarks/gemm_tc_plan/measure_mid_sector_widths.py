"""The wgmma kernel's widths where an operand's rows start inside 32-byte sectors (sides of 8 mod 16
elements, 16-byte aligned), at four shapes in every layout (bfloat16) and any shapes given: the
auto path against each width forced (128, 144, 168, 192, 256), with no copies or with both
operands copied first, and cuBLAS. Forced 64-multiple widths read such a B in place in clusters of
two blocks; 144 and 168 run without clusters.

    python benchmarks/gemm_tc_plan/measure_mid_sector_widths.py mid_sector.json --build <sha>

Keys of each row's "forced": the width, "c" where both operands were copied first; us, medians of
samples interleaved with torch.mm ("ref").
"""

from __future__ import annotations

import argparse
import functools
import json
from typing import Any

import torch

import lltm_ext
from lltm_ext._extension import load_extension
from lltm_ext.cli.sweep import time_interleaved

SHAPES = ((1032, 4104, 1032), (2056, 2056, 1032), (3080, 4104, 2056), (520, 8200, 4104))
WIDTHS = (128, 144, 168, 192, 256)
LAYOUTS = ("nt", "tt", "nn", "tn")


def operand(rows: int, cols: int, transposed: bool, dtype: torch.dtype) -> torch.Tensor:
    """A random (rows, cols) CUDA matrix, row-major or a transposed view of a row-major one."""
    x = (
        torch.randn(cols, rows, device="cuda").t()
        if transposed
        else torch.randn(rows, cols, device="cuda")
    )
    return x.to(dtype)


def measure(ext: Any, m: int, n: int, k: int, layout: str, dtype: str) -> dict[str, Any]:
    """Auto, each width forced (copies or not) and cuBLAS at one shape, layout and dtype
    (bfloat16, or tf32: float32 operands with TF32 allowed)."""
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    dt = torch.float32 if dtype == "tf32" else getattr(torch, dtype)
    a = operand(m, k, layout[0] == "t", dt)
    b = operand(k, n, layout[1] == "t", dt)
    mm = functools.partial(torch.mm, a, b)
    auto, ref, _ = time_interleaved(functools.partial(lltm_ext.gemm, a, b), mm, dev, 0.02)
    plan = list(ext._cuda_tc_plan(a, b))
    row: dict[str, Any] = dict(m=m, n=n, k=k, layout=layout, dtype=dtype, plan=plan,
                               auto=auto * 1e6, ref=ref * 1e6, forced={})  # fmt: skip
    for width in WIDTHS:
        for copy in (False, True):
            run = functools.partial(ext._gemm_tensor_core, a, b, "wgmma", width, 1, False, copy)
            try:
                run()
            except RuntimeError:  # 144 and 168 need a K-major B
                continue
            us, _, _ = time_interleaved(run, mm, dev, 0.01)
            row["forced"][f"{width}{'c' if copy else ''}"] = round(us * 1e6, 2)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", help="where to write the rows")
    parser.add_argument("--build", default="", help="the git commit built, to record")
    parser.add_argument(
        "--shape",
        action="append",
        metavar="MxNxK:LAYOUT:DTYPE",
        help="time this shape too (layout nn, nt, tn or tt; bfloat16 or tf32; repeatable)",
    )
    args = parser.parse_args()
    ext = load_extension("gemm")
    out: dict[str, Any] = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "build": args.build,
        "command": "python benchmarks/gemm_tc_plan/measure_mid_sector_widths.py",
        "rows": [],
    }
    todo = [(m, n, k, layout, "bfloat16") for m, n, k in SHAPES for layout in LAYOUTS]
    for text in args.shape or []:
        dims, layout, dtype = text.split(":")
        m, n, k = (int(x) for x in dims.split("x"))
        todo.append((m, n, k, layout, dtype))
    for m, n, k, layout, dtype in todo:
        row = measure(ext, m, n, k, layout, dtype)
        out["rows"].append(row)
        best = min(row["forced"].items(), key=lambda kv: kv[1])
        print(
            f"{m}x{n}x{k} {layout} {dtype} plan {row['plan'][:7]} auto {row['auto']:.1f}"
            f" ref {row['ref']:.1f} best forced {best[0]} {best[1]:.1f}",
            flush=True,
        )
    torch.backends.cuda.matmul.allow_tf32 = False
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
