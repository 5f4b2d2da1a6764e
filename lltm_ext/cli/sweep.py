"""Random-shape sweeps for `lltm-ext bench --sweep N`: lltm_ext against its reference over shapes a
user might bring, drawn log-uniformly, reported as a distribution of ratios.

The bench's fixed cases (``lltm_ext.cli.cases``) time large, aligned shapes; a sweep draws N shapes
at random (a seed makes them repeatable) and times lltm_ext and the reference on each, interleaved:

* GEMM: M, N, K each log-uniform in [1, 12000] (redrawn while 2 M N K exceeds the device's FLOP
  cap), one of the four layouts (``a`` and ``b`` row-major or transposed views) per shape; every
  dtype (bfloat16, float16, float32 exact and, on CUDA, TF32) runs the same shapes, against
  ``torch.mm`` under the same float32-matmul precision.
* ``lltm_sequence``: T in [8, 2048], B in [1, 512], S in [32, 2048] and I in [1, 2048], each
  log-uniform (redrawn past a work cap), forward+backward against ``torch.nn.LSTM(I, S)``, in
  float32 and bfloat16, and on request (``--dtypes tf32``) in float32 with TF32 matmuls allowed.

Timing, per shape: a warm-up call of each side, then samples alternating between the two sides.
On CUDA one sample is one call between CUDA events, the L2 cache flushed before it (as
``triton.testing.do_bench`` does) and the host's time hidden behind a spin (``_CudaSampler``), or,
with ``timer="loop"``, a few calls back to back (``_CudaLoopSampler``: the host's time counted
where it passes the GPU's); on the CPU one sample is the mean of a block of calls timed by the host
clock. A side's time is the median of its samples; ratio = reference time / lltm_ext
time (> 1: lltm_ext is faster). Each point also records both sides' error against float64, from
one untimed call (GEMM: ``|c - c64| / |c64|`` in the Frobenius norm; sequences: ``max |out - out64|
/ max |out64|`` of the forward output, each side against itself run in float64 from the same
weights and input).

A summary gives, per (op, dtype), the geometric mean of the ratios, their 10th percentile, minimum,
median and maximum, and the worst shapes.
"""

from __future__ import annotations

import copy
import functools
import math
import random
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

GEMM_DIM = (1, 12000)
# 2 M N K at most: a call stays short on a GPU (exact float32) and on a CPU (the times:
# docs/decisions.md#sweep-gemm-flop-cap).
GEMM_FLOP_CAP = {"cuda": 2e11, "cpu": 2e9}
GEMM_LAYOUTS = ("nn", "nt", "tn", "tt")
GEMM_DTYPES = {
    "cuda": ("bfloat16", "float16", "float32", "tf32"),
    "cpu": ("bfloat16", "float16", "float32"),
}
SEQ_RANGES = {"T": (8, 2048), "B": (1, 512), "S": (32, 2048), "I": (1, 2048)}
# Forward+backward work of a sequence, ~ 18 T B S (I + S) FLOP (three gate products, forward and
# two backward), at most this much.
SEQ_FLOP_CAP = {"cuda": 4e12, "cpu": 2e10}
SEQ_DTYPES = {"cuda": ("float32", "bfloat16"), "cpu": ("float32",)}
# Sequence dtypes timed only when --dtypes names them: "tf32" is float32 under
# torch.set_float32_matmul_precision("high"), lltm_sequence's TF32 setting (nn.LSTM follows cuDNN's
# own RNN setting, TF32 by default, either way): the two sides at the same precision. "autocast"
# is float32 modules and input, both sides called under torch.autocast(dtype=bfloat16), as a model
# trained in mixed precision calls them.
SEQ_EXTRA_DTYPES = {"cuda": ("tf32", "autocast"), "cpu": ("autocast",)}
SWEEP_OPS = ("gemm", "lltm_sequence")
# The sequence's configurations (--seq-configs), each against nn.LSTM in the same configuration:
# "1" one layer; "l2" .. "l4" that many layers; "bi" bidirectional; "packed" a PackedSequence of
# lengths drawn uniformly from [T/4, T] (both sides take the same packed batch).
SEQ_CONFIGS = ("1", "l2", "l3", "l4", "bi", "packed")
# Large states with large batches (S >= 1536, B >= 128) and the rest of the shapes users reported
# behind cuDNN, timed beside the random shapes with --seq-shapes large.
SEQ_LARGE_SHAPES = (
    {"T": 236, "B": 192, "I": 338, "S": 2048},
    {"T": 128, "B": 128, "I": 256, "S": 1536},
    {"T": 128, "B": 128, "I": 256, "S": 768},
    {"T": 100, "B": 256, "I": 256, "S": 1156},
    {"T": 200, "B": 64, "I": 256, "S": 1024},
)
_TORCH_DTYPES = {
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float32": torch.float32,
    "tf32": torch.float32,
    "autocast": torch.float32,
    "float64": torch.float64,
}


@dataclass
class SweepPoint:
    """One shape of one (op, dtype): both sides' median times and errors, and their ratio."""

    op: str
    dtype: str
    shape: dict[str, Any]
    flops: float
    ours_us: float
    ref_us: float
    ratio: float  # ref_us / ours_us: > 1, lltm_ext is faster
    samples: int
    ours_err: float | None = None
    ref_err: float | None = None
    notes: str = ""

    def label(self) -> str:
        """The shape as one short string, e.g. ``127x4096x1000 nt``."""
        s = self.shape
        if self.op == "gemm":
            return f"{s['M']}x{s['N']}x{s['K']} {s['layout']}"
        return f"T={s['T']} B={s['B']} I={s['I']} S={s['S']}"


@dataclass
class Summary:
    """The distribution of one (op, dtype)'s ratios."""

    op: str
    dtype: str
    points: int
    geomean: float
    p10: float
    minimum: float
    median: float
    maximum: float
    worst: list[str] = field(default_factory=list)
    max_err: float | None = None  # the largest error against float64, lltm_ext's
    max_ref_err: float | None = None  # and the reference's


def log_uniform(rng: random.Random, lo: int, hi: int) -> int:
    """An integer in [lo, hi] whose logarithm is uniform (each factor of 2 equally likely)."""
    return min(hi, int(math.exp(rng.uniform(math.log(lo), math.log(hi + 1)))))


def gemm_shapes(n: int, seed: int, device: str) -> list[dict[str, Any]]:
    """n GEMM shapes {M, N, K, layout}: dims log-uniform in GEMM_DIM, 2 M N K <= the cap."""
    rng = random.Random(seed)
    shapes: list[dict[str, Any]] = []
    while len(shapes) < n:
        m, nn_, k = (log_uniform(rng, *GEMM_DIM) for _ in range(3))
        layout = rng.choice(GEMM_LAYOUTS)
        if 2.0 * m * nn_ * k <= GEMM_FLOP_CAP[device]:
            shapes.append({"M": m, "N": nn_, "K": k, "layout": layout})
    return shapes


def sequence_flops(s: dict[str, int]) -> float:
    """Forward+backward FLOP of an LLTM sequence (T, B, I, S): its three gate products."""
    return 18.0 * s["T"] * s["B"] * s["S"] * (s["I"] + s["S"])


def config_work(config: str) -> int:
    """How many one-layer sequences' work a configuration is (layers x directions)."""
    if config.startswith("l"):
        return int(config[1:])
    return 2 if config == "bi" else 1


def sequence_shapes(n: int, seed: int, device: str, config: str = "1") -> list[dict[str, int]]:
    """n sequence shapes {T, B, I, S}, each log-uniform in SEQ_RANGES, work under the cap (the
    configuration's whole work: layers x directions)."""
    rng = random.Random(seed + 1)  # not the GEMM's stream of draws
    shapes: list[dict[str, int]] = []
    while len(shapes) < n:
        s = {k: log_uniform(rng, *r) for k, r in SEQ_RANGES.items()}
        if sequence_flops(s) * config_work(config) <= SEQ_FLOP_CAP[device]:
            shapes.append(s)
    return shapes


# ----------------------------------------------------------------------------------------------
# Timing: interleaved samples of two callables.
# ----------------------------------------------------------------------------------------------


class _CudaSampler:
    """One sample = one call between CUDA events, after a write of 256 MB that flushes L2 and a
    spin kernel: the GPU stays busy while the host queues the call, so that the host's own time
    per call (Python, dispatch, autograd) stays out of both sides' figures, as in a training loop
    that keeps the GPU busy. The spin is ~50 us unless `cover` sizes it to the callables' host
    time (an LLTM sequence's forward+backward takes the host a few hundred microseconds, past
    what the flush and 50 us hide: short sequences then timed the host).

    `flush`: "write" zeroes the 256 MB (L2 is left full of dirty lines, which the timed call
    writes back to memory as it evicts them: up to L2's 50 MB of writes charged to every call, as
    ``triton.testing.do_bench`` does); "read" sums it (L2 left holding clean lines: the timed call
    moves only its own bytes)."""

    def __init__(self, device: torch.device, flush: str = "write") -> None:
        if flush not in ("write", "read"):
            raise ValueError(f"flush must be 'write' or 'read', not {flush!r}")
        self.flush = torch.zeros(256 * 2**20, dtype=torch.int8, device=device)
        self._flush_words = self.flush.view(torch.float32)
        self.flush_mode = flush
        self.spin_cycles = 100_000  # ~50 us at the H100's clock
        self._cycles_per_us = 0.0

    def cycles_per_us(self) -> float:
        """The spin kernel's clock cycles per microsecond (measured once, CUDA events)."""
        if not self._cycles_per_us:
            cycles = 2_000_000
            torch.cuda._sleep(cycles)  # warm-up
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(cycles)
            end.record()
            end.synchronize()
            self._cycles_per_us = cycles / (start.elapsed_time(end) * 1e3)
        return self._cycles_per_us

    def cover(self, fns: list[Callable[[], Any]]) -> float:
        """Sizes the spin to 1.5x the longest host time of one call of fns, plus 20 us (at least
        50 us, at most 20 ms), and returns that host time in seconds. Each call is timed by the
        host clock while the GPU runs a 20 ms spin, so the host never waits on the GPU (a call
        that synchronizes reads as 20 ms)."""
        per_us = self.cycles_per_us()
        worst = 0.0
        for fn in fns:
            times = []
            for _ in range(3):
                torch.cuda._sleep(int(20_000 * per_us))
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
                torch.cuda.synchronize()
            worst = max(worst, statistics.median(times))
        spin_us = min(20_000.0, max(50.0, 1.5 * worst * 1e6 + 20.0))
        self.spin_cycles = int(spin_us * per_us)
        return worst

    def run(self, fns: list[Callable[[], Any]], per_side: int) -> list[list[float]]:
        events = [[] for _ in fns]  # type: list[list[tuple[torch.cuda.Event, torch.cuda.Event]]]
        for _ in range(per_side):
            for fn, ev in zip(fns, events, strict=True):
                if self.flush_mode == "write":
                    self.flush.zero_()
                else:
                    self._flush_words.sum()
                torch.cuda._sleep(self.spin_cycles)
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                ev.append((start, end))
        torch.cuda.synchronize()
        return [[s.elapsed_time(e) * 1e-3 for s, e in ev] for ev in events]


class _CudaLoopSampler:
    """One sample = a few calls back to back between CUDA events, from an idle GPU, per call: a
    training loop that runs nothing else, where a call whose host time passes its GPU time makes
    the next call wait on the host. No L2 flush (the calls share L2, as a loop's do) and no spin.
    Calls per sample: enough for about 2 ms, 2 to 50."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def run(self, fns: list[Callable[[], Any]], per_side: int) -> list[list[float]]:
        if not self.calls:
            for fn in fns:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                fn()
                torch.cuda.synchronize()
                once = max(time.perf_counter() - t0, 1e-7)
                self.calls.append(max(2, min(50, math.ceil(2e-3 / once))))
        out: list[list[float]] = [[] for _ in fns]
        for _ in range(per_side):
            for fn, calls, samples in zip(fns, self.calls, out, strict=True):
                torch.cuda.synchronize()
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(calls):
                    fn()
                end.record()
                end.synchronize()
                samples.append(start.elapsed_time(end) * 1e-3 / calls)
        return out


SWEEP_TIMERS = ("covered", "loop")


class _CpuSampler:
    """One sample = the mean time of a block of calls (blocks of >= ~1 ms), by the host clock."""

    def __init__(self) -> None:
        self.block: list[int] = []

    def run(self, fns: list[Callable[[], Any]], per_side: int) -> list[list[float]]:
        if not self.block:
            for fn in fns:
                t0 = time.perf_counter()
                fn()
                once = max(time.perf_counter() - t0, 1e-7)
                self.block.append(max(1, min(1000, int(1e-3 / once))))
        out: list[list[float]] = [[] for _ in fns]
        for _ in range(per_side):
            for fn, reps, samples in zip(fns, self.block, out, strict=True):
                t0 = time.perf_counter()
                for _ in range(reps):
                    fn()
                samples.append((time.perf_counter() - t0) / reps)
        return out


def time_medians(
    fns: list[Callable[[], Any]],
    device: torch.device,
    budget_s: float,
    flush: str = "write",
    timer: str = "covered",
) -> tuple[list[float], int]:
    """Median seconds per call of each of `fns`, sampled in turn, and the samples per fn.

    One warm-up call each first (and a first sample to size the rest); then as many samples as fit
    in about `budget_s` together, at least 5 and at most 100 per fn. `flush`: how L2 is emptied
    before each CUDA sample (`_CudaSampler`). `timer` (CUDA): "covered", one call a sample with the
    host's time hidden (`_CudaSampler`), or "loop", calls back to back (`_CudaLoopSampler`).
    """
    if timer not in SWEEP_TIMERS:
        raise ValueError(f"timer must be one of {SWEEP_TIMERS}, got {timer!r}")
    sampler: _CudaSampler | _CudaLoopSampler | _CpuSampler
    if device.type == "cuda":
        for fn in fns:
            fn()
        torch.cuda.synchronize()
        if timer == "loop":
            sampler = _CudaLoopSampler()
        else:
            sampler = _CudaSampler(device, flush)
            sampler.cover(fns)
    else:
        sampler = _CpuSampler()
    first = sampler.run(fns, 1)
    # A sample's cost: its calls (the loop sampler's several) times a call's time.
    calls = sampler.calls if isinstance(sampler, _CudaLoopSampler) else [1] * len(fns)
    per_call = sum(s[0] * c for s, c in zip(first, calls, strict=True))
    per_fn = int(min(100, max(5, budget_s / max(per_call, 1e-9))))
    samples = sampler.run(fns, per_fn)
    return [statistics.median(s) for s in samples], per_fn


def time_interleaved(
    ours: Callable[[], Any],
    ref: Callable[[], Any],
    device: torch.device,
    budget_s: float,
    timer: str = "covered",
) -> tuple[float, float, int]:
    """Median seconds per call of `ours` and `ref`, sampled alternately, and the samples per side
    (``time_medians`` of the two, with its `timer`)."""
    (a, b), per_side = time_medians([ours, ref], device, budget_s, timer=timer)
    return a, b, per_side


# ----------------------------------------------------------------------------------------------
# The ops.
# ----------------------------------------------------------------------------------------------


@contextmanager
def _matmul_precision(tf32: bool) -> Iterator[None]:
    """float32 matmuls exact ("highest") or TF32 ("high") inside; the caller's setting after."""
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old)


def _rel_err(c: torch.Tensor, ref64: torch.Tensor) -> float:
    return float((c.double() - ref64).norm() / ref64.norm().clamp_min(1e-300))


def _max_err(out: torch.Tensor, ref64: torch.Tensor) -> float:
    return float((out.double() - ref64).abs().max() / ref64.abs().max().clamp_min(1e-300))


def gemm_point(
    shape: dict[str, Any],
    dtype: str,
    device: torch.device,
    budget_s: float,
    seed: int,
    timer: str = "covered",
) -> SweepPoint:
    """lltm_ext.gemm against torch.mm on one shape: times (`timer`: time_medians'), ratio, and
    both errors."""
    import lltm_ext

    m, n, k, layout = shape["M"], shape["N"], shape["K"], shape["layout"]
    gen = torch.Generator(device="cpu").manual_seed(seed)
    tdt = _TORCH_DTYPES[dtype]
    a = torch.randn(k, m, generator=gen) if layout[0] == "t" else torch.randn(m, k, generator=gen)
    b = torch.randn(n, k, generator=gen) if layout[1] == "t" else torch.randn(k, n, generator=gen)
    a, b = a.to(device, tdt), b.to(device, tdt)
    if layout[0] == "t":
        a = a.t()
    if layout[1] == "t":
        b = b.t()
    with _matmul_precision(dtype == "tf32"):
        ref64 = torch.mm(a.double(), b.double())
        ours_err = _rel_err(lltm_ext.gemm(a, b), ref64)
        ref_err = _rel_err(torch.mm(a, b), ref64)
        del ref64
        t_ours, t_ref, samples = time_interleaved(
            lambda: lltm_ext.gemm(a, b), lambda: torch.mm(a, b), device, budget_s, timer
        )
    return SweepPoint(
        op="gemm",
        dtype=dtype,
        shape=dict(shape),
        flops=2.0 * m * n * k,
        ours_us=t_ours * 1e6,
        ref_us=t_ref * 1e6,
        ratio=t_ref / t_ours,
        samples=samples,
        ours_err=ours_err,
        ref_err=ref_err,
    )


def sequence_point(
    shape: dict[str, int],
    dtype: str,
    device: torch.device,
    budget_s: float,
    seed: int,
    config: str = "1",
    timer: str = "covered",
) -> SweepPoint:
    """lltm_ext.LLTMSequence against torch.nn.LSTM in the same configuration (SEQ_CONFIGS),
    forward+backward, on one (T, B, I, S), timed as `timer` says (time_medians')."""
    import warnings

    from torch.nn.utils.rnn import pack_padded_sequence

    import lltm_ext

    t, b, i, s = shape["T"], shape["B"], shape["I"], shape["S"]
    tdt = _TORCH_DTYPES[dtype]
    torch.manual_seed(seed)
    layers = config_work(config) if config.startswith("l") else 1
    bidirectional = config == "bi"
    seq = lltm_ext.LLTMSequence(i, s, num_layers=layers, bidirectional=bidirectional)
    seq = seq.to(device, tdt)
    lstm = torch.nn.LSTM(i, s, num_layers=layers, bidirectional=bidirectional).to(device, tdt)
    x: Any = torch.randn(t, b, i, device=device, dtype=tdt)
    if config == "packed":
        lengths = torch.randint(max(1, t // 4), t + 1, (b,))
        lengths[0] = t  # the longest is T
        x = pack_padded_sequence(x, lengths, enforce_sorted=False)
        g = torch.randn(x.data.shape[0], s, device=device, dtype=tdt)
    else:
        g = torch.randn(t, b, s * (2 if config == "bi" else 1), device=device, dtype=tdt)
    # nn.LSTM in bfloat16 re-compacts its weights every call and warns once; that cost is part of
    # what its users get, the warning is not.
    warnings.filterwarnings(
        "ignore", message="RNN module weights are not part of single contiguous chunk"
    )
    seq_params = tuple(seq.parameters())
    lstm_params = tuple(lstm.parameters())

    autocast = dtype == "autocast"

    def run(module: torch.nn.Module, x: Any = x) -> torch.Tensor:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            out = module(x)[0]
        return out.data if config == "packed" else out

    x64 = x.to(torch.float64) if config == "packed" else x.double()

    def ours() -> Any:
        return torch.autograd.grad(run(seq), seq_params, g)

    def ref() -> Any:
        return torch.autograd.grad(run(lstm), lstm_params, g)

    with _matmul_precision(dtype == "tf32"):
        with torch.no_grad():
            ours_err = _max_err(run(seq), run(copy.deepcopy(seq).double(), x64))
            ref_err = _max_err(run(lstm), run(copy.deepcopy(lstm).double(), x64))
        t_ours, t_ref, samples = time_interleaved(ours, ref, device, budget_s, timer)
    return SweepPoint(
        op="lltm_sequence" if config == "1" else f"lltm_sequence[{config}]",
        dtype=dtype,
        shape=dict(shape),
        flops=sequence_flops(shape) * config_work(config),
        ours_us=t_ours * 1e6,
        ref_us=t_ref * 1e6,
        ratio=t_ref / t_ours,
        samples=samples,
        ours_err=ours_err,
        ref_err=ref_err,
    )


# ----------------------------------------------------------------------------------------------
# Running and summarizing.
# ----------------------------------------------------------------------------------------------


def summarize(points: list[SweepPoint], worst: int = 5) -> list[Summary]:
    """Per (op, dtype), in the order first seen: the ratios' distribution and the worst shapes."""
    groups: dict[tuple[str, str], list[SweepPoint]] = {}
    for p in points:
        groups.setdefault((p.op, p.dtype), []).append(p)
    out = []
    for (op, dtype), ps in groups.items():
        r = sorted(p.ratio for p in ps)
        p10 = r[min(len(r) - 1, int(0.1 * (len(r) - 1) + 0.5))]
        out.append(
            Summary(
                op=op,
                dtype=dtype,
                points=len(r),
                geomean=math.exp(sum(math.log(x) for x in r) / len(r)),
                p10=p10,
                minimum=r[0],
                median=statistics.median(r),
                maximum=r[-1],
                worst=[
                    f"{p.label()}: {p.ratio:.3f}x ({p.ours_us:.1f} vs {p.ref_us:.1f} us)"
                    for p in sorted(ps, key=lambda p: p.ratio)[:worst]
                ],
                max_err=_max_or_none(p.ours_err for p in ps),
                max_ref_err=_max_or_none(p.ref_err for p in ps),
            )
        )
    return out


def _max_or_none(values: Iterator[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


SUMMARY_HEADER = (
    f"{'op':<14} {'dtype':<9} {'points':>6} {'geomean':>8} {'p10':>7} {'min':>7} {'median':>7} "
    f"{'max':>7} {'max err':>9} {'(ref)':>9}"
)


def format_summary(s: Summary) -> str:
    """One line of the summary table."""
    return (
        f"{s.op:<14} {s.dtype:<9} {s.points:>6} {s.geomean:7.3f}x {s.p10:6.3f}x {s.minimum:6.3f}x "
        f"{s.median:6.3f}x {s.maximum:6.3f}x"
        + (f" {s.max_err:9.1e} {s.max_ref_err:9.1e}" if s.max_err is not None else "")
    )


def format_point(p: SweepPoint) -> str:
    """One progress line: the shape, both times, the ratio and the errors."""
    err = ""
    if p.ours_err is not None:
        err = f"  err {p.ours_err:.1e} / {p.ref_err:.1e}"
    return (
        f"{p.op:<14} {p.dtype:<9} {p.label():<28} {p.ours_us:10.1f} {p.ref_us:10.1f} us "
        f"{p.ratio:7.3f}x{err}"
    )


def run_sweep(
    ops: list[str],
    n: int,
    seed: int,
    device: torch.device,
    *,
    dtypes: list[str] | None = None,
    budget_s: float = 0.05,
    echo: Callable[[str], None] | None = print,
    seq_configs: list[str] | None = None,
    seq_large: bool = False,
    timer: str = "covered",
) -> list[SweepPoint]:
    """Time n random shapes of each op in `ops` for each dtype (default: the device's list); the
    sequence in each of `seq_configs` (default: one layer), with SEQ_LARGE_SHAPES after the random
    shapes when `seq_large`; on CUDA by `timer` ("covered" or "loop": time_medians')."""
    if timer not in SWEEP_TIMERS:
        raise ValueError(f"timer must be one of {SWEEP_TIMERS}, got {timer!r}")
    points = []
    for op in ops:
        runs: list[tuple[list[dict[str, Any]], Callable[..., SweepPoint]]] = []
        if op == "gemm":
            runs.append(
                (gemm_shapes(n, seed, device.type), functools.partial(gemm_point, timer=timer))
            )
            names = GEMM_DTYPES[device.type]
        else:
            for config in seq_configs or ["1"]:
                shapes = sequence_shapes(n, seed, device.type, config)
                if seq_large:
                    shapes += [dict(s) for s in SEQ_LARGE_SHAPES]
                runs.append((shapes, functools.partial(sequence_point, config=config, timer=timer)))
            names = SEQ_DTYPES[device.type]
        allowed = names + (SEQ_EXTRA_DTYPES[device.type] if op == "lltm_sequence" else ())
        for shapes, point in runs:
            for dtype in dtypes or names:
                if dtype not in allowed:
                    continue  # e.g. tf32 on the CPU
                for idx, shape in enumerate(shapes):
                    p = point(shape, dtype, device, budget_s, seed * 100003 + idx)
                    points.append(p)
                    if echo:
                        echo(format_point(p))
    return points


def sweep_json(points: list[SweepPoint], summaries: list[Summary]) -> dict[str, Any]:
    """What `--json` writes for a sweep (beside the environment)."""
    return {
        "summary": [asdict(s) for s in summaries],
        "points": [asdict(p) for p in points],
    }


def plot_sweep(points: list[SweepPoint], meta: dict[str, Any], path: str) -> None:
    """Ratio against problem size (FLOP), one panel per op, one colour per dtype (needs
    matplotlib)."""
    from lltm_ext.cli.plot import require_matplotlib

    require_matplotlib()
    import matplotlib.pyplot as plt

    ops = list(dict.fromkeys(p.op for p in points))
    fig, axes = plt.subplots(1, len(ops), figsize=(7 * len(ops), 4.8), squeeze=False)
    for ax, op in zip(axes[0], ops, strict=True):
        for dtype in dict.fromkeys(p.dtype for p in points if p.op == op):
            ps = [p for p in points if p.op == op and p.dtype == dtype]
            ax.scatter([p.flops for p in ps], [p.ratio for p in ps], s=12, alpha=0.7, label=dtype)
        ax.set_xscale("log")
        ax.set_yscale("log")
        for y, style in ((1.0, "-"), (0.9, "--"), (0.5, ":")):
            ax.axhline(y, color="gray", linestyle=style, linewidth=0.8)
        ref = "torch.mm" if op == "gemm" else "torch.nn.LSTM"
        ax.set_title(f"{op}: {ref} time / lltm_ext time (> 1: lltm_ext faster)")
        ax.set_xlabel("problem size, FLOP" + (" (forward+backward)" if op != "gemm" else ""))
        ax.set_ylabel("ratio")
        ax.legend(fontsize=8)
    where = meta.get("gpu") or meta.get("cpu", "")
    fig.suptitle(f"lltm_ext {meta.get('lltm_ext', '')}, torch {meta.get('torch', '')}, {where}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
