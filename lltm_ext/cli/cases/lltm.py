"""``lltm-ext bench`` cases of the LLTM ops (:mod:`lltm_ext.ops.lltm`): the cell against the
pure-PyTorch LLTM, and the sequence against ``torch.nn.LSTM`` and Python loops of cells."""

from __future__ import annotations

import functools
import itertools
import math
import warnings

import torch
from torch import nn

from lltm_ext.cli.bench import BenchCase
from lltm_ext.ops._lltm_reference import _compiled_reference, lltm_loop, lltm_reference
from lltm_ext.ops.lltm import lltm, lltm_sequence

BENCH_OPS = ("lltm", "lltm_sequence")
"""The `op` names of this module's bench cases (``lltm-ext bench --ops`` takes either)."""


def benchmarks(device: torch.device, quick: bool) -> list[BenchCase]:
    """The cell's cases (op ``lltm``), then the sequence's (op ``lltm_sequence``)."""
    return cell_benchmarks(device, quick) + sequence_benchmarks(device, quick)


def cell_benchmarks(device: torch.device, quick: bool) -> list[BenchCase]:
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


def sequence_benchmarks(device: torch.device, quick: bool) -> list[BenchCase]:
    """lltm_ext.lltm_sequence over T = 128 steps, forward+backward (gradients of input, weights
    and bias), against ``torch.nn.LSTM(I, S)`` (cuDNN on CUDA, run as users run it: default
    settings) and Python loops of the pure-PyTorch cell and of lltm_ext.lltm.

    CUDA: B in {16, 64, 256} x S in {128, 512, 1024} (I = S), float32 and bfloat16; the loops at
    B = 16, S = 128. CPU: B = 16, S = 128, float32. The first reference is nn.LSTM on CUDA and the
    pure-PyTorch loop on CPU (each platform's target).
    """
    steps = 128
    # nn.LSTM in bfloat16 cannot flatten its weights (torch.backends.cudnn.is_acceptable leaves
    # bfloat16 out), so cuDNN compacts them at every call and warns once per process. That cost
    # is part of what a user of nn.LSTM gets, so the bench keeps it; the warning would only
    # interrupt the table.
    warnings.filterwarnings(
        "ignore", message="RNN module weights are not part of single contiguous chunk"
    )
    if device.type == "cuda":
        sizes = [(b, s) for b in (16, 64, 256) for s in (128, 512, 1024)]
        dtypes = [torch.float32, torch.bfloat16]
    else:
        sizes, dtypes = [(16, 128)], [torch.float32]
    if quick:
        sizes = sizes[:1]
    cases = []
    for (batch, state), dtype in itertools.product(sizes, dtypes):
        gen = torch.Generator(device="cpu").manual_seed(0)
        features = state
        stdv = 1.0 / math.sqrt(state)

        def rand(*shape, scale=1.0, gen=gen, dtype=dtype, grad=True):
            t = (torch.randn(*shape, generator=gen) * scale).to(device, dtype)
            return t.requires_grad_(grad)

        x = rand(steps, batch, features, grad=False)
        weights = rand(3 * state, state + features, scale=stdv)
        bias = rand(3 * state, scale=stdv)
        zeros = torch.zeros(batch, state, device=device, dtype=dtype)
        grad_out = rand(steps, batch, state, grad=False)
        lstm = nn.LSTM(features, state, device=device, dtype=dtype)

        def ours(x=x, w=weights, b=bias, g=grad_out):
            return torch.autograd.grad(lltm_sequence(x, w, b)[0], (w, b), g)

        def with_lstm(x=x, lstm=lstm, g=grad_out):
            return torch.autograd.grad(lstm(x)[0], tuple(lstm.parameters()), g)

        def loop(cell, x=x, w=weights, b=bias, z=zeros, g=grad_out):
            return torch.autograd.grad(lltm_loop(cell, x, w, b, z, z), (w, b), g)

        refs = {"torch.nn.LSTM (cuDNN)" if device.type == "cuda" else "torch.nn.LSTM": with_lstm}
        if (batch, state) == (16, 128):
            refs["loop of pure-PyTorch cell"] = functools.partial(loop, lltm_reference)
            refs["loop of lltm_ext.lltm"] = functools.partial(loop, lltm)
        if device.type != "cuda":  # the CPU target is the pure-PyTorch loop
            names = ["loop of pure-PyTorch cell", "torch.nn.LSTM", "loop of lltm_ext.lltm"]
            refs = {n: refs[n] for n in names}
        (ref_name, ref), *more = refs.items()
        cases.append(
            BenchCase(
                op="lltm_sequence",
                case="forward+backward",
                dtype=dtype,
                size=f"T={steps} B={batch} I={features} S={state}",
                ours=ours,
                ref=ref,
                ref_name=ref_name,
                also=dict(more),
            )
        )
    return cases
