"""`lltm-ext bench --linear`: lltm_ext.gemm timed as linear layers call it, against torch's matmul.

A linear layer multiplies activations x (M, K), M the tokens in flight, by a weight stored as
``nn.Linear`` stores it, W (N, K): ``x @ W.T``. Layout ``t`` times ``lltm_ext.gemm(x, W.t())``
against ``x @ W.t()`` (``W.t()`` a transposed view, no copy, made inside each call on both sides);
layout ``n`` a weight stored (K, N): ``lltm_ext.gemm(x, W)`` against ``x @ W``. On CUDA the
reference is cuBLAS, on the CPU torch's CPU matmul.

Each layer (K, N) gets its own operands, made on the device and freed before the next layer: x
random normal, W uniform in [-1/sqrt(K), 1/sqrt(K)] (``nn.Linear``'s initialization), in float32
and rounded to the dtype; every M takes the first M rows of one x. Timing is the sweep's
(``lltm_ext.cli.sweep.time_medians``): a warm-up call of each side, then samples alternating
between the two; on CUDA one call between CUDA events with the L2 cache flushed before it, on the
CPU the mean of a block of calls by the host clock; a side's time is its median.

Small M reads the whole weight for little arithmetic: the GEMM is bound by memory bandwidth there.
Each point records the effective bandwidth W bytes / time of both sides and its fraction of the
copy bandwidth, measured in the same run by the same method: a device-to-device copy of a buffer
as large as the largest weight timed, copy bandwidth = 2 bytes / time (read and write). On CUDA,
at M <= 16 the bandwidth's times (``*_bw_us``) are a second interleaved timing whose flush leaves
L2 clean (``time_medians(flush="read")``), the copy's too: the ratios' flush, a zero fill, leaves
L2 full of dirty lines that the timed call writes back as it reads W (3-8 us a call on the H200,
benchmarks/gemm_skinny/measure_flush.py), bytes that are not the call's. On the CPU nothing is
flushed: the blocks of calls keep weights that fit in cache there, the copy too, so a weight
smaller than the copy's buffer can read faster than the copy (a fraction above 1).

Each point also records both sides' error against float64 (``|c - c64| / |c64|``, Frobenius
norm; c64 the product of the same rounded operands in float64), from one untimed call.

A summary per (dtype, layout, M): the geometric mean of the ratios over the layers, the worst
ratio and its layer, and for M <= 16 the median fraction of the copy bandwidth of each side.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from lltm_ext.cli.sweep import _TORCH_DTYPES, _matmul_precision, _rel_err, time_medians

# M, the tokens in flight (--linear-ms); on the CPU those up to CPU_MAX_M.
LINEAR_MS = (1, 8, 16, 32, 128, 512, 2048, 8192)
CPU_MAX_M = 512
# Weights (K, N) of the linear layers of common language models (--linear-layers): attention
# projections and MLPs of 7B-70B models; on the CPU small ones (seconds on one thread).
LINEAR_LAYERS: dict[str, tuple[tuple[int, int], ...]] = {
    "cuda": (
        (4096, 4096),
        (4096, 11008),
        (11008, 4096),
        (4096, 14336),
        (14336, 4096),
        (8192, 28672),
        (5120, 13824),
        (2048, 8192),
    ),
    "cpu": ((256, 256), (512, 1024), (1024, 512)),
}
LINEAR_DTYPES = {
    "cuda": ("bfloat16", "float16", "float32", "tf32"),
    "cpu": ("bfloat16", "float16", "float32"),
}
DEFAULT_DTYPES = {"cuda": ("bfloat16", "float16"), "cpu": ("bfloat16", "float32")}
# --linear-layouts: the weight's storage.
LINEAR_LAYOUTS = {
    "t": "x @ W.T, W stored (N, K) as nn.Linear stores it",
    "n": "x @ W, W stored (K, N)",
}
DEFAULT_LAYOUTS = ("t",)
# The summary's bandwidth fractions are of the points with M at most this (memory-bound).
BANDWIDTH_MAX_M = 16


@dataclass
class LinearPoint:
    """One (M, layer, layout, dtype): both sides' median times, bandwidths and errors."""

    M: int
    K: int
    N: int
    layout: str
    dtype: str
    ours_us: float
    ref_us: float
    ratio: float  # ref_us / ours_us: > 1, lltm_ext is faster
    w_bytes: int
    ours_gbps: float  # w_bytes / ours_bw_us
    ref_gbps: float
    ours_bw_fraction: float  # ours_gbps / the copy bandwidth
    ref_bw_fraction: float
    samples: int
    flops: float = 0.0
    ours_err: float | None = None
    ref_err: float | None = None
    # The times the bandwidth is of: on CUDA at M <= BANDWIDTH_MAX_M timed again with L2 left
    # clean by the flush, else ours_us / ref_us.
    ours_bw_us: float | None = None
    ref_bw_us: float | None = None

    def layer(self) -> str:
        """The weight's (K, N) as ``KxN``."""
        return f"{self.K}x{self.N}"


@dataclass
class LinearSummary:
    """One (dtype, layout, M) over the layers."""

    dtype: str
    layout: str
    M: int
    layers: int
    geomean: float  # of the ratios
    worst: float  # the lowest ratio
    worst_layer: str  # its layer, KxN
    ours_bw_fraction: float | None = None  # median over the layers, M <= BANDWIDTH_MAX_M only
    ref_bw_fraction: float | None = None


@dataclass
class CopyBandwidth:
    """The device's copy bandwidth: a copy of `bytes` in `us`, 2 bytes / time in GB/s."""

    bytes: int
    us: float
    gbps: float
    samples: int
    what: str = "dst.copy_(src) of one buffer, same device, timed as the GEMMs; 2 bytes / time"
    flush: str = "write"  # time_medians' flush: "read" (L2 left clean) on CUDA


@dataclass
class LinearOptions:
    """What a `--linear` run times (parsed from the command line)."""

    ms: list[int]
    layers: list[tuple[int, int]]
    dtypes: list[str]
    layouts: list[str]


# ----------------------------------------------------------------------------------------------
# Options.
# ----------------------------------------------------------------------------------------------


def _items(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _whole(text: str) -> int | None:
    return int(text) if text.isdigit() and int(text) >= 1 else None


def parse_ms(text: str) -> list[int]:
    """``1,8,16`` -> [1, 8, 16] (whole numbers >= 1, each once); ValueError naming a bad one."""
    values = [_whole(t) for t in _items(text)]
    bad = [t for t, v in zip(_items(text), values, strict=True) if v is None]
    if bad or not values:
        raise ValueError(
            f"--linear-ms takes whole numbers >= 1, comma-separated (e.g. 1,16,512), got {text!r}"
        )
    return list(dict.fromkeys(v for v in values if v is not None))


def parse_layers(text: str) -> list[tuple[int, int]]:
    """``4096x4096,4096x11008`` -> [(K, N), ...] (whole numbers >= 1, each layer once);
    ValueError naming a bad one."""
    out: list[tuple[int, int]] = []
    for item in _items(text):
        dims = [_whole(d.strip()) for d in item.lower().split("x")]
        if len(dims) != 2 or None in dims:
            raise ValueError(
                f"--linear-layers takes KxN pairs of whole numbers >= 1, comma-separated "
                f"(e.g. 4096x11008,11008x4096), got {item!r}"
            )
        k, n = dims
        assert k is not None and n is not None
        out.append((k, n))
    if not out:
        raise ValueError(f"--linear-layers names no layer: {text!r}")
    return list(dict.fromkeys(out))


def parse_layouts(text: str) -> list[str]:
    """``t,n`` -> ["t", "n"]; ValueError naming the known ones."""
    values = _items(text)
    bad = [v for v in values if v not in LINEAR_LAYOUTS]
    if bad or not values:
        known = "; ".join(f"{k}: {v}" for k, v in LINEAR_LAYOUTS.items())
        raise ValueError(f"unknown --linear-layouts {bad or text!r}; known: {known}")
    return list(dict.fromkeys(values))


def parse_dtypes(text: str, device_type: str) -> list[str]:
    """``bfloat16,float16`` -> the list; ValueError naming those `device_type` times."""
    values = _items(text)
    bad = [v for v in values if v not in LINEAR_DTYPES[device_type]]
    if bad or not values:
        raise ValueError(
            f"--linear times --dtypes {','.join(LINEAR_DTYPES[device_type])} on {device_type}; "
            f"got {bad or text!r}"
        )
    return list(dict.fromkeys(values))


def linear_options(
    device_type: str,
    ms: str | None = None,
    layers: str | None = None,
    dtypes: str | None = None,
    layouts: str | None = None,
) -> LinearOptions:
    """The run's options from the command line's text (None: the device's default)."""
    return LinearOptions(
        ms=parse_ms(ms)
        if ms is not None
        else [m for m in LINEAR_MS if device_type == "cuda" or m <= CPU_MAX_M],
        layers=parse_layers(layers) if layers is not None else list(LINEAR_LAYERS[device_type]),
        dtypes=parse_dtypes(dtypes, device_type)
        if dtypes is not None
        else list(DEFAULT_DTYPES[device_type]),
        layouts=parse_layouts(layouts) if layouts is not None else list(DEFAULT_LAYOUTS),
    )


# ----------------------------------------------------------------------------------------------
# Measuring.
# ----------------------------------------------------------------------------------------------


def _element_size(dtype: str) -> int:
    return torch.empty((), dtype=_TORCH_DTYPES[dtype]).element_size()


def copy_bandwidth(
    nbytes: int, device: torch.device, budget_s: float, flush: str = "write"
) -> CopyBandwidth:
    """Times ``dst.copy_(src)`` of two `nbytes` buffers on `device` (random bytes) as the GEMMs
    are timed, L2 emptied by `flush` (``time_medians``); bandwidth = 2 nbytes / median time (read
    and write)."""
    gen = torch.Generator(device=device).manual_seed(0)
    src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device=device, generator=gen)
    dst = torch.empty_like(src)
    (t,), samples = time_medians([lambda: dst.copy_(src)], device, budget_s, flush=flush)
    return CopyBandwidth(
        bytes=nbytes, us=t * 1e6, gbps=2 * nbytes / t / 1e9, samples=samples, flush=flush
    )


def _operands(
    k: int, n: int, max_m: int, dtype: str, device: torch.device, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """x (max_m, K) random normal and W (N, K) uniform in +-1/sqrt(K) (nn.Linear's init), made in
    float32 on `device` and rounded to `dtype`."""
    gen = torch.Generator(device=device).manual_seed(seed)
    tdt = _TORCH_DTYPES[dtype]
    x = torch.randn(max_m, k, device=device, generator=gen).to(tdt)
    w = torch.rand(n, k, device=device, generator=gen).mul_(2).sub_(1).mul_(k**-0.5).to(tdt)
    return x, w


def _calls(
    x: torch.Tensor, w: torch.Tensor, layout: str
) -> tuple[Callable[[], torch.Tensor], Callable[[], torch.Tensor]]:
    """lltm_ext's call and the reference's, as a user writes them: layout t, w (N, K) and the
    view w.t() made in the call; layout n, w (K, N)."""
    import lltm_ext

    if layout == "t":
        return (lambda: lltm_ext.gemm(x, w.t())), (lambda: x @ w.t())
    return (lambda: lltm_ext.gemm(x, w)), (lambda: x @ w)


def run_linear(
    device: torch.device,
    options: LinearOptions,
    *,
    budget_s: float = 0.05,
    seed: int = 0,
    echo: Callable[[str], None] | None = print,
) -> tuple[list[LinearPoint], CopyBandwidth]:
    """Time every (layer, dtype, M, layout) of `options`; the points, and the copy bandwidth
    (measured first, on a buffer as large as the largest weight)."""
    largest = max(k * n * _element_size(d) for k, n in options.layers for d in options.dtypes)
    bw_flush = "read" if device.type == "cuda" else "write"  # the bandwidth's timing: L2 clean
    copy = copy_bandwidth(largest, device, budget_s, flush=bw_flush)
    if echo:
        echo(
            f"copy bandwidth: {copy.gbps:.1f} GB/s (2 x {copy.bytes / 1e6:.1f} MB in "
            f"{copy.us:.1f} us)"
        )
    points = []
    max_m = max(options.ms)
    for index, (k, n) in enumerate(options.layers):
        for dtype in options.dtypes:
            x_all, w_nk = _operands(k, n, max_m, dtype, device, seed * 1009 + index)
            weights = {"t": w_nk, "n": w_nk.t().contiguous() if "n" in options.layouts else w_nk}
            w64 = w_nk.double()
            w_bytes = w_nk.numel() * w_nk.element_size()
            with _matmul_precision(dtype == "tf32"):
                for m in options.ms:
                    x = x_all[:m]
                    c64 = x.double() @ w64.t()
                    for layout in options.layouts:
                        ours, ref = _calls(x, weights[layout], layout)
                        ours_err, ref_err = _rel_err(ours(), c64), _rel_err(ref(), c64)
                        (t_ours, t_ref), samples = time_medians([ours, ref], device, budget_s)
                        bw_ours, bw_ref = t_ours, t_ref
                        if m <= BANDWIDTH_MAX_M and bw_flush != "write":
                            (bw_ours, bw_ref), _ = time_medians(
                                [ours, ref], device, budget_s, flush=bw_flush
                            )
                        p = LinearPoint(
                            M=m,
                            K=k,
                            N=n,
                            layout=layout,
                            dtype=dtype,
                            ours_us=t_ours * 1e6,
                            ref_us=t_ref * 1e6,
                            ratio=t_ref / t_ours,
                            w_bytes=w_bytes,
                            ours_gbps=w_bytes / bw_ours / 1e9,
                            ref_gbps=w_bytes / bw_ref / 1e9,
                            ours_bw_fraction=w_bytes / bw_ours / 1e9 / copy.gbps,
                            ref_bw_fraction=w_bytes / bw_ref / 1e9 / copy.gbps,
                            samples=samples,
                            flops=2.0 * m * k * n,
                            ours_err=ours_err,
                            ref_err=ref_err,
                            ours_bw_us=bw_ours * 1e6,
                            ref_bw_us=bw_ref * 1e6,
                        )
                        points.append(p)
                        if echo:
                            echo(format_point(p))
                    del c64
            # One layer's operands at a time: the calls' closures hold them too.
            del x_all, w_nk, weights, w64, x, ours, ref
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return points, copy


# ----------------------------------------------------------------------------------------------
# Summary, table, JSON.
# ----------------------------------------------------------------------------------------------


def summarize_linear(points: list[LinearPoint]) -> list[LinearSummary]:
    """Per (dtype, layout, M) (dtypes and layouts in the order first seen, M ascending): the
    geometric mean and the worst of the ratios over the layers, and at M <= BANDWIDTH_MAX_M the
    median fraction of the copy bandwidth of each side."""
    groups: dict[tuple[str, str, int], list[LinearPoint]] = {}
    for p in points:
        groups.setdefault((p.dtype, p.layout, p.M), []).append(p)
    dtypes = list(dict.fromkeys(p.dtype for p in points))
    layouts = list(dict.fromkeys(p.layout for p in points))
    out = []
    for key in sorted(groups, key=lambda g: (dtypes.index(g[0]), layouts.index(g[1]), g[2])):
        dtype, layout, m = key
        ps = groups[key]
        worst = min(ps, key=lambda p: p.ratio)
        small = m <= BANDWIDTH_MAX_M
        out.append(
            LinearSummary(
                dtype=dtype,
                layout=layout,
                M=m,
                layers=len(ps),
                geomean=math.exp(sum(math.log(p.ratio) for p in ps) / len(ps)),
                worst=worst.ratio,
                worst_layer=worst.layer(),
                ours_bw_fraction=statistics.median(p.ours_bw_fraction for p in ps)
                if small
                else None,
                ref_bw_fraction=statistics.median(p.ref_bw_fraction for p in ps) if small else None,
            )
        )
    return out


def format_point(p: LinearPoint) -> str:
    """One progress line: the point, both times, the ratio, bandwidth fractions and errors."""
    err = f"  err {p.ours_err:.1e} / {p.ref_err:.1e}" if p.ours_err is not None else ""
    return (
        f"{p.dtype:<9} {p.layout} M={p.M:<5} {p.layer():<11} {p.ours_us:10.1f} {p.ref_us:10.1f} us "
        f"{p.ratio:6.3f}x  bw {p.ours_bw_fraction:5.2f} / {p.ref_bw_fraction:5.2f} of copy{err}"
    )


_CELL = 39  # one dtype's columns in the table


def format_table(summaries: list[LinearSummary], layout: str) -> list[str]:
    """The table of one layout: a row per M; per dtype the geometric mean of the ratios over the
    layers, the worst (and its layer, KxN) and, at M <= 16, the median fraction of the copy
    bandwidth of lltm_ext / of the reference."""
    rows = [s for s in summaries if s.layout == layout]
    dtypes = list(dict.fromkeys(s.dtype for s in rows))
    by = {(s.dtype, s.M): s for s in rows}
    ms = sorted({s.M for s in rows})
    lines = [
        f"{'':>6} |" + "|".join(f" {d:<{_CELL - 1}}" for d in dtypes),
        f"{'M':>6} |"
        + "|".join(
            f" {'geomean':>7} {'worst':>7} {'(layer)':<11} {'bw ours/ref':>11} " for _ in dtypes
        ),
    ]
    for m in ms:
        cells = []
        for d in dtypes:
            s = by.get((d, m))
            if s is None:
                cells.append(" " * _CELL)
                continue
            bw = "-"
            if s.ours_bw_fraction is not None and s.ref_bw_fraction is not None:
                bw = f"{s.ours_bw_fraction:.2f}/{s.ref_bw_fraction:.2f}"
            cells.append(f" {s.geomean:6.3f}x {s.worst:6.3f}x {s.worst_layer:<11} {bw:>11} ")
        lines.append(f"{m:>6} |" + "|".join(cells))
    return [line.rstrip() for line in lines]


def linear_json(
    points: list[LinearPoint], summaries: list[LinearSummary], copy: CopyBandwidth
) -> dict[str, Any]:
    """What `--json` writes for --linear (beside the environment)."""
    return {
        "copy": asdict(copy),
        "summary": [asdict(s) for s in summaries],
        "points": [asdict(p) for p in points],
    }


# ----------------------------------------------------------------------------------------------
# The command.
# ----------------------------------------------------------------------------------------------


def check_args(args: Any, device: torch.device) -> LinearOptions | None:
    """`bench`'s arguments checked for --linear: the run's options (None without --linear), or
    ValueError saying what is wrong. Without --linear, a --linear-* option is refused (it would do
    nothing)."""
    given = [
        f"--linear-{name}"
        for name in ("ms", "layers", "layouts")
        if getattr(args, f"linear_{name}") is not None
    ]
    if not args.linear:
        if given:
            raise ValueError(f"{', '.join(given)} needs --linear")
        return None
    conflicts = [
        option
        for option, on in (
            ("--sweep", args.sweep is not None),
            ("--plot", bool(args.plot)),
            ("--quick", args.quick),
            ("--seq-configs", args.seq_configs is not None),
            ("--seq-shapes large", args.seq_shapes != "random"),
        )
        if on
    ]
    if conflicts:
        raise ValueError(f"--linear times its own layers; it takes no {', '.join(conflicts)}")
    if args.ops is not None and {o.strip() for o in args.ops.split(",") if o.strip()} != {"gemm"}:
        raise ValueError(f"--linear times gemm only; --ops {args.ops} (leave --ops out)")
    return linear_options(
        device.type, args.linear_ms, args.linear_layers, args.dtypes, args.linear_layouts
    )


def run_cli(args: Any, device: torch.device, options: LinearOptions, meta: dict[str, Any]) -> int:
    """`lltm-ext bench --linear`: time, print the points and the per-M tables, write --json."""
    import json

    budget = args.budget if args.budget is not None else 0.05
    meta = dict(meta)
    meta["timer"] = (
        "CUDA events around each call, L2 flushed before it"
        if device.type == "cuda"
        else "host clock around blocks of calls"
    )
    meta["linear"] = {
        "ms": options.ms,
        "layers": [list(layer) for layer in options.layers],
        "dtypes": options.dtypes,
        "layouts": options.layouts,
        "seed": args.seed,
        "budget_s": budget,
    }
    shown = ("lltm_ext", "torch", "device", "cpu", "threads", "gpu")
    print("environment:", ", ".join(f"{k}={meta[k]}" for k in shown if k in meta))
    print(
        f"linear: x (M, K) times W, {len(options.layers)} layers (K x N), M in "
        f"{','.join(map(str, options.ms))}; ratio = reference time / lltm_ext time (> 1: "
        "lltm_ext is faster), medians of interleaved samples; bw = W bytes / time as a fraction "
        "of the copy bandwidth; err = |c - c64| / |c64| of lltm_ext / of the reference"
    )
    points, copy = run_linear(device, options, budget_s=budget, seed=args.seed)
    summaries = summarize_linear(points)
    clean = ", both timed with L2 left clean" if copy.flush == "read" else ""
    for layout in options.layouts:
        print()
        print(
            f"layout {layout}: {LINEAR_LAYOUTS[layout]}; geomean and worst of the ratios over the "
            f"layers; bw at M <= {BANDWIDTH_MAX_M}: median fraction of the copy bandwidth "
            f"({copy.gbps:.1f} GB/s{clean})"
        )
        for line in format_table(summaries, layout):
            print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": meta, **linear_json(points, summaries, copy)}, f, indent=2)
            f.write("\n")
        print(f"wrote {args.json}")
    return 0
