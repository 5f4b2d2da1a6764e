"""LLTMSequence on packed batches whose lengths change every batch, as a loader's epoch feeds them,
against nn.LSTM's packed path: forward+backward, per-batch time, with the step graphs on and off.

    python benchmarks/packed_epochs.py --shapes 200x64x256x512,300x16x64x1024 \\
        --dtypes bfloat16,autocast,float32 --json out.json

Each batch: B sequences of lengths drawn uniformly from [T/4, T] (the longest T, as the sweep's
packed configuration), packed unsorted, fresh every batch, so no two batches need share their
steps' batch sizes. The sweep times one packed batch over and over, so that its time loops repeat
and run as CUDA graphs (decisions_sequence.md#step-graphs); here a loop's sizes rarely come back,
and the graph counts (direct, captured, replayed) show how often they did. Per side and mode: one
warm epoch, then three epochs of `--batches` fresh batches, each timed between CUDA events around
the whole epoch (the host's time counts, as in training), the median epoch's mean per batch.
Ratios are nn.LSTM's time over ours. "autocast" is float32 modules and data under
torch.autocast(dtype=bfloat16).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from typing import Any

import torch
from torch.nn.utils.rnn import pack_padded_sequence

import lltm_ext
from lltm_ext._extension import load_extension


def parse_shapes(text: str) -> list[tuple[int, int, int, int]]:
    """ "TxBxIxS,..." -> [(T, B, I, S), ...]."""
    shapes = []
    for item in text.split(","):
        t, b, i, s = (int(v) for v in item.split("x"))
        shapes.append((t, b, i, s))
    return shapes


def time_case(
    shape: tuple[int, int, int, int], dtype: str, layers: int, batches: int, seed: int
) -> dict[str, Any]:
    """Per-batch ms of ours (graphs auto, off) and nn.LSTM on fresh packed batches of `shape`."""
    t, b, i, s = shape
    tdt = torch.float32 if dtype == "autocast" else getattr(torch, dtype)
    autocast = dtype == "autocast"
    torch.manual_seed(seed)
    seq = lltm_ext.LLTMSequence(i, s, layers).cuda().to(tdt)
    lstm = torch.nn.LSTM(i, s, layers).cuda().to(tdt)
    gen = torch.Generator().manual_seed(seed)
    ext = load_extension("lltm_sequence")

    def epoch() -> list[tuple[Any, torch.Tensor]]:
        data = []
        for _ in range(batches):
            lengths = torch.randint(max(1, t // 4), t + 1, (b,), generator=gen)
            lengths[0] = t
            x = torch.randn(t, b, i, device="cuda", dtype=tdt)
            packed = pack_padded_sequence(x, lengths, enforce_sorted=False)
            data.append((packed, torch.randn(packed.data.shape[0], s, device="cuda", dtype=tdt)))
        return data

    def per_batch_ms(module: torch.nn.Module, data: list[tuple[Any, torch.Tensor]]) -> float:
        params = tuple(module.parameters())
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for packed, grad in data:
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
                out = module(packed)[0].data
            torch.autograd.grad(out, params, grad)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / len(data)

    result: dict[str, Any] = {
        "shape": {"T": t, "B": b, "I": i, "S": s},
        "dtype": dtype,
        "layers": layers,
        "ms": {},
    }
    before_env = os.environ.get("LLTM_EXT_SEQUENCE_GRAPHS")
    try:
        for mode in ("auto", "off", "lstm"):
            os.environ["LLTM_EXT_SEQUENCE_GRAPHS"] = "off" if mode == "off" else "auto"
            module = lstm if mode == "lstm" else seq
            per_batch_ms(module, epoch())  # warm-up
            counts = list(ext._step_graph_counts())
            times = sorted(per_batch_ms(module, epoch()) for _ in range(3))
            result["ms"][mode] = round(times[1], 3)
            if mode != "lstm":
                after = ext._step_graph_counts()
                result[f"graph_counts_{mode}"] = [y - x for x, y in zip(counts, after, strict=True)]
    finally:
        if before_env is None:
            os.environ.pop("LLTM_EXT_SEQUENCE_GRAPHS", None)
        else:
            os.environ["LLTM_EXT_SEQUENCE_GRAPHS"] = before_env
    for mode in ("auto", "off"):
        result[f"ratio_{mode}"] = round(result["ms"]["lstm"] / result["ms"][mode], 3)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", required=True, help="TxBxIxS,... (T steps, batch, features, state)")
    ap.add_argument("--dtypes", default="bfloat16,autocast,float32")
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--batches", type=int, default=20, help="fresh batches an epoch")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("packed_epochs.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    # nn.LSTM in bfloat16 re-compacts its weights every call and warns; the cost is its users'.
    warnings.filterwarnings("ignore", message="RNN module weights are not part of single")
    results = []
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; ms a batch")
    print("T B I S dtype | auto | graphs off | nn.LSTM | loops: direct, captured, replayed")
    for dtype in args.dtypes.split(","):
        for shape in parse_shapes(args.shapes):
            r = time_case(shape, dtype, args.layers, args.batches, args.seed)
            results.append(r)
            ms = r["ms"]
            print(
                " ".join(map(str, shape)) + f" {dtype} | {ms['auto']} ({r['ratio_auto']}x) | "
                f"{ms['off']} ({r['ratio_off']}x) | {ms['lstm']} | {r['graph_counts_auto']}",
                flush=True,
            )
            if args.json:  # after every case: a run stopped at a time limit keeps its results
                with open(args.json, "w") as f:
                    doc = {"device": torch.cuda.get_device_name(), "argv": sys.argv}
                    json.dump({**doc, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
