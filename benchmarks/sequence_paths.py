"""Time lltm_sequence's CUDA paths against each other and nn.LSTM, forward+backward, at given
shapes: each path forced through LLTM_EXT_SEQUENCE_* (read at every call), all sides sampled in
turn in one process (the sweep's sampler: L2 flushed, a spin kernel that covers the host's time
before each call, CUDA events), medians. For choosing a planner rule: the sweep (`lltm-ext bench
--sweep`) times auto's choice only.

    python benchmarks/sequence_paths.py --shapes 1190x111x216x1156,135x508x4x529 \\
        --paths auto,cublas,tiled,tiled:tiles=4:cols=16 --dtypes float32,bfloat16 --json out.json

A path is LLTM_EXT_SEQUENCE_PATH's value, optionally with :tiles=N, :cols=N, :stages=N (the tiled
kernels' LLTM_EXT_SEQUENCE_TILED_TILES / _COLS / _STAGES), :wcols=N (LLTM_EXT_SEQUENCE_WIDE_COLS)
or :product=P (LLTM_EXT_SEQUENCE_PRODUCT, e.g. cluster:product=simt), :gemm=G, :splits=N and
:pad=off (the cuBLAS path's step products, LLTM_EXT_SEQUENCE_STEP_GEMM / _STEP_SPLITS /
_STEP_PAD, e.g. cublas:gemm=tensor:splits=4), :blocks=N and :rows=N (the cluster kernels'
LLTM_EXT_SEQUENCE_CLUSTER_BLOCKS / _ROWS), :srows=N (LLTM_EXT_SEQUENCE_SMALL_ROWS), :short=N
(LLTM_EXT_SEQUENCE_SHORT_STEPS, e.g. auto:short=1), :mid=off (LLTM_EXT_SEQUENCE_MID_BATCH),
:graphs=off (LLTM_EXT_SEQUENCE_GRAPHS: the per-step loops launched step by step) or
:wgrad=W (the weight gradients, LLTM_EXT_SEQUENCE_WGRAD: fused, tensor or cublas) or :input=P
(float32's input products, LLTM_EXT_SEQUENCE_INPUT_GEMM: cublas or tensor); "lstm" is
torch.nn.LSTM, "lstm:ieee" the same with cuDNN's RNN products in full float32
(torch.backends.cudnn.rnn.fp32_precision "ieee"; nn.LSTM's default is TF32). Ratios are
nn.LSTM's time over each path's (> 1: faster than cuDNN); a path that does not apply at a shape
(forced, it raises) shows "-". --sweep N --seed S takes the sweep's shapes;
--grid "T=1,2,4/B=8,64/I=64/S=128,285" every combination of the values given. --config l2 .. l4
(layers) or bi (bidirectional) times the module in that configuration against nn.LSTM in the same,
where :at_once=off (LLTM_EXT_SEQUENCE_AT_ONCE) runs its calls one after another, :parts=N
(LLTM_EXT_SEQUENCE_AT_ONCE_PARTS) shares the GPU N ways between a wavefront's calls and :chunks=N
(LLTM_EXT_SEQUENCE_AT_ONCE_CHUNKS) cuts its steps in N chunks, e.g. --config l4 --paths
auto,auto:at_once=off,auto:parts=4,auto:chunks=1; the dtype "autocast" is float32 modules and
input called under torch.autocast(dtype=bfloat16), as the sweep's, and :mixed=products|off
(LLTM_EXT_SEQUENCE_MIXED) picks how its float32 state's products run.

--timer covered (the default) times one call at a time with the GPU kept busy while the host
queues it (the sweep's sampler: the host's time hidden, up to its 20 ms spin); --timer loop times
calls back to back as a training loop that does nothing else runs them (the sweep's
--sweep-timer loop: a few calls between CUDA events, no flush, no spin): a path whose host time
per call passes its GPU time shows it there.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import warnings
from collections.abc import Callable
from typing import Any

import torch

import lltm_ext
from lltm_ext.cli.sweep import _CudaLoopSampler, _CudaSampler, _matmul_precision, sequence_shapes

KNOBS = {
    "tiles": "LLTM_EXT_SEQUENCE_TILED_TILES",
    "cols": "LLTM_EXT_SEQUENCE_TILED_COLS",
    "stages": "LLTM_EXT_SEQUENCE_TILED_STAGES",
    "wcols": "LLTM_EXT_SEQUENCE_WIDE_COLS",
    "product": "LLTM_EXT_SEQUENCE_PRODUCT",
    "gemm": "LLTM_EXT_SEQUENCE_STEP_GEMM",
    "splits": "LLTM_EXT_SEQUENCE_STEP_SPLITS",
    "pad": "LLTM_EXT_SEQUENCE_STEP_PAD",
    "blocks": "LLTM_EXT_SEQUENCE_CLUSTER_BLOCKS",
    "rows": "LLTM_EXT_SEQUENCE_CLUSTER_ROWS",
    "srows": "LLTM_EXT_SEQUENCE_SMALL_ROWS",
    "wgrad": "LLTM_EXT_SEQUENCE_WGRAD",
    "input": "LLTM_EXT_SEQUENCE_INPUT_GEMM",
    "short": "LLTM_EXT_SEQUENCE_SHORT_STEPS",
    "mid": "LLTM_EXT_SEQUENCE_MID_BATCH",
    "graphs": "LLTM_EXT_SEQUENCE_GRAPHS",
    "at_once": "LLTM_EXT_SEQUENCE_AT_ONCE",
    "parts": "LLTM_EXT_SEQUENCE_AT_ONCE_PARTS",
    "chunks": "LLTM_EXT_SEQUENCE_AT_ONCE_CHUNKS",
    "mixed": "LLTM_EXT_SEQUENCE_MIXED",
}
ALL_KNOBS = ["LLTM_EXT_SEQUENCE_PATH", *KNOBS.values()]


def path_env(spec: str) -> dict[str, str]:
    """The environment that forces `spec` ("tiled:tiles=8:cols=10"); knobs it leaves out unset."""
    name, *opts = spec.split(":")
    env = {"LLTM_EXT_SEQUENCE_PATH": name}
    for opt in opts:
        key, _, value = opt.partition("=")
        env[KNOBS[key]] = value
    return env


def set_env(env: dict[str, str]) -> None:
    for key in ALL_KNOBS:
        if key in env:
            os.environ[key] = env[key]
        else:
            os.environ.pop(key, None)


def with_env(env: dict[str, str], fn: Callable[[], Any]) -> Callable[[], Any]:
    def call() -> Any:
        set_env(env)
        return fn()

    return call


def time_shape(
    shape: dict[str, int],
    dtype: str,
    paths: list[str],
    budget_s: float,
    config: str = "1",
    timer: str = "covered",
) -> dict[str, Any]:
    """{path: median us or None} for one (T, B, I, S) and dtype ("tf32": float32, TF32 allowed;
    "autocast": float32 under autocast(bfloat16)), both modules in `config` ("1", "l2" .. "l4",
    "bi"), timed as `timer` says ("covered" or "loop", as --timer)."""
    t, b, i, s = shape["T"], shape["B"], shape["I"], shape["S"]
    tdt = torch.float32 if dtype in ("tf32", "autocast") else getattr(torch, dtype)
    layers = int(config[1:]) if config.startswith("l") else 1
    bidirectional = config == "bi"
    torch.manual_seed(0)
    seq = lltm_ext.LLTMSequence(i, s, layers, bidirectional=bidirectional).cuda().to(tdt)
    lstm = torch.nn.LSTM(i, s, layers, bidirectional=bidirectional).cuda().to(tdt)
    x = torch.randn(t, b, i, device="cuda", dtype=tdt)
    g = torch.randn(t, b, s * (2 if bidirectional else 1), device="cuda", dtype=tdt)
    warnings.filterwarnings("ignore", message="RNN module weights are not part of single")
    seq_params, lstm_params = tuple(seq.parameters()), tuple(lstm.parameters())
    autocast = dtype == "autocast"

    def ours() -> Any:
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            out = seq(x)[0]
        return torch.autograd.grad(out, seq_params, g)

    def ref() -> Any:
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            out = lstm(x)[0]
        return torch.autograd.grad(out, lstm_params, g)

    def ref_ieee() -> Any:
        rnn = torch.backends.cudnn.rnn
        saved, rnn.fp32_precision = rnn.fp32_precision, "ieee"
        try:
            return ref()
        finally:
            rnn.fp32_precision = saved

    result: dict[str, Any] = {
        "shape": shape,
        "dtype": dtype,
        "config": config,
        "timer": timer,
        "us": {},
    }
    fns, names = [], []
    with _matmul_precision(dtype == "tf32"):
        for p in paths:
            if p in ("lstm", "lstm:ieee"):
                fn = ref if p == "lstm" else ref_ieee
            else:
                fn = with_env(path_env(p), ours)
                try:
                    fn()  # a forced path that does not apply raises here
                except RuntimeError as exc:
                    result["us"][p] = None
                    result.setdefault("skipped", {})[p] = str(exc).splitlines()[0][:200]
                    continue
            fns.append(fn)
            names.append(p)
        torch.cuda.synchronize()
        if timer == "loop":
            loop = _CudaLoopSampler()
            first = loop.run(fns, 1)
            per_call = sum(f[0] * c for f, c in zip(first, loop.calls, strict=True))
            per_side = int(min(30, max(3, budget_s / max(per_call, 1e-9))))
            samples = loop.run(fns, per_side)
        else:
            sampler = _CudaSampler(torch.device("cuda"))
            sampler.cover(fns)
            first = sampler.run(fns, 1)
            per_call = sum(f[0] for f in first)
            per_side = int(min(60, max(5, budget_s / max(per_call, 1e-9))))
            samples = sampler.run(fns, per_side)
    set_env({})
    for name, sm in zip(names, samples, strict=True):
        result["us"][name] = statistics.median(sm) * 1e6
    result["samples"] = per_side
    return result


def parse_shapes(text: str) -> list[dict[str, int]]:
    shapes = []
    for item in text.split(","):
        t, b, i, s = (int(v) for v in item.split("x"))
        shapes.append({"T": t, "B": b, "I": i, "S": s})
    return shapes


def grid_shapes(text: str) -> list[dict[str, int]]:
    """Every combination of "T=1,2,4/B=8,64/I=64/S=128,285" (each of T, B, I, S given)."""
    values = {}
    for part in text.split("/"):
        key, _, items = part.partition("=")
        values[key.strip()] = [int(v) for v in items.split(",")]
    return [
        {"T": t, "B": b, "I": i, "S": s}
        for s in values["S"]
        for b in values["B"]
        for i in values["I"]
        for t in values["T"]
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="", help="TxBxIxS,... (T steps, batch, features, state)")
    ap.add_argument("--grid", default="", help="T=..,../B=../I=../S=..: every combination")
    ap.add_argument("--sweep", type=int, default=0, help="the sweep's first N shapes (--seed)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--paths", default="auto,cublas,lstm")
    ap.add_argument("--dtypes", default="float32", help="float32, bfloat16, tf32, autocast, ...")
    ap.add_argument("--config", default="1", help="1, l2 .. l4 (layers) or bi (bidirectional)")
    ap.add_argument("--budget", type=float, default=1.0, help="seconds of samples per shape")
    ap.add_argument("--timer", choices=("covered", "loop"), default="covered")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    shapes = parse_shapes(args.shapes) if args.shapes else []
    if args.grid:
        shapes += grid_shapes(args.grid)
    if args.sweep:
        shapes += sequence_shapes(args.sweep, args.seed, "cuda")
    paths = args.paths.split(",")
    if "lstm" not in paths:
        paths.append("lstm")
    results = []
    print(
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}; us, (nn.LSTM / path); "
        f"timer {args.timer}"
    )
    print("T B I S dtype | " + " | ".join(paths))
    for dtype in args.dtypes.split(","):
        for shape in shapes:
            r = time_shape(shape, dtype, paths, args.budget, args.config, args.timer)
            results.append(r)
            ref = r["us"]["lstm"]
            cells = [
                "-" if r["us"][p] is None else f"{r['us'][p]:.0f} ({ref / r['us'][p]:.2f}x)"
                for p in paths
            ]
            label = f"{shape['T']} {shape['B']} {shape['I']} {shape['S']} {dtype}"
            print(label + " | " + " | ".join(cells))
            sys.stdout.flush()
            if args.json:  # after every shape: a run stopped at a time limit keeps its results
                with open(args.json, "w") as f:
                    json.dump(
                        {
                            "device": torch.cuda.get_device_name(),
                            "argv": sys.argv,
                            "results": results,
                        },
                        f,
                        indent=1,
                    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
