"""Benchmark harness for `lltm-ext bench`: lltm_ext vs PyTorch, medians with spread, table, JSON.

Each op's module in ``lltm_ext.cli.cases`` defines ``benchmarks(device, quick) -> list[BenchCase]``.
A case pairs lltm_ext's call with PyTorch's own way of doing the same job. Both are timed in the
same run, interleaved in rounds (these machines are shared and noisy: a slow spell hits both sides),
by a kept library:

* ``torch.utils.benchmark.Timer.blocked_autorange`` (CPU and CUDA; it synchronizes CUDA around
  each block): one sample is the mean time per call over a block of calls, the block sized so the
  timer's own cost is negligible.
* ``triton.testing.do_bench`` on CUDA when triton is importable: one sample per call, timed with
  CUDA events, the L2 cache flushed before each call.

A result is the median of the samples and their interquartile range (25th-75th percentile).
Element-wise cases also time a copy that moves the same bytes (``torch.empty_like(x).copy_(x)``):
the memory-bandwidth roofline, measured in the same run.
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import platform
import statistics
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from lltm_ext._extension import cpu_isa

TIMERS = ("auto", "torch", "triton")
SPREAD = "IQR: 25th-75th percentile of the samples"


@dataclass
class BenchCase:
    """One comparison. `bytes` (moved per call) gives GB/s; `flops` (per call) gives TFLOP/s.

    `ours` and `ref` are called without arguments, `ref` being PyTorch's way of doing the job
    (named `ref_name`). A case with `bytes` and no `flops` is element-wise (memory-bound): the
    bench also times a copy of the same bytes as its roofline. A case with `flops` (GEMM) takes
    the reference's TFLOP/s as its ceiling. `also` names more references (e.g. torch.compile, a
    floor), timed in the same interleaved rounds; each gets its own ratio.
    """

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
    also: dict[str, Callable[[], Any]] = field(default_factory=dict)


@dataclass
class Timing:
    """Samples of seconds per call, and their median and quartiles."""

    samples: list[float]

    def quantile(self, q: float) -> float:
        """The q-quantile (0..1) of the samples, linearly interpolated."""
        s = sorted(self.samples)
        if len(s) == 1:
            return s[0]
        pos = q * (len(s) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(s) - 1)
        return s[lo] + (s[hi] - s[lo]) * (pos - lo)

    @property
    def median(self) -> float:
        """The median of the samples."""
        return statistics.median(self.samples)

    @property
    def p25(self) -> float:
        """The 25th percentile of the samples."""
        return self.quantile(0.25)

    @property
    def p75(self) -> float:
        """The 75th percentile of the samples."""
        return self.quantile(0.75)


# ----------------------------------------------------------------------------------------------
# Timing backends.
# ----------------------------------------------------------------------------------------------


def triton_available() -> bool:
    """Whether ``triton.testing.do_bench`` can be imported (installed, and it imports)."""
    try:
        if importlib.util.find_spec("triton") is None:
            return False
        from triton.testing import do_bench  # noqa: F401
    except Exception:  # an installed triton that fails to import: time with torch instead
        return False
    return True


def choose_timer(device: torch.device, requested: str = "auto") -> str:
    """'torch' or 'triton' for `requested` ('auto': triton on CUDA when importable, else torch).

    Raises ValueError when 'triton' is asked for where it cannot run.
    """
    if requested not in TIMERS:
        raise ValueError(f"timer must be one of {TIMERS}, got {requested!r}")
    if requested == "triton":
        if device.type != "cuda":
            raise ValueError("--timer triton times CUDA only (triton.testing.do_bench)")
        if not triton_available():
            raise ValueError("--timer triton, but triton is not importable")
        return "triton"
    if requested == "auto" and device.type == "cuda" and triton_available():
        return "triton"
    return "torch"


class _TorchTimer:
    """Samples from ``torch.utils.benchmark.Timer(...).blocked_autorange`` (per-block means)."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        from torch.utils.benchmark import Timer

        # num_threads: Timer defaults to 1 thread; time with the threads the user's code gets.
        self.timer = Timer(
            stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads(), label="lltm_ext"
        )

    def samples(self, seconds: float) -> list[float]:
        return list(self.timer.blocked_autorange(min_run_time=seconds).times)


class _TritonTimer:
    """Samples from ``triton.testing.do_bench`` (one per call, CUDA events, L2 flushed)."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        from triton.testing import do_bench

        self.fn = fn
        self.do_bench = do_bench

    def samples(self, seconds: float) -> list[float]:
        ms = max(seconds * 1e3, 1.0)
        try:  # triton >= 3.0: every call's time
            out = self.do_bench(self.fn, warmup=ms / 4, rep=ms, return_mode="all")
        except (TypeError, AssertionError, ValueError):  # older: quantiles only
            out = self.do_bench(self.fn, warmup=ms / 4, rep=ms, quantiles=[0.5])
        if isinstance(out, (int, float)):
            out = [out]
        return [float(t) / 1e3 for t in out]


def _make_timer(fn: Callable[[], Any], timer: str) -> _TorchTimer | _TritonTimer:
    return _TritonTimer(fn) if timer == "triton" else _TorchTimer(fn)


def time_fns(
    fns: Sequence[Callable[[], Any]],
    *,
    budget_s: float = 0.4,
    rounds: int = 5,
    timer: str = "torch",
) -> list[Timing]:
    """Time each of `fns`, interleaved: `rounds` rounds, each running every fn in turn.

    `budget_s` is the measuring time of all fns together (about; a call longer than a round's
    share still runs once per round); a discarded warm-up round comes first.
    """
    timers = [_make_timer(fn, timer) for fn in fns]
    share = budget_s / rounds / len(fns)
    for t in timers:  # warm-up: first calls, caches, allocator, thread pool
        t.samples(share / 2)
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for t, out in zip(timers, samples, strict=True):
            out += t.samples(share)
    return [Timing(s) for s in samples]


def time_pair(
    ours: Callable[[], Any],
    ref: Callable[[], Any],
    device: torch.device | None = None,
    *,
    rounds: int = 5,
    budget_s: float = 0.3,
    timer: str = "torch",
) -> tuple[list[float], list[float]]:
    """Per-call seconds (samples) of `ours` and `ref`, interleaved over `rounds` after warm-up.

    `device` is accepted for compatibility; the timers synchronize CUDA themselves.
    """
    a, b = time_fns([ours, ref], budget_s=budget_s, rounds=rounds, timer=timer)
    return a.samples, b.samples


# ----------------------------------------------------------------------------------------------
# Running cases.
# ----------------------------------------------------------------------------------------------


def _copy_case(device: torch.device, dtype: torch.dtype, nbytes: int) -> Callable[[], Any]:
    """A copy that moves `nbytes` (reads and writes nbytes / 2 each), the element-wise roofline."""
    n = max(1, nbytes // 2 // torch.empty((), dtype=dtype).element_size())
    x = torch.randn(n, device=device).to(dtype)

    def copy() -> torch.Tensor:
        return torch.empty_like(x).copy_(x)

    return copy


def _spread(prefix: str, t: Timing) -> dict[str, float]:
    return {
        f"{prefix}_us": t.median * 1e6,
        f"{prefix}_p25_us": t.p25 * 1e6,
        f"{prefix}_p75_us": t.p75 * 1e6,
        f"{prefix}_samples": len(t.samples),
    }


def run_cases(
    cases: Iterable[BenchCase],
    device: torch.device,
    budget_s: float,
    *,
    timer: str = "torch",
    echo: bool = True,
) -> list[dict]:
    """Time every case (ours and ref interleaved); one result row each, printed as it comes."""
    rows = []
    copies: dict[tuple[torch.dtype, int], Timing] = {}
    for c in cases:
        ours, ref, *others = time_fns(
            [c.ours, c.ref, *c.also.values()], budget_s=budget_s, timer=timer
        )
        row: dict[str, Any] = {
            "op": c.op,
            "case": c.case,
            "dtype": str(c.dtype).replace("torch.", ""),
            "size": c.size,
            "device": str(device),
            "ref": c.ref_name,
            **_spread("ours", ours),
            **_spread("ref", ref),
            "speedup": ref.median / ours.median,  # > 1: lltm_ext is faster
            "notes": c.notes,
            **c.extra,
        }
        if c.also:  # name -> median, IQR and ratio (its time / ours: > 1, lltm_ext is faster)
            row["also"] = {
                name: {**_spread("ref", t), "speedup": t.median / ours.median}
                for name, t in zip(c.also, others, strict=True)
            }
        if c.bytes:
            for side, t in (("ours", ours), ("ref", ref)):
                row[f"{side}_gbps"] = c.bytes / t.median / 1e9
                row[f"{side}_gbps_p25"] = c.bytes / t.p75 / 1e9  # slower time, lower rate
                row[f"{side}_gbps_p75"] = c.bytes / t.p25 / 1e9
            if not c.flops:
                key = (c.dtype, c.bytes)
                if key not in copies:
                    (copies[key],) = time_fns(
                        [_copy_case(device, c.dtype, c.bytes)], budget_s=budget_s / 2, timer=timer
                    )
                row["roofline"] = "copy"
                row["roofline_name"] = "torch.empty_like(x).copy_(x), same bytes"
                row["roofline_gbps"] = c.bytes / copies[key].median / 1e9
        if c.flops:
            for side, t in (("ours", ours), ("ref", ref)):
                row[f"{side}_tflops"] = c.flops / t.median / 1e12
                row[f"{side}_tflops_p25"] = c.flops / t.p75 / 1e12
                row[f"{side}_tflops_p75"] = c.flops / t.p25 / 1e12
            row["roofline"] = "reference"
            row["roofline_name"] = c.ref_name
            row["roofline_tflops"] = row["ref_tflops"]
        rows.append(row)
        if echo:
            print(format_row(row), flush=True)
    return rows


# ----------------------------------------------------------------------------------------------
# Table, environment, JSON.
# ----------------------------------------------------------------------------------------------

HEADER = (
    f"{'op':<9} {'case':<16} {'dtype':<8} {'size':<20} {'lltm_ext (IQR)':>17} "
    f"{'pytorch (IQR)':>17} {'ratio':>7}  throughput: lltm_ext / pytorch (roofline)"
)


def _time_cell(us: float, p25: float, p75: float) -> str:
    iqr = (p75 - p25) / us * 100 if us > 0 else 0.0
    return f"{us:9.1f}us ({iqr:4.1f}%)"


def format_row(r: dict) -> str:
    """One table line: median times with their IQR as a % of the median, ratio, throughput."""
    thr = ""
    if "ours_tflops" in r:
        thr = f"{r['ours_tflops']:7.3f} / {r['ref_tflops']:7.3f} TFLOP/s"
    elif "ours_gbps" in r:
        thr = f"{r['ours_gbps']:7.1f} / {r['ref_gbps']:7.1f} GB/s"
        if "roofline_gbps" in r:
            thr += f" (copy {r['roofline_gbps']:.1f})"
    size = r["size"].split(" (")[0] if len(r["size"]) > 20 else r["size"]
    line = (
        f"{r['op']:<9} {r['case']:<16} {r['dtype']:<8} {size:<20} "
        f"{_time_cell(r['ours_us'], r['ours_p25_us'], r['ours_p75_us']):>17} "
        f"{_time_cell(r['ref_us'], r['ref_p25_us'], r['ref_p75_us']):>17} "
        f"{r['speedup']:6.3f}x  {thr or 'vs ' + r['ref']}"
    )
    for name, t in r.get("also", {}).items():  # more references: a line each, under the row
        line += (
            f"\n{'':<9} {'':<16} {'':<8} {'':<20} {'':>17} "
            f"{_time_cell(t['ref_us'], t['ref_p25_us'], t['ref_p75_us']):>17} "
            f"{t['speedup']:6.3f}x  vs {name}"
        )
    return line


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux, else what `platform` knows)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def environment(device: torch.device, timer: str = "torch") -> dict[str, Any]:
    """What the numbers depend on: versions, device, CPU/GPU models, threads, timer."""
    import lltm_ext

    env: dict[str, Any] = {
        "lltm_ext": lltm_ext.__version__,
        "torch": torch.__version__,
        "device": str(device),
        "cpu": cpu_model(),
        "threads": torch.get_num_threads(),
        "cpu_isa": cpu_isa(),
        "torch_cpu": torch.backends.cpu.get_cpu_capability(),
        "timer": {
            "torch": "torch.utils.benchmark.Timer.blocked_autorange",
            "triton": "triton.testing.do_bench",
        }[timer],
    }
    if torch.cuda.is_available():
        env["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        env["cuda"] = torch.version.cuda
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(gpu=props.name, sms=props.multi_processor_count)
    return env


def metadata(
    device: torch.device, timer: str = "torch", argv: Sequence[str] | None = None
) -> dict[str, Any]:
    """environment() plus a UTC timestamp (ISO 8601), the command line and how spread is given."""
    return {
        **environment(device, timer),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        if torch.cuda.is_available()
        else [],
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "argv": list(sys.argv if argv is None else argv),
        "spread": SPREAD,
    }


def write_json(
    path: str, rows: list[dict], device: torch.device, meta: dict[str, Any] | None = None
) -> None:
    """Write ``{"environment": ..., "results": rows}`` to `path`."""
    with open(path, "w") as f:
        json.dump(
            {"environment": meta if meta is not None else metadata(device), "results": rows},
            f,
            indent=2,
        )
        f.write("\n")
