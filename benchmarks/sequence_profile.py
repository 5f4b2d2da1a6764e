"""Where an LLTMSequence call's GPU time goes: forward+backward of one shape (and nn.LSTM's
beside it) under torch.profiler, the CUDA kernels' total and per-call times, largest first.

    python benchmarks/sequence_profile.py --shape 236x192x338x2048 --dtype bfloat16
    python benchmarks/sequence_profile.py --shape 236x192x338x2048 --dtype autocast --json p.json

--dtype: float32, bfloat16, float16, or autocast (float32 modules and input under
torch.autocast("cuda", dtype=torch.bfloat16)). For reading a path's cost apart (which kernel, how
many launches); speed against nn.LSTM is the sweep's (`lltm-ext bench --sweep`), not this.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import warnings
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

import lltm_ext


def kernel_table(module: torch.nn.Module, x: torch.Tensor, autocast: bool, runs: int) -> list:
    """[(kernel name, calls per run, total us per run)] of `runs` forward+backward calls."""

    def step() -> None:
        ctx = torch.autocast("cuda", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
        with ctx:
            out = module(x)[0]
        out.float().square().mean().backward()

    for _ in range(2):  # warm-up: plans, cuBLAS handles, caches
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            step()
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        us = getattr(e, "device_time_total", getattr(e, "cuda_time_total", 0.0))
        if us > 0 and e.count > 0:
            rows.append((e.key, e.count / runs, us / runs))
    rows.sort(key=lambda r: -r[2])
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", required=True, help="TxBxIxS (steps, batch, features, state)")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    t, b, i, s = (int(v) for v in args.shape.split("x"))
    autocast = args.dtype == "autocast"
    dtype = torch.float32 if autocast else getattr(torch, args.dtype)
    warnings.filterwarnings("ignore", message="RNN module weights are not part of single")
    torch.manual_seed(0)
    x = torch.randn(t, b, i, device="cuda", dtype=dtype)
    found: dict[str, Any] = {"shape": args.shape, "dtype": args.dtype}
    for name, module in (
        ("lltm_ext", lltm_ext.LLTMSequence(i, s)),
        ("nn.LSTM", torch.nn.LSTM(i, s)),
    ):
        rows = kernel_table(module.cuda().to(dtype), x, autocast, args.runs)
        total = sum(r[2] for r in rows)
        found[name] = {"total_us": total, "kernels": rows}
        print(f"\n{name} {args.shape} {args.dtype}: {total:.0f} us of kernels a run")
        for key, calls, us in rows[: args.top]:
            print(f"  {us:9.0f} us {calls:7.0f} calls {us / calls:8.1f} us/call  {key[:110]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(found, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
