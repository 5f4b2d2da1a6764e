"""The LLTM cell of PyTorch's C++/CUDA extension tutorial, on lltm_ext's fused kernels.

Shapes (B: batch, I: input features, S: state size)::

    input (B, I), weights (3S, S + I), bias (3S,) or (1, 3S), old_h (B, S), old_cell (B, S)
    X = cat([old_h, input], 1);  gates = X @ weights.T + bias  ->  z_i, z_o, z_c  (B, S) each
    new_cell = old_cell + elu(z_c) * sigmoid(z_i);  new_h = tanh(new_cell) * sigmoid(z_o)

The gate math runs in one fused kernel each way (CPU: vectorized C++ loops; CUDA: one launch);
the matrix products go through ATen (cuBLAS on CUDA).

The path of a call: ``lltm(...)`` (or ``LLTM``) -> the operator ``torch.ops.lltm_ext.lltm``,
whose autograd kernel is C++ (``src/lltm/lltm.cpp``: no Python runs in forward or backward) ->
the operators ``torch.ops.lltm_ext.lltm_forward`` / ``lltm_backward`` (checks, products, CPU/CUDA
dispatch) -> the gate kernels in ``src/lltm/``. Eager and compiled calls run the same path.
"""

import functools
import itertools
import math
import types
from typing import Any

import torch
from torch import Tensor, nn

from lltm_ext._extension import load_ops, register_fake
from lltm_ext.ops._checks import check_inputs

__all__ = ["LLTM", "LLTMFunction", "lltm"]

_ops = load_ops("lltm")
lltm_forward = _ops.lltm_forward.default
"""``lltm_forward(input, weights, bias, old_h, old_cell) -> (new_h, new_cell, gates, X)``,
contiguous tensors; gates (B, 3S) are the pre-activations X @ weights.T + bias, X = [old_h, input]
(B, S + I); new_cell, gates and X feed backward."""
lltm_backward = _ops.lltm_backward.default
"""``lltm_backward(grad_h, grad_cell, new_cell, gates, X, weights) -> (d_X (B, S + I) =
[d_old_h | d_input], d_weights, d_bias (3S,), d_old_cell)``; the gates are recomputed from their
pre-activations; grad_h may have a row stride (each row contiguous)."""


def _state_message(name: str, t: Tensor, batch: int, state: int) -> str:
    return (
        f"lltm_ext.lltm: `{name}` must have shape [{batch}, {state}] ([batch, state_size]: batch "
        f"from `input`, state_size = weights.size(0) / 3), but got shape {list(t.shape)}."
    )


def _check_shapes(input: Tensor, weights: Tensor, bias: Tensor, old_h: Tensor, old_cell: Tensor):
    """The checks of ``src/lltm/lltm.cpp``, with its messages, for torch.compile's tracing (and
    meta tensors): dtypes and devices, then shapes."""
    check_inputs(input=input, weights=weights, bias=bias, old_h=old_h, old_cell=old_cell)
    torch._check(
        weights.dim() == 2
        and weights.shape[0] % 3 == 0
        and weights.shape[1] >= weights.shape[0] // 3,
        lambda: (
            "lltm_ext.lltm: `weights` must have shape [3 * state_size, state_size + "
            f"input_features], but got shape {list(weights.shape)}."
        ),
    )
    state = weights.shape[0] // 3
    features = weights.shape[1] - state
    torch._check(
        input.dim() == 2 and input.shape[1] == features,
        lambda: (
            f"lltm_ext.lltm: `input` must have shape [batch, {features}] (input_features = "
            f"weights.size(1) - state_size = {weights.shape[1]} - {state}), but got shape "
            f"{list(input.shape)}."
        ),
    )
    for t, name in ((old_h, "old_h"), (old_cell, "old_cell")):
        torch._check(
            t.dim() == 2 and t.shape[0] == input.shape[0] and t.shape[1] == state,
            functools.partial(_state_message, name, t, input.shape[0], state),
        )
    torch._check(
        bias.numel() == 3 * state and (bias.dim() == 1 or (bias.dim() == 2 and bias.shape[0] == 1)),
        lambda: (
            f"lltm_ext.lltm: `bias` must have shape [{3 * state}] or [1, {3 * state}] "
            f"(3 * state_size), but got shape {list(bias.shape)}."
        ),
    )


@register_fake(_ops, "lltm_ext::lltm_forward")
def _(input, weights, bias, old_h, old_cell):
    _check_shapes(input, weights, bias, old_h, old_cell)
    batch, state = old_h.shape
    x = input.new_empty((batch, state + input.shape[1]))
    gates = input.new_empty((batch, 3 * state))
    return old_cell.new_empty((batch, state)), old_cell.new_empty((batch, state)), gates, x


@register_fake(_ops, "lltm_ext::lltm_backward")
def _(grad_h, grad_cell, new_cell, gates, X, weights):
    check_inputs(
        new_cell=new_cell, grad_h=grad_h, grad_cell=grad_cell, gates=gates, X=X, weights=weights
    )
    return (
        new_cell.new_empty(tuple(X.shape)),
        new_cell.new_empty(tuple(weights.shape)),
        new_cell.new_empty((weights.shape[0],)),
        new_cell.new_empty(tuple(new_cell.shape)),
    )


@register_fake(_ops, "lltm_ext::lltm")
def _(input, weights, bias, old_h, old_cell):
    _check_shapes(input, weights, bias, old_h, old_cell)
    batch, state = old_h.shape
    return old_cell.new_empty((batch, state)), old_cell.new_empty((batch, state))


lltm_cell = _ops.lltm.default
"""``lltm(input, weights, bias, old_h, old_cell) -> (new_h, new_cell)``: the cell, any layout,
with its autograd in C++ (``src/lltm/lltm.cpp``): forward runs ``lltm_forward`` and saves its
tensors, backward runs ``lltm_backward``; no Python in a training step."""


class LLTMFunction:
    """The tutorial's name for the cell's autograd:
    ``LLTMFunction.apply(input, weights, bias, old_h, old_cell) -> (new_h, new_cell)``, which is
    :func:`lltm` (the autograd is C++, in the operator ``torch.ops.lltm_ext.lltm``).
    """

    @staticmethod
    def apply(
        input: Tensor, weights: Tensor, bias: Tensor, old_h: Tensor, old_cell: Tensor
    ) -> tuple[Tensor, Tensor]:
        return lltm(input, weights, bias, old_h, old_cell)


def lltm(
    input: Tensor, weights: Tensor, bias: Tensor, old_h: Tensor, old_cell: Tensor
) -> tuple[Tensor, Tensor]:
    """One LLTM step.

    Args:
        input: (B, I) features.
        weights: (3S, S + I) gate weights, rows ordered input gate, output gate, candidate.
        bias: (3S,) or (1, 3S); its gradient has the same shape.
        old_h: (B, S) previous hidden state.
        old_cell: (B, S) previous cell state (may be the same tensor as ``old_h``, e.g. zeros).

    Returns:
        (new_h, new_cell), each (B, S), same dtype and device as the inputs.

    All tensors must share one device (CPU or CUDA) and one floating dtype (float32, float64,
    float16, bfloat16; half types are computed in float). Any layout (non-contiguous tensors are
    copied). Differentiable in every argument (first order: a second derivative raises).
    """
    # One tensor passed as two arguments (a zero state): torch.compile needs distinct tensors.
    if old_cell is old_h or old_cell is input:
        old_cell = old_cell.view_as(old_cell)
    if old_h is input:
        old_h = old_h.view_as(old_h)
    return lltm_cell(input, weights, bias, old_h, old_cell)


class LLTM(nn.Module):
    """The tutorial's LLTM cell as a module: ``LLTM(input_features, state_size)``.

    ``forward(input (B, I), (h (B, S), cell (B, S))) -> (new_h, new_cell)``.
    """

    def __init__(
        self,
        input_features: int,
        state_size: int,
        *,
        device: torch.device | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.input_features = input_features
        self.state_size = state_size
        self.weights = nn.Parameter(
            torch.empty(3 * state_size, input_features + state_size, device=device, dtype=dtype)
        )
        self.bias = nn.Parameter(torch.empty(3 * state_size, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Uniform(-1/sqrt(S), 1/sqrt(S)) for weights and bias, as in the tutorial."""
        stdv = 1.0 / math.sqrt(self.state_size)
        for weight in self.parameters():
            nn.init.uniform_(weight, -stdv, +stdv)

    def forward(self, input: Tensor, state: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        """One step: `input` (B, I), `state` = (h, cell), each (B, S) -> (new_h, new_cell)."""
        if not (isinstance(state, (tuple, list)) and len(state) == 2):
            got = (
                f"a tensor of shape {list(state.shape)}"
                if isinstance(state, Tensor)
                else f"{type(state).__name__}"
                + (f" of length {len(state)}" if isinstance(state, (tuple, list)) else "")
            )
            raise TypeError(
                "LLTM.forward: `state` must be a pair (h, cell) of two (batch, "
                f"{self.state_size}) tensors, as in cell(x, (h, cell)), but got {got}."
            )
        old_h, old_cell = state
        return lltm(input, self.weights, self.bias, old_h, old_cell)

    def extra_repr(self) -> str:
        return f"input_features={self.input_features}, state_size={self.state_size}"


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


def benchmarks(device: torch.device, quick: bool) -> list:
    """lltm_ext.lltm vs the pure-PyTorch LLTM, forward and forward+backward, with torch.compile of
    the pure-PyTorch LLTM and the GEMM floor (the cell's matrix products alone, cuBLAS or
    MKL/oneDNN: gates = X W^T + b forward; d_W = dG^T X and d_X = dG W backward) as more
    references; on CUDA float16 and bfloat16 too (forward+backward)."""
    from lltm_ext._bench import BenchCase

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
