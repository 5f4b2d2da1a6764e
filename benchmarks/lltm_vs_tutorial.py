"""lltm_ext.lltm beside PyTorch's extension tutorial's own LLTM, the pure-PyTorch LLTM and
torch.compile of it, forward, forward+backward and a training step, interleaved in one run.

The tutorial's extension (pytorch/extension-cpp at commit 79d111d, folders ``cpp/`` and
``cuda/``) is built outside this repository (``python setup.py build_ext --inplace`` in its
folder) and found through ``--tutorial DIR``: DIR holds the built module ``lltm_cpp`` (CPU) or
``lltm_cuda`` (CUDA). Its ``forward``/``backward`` functions are called through an
autograd.Function written here, as the tutorial's Python wrapper calls them. Without
``--tutorial`` that column is left out.

    python benchmarks/lltm_vs_tutorial.py --device cpu --threads 2 --tutorial ../ext/cpp
    python benchmarks/lltm_vs_tutorial.py --device cuda --tutorial ../ext/cuda --json out.json

Cases: ``forward`` (no grad), ``forward+backward`` (``torch.autograd.grad`` for all five
arguments) and ``training step`` (what a training loop runs each step: weights and bias are
parameters of an SGD optimizer, input and state plain tensors; the cell, ``backward`` of both
outputs, ``step()`` and ``zero_grad()``, every implementation with its own copy of the
parameters). ``--host`` adds, for the training step, each implementation's host time per step
(the wall time of 200 steps issued back to back, before the closing synchronize: where that is
near the step's time, the step is bound by the host), and ``--profile N`` prints the profiler's
table of host time per operator over N training steps of each.

Times are medians of interleaved rounds after warm-up (``lltm_ext.cli.bench.time_fns``:
``torch.utils.benchmark``, which runs blocks of calls back to back and synchronizes around each
block); ratio = other's time / lltm_ext's time (> 1: lltm_ext is faster).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

import lltm_ext
from lltm_ext.cli.bench import environment, time_fns
from lltm_ext.ops.lltm import _compiled_reference, lltm_reference

SIZES = {"cpu": "16x32x128,64x256x512", "cuda": "16x32x128,64x256x512,4096x1024x1024,32768x256x256"}


def tutorial_cell(directory: str, device: str) -> Any:
    """The tutorial's extension module as an LLTM function (input, weights, bias, old_h,
    old_cell) -> (new_h, new_cell), with autograd through its `forward`/`backward`."""
    sys.path.insert(0, directory)
    ext = importlib.import_module("lltm_cuda" if device == "cuda" else "lltm_cpp")

    class TutorialLLTM(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, input, weights, bias, old_h, old_cell):  # type: ignore[override]
            # forward -> [new_h, new_cell, input_gate, output_gate, candidate_cell, X, gate_weights]
            out = ext.forward(input, weights, bias, old_h, old_cell)
            ctx.save_for_backward(*out[1:], weights)
            return out[0], out[1]

        @staticmethod
        def backward(ctx: Any, grad_h, grad_cell):  # type: ignore[override]
            grads = ext.backward(grad_h.contiguous(), grad_cell.contiguous(), *ctx.saved_tensors)
            d_old_h, d_input, d_weights, d_bias, d_old_cell = grads[:5]
            return d_input, d_weights, d_bias, d_old_h, d_old_cell

    return TutorialLLTM.apply


CASES = ("forward", "forward+backward", "training step")


def training_step(fn: Any, inputs: tuple, grads: tuple) -> Callable[[], None]:
    """One training step of the cell `fn` on its own copy of the weights and bias (SGD
    parameters); input and state (`inputs`' others) are plain tensors, as a loop's data is."""
    x, w, b, h, c = (t.detach() for t in inputs)
    w, b = w.clone().requires_grad_(), b.clone().requires_grad_()
    # A tiny learning rate: the parameters stay where the comparison started.
    opt = torch.optim.SGD([w, b], lr=1e-9)

    def step() -> None:
        new_h, new_cell = fn(x, w, b, h, c)
        torch.autograd.backward((new_h, new_cell), grads)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def host_us(step: Callable[[], None], device: torch.device, n: int = 200) -> float:
    """Host microseconds per call of `step`, n calls back to back (the wall time before the
    closing synchronize); warmed up first."""
    for _ in range(20):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    host = time.perf_counter() - t0
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return host / n * 1e6


def profile_steps(name: str, step: Callable[[], None], device: torch.device, n: int) -> None:
    """Prints the profiler's host time per operator over `n` calls of `step`."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    for _ in range(20):
        step()
    with profile(activities=activities) as prof:
        for _ in range(n):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    print(f"--- profile: {name}, {n} training steps (host time per operator)")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--sizes", help="BxIxS,... (default: CPU 2 sizes, CUDA 4)")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--tutorial", help="folder with the built tutorial module (lltm_cpp/lltm_cuda)")
    p.add_argument("--threads", type=int, help="CPU threads (torch.set_num_threads)")
    p.add_argument("--budget", type=float, default=0.5, help="seconds per case, all together")
    p.add_argument("--json", help="write the rows and the environment as JSON")
    p.add_argument("--cases", default=",".join(CASES), help=f"of {', '.join(CASES)}")
    p.add_argument("--host", action="store_true", help="host time per training step as well")
    p.add_argument("--profile", type=int, default=0, metavar="N", help="profile N training steps")
    args = p.parse_args(argv)
    cases = args.cases.split(",")
    for case in cases:
        if case not in CASES:
            p.error(f"--cases: {case!r} is not one of {', '.join(CASES)}")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    tutorial = tutorial_cell(args.tutorial, device.type) if args.tutorial else None
    timer = "torch"
    rows = []
    print(f"{'size':<18} {'case':<17} {'lltm_ext':>10}  ratio vs: pure  compile  tutorial  floor")
    for size in (args.sizes or SIZES[device.type]).split(","):
        b, i, s = map(int, size.split("x"))
        gen = torch.Generator().manual_seed(0)
        shapes = [(b, i), (3 * s, s + i), (3 * s,), (b, s), (b, s)]
        scales = [1.0, 1 / math.sqrt(s), 1 / math.sqrt(s), 1.0, 1.0]
        inputs = tuple(
            (torch.randn(*sh, generator=gen) * sc).to(device, dtype).requires_grad_()
            for sh, sc in zip(shapes, scales, strict=True)
        )
        grads = tuple(torch.randn(b, s, generator=gen).to(device, dtype) for _ in "hc")
        x = torch.cat([inputs[3], inputs[0]], 1).detach()
        w, bias = inputs[1].detach(), inputs[2].detach()
        d_gates = torch.randn(b, 3 * s, generator=gen).to(device, dtype)

        def fwd(fn: Any, inputs: tuple = inputs) -> Any:
            with torch.no_grad():
                return fn(*inputs)

        def fwd_bwd(fn: Any, inputs: tuple = inputs, grads: tuple = grads) -> Any:
            return torch.autograd.grad(fn(*inputs), inputs, grads)

        floors = {
            "forward": lambda x=x, w=w, bias=bias: torch.addmm(bias, x, w.t()),
            "forward+backward": lambda x=x, w=w, bias=bias, d=d_gates: (
                torch.addmm(bias, x, w.t()),
                d.t().mm(x),
                d.mm(w),
            ),
        }
        floors["training step"] = floors["forward+backward"]
        for case in cases:
            compiled = _compiled_reference()
            cells = {"lltm_ext": lltm_ext.lltm, "pure": lltm_reference, "compile": compiled}
            if tutorial is not None:
                cells["tutorial"] = tutorial
            if case == "training step":
                fns = {k: training_step(f, inputs, grads) for k, f in cells.items()}
            else:
                run = fwd if case == "forward" else fwd_bwd
                fns = {k: lambda run=run, f=f: run(f) for k, f in cells.items()}
            fns["floor"] = floors[case]
            # The tutorial's extension and ours must agree before they are timed.
            if tutorial is not None and case == "forward":
                ours, theirs = fns["lltm_ext"](), fns["tutorial"]()
                tol = 1e-4 if dtype == torch.float32 else 2e-2
                for a, t in zip(ours, theirs, strict=True):
                    torch.testing.assert_close(a, t, rtol=tol, atol=tol)
            times = time_fns(list(fns.values()), budget_s=args.budget)
            timings = dict(zip(fns, times, strict=True))
            ours_t = timings["lltm_ext"].median
            row = {
                "size": size,
                "case": case,
                "dtype": args.dtype,
                **{f"{k}_us": t.median * 1e6 for k, t in timings.items()},
                **{f"ratio_{k}": t.median / ours_t for k, t in timings.items() if k != "lltm_ext"},
            }
            if case == "training step" and args.host:
                row.update({f"{k}_host_us": host_us(fn, device) for k, fn in fns.items()})
            rows.append(row)
            cols = [row.get(f"ratio_{k}") for k in ("pure", "compile", "tutorial", "floor")]
            shown = "  ".join("   -   " if r is None else f"{r:6.3f}x" for r in cols)
            print(f"{size:<18} {case:<17} {ours_t * 1e6:8.1f}us  {shown}", flush=True)
            if case == "training step" and args.host:
                print(
                    "  host us per step: "
                    + ", ".join(f"{k} {row[f'{k}_host_us']:.1f}" for k in fns if k != "floor")
                )
            if case == "training step" and args.profile:
                for k, fn in fns.items():
                    if k != "floor":
                        profile_steps(f"{k} {size}", fn, device, args.profile)
    print("ratio = other's time / lltm_ext's time; floor = the products alone (> 1 impossible)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": environment(device, timer), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
