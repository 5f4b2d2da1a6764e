"""``lltm-ext bench`` cases of the LLTM sequence (:mod:`lltm_ext.ops.lltm_sequence`) against
``torch.nn.LSTM`` and Python loops of cells; each case's notes name the kernel family that runs it
(:func:`lltm_ext.explain`)."""

from __future__ import annotations

import functools
import itertools
import math
import warnings

import torch
from torch import nn

from lltm_ext.cli.bench import BenchCase
from lltm_ext.explain import explain
from lltm_ext.ops._lltm_reference import lltm_loop, lltm_reference
from lltm_ext.ops.lltm import lltm
from lltm_ext.ops.lltm_sequence import lltm_sequence

BENCH_OPS = ("lltm_sequence",)
"""The `op` names of this module's bench cases (what ``lltm-ext bench --ops`` takes)."""


def benchmarks(device: torch.device, quick: bool) -> list[BenchCase]:
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
        plan = explain("lltm_sequence", x, weights, bias)
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
                notes=f"path: {plan.path}" + (f" ({plan.product})" if plan.product else ""),
            )
        )
    return cases
