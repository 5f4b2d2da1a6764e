"""Where an LLTMSequence call's time goes: forward+backward of one shape (and nn.LSTM's beside it)
under torch.profiler, the CUDA kernels' total and per-call times, largest first; with --host, the
host's side too: a call's host time, and the operators that spend it.

    python benchmarks/sequence_profile.py --shape 236x192x338x2048 --dtype bfloat16
    python benchmarks/sequence_profile.py --shape 236x192x338x2048 --dtype autocast --json p.json
    python benchmarks/sequence_profile.py --shape 160x96x128x518 --config l4 --host

--dtype: float32, bfloat16, float16, or autocast (float32 modules and input under
torch.autocast(dtype=torch.bfloat16)). --config: 1 (one layer), l2 .. l4 (layers) or bi
(bidirectional), both modules alike. --host: a call's host time (the host clock around it while
the GPU is kept busy, so that the host never waits on it) and the operators' own host time
(torch.profiler's self CPU time: lltm_ext's operators, autograd's, ATen's), per run; --device cpu
times the host's side alone. For reading a path's cost apart (which kernel, how many launches,
where the host's time goes); speed against nn.LSTM is the sweep's (`lltm-ext bench --sweep`).
--timeline: the GPU's own timeline of one call, its host time covered by a spin kernel queued
before it (so that each kernel starts when its stream and its dependencies let it, not when the
host reaches it): every kernel of 10 us or more with its stream, start and end (us from the first),
and the call's span, the time some kernel runs, and the time two or more run at once (how much its
streams overlap: the layers' wavefront, both directions).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

import lltm_ext


def forward_backward(
    module: torch.nn.Module, x: torch.Tensor, autocast: bool
) -> Callable[[], None]:
    """One forward+backward call of `module` on x (under autocast(bfloat16) when `autocast`)."""

    def step() -> None:
        ctx = (
            torch.autocast(x.device.type, dtype=torch.bfloat16)
            if autocast
            else contextlib.nullcontext()
        )
        with ctx:
            out = module(x)[0]
        out.float().square().mean().backward()

    return step


def kernel_table(module: torch.nn.Module, x: torch.Tensor, autocast: bool, runs: int) -> list:
    """[(kernel name, calls per run, total us per run)] of `runs` forward+backward calls."""
    step = forward_backward(module, x, autocast)
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


def host_table(
    module: torch.nn.Module, x: torch.Tensor, autocast: bool, runs: int
) -> tuple[float, list]:
    """A forward+backward call's host time in us (median of `runs`, each timed while the GPU spins
    long enough to be busy all along), and [(operator, calls per run, self CPU us per run)]. A
    call of more launches than CUDA's queue holds (about a thousand) waits for the GPU to take
    them whatever the spin: its host time then includes that wait."""
    step = forward_backward(module, x, autocast)
    for _ in range(2):
        step()
    cuda = x.is_cuda
    spin = 0
    if cuda:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        # 4e6 cycles a ms of the call's time: twice that or more at the GPU's clock (<= 2 GHz)
        spin = int(4e6 * max(1.0, (time.perf_counter() - t0) * 1e3))
    times = []
    for _ in range(runs):
        if cuda:
            torch.cuda._sleep(spin)
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e6)
        if cuda:
            torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(runs):
            step()
        if cuda:
            torch.cuda.synchronize()
    rows = [
        (e.key, e.count / runs, e.self_cpu_time_total / runs)
        for e in prof.key_averages()
        if e.count > 0 and e.self_cpu_time_total > 0
    ]
    rows.sort(key=lambda r: -r[2])
    return statistics.median(times), rows


def timeline(module: torch.nn.Module, x: torch.Tensor, autocast: bool) -> dict[str, Any]:
    """One forward+backward call's kernels as the GPU ran them, the host's time covered (above):
    {"span_us", "busy_us", "overlap_us", "kernels": [(name, stream, start us, end us)]}, spin
    kernel and kernels under 10 us left out of the list (not of the sums)."""
    step = forward_backward(module, x, autocast)
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    step()
    torch.cuda.synchronize()
    # At least 20 ms of spin, 4e6 cycles a ms: past the call's host time under the profiler.
    spin = int(4e6 * max(20.0, 10 * (time.perf_counter() - t0) * 1e3))
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.cuda._sleep(spin)
        step()
        torch.cuda.synchronize()
    events = [
        (e.name, int(getattr(e, "device_resource_id", -1)), e.time_range.start, e.time_range.end)
        for e in prof.events()
        if e.device_type == torch.autograd.DeviceType.CUDA and "spin_kernel" not in e.name
    ]
    events.sort(key=lambda e: e[2])
    first = events[0][2] if events else 0.0
    # Sweep over the kernels' edges: time with >= 1 and >= 2 kernels running.
    edges = sorted([(e[2], 1) for e in events] + [(e[3], -1) for e in events])
    busy = overlap = 0.0
    running, last = 0, first
    for at, change in edges:
        if running >= 1:
            busy += at - last
        if running >= 2:
            overlap += at - last
        running, last = running + change, at
    return {
        "span_us": (max(e[3] for e in events) - first) if events else 0.0,
        "busy_us": busy,
        "overlap_us": overlap,
        "kernels": [
            (name, stream, round(start - first, 1), round(end - first, 1))
            for name, stream, start, end in events
            if end - start >= 10
        ],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", required=True, help="TxBxIxS (steps, batch, features, state)")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--config", default="1", help="1, l2 .. l4 (layers) or bi (bidirectional)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--host", action="store_true", help="also the host's time and its operators")
    ap.add_argument(
        "--timeline", action="store_true", help="also the GPU's timeline, the host covered"
    )
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    t, b, i, s = (int(v) for v in args.shape.split("x"))
    autocast = args.dtype == "autocast"
    dtype = torch.float32 if autocast else getattr(torch, args.dtype)
    layers = int(args.config[1:]) if args.config.startswith("l") else 1
    bidirectional = args.config == "bi"
    device = torch.device(args.device)
    warnings.filterwarnings("ignore", message="RNN module weights are not part of single")
    torch.manual_seed(0)
    x = torch.randn(t, b, i, device=device, dtype=dtype)
    found: dict[str, Any] = {"shape": args.shape, "dtype": args.dtype, "config": args.config}
    for name, cls in (("lltm_ext", lltm_ext.LLTMSequence), ("nn.LSTM", torch.nn.LSTM)):
        module = cls(i, s, layers, bidirectional=bidirectional).to(device, dtype)
        found[name] = {}
        label = f"{name} {args.shape} {args.dtype} {args.config}"
        if device.type == "cuda":
            rows = kernel_table(module, x, autocast, args.runs)
            total = sum(r[2] for r in rows)
            found[name].update(total_us=total, kernels=rows)
            print(f"\n{label}: {total:.0f} us of kernels a run")
            for key, calls, us in rows[: args.top]:
                print(f"  {us:9.0f} us {calls:7.0f} calls {us / calls:8.1f} us/call  {key[:110]}")
        if args.timeline and device.type == "cuda":
            line = timeline(module, x, autocast)
            found[name]["timeline"] = line
            print(
                f"\n{label}: GPU timeline, host covered: span {line['span_us']:.0f} us, kernels "
                f"running {line['busy_us']:.0f}, two or more at once {line['overlap_us']:.0f}"
            )
            for key, stream, start, end in line["kernels"]:
                print(f"  s{stream:<4d} {start:9.0f} {end:9.0f}  {key[:100]}")
        if args.host:
            host_us, ops = host_table(module, x, autocast, args.runs)
            found[name].update(host_us=host_us, host_ops=ops)
            print(f"\n{label}: {host_us:.0f} us of host time a call; operators' own host time:")
            for key, calls, us in ops[: args.top]:
                print(f"  {us:9.0f} us {calls:7.0f} calls {us / calls:8.1f} us/call  {key[:110]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(found, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
