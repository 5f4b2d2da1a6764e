"""Benchmark harness for `python -m lltm_ext bench`: lltm_ext vs PyTorch, medians, table, JSON.

Each op module may define ``benchmarks(device, quick) -> list[BenchCase]``. A case pairs lltm_ext's
call with PyTorch's own way of doing the same job; both are timed in the same run, interleaved in
rounds (these machines are shared and noisy), after warm-up, on CUDA with events.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from lltm_ext._extension import cpu_isa


@dataclass
class BenchCase:
    """One comparison. `bytes` (moved per call) gives GB/s; `flops` (per call) gives TFLOP/s."""

    op: str
    case: str
    dtype: torch.dtype
    size: str
    ours: Callable[[], Any]
    ref: Callable[[], Any]
    ref_name: str
    bytes: int | None = None
    flops: int | None = None
    notes: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_calls(fn: Callable[[], Any], reps: int, device: torch.device) -> list[float]:
    """Seconds per call, `reps` calls, each timed on its own."""
    if device.type == "cuda":
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(reps)
        ]
        for start, end in events:
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize(device)
        return [start.elapsed_time(end) / 1e3 for start, end in events]
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def time_pair(
    ours: Callable[[], Any],
    ref: Callable[[], Any],
    device: torch.device,
    *,
    rounds: int = 7,
    budget_s: float = 0.3,
) -> tuple[list[float], list[float]]:
    """Per-call seconds of `ours` and `ref`, interleaved over `rounds` after warm-up."""
    for fn in (ours, ref):  # warm-up: first calls, then about 50 ms each
        fn()
        _sync(device)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 0.05:
            fn()
            _sync(device)
    probe = min(statistics.median(_time_calls(f, 3, device)) for f in (ours, ref))
    reps = int(min(500, max(3, budget_s / rounds / 2 / max(probe, 1e-7))))
    a: list[float] = []
    b: list[float] = []
    for _ in range(rounds):
        a += _time_calls(ours, reps, device)
        b += _time_calls(ref, reps, device)
    return a, b


def run_cases(cases: Iterable[BenchCase], device: torch.device, budget_s: float) -> list[dict]:
    rows = []
    for c in cases:
        a, b = time_pair(c.ours, c.ref, device, budget_s=budget_s)
        t_ours, t_ref = statistics.median(a), statistics.median(b)
        row = {
            "op": c.op,
            "case": c.case,
            "dtype": str(c.dtype).replace("torch.", ""),
            "size": c.size,
            "device": str(device),
            "ref": c.ref_name,
            "ours_us": t_ours * 1e6,
            "ref_us": t_ref * 1e6,
            "speedup": t_ref / t_ours,  # > 1: lltm_ext is faster
            "samples": len(a),
            "notes": c.notes,
            **c.extra,
        }
        if c.bytes:
            row["ours_gbps"] = c.bytes / t_ours / 1e9
            row["ref_gbps"] = c.bytes / t_ref / 1e9
        if c.flops:
            row["ours_tflops"] = c.flops / t_ours / 1e12
            row["ref_tflops"] = c.flops / t_ref / 1e12
        rows.append(row)
        print(format_row(row), flush=True)
    return rows


HEADER = (
    f"{'op':<8} {'case':<16} {'dtype':<9} {'size':<24} {'lltm_ext':>11} {'pytorch':>11} "
    f"{'ratio':>7}  throughput (lltm_ext / pytorch)"
)


def format_row(r: dict) -> str:
    thr = ""
    if "ours_gbps" in r:
        thr = f"{r['ours_gbps']:8.1f} / {r['ref_gbps']:8.1f} GB/s"
    elif "ours_tflops" in r:
        thr = f"{r['ours_tflops']:8.2f} / {r['ref_tflops']:8.2f} TFLOP/s"
    return (
        f"{r['op']:<8} {r['case']:<16} {r['dtype']:<9} {r['size']:<24} "
        f"{r['ours_us']:9.1f}us {r['ref_us']:9.1f}us {r['speedup']:6.3f}x  {thr}"
    )


def environment(device: torch.device) -> dict[str, Any]:
    env: dict[str, Any] = {"torch": torch.__version__, "device": str(device)}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(gpu=props.name, sms=props.multi_processor_count, cuda=torch.version.cuda)
    else:
        env.update(
            threads=torch.get_num_threads(),
            cpu_isa=cpu_isa(),
            torch_cpu=torch.backends.cpu.get_cpu_capability(),
        )
    return env


def write_json(path: str, rows: list[dict], device: torch.device) -> None:
    with open(path, "w") as f:
        json.dump({"environment": environment(device), "results": rows}, f, indent=2)
