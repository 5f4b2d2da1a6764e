"""The LLTM cell of PyTorch's C++/CUDA extension tutorial, on lltm_ext's fused kernels.

Shapes (B: batch, I: input features, S: state size)::

    input (B, I), weights (3S, S + I), bias (3S,) or (1, 3S), old_h (B, S), old_cell (B, S)
    X = cat([old_h, input], 1);  gates = X @ weights.T + bias  ->  z_i, z_o, z_c  (B, S) each
    new_cell = old_cell + elu(z_c) * sigmoid(z_i);  new_h = tanh(new_cell) * sigmoid(z_o)

The gate math runs in one fused kernel each way (CPU: parallel C++ loops; CUDA: one launch);
the matrix products go through ATen (cuBLAS on CUDA).
"""

# No `from __future__ import annotations` here: torch.library reads the annotations at runtime.

import math

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from lltm_ext._extension import load_extension

__all__ = ["LLTM", "LLTMFunction", "lltm"]

_Outputs = tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]
_Grads = tuple[Tensor, Tensor, Tensor, Tensor, Tensor]


def _ext():
    return load_extension("lltm")


# ----------------------------------------------------------------------------------------------
# torch.library ops: what torch.compile sees (no graph break), checked by opcheck.
# ----------------------------------------------------------------------------------------------


@torch.library.custom_op("lltm_ext::lltm_forward", mutates_args=(), device_types=("cpu", "cuda"))
def lltm_forward(
    input: Tensor, weights: Tensor, bias: Tensor, old_h: Tensor, old_cell: Tensor
) -> _Outputs:
    """(new_h, new_cell, input_gate, output_gate, candidate_cell, X); the last 4 feed backward."""
    return tuple(_ext().forward(input, weights, bias, old_h, old_cell))


@lltm_forward.register_fake
def _(input, weights, bias, old_h, old_cell):
    torch._check(input.dim() == 2 and old_h.dim() == 2, lambda: "input and old_h must be 2-D")
    batch, state = old_h.shape
    x = input.new_empty((batch, state + input.shape[1]))
    return tuple(old_cell.new_empty((batch, state)) for _ in range(5)) + (x,)


@torch.library.custom_op("lltm_ext::lltm_backward", mutates_args=(), device_types=("cpu", "cuda"))
def lltm_backward(
    grad_h: Tensor,
    grad_cell: Tensor,
    new_cell: Tensor,
    input_gate: Tensor,
    output_gate: Tensor,
    candidate_cell: Tensor,
    X: Tensor,
    weights: Tensor,
) -> _Grads:
    """(d_old_h, d_input, d_weights, d_bias (3S,), d_old_cell)."""
    return tuple(
        _ext().backward(
            grad_h, grad_cell, new_cell, input_gate, output_gate, candidate_cell, X, weights
        )
    )


@lltm_backward.register_fake
def _(grad_h, grad_cell, new_cell, input_gate, output_gate, candidate_cell, X, weights):
    batch, state = new_cell.shape
    features = X.shape[1] - state
    return (
        new_cell.new_empty((batch, state)),
        new_cell.new_empty((batch, features)),
        new_cell.new_empty(tuple(weights.shape)),
        new_cell.new_empty((3 * state,)),
        new_cell.new_empty((batch, state)),
    )


def _zeros_if_none(grad: Tensor | None, like: Tensor) -> Tensor:
    return torch.zeros_like(like) if grad is None else grad.contiguous()


def _setup_context(ctx, inputs, output):
    _, weights, bias, _, _ = inputs
    _, new_cell, input_gate, output_gate, candidate_cell, X = output
    ctx.mark_non_differentiable(input_gate, output_gate, candidate_cell, X)
    ctx.save_for_backward(new_cell, input_gate, output_gate, candidate_cell, X, weights)
    ctx.bias_shape = bias.shape


def _op_backward(ctx, grad_h, grad_cell, *_unused):
    new_cell, input_gate, output_gate, candidate_cell, X, weights = ctx.saved_tensors
    d_old_h, d_input, d_weights, d_bias, d_old_cell = lltm_backward(
        _zeros_if_none(grad_h, new_cell),
        _zeros_if_none(grad_cell, new_cell),
        new_cell,
        input_gate,
        output_gate,
        candidate_cell,
        X,
        weights,
    )
    return d_input, d_weights, d_bias.reshape(ctx.bias_shape), d_old_h, d_old_cell


lltm_forward.register_autograd(_op_backward, setup_context=_setup_context)


# ----------------------------------------------------------------------------------------------
# The public API. Eager calls go straight to the compiled module (no dispatcher round trip);
# under torch.compile the same calls go through the torch.library ops above.
# ----------------------------------------------------------------------------------------------


def _forward_impl(*args: Tensor) -> _Outputs:
    if torch.compiler.is_compiling():
        return lltm_forward(*args)
    return tuple(_ext().forward(*args))


def _backward_impl(*args: Tensor) -> _Grads:
    if torch.compiler.is_compiling():
        return lltm_backward(*args)
    return tuple(_ext().backward(*args))


class LLTMFunction(torch.autograd.Function):
    """Autograd for the LLTM cell: ``LLTMFunction.apply(input, weights, bias, old_h, old_cell)``.

    Returns ``(new_h, new_cell)``, each (B, S). Non-contiguous inputs are made contiguous.
    """

    @staticmethod
    def forward(ctx, input, weights, bias, old_h, old_cell):
        input, weights, bias, old_h, old_cell = (
            t.contiguous() for t in (input, weights, bias, old_h, old_cell)
        )
        new_h, new_cell, input_gate, output_gate, candidate_cell, X = _forward_impl(
            input, weights, bias, old_h, old_cell
        )
        ctx.save_for_backward(new_cell, input_gate, output_gate, candidate_cell, X, weights)
        ctx.bias_shape = bias.shape
        return new_h, new_cell

    @staticmethod
    @once_differentiable  # the backward kernels are not differentiable: raise, not wrong
    def backward(ctx, grad_h, grad_cell):
        new_cell, input_gate, output_gate, candidate_cell, X, weights = ctx.saved_tensors
        d_old_h, d_input, d_weights, d_bias, d_old_cell = _backward_impl(
            _zeros_if_none(grad_h, new_cell),
            _zeros_if_none(grad_cell, new_cell),
            new_cell,
            input_gate,
            output_gate,
            candidate_cell,
            X,
            weights,
        )
        return d_input, d_weights, d_bias.reshape(ctx.bias_shape), d_old_h, d_old_cell


def lltm(
    input: Tensor, weights: Tensor, bias: Tensor, old_h: Tensor, old_cell: Tensor
) -> tuple[Tensor, Tensor]:
    """One LLTM step.

    Args:
        input: (B, I) features.
        weights: (3S, S + I) gate weights, rows ordered input gate, output gate, candidate.
        bias: (3S,) or (1, 3S); its gradient has the same shape.
        old_h: (B, S) previous hidden state.
        old_cell: (B, S) previous cell state.

    Returns:
        (new_h, new_cell), each (B, S), same dtype and device as the inputs.

    All tensors must share one device (CPU or CUDA) and one floating dtype (float32, float64,
    float16, bfloat16; half types are computed in float). Differentiable in every argument.
    """
    return LLTMFunction.apply(input, weights, bias, old_h, old_cell)


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
        factory = {"device": device, "dtype": dtype}
        self.weights = nn.Parameter(
            torch.empty(3 * state_size, input_features + state_size, **factory)
        )
        self.bias = nn.Parameter(torch.empty(3 * state_size, **factory))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Uniform(-1/sqrt(S), 1/sqrt(S)) for weights and bias, as in the tutorial."""
        stdv = 1.0 / math.sqrt(self.state_size)
        for weight in self.parameters():
            nn.init.uniform_(weight, -stdv, +stdv)

    def forward(self, input: Tensor, state: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
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


def benchmarks(device: torch.device, quick: bool) -> list:
    """lltm_ext.lltm vs the pure-PyTorch LLTM, forward and forward+backward (float32)."""
    from lltm_ext._bench import BenchCase

    sizes = [(16, 32, 128)]  # the tutorial's (batch, features, state)
    sizes.append((4096, 1024, 1024) if device.type == "cuda" else (256, 256, 256))
    cases = []
    for batch, features, state in sizes[:1] if quick else sizes:
        gen = torch.Generator(device="cpu").manual_seed(0)

        def rand(*shape, scale=1.0, gen=gen):
            t = torch.randn(*shape, generator=gen) * scale
            return t.to(device).requires_grad_()

        stdv = 1.0 / math.sqrt(state)
        args = (
            rand(batch, features),
            rand(3 * state, features + state, scale=stdv),
            rand(3 * state, scale=stdv),
            rand(batch, state),
            rand(batch, state),
        )
        grads = (torch.randn(batch, state, device=device), torch.randn(batch, state, device=device))
        size = f"B={batch} I={features} S={state}"

        def fwd(fn, args=args):
            with torch.no_grad():
                return fn(*args)

        def fwd_bwd(fn, args=args, grads=grads):
            return torch.autograd.grad(fn(*args), args, grads)

        for case, run in (("forward", fwd), ("forward+backward", fwd_bwd)):
            cases.append(
                BenchCase(
                    op="lltm",
                    case=case,
                    dtype=torch.float32,
                    size=size,
                    ours=lambda run=run: run(lltm),
                    ref=lambda run=run: run(lltm_reference),
                    ref_name="pure-PyTorch LLTM",
                )
            )
    return cases
