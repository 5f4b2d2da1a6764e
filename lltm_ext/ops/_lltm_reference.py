"""Pure-PyTorch references of the LLTM: the tutorial's cell (a chain of ATen ops), a compiled
copy of it, and a Python loop of a cell over a sequence. Tests compare lltm_ext against them and
``lltm-ext bench`` times them; :mod:`lltm_ext.ops.lltm` re-exports them."""

import types
from typing import Any

import torch
from torch import Tensor


def lltm_reference(
    input: Tensor, weights: Tensor, bias: Tensor, old_h: Tensor, old_cell: Tensor
) -> tuple[Tensor, Tensor]:
    """The tutorial's pure-PyTorch LLTM (a chain of ATen ops): the reference for tests and bench."""
    X = torch.cat([old_h, input], dim=1)
    gates = torch.nn.functional.linear(X, weights, bias.reshape(-1)).chunk(3, dim=1)
    input_gate = torch.sigmoid(gates[0])
    output_gate = torch.sigmoid(gates[1])
    candidate_cell = torch.nn.functional.elu(gates[2])
    new_cell = old_cell + candidate_cell * input_gate
    new_h = torch.tanh(new_cell) * output_gate
    return new_h, new_cell


def _compiled_reference() -> Any:
    """``torch.compile`` (default mode) of :func:`lltm_reference`, through a copy of its code
    object: torch.compile keeps its compiled graphs per code object (8 at most), and each bench
    case (size, dtype, with or without grad) gets its own."""
    code = lltm_reference.__code__.replace()
    fn = types.FunctionType(code, lltm_reference.__globals__, lltm_reference.__name__)
    return torch.compile(fn)


def lltm_loop(
    cell: Any, input: Tensor, weights: Tensor, bias: Tensor, h0: Tensor, c0: Tensor
) -> Tensor:
    """A Python loop of ``cell(x_t, weights, bias, h, c)`` over input (T, B, I) -> every step's h
    stacked, (T, B, S): what :func:`lltm_sequence` replaces, and its reference in tests."""
    h, c = h0, c0
    steps = []
    for x in input.unbind(0):
        h, c = cell(x, weights, bias, h, c)
        steps.append(h)
    return torch.stack(steps) if steps else input.new_empty((0, *h0.shape))
