"""The sequence's CPU loop, part by part: its products on ATen against lltm_ext's GEMM, the
mixed loop under autocast against float32 products on the rounded operands, packed batches.

An experiment (not shipped), timed in one process (``lltm_ext.cli.sweep.time_medians``: medians
of interleaved samples), one thread by default:

* ``--part products``: at each T x B x I x S of --shapes, the four products the loop runs over
  all steps at once (the input projections ``x W_i^T``, ``d input = dG W_i``, ``d W_i = dG^T x``,
  ``d W_h = dG^T h``; the weights' blocks as the loop reads them, views of (3S, S + I)), each
  into a contiguous tensor, on ATen's ``torch.mm(out=)`` and on ``lltm_ext.gemm(out=)``,
  float32.
* ``--part mixed``: ``LLTMSequence(I, S)`` forward+backward under
  ``torch.autocast("cpu", bfloat16)`` at T = --steps, I = --features over a grid of batches and
  states, with ``LLTM_EXT_SEQUENCE_MIXED=products`` (the mixed loop at every size) against
  ``off`` (float32 products on the operands rounded to bfloat16): where the mixed loop pays.
* ``--part packed``: ``LLTMSequence(I, S)`` against ``torch.nn.LSTM(I, S)`` forward+backward on
  one ``PackedSequence`` of B sequences whose lengths are drawn from [T/4, T] (the longest T), at
  each T x B x I x S of --packed-shapes, in float32 and under ``torch.autocast("cpu", bfloat16)``.

    python benchmarks/sequence_cpu.py --part products --json products.json
    python benchmarks/sequence_cpu.py --part mixed --json mixed.json
    python benchmarks/sequence_cpu.py --part packed --json packed.json
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
from torch.nn.utils.rnn import pack_padded_sequence

import lltm_ext
from lltm_ext.cli.bench import write_json
from lltm_ext.cli.sweep import time_medians


def product_rows(shape: str, budget: float) -> list[dict]:
    """The loop's four whole-sequence products at T x B x I x S, ATen against lltm_ext."""
    T, B, F, S = (int(v) for v in shape.split("x"))  # F: the input features (I)
    weights = torch.randn(3 * S, S + F) / (S + F) ** 0.5
    x, h = torch.randn(T * B, F), torch.randn(T * B, S)
    dg, gates, d_x = torch.randn(T * B, 3 * S), torch.empty(T * B, 3 * S), torch.empty(T * B, F)
    products = {
        "x W_i^T": (x, weights[:, S:].t(), gates),
        "dG W_i": (dg, weights[:, S:], d_x),
        "dG^T x": (dg.t(), x, torch.empty(3 * S, F)),
        "dG^T h": (dg.t(), h, torch.empty(3 * S, S)),
    }
    rows = []
    for name, (a, b, out) in products.items():
        (t_ours, t_ref), samples = time_medians(
            [
                lambda a=a, b=b, out=out: lltm_ext.gemm(a, b, out=out),
                lambda a=a, b=b, out=out: torch.mm(a, b, out=out),
            ],
            torch.device("cpu"),
            budget,
        )
        rows.append(
            {
                "part": "products",
                "shape": shape,
                "product": name,
                "mnk": [a.shape[0], b.shape[1], a.shape[1]],
                "ours_us": round(t_ours * 1e6, 1),
                "ref_us": round(t_ref * 1e6, 1),
                "ratio": round(t_ref / t_ours, 3),
                "samples": samples,
            }
        )
    return rows


def mixed_row(steps: int, batch: int, features: int, state: int, budget: float) -> dict:
    """LLTMSequence forward+backward under CPU autocast: the mixed loop against float32."""
    module = lltm_ext.LLTMSequence(features, state)
    x = torch.randn(steps, batch, features, requires_grad=True)

    def call(setting: str) -> None:
        os.environ["LLTM_EXT_SEQUENCE_MIXED"] = setting
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = module(x)[0]
        out.float().sum().backward()

    saved = os.environ.get("LLTM_EXT_SEQUENCE_MIXED")
    try:
        (t_mixed, t_f32), samples = time_medians(
            [lambda: call("products"), lambda: call("off")], torch.device("cpu"), budget
        )
    finally:
        os.environ.pop("LLTM_EXT_SEQUENCE_MIXED", None)
        if saved is not None:
            os.environ["LLTM_EXT_SEQUENCE_MIXED"] = saved
    return {
        "part": "mixed",
        "shape": {"T": steps, "B": batch, "I": features, "S": state},
        "step_product_macs": batch * state * 3 * state,
        "ours_us": round(t_mixed * 1e6, 1),
        "ref_us": round(t_f32 * 1e6, 1),
        "ratio": round(t_f32 / t_mixed, 3),
        "samples": samples,
    }


def packed_rows(shape: str, budget: float, seed: int) -> list[dict]:
    """LLTMSequence against nn.LSTM on one packed batch of uneven lengths, float32 and autocast."""
    T, B, F, S = (int(v) for v in shape.split("x"))  # F: the input features (I)
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(max(T // 4, 1), T + 1, (B,), generator=gen)
    lengths[0] = T
    x = torch.randn(T, B, F, generator=gen)
    packed = pack_padded_sequence(x, lengths, enforce_sorted=False)
    ours, ref = lltm_ext.LLTMSequence(F, S), torch.nn.LSTM(F, S)
    rows = []
    for mode in ("float32", "autocast"):

        def call(module: torch.nn.Module, mode: str = mode) -> None:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode == "autocast"):
                out = module(packed)[0]
            out.data.float().sum().backward()

        (t_ours, t_ref), samples = time_medians(
            [lambda: call(ours), lambda: call(ref)], torch.device("cpu"), budget
        )
        rows.append(
            {
                "part": "packed",
                "mode": mode,
                "shape": {"T": T, "B": B, "I": F, "S": S},
                "rows": int(lengths.sum()),
                "ours_us": round(t_ours * 1e6, 1),
                "ref_us": round(t_ref * 1e6, 1),
                "ratio": round(t_ref / t_ours, 3),
                "samples": samples,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--part", choices=("products", "mixed", "packed"), required=True)
    p.add_argument(
        "--shapes",
        default="442x20x11x80,1605x370x1x40,103x27x1155x245,131x25x88x480",
        help="products: TxBxIxS list (default: points of the CPU sweep, seed 1)",
    )
    p.add_argument("--steps", type=int, default=64, help="mixed: T (default 64)")
    p.add_argument("--features", type=int, default=32, help="mixed: I (default 32)")
    p.add_argument("--batches", default="1,4,16,64", help="mixed: B list")
    p.add_argument("--states", default="16,32,64,128,256", help="mixed: S list")
    p.add_argument(
        "--packed-shapes",
        default="64x16x32x128,200x8x16x64,442x20x11x80,50x32x128x256,100x64x64x512,25x243x236x185",
        help="packed: TxBxIxS list (the longest sequence T)",
    )
    p.add_argument("--seed", type=int, default=1, help="packed: the lengths' and inputs' seed")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--budget", type=float, default=0.4, help="seconds per case (default 0.4)")
    p.add_argument("--json", help="write the rows and the environment here")
    args = p.parse_args(argv)

    torch.set_num_threads(args.threads)
    rows = []
    if args.part == "products":
        for shape in args.shapes.split(","):
            for row in product_rows(shape, args.budget):
                rows.append(row)
                print(
                    f"{shape:18s} {row['product']:8s} lltm_ext {row['ours_us']:10.1f} us  "
                    f"torch.mm {row['ref_us']:10.1f} us  {row['ratio']:.2f}x",
                    flush=True,
                )
    elif args.part == "packed":
        for shape in args.packed_shapes.split(","):
            for row in packed_rows(shape, args.budget, args.seed):
                rows.append(row)
                print(
                    f"{shape:18s} {row['mode']:8s} lltm_ext {row['ours_us']:10.1f} us  "
                    f"nn.LSTM {row['ref_us']:10.1f} us  {row['ratio']:.2f}x",
                    flush=True,
                )
    else:
        for batch in (int(v) for v in args.batches.split(",")):
            for state in (int(v) for v in args.states.split(",")):
                row = mixed_row(args.steps, batch, args.features, state, args.budget)
                rows.append(row)
                print(
                    f"B={batch:4d} S={state:5d} B*S*3S={row['step_product_macs']:10d}  mixed "
                    f"{row['ours_us']:10.1f} us  float32 {row['ref_us']:10.1f} us  "
                    f"{row['ratio']:.2f}x",
                    flush=True,
                )
    if args.json:
        write_json(args.json, rows, torch.device("cpu"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
