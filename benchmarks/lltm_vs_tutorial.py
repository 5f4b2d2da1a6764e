"""lltm_ext.lltm beside PyTorch's extension tutorial's own LLTM, the pure-PyTorch LLTM and
torch.compile of it, forward and forward+backward, interleaved in one run.

The tutorial's extension (pytorch/extension-cpp at commit 79d111d, folders ``cpp/`` and
``cuda/``) is built outside this repository (``python setup.py build_ext --inplace`` in its
folder) and found through ``--tutorial DIR``: DIR holds the built module ``lltm_cpp`` (CPU) or
``lltm_cuda`` (CUDA). Its ``forward``/``backward`` functions are called through an
autograd.Function written here, as the tutorial's Python wrapper calls them. Without
``--tutorial`` that column is left out.

    python benchmarks/lltm_vs_tutorial.py --device cpu --threads 2 --tutorial ../ext/cpp
    python benchmarks/lltm_vs_tutorial.py --device cuda --tutorial ../ext/cuda --json out.json

Times are medians of interleaved rounds after warm-up (``lltm_ext._bench.time_fns``: CUDA events
or ``torch.utils.benchmark``); ratio = other's time / lltm_ext's time (> 1: lltm_ext is faster).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
from typing import Any

import torch

import lltm_ext
from lltm_ext._bench import environment, time_fns
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


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--sizes", help="BxIxS,... (default: CPU 2 sizes, CUDA 4)")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--tutorial", help="folder with the built tutorial module (lltm_cpp/lltm_cuda)")
    p.add_argument("--threads", type=int, help="CPU threads (torch.set_num_threads)")
    p.add_argument("--budget", type=float, default=0.5, help="seconds per case, all together")
    p.add_argument("--json", help="write the rows and the environment as JSON")
    args = p.parse_args(argv)
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
        for case, run in (("forward", fwd), ("forward+backward", fwd_bwd)):
            compiled = _compiled_reference()
            fns = {
                "lltm_ext": lambda run=run: run(lltm_ext.lltm),
                "pure": lambda run=run: run(lltm_reference),
                "compile": lambda run=run, c=compiled: run(c),
                "floor": floors[case],
            }
            if tutorial is not None:
                fns["tutorial"] = lambda run=run: run(tutorial)
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
            rows.append(row)
            cols = [row.get(f"ratio_{k}") for k in ("pure", "compile", "tutorial", "floor")]
            shown = "  ".join("   -   " if r is None else f"{r:6.3f}x" for r in cols)
            print(f"{size:<18} {case:<17} {ours_t * 1e6:8.1f}us  {shown}", flush=True)
    print("ratio = other's time / lltm_ext's time; floor = the products alone (> 1 impossible)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": environment(device, timer), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
