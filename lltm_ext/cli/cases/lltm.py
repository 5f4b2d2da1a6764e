"""``lltm-ext bench`` cases of the LLTM cell (:mod:`lltm_ext.ops.lltm`) against the pure-PyTorch
LLTM."""

from __future__ import annotations

import functools
import itertools
import math

import torch

from lltm_ext.cli.bench import BenchCase
from lltm_ext.ops._lltm_reference import _compiled_reference, lltm_reference
from lltm_ext.ops.lltm import lltm

BENCH_OPS = ("lltm",)
"""The `op` names of this module's bench cases (what ``lltm-ext bench --ops`` takes)."""


def benchmarks(device: torch.device, quick: bool) -> list[BenchCase]:
    """lltm_ext.lltm vs the pure-PyTorch LLTM, forward and forward+backward, with torch.compile of
    the pure-PyTorch LLTM and the GEMM floor (the cell's matrix products alone, cuBLAS or
    MKL/oneDNN: gates = X W^T + b forward; d_W = dG^T X and d_X = dG W backward) as more
    references; on CUDA float16 and bfloat16 too (forward+backward)."""
    # (batch, features, state): the tutorial's size, a mid size, and (CUDA) two at the GEMM floor.
    sizes = [(16, 32, 128), (64, 256, 512)]
    if device.type == "cuda":
        sizes += [(4096, 1024, 1024), (32768, 256, 256)]
    dtypes = [torch.float32]
    if device.type == "cuda":
        dtypes += [torch.float16, torch.bfloat16]
    cases = []
    for (batch, features, state), dtype in itertools.product(sizes[:1] if quick else sizes, dtypes):
        gen = torch.Generator(device="cpu").manual_seed(0)

        def rand(*shape, scale=1.0, gen=gen, dtype=dtype):
            t = torch.randn(*shape, generator=gen) * scale
            return t.to(device, dtype).requires_grad_()

        stdv = 1.0 / math.sqrt(state)
        args = (
            rand(batch, features),
            rand(3 * state, features + state, scale=stdv),
            rand(3 * state, scale=stdv),
            rand(batch, state),
            rand(batch, state),
        )
        grads = tuple(torch.randn(batch, state, generator=gen).to(device, dtype) for _ in "hc")
        x = torch.cat([args[3], args[0]], dim=1).detach()
        w, b = args[1].detach(), args[2].detach()
        d_gates = torch.randn(batch, 3 * state, generator=gen).to(device, dtype)
        size = f"B={batch} I={features} S={state}"

        def fwd(fn, args=args):
            with torch.no_grad():
                return fn(*args)

        def fwd_bwd(fn, args=args, grads=grads):
            return torch.autograd.grad(fn(*args), args, grads)

        def floor_fwd(x=x, w=w, b=b):
            return torch.addmm(b, x, w.t())

        def floor_fwd_bwd(x=x, w=w, b=b, d_gates=d_gates):
            return torch.addmm(b, x, w.t()), d_gates.t().mm(x), d_gates.mm(w)

        runs = [("forward", fwd, floor_fwd), ("forward+backward", fwd_bwd, floor_fwd_bwd)]
        for case, run, floor in runs[1:] if dtype != torch.float32 else runs:
            cases.append(
                BenchCase(
                    op="lltm",
                    case=case,
                    dtype=dtype,
                    size=size,
                    ours=functools.partial(run, lltm),
                    ref=functools.partial(run, lltm_reference),
                    ref_name="pure-PyTorch LLTM",
                    also={
                        "torch.compile(pure-PyTorch LLTM)": functools.partial(
                            run, _compiled_reference()
                        ),
                        "GEMM floor (the products alone)": floor,
                    },
                )
            )
    return cases
