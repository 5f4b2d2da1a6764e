"""Times every tensor-core GEMM plan (forced) and cuBLAS on random shapes: the data that
fit_plan_model.py fits the planner's constants to (src/gemm/gemm_tc_plan.cpp).

For each of N shapes drawn as `lltm-ext bench --sweep` draws them (lltm_ext.cli.sweep.gemm_shapes,
this seed), or the shapes given, and each dtype: the wgmma kernel (with the copies the operands
need) at each number of K splits, the mma kernel at each block tile and number of K splits with
each way of loading its stages the operands allow, each timed against torch.mm interleaved
(keys kernel/tile/splits/loads; loads "a": the copies the operands allow (16-byte, else 4-byte,
else registers), "u": not the 16-byte ones, "r": the register-staged loads); also what the planner
picks and its time. Writes one JSON row per shape and dtype (rewritten every 10 rows, so a run
cut short keeps what it measured).

    python benchmarks/gemm_tc_plan/measure_plans.py plans.json --shapes 120 --seed 2 \\
        --dtypes bfloat16,tf32
"""

from __future__ import annotations

import argparse
import functools
import json

import torch

import lltm_ext
from lltm_ext._extension import load_extension
from lltm_ext.cli.sweep import gemm_shapes, time_interleaved

SPLITS = (1, 2, 4, 8, 16, 32, 64)


def make(rows: int, cols: int, transposed: bool, gen: torch.Generator, dtype: torch.dtype):
    """A random (rows, cols) CUDA matrix, row-major or a transposed view of a row-major one."""
    x = (
        torch.randn(cols, rows, generator=gen)
        if transposed
        else torch.randn(rows, cols, generator=gen)
    )
    x = x.to("cuda", dtype)
    return x.t() if transposed else x


def parse_shape(text: str) -> dict[str, object]:
    """'586x230x9080:tn' -> {M: 586, N: 230, K: 9080, layout: 'tn'} (a sweep shape's form)."""
    dims, _, layout = text.partition(":")
    m, n, k = (int(d) for d in dims.split("x"))
    if layout not in ("nn", "nt", "tn", "tt"):
        raise SystemExit(f"--shape {text}: the layout must be nn, nt, tn or tt")
    return {"M": m, "N": n, "K": k, "layout": layout}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", help="where to write the rows")
    parser.add_argument("--shapes", type=int, default=120)
    parser.add_argument("--seed", type=int, default=2, help="not the seed the sweep reports")
    parser.add_argument("--dtypes", default="bfloat16,tf32", help="bfloat16, float16 and/or tf32")
    parser.add_argument(
        "--shape",
        action="append",
        metavar="MxNxK:LAYOUT",
        help="time this shape instead of random ones (layout nn, nt, tn or tt; repeatable)",
    )
    args = parser.parse_args()
    ext = load_extension("gemm")
    dev = torch.device("cuda")
    rows = []
    for name in args.dtypes.split(","):
        dtype = torch.float32 if name == "tf32" else getattr(torch, name)
        torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
        shapes = (
            [parse_shape(text) for text in args.shape]
            if args.shape
            else gemm_shapes(args.shapes, args.seed, "cuda")
        )
        for idx, s in enumerate(shapes):
            m, n, k, layout = s["M"], s["N"], s["K"], s["layout"]
            gen = torch.Generator().manual_seed(idx)

            a, b = (
                make(m, k, layout[0] == "t", gen, dtype),
                make(k, n, layout[1] == "t", gen, dtype),
            )
            # (kernel, tile, splits, unaligned, registers): the loads the operands allow (16-byte
            # copies, else 4-byte ones, else registers), not the 16-byte ones, the registers.
            # wgmma: unsplit at its own width; split at each width whose tiles leave SMs idle
            # (where the planner weighs splits: gemm_tc_plan.cpp).
            candidates = [("wgmma", 0, 1, False, False)]
            candidates += [
                ("wgmma", t, sp, False, False)
                for t in (64, 128, 256)
                for sp in SPLITS[1:]
                if -(-m // 128) * -(-n // t) < 132
            ]
            candidates += [("mma", t, sp, False, False) for t in (64, 128, 256) for sp in SPLITS]
            candidates += [("mma", t, sp, True, False) for t in (64, 128) for sp in (*SPLITS, 128)]
            candidates += [("mma", 64, sp, True, True) for sp in (*SPLITS, 128)]
            plans: dict[str, float] = {}
            ref_us = float("inf")

            def mm(a: torch.Tensor = a, b: torch.Tensor = b) -> torch.Tensor:
                return torch.mm(a, b)

            for kernel, tile, splits, unaligned, registers in candidates:
                run = functools.partial(
                    ext._gemm_tensor_core,
                    a, b, kernel, tile, splits, unaligned, registers=registers,
                )  # fmt: skip
                try:
                    run()
                except RuntimeError:  # a plan that cannot run for these operands here
                    continue
                ours, ref, _ = time_interleaved(run, mm, dev, 0.01)
                loads = "r" if registers else "u" if unaligned else "a"
                plans[f"{kernel}/{tile}/{splits}/{loads}"] = ours * 1e6
                ref_us = min(ref_us, ref * 1e6)
            auto, ref, _ = time_interleaved(functools.partial(lltm_ext.gemm, a, b), mm, dev, 0.02)
            rows.append(
                dict(
                    dtype=name,
                    **s,
                    auto_plan=list(ext._cuda_tc_plan(a, b)),
                    auto_us=auto * 1e6,
                    ref_us=min(ref_us, ref * 1e6),
                    plans=plans,
                )
            )
            if len(rows) % 10 == 0:
                with open(args.json, "w") as f:
                    json.dump(rows, f)
            best = min(plans.items(), key=lambda kv: kv[1]) if plans else ("-", 0.0)
            print(
                f"{name} {m}x{n}x{k} {layout} ref {rows[-1]['ref_us']:.1f} auto {auto * 1e6:.1f}"
                f" best {best[0]} {best[1]:.1f}",
                flush=True,
            )
    with open(args.json, "w") as f:
        json.dump(rows, f)


if __name__ == "__main__":
    main()
