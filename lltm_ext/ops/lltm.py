"""The LLTM cell of PyTorch's C++/CUDA extension tutorial, on lltm_ext's fused kernels.

Shapes (B: batch, I: input features, S: state size)::

    input (B, I), weights (3S, S + I), bias (3S,) or (1, 3S), old_h (B, S), old_cell (B, S)
    X = cat([old_h, input], 1);  gates = X @ weights.T + bias  ->  z_i, z_o, z_c  (B, S) each
    new_cell = old_cell + elu(z_c) * sigmoid(z_i);  new_h = tanh(new_cell) * sigmoid(z_o)

The gate math runs in one fused kernel each way (CPU: vectorized C++ loops; CUDA: one launch);
the matrix products go through ATen (cuBLAS on CUDA).

The path of a call: ``lltm(...)`` (or ``LLTM``) -> the operator ``torch.ops.lltm_ext.lltm``,
called through its module's binding (``lltm_ext._lltm.lltm``: PyTorch's C++ dispatcher without
``torch.ops``'s Python boxing; torch.compile sees the operator), whose autograd kernel is C++
(``src/lltm/lltm.cpp``: no Python runs in forward or backward) -> the operators
``torch.ops.lltm_ext.lltm_forward`` / ``lltm_backward`` (checks, products, CPU/CUDA dispatch) ->
the gate kernels in ``src/lltm/``. Eager and compiled calls run the same path.

Files by role: this module is the public API (the function, the module, the operators);
``_lltm_fake.py`` registers the operators' fake kernels (the cell's and the sequence's),
``_lltm_reference.py`` holds the pure-PyTorch references; the bench cases are in
``lltm_ext/cli/cases/lltm.py``. The sequence (:mod:`lltm_ext.ops.lltm_sequence`) initializes its
parameters as the cell's module does.
"""

import math
from typing import Any

import torch
from torch import Tensor, nn

from lltm_ext._extension import load_ops, operator_call
from lltm_ext.ops import _lltm_fake  # noqa: F401  (registers the operators' fake kernels)

# The references, re-exported: tests and benchmarks import them from here.
from lltm_ext.ops._lltm_reference import _compiled_reference as _compiled_reference
from lltm_ext.ops._lltm_reference import lltm_loop as lltm_loop
from lltm_ext.ops._lltm_reference import lltm_reference as lltm_reference

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


lltm_cell = _ops.lltm.default
"""``lltm(input, weights, bias, old_h, old_cell) -> (new_h, new_cell)``: the cell, any layout,
with its autograd in C++ (``src/lltm/lltm.cpp``): forward runs ``lltm_forward`` and saves its
tensors, backward runs ``lltm_backward``; no Python in a training step."""
_lltm_call = operator_call("lltm", "lltm", lltm_cell)


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
    return _lltm_call(input, weights, bias, old_h, old_cell)


def _describe_state(state: Any) -> str:
    """How a `state` that is not a pair of tensors is named in the modules' TypeErrors."""
    if isinstance(state, Tensor):
        return f"a tensor of shape {list(state.shape)}"
    length = f" of length {len(state)}" if isinstance(state, (tuple, list)) else ""
    return f"{type(state).__name__}{length}"


class _LLTMParameters(nn.Module):
    """The parameters of :class:`LLTM`: ``weights`` (3S, S + I) and ``bias`` (3S,), made on
    `device` in `dtype`, with ``input_features`` (I) and ``state_size`` (S) kept as attributes.
    :class:`LLTMSequence` makes its own per layer and direction, initialized the same way; a single
    layer in one direction keeps these names, so a cell's ``state_dict`` loads into it."""

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

    def extra_repr(self) -> str:
        return f"input_features={self.input_features}, state_size={self.state_size}"


class LLTM(_LLTMParameters):
    """The tutorial's LLTM cell as a module: ``LLTM(input_features, state_size)``.

    ``forward(input (B, I), (h (B, S), cell (B, S)) = None) -> (new_h, new_cell)``, a zero state
    where none is given (as ``nn.LSTMCell``). Parameters: ``weights`` (3S, S + I) and ``bias``
    (3S,), Uniform(-1/sqrt(S), 1/sqrt(S)) at first, as in the tutorial
    (:meth:`reset_parameters`); `device` and `dtype` are the parameters'.
    """

    def forward(
        self, input: Tensor, state: tuple[Tensor, Tensor] | None = None
    ) -> tuple[Tensor, Tensor]:
        """One step: `input` (B, I), `state` = (h, cell), each (B, S), or None for zeros (in
        input's dtype) -> (new_h, new_cell)."""
        if state is None:
            # (B, S) zeros, one tensor for both; an input of another rank meets lltm's own check.
            zero = input.new_zeros(input.size(0) if input.dim() == 2 else 1, self.state_size)
            return lltm(input, self.weights, self.bias, zero, zero)
        if not (isinstance(state, (tuple, list)) and len(state) == 2):
            raise TypeError(
                "LLTM.forward: `state` must be None (zeros) or a pair (h, cell) of two (batch, "
                f"{self.state_size}) tensors, as in cell(x, (h, cell)), but got "
                f"{_describe_state(state)}."
            )
        old_h, old_cell = state
        return lltm(input, self.weights, self.bias, old_h, old_cell)
