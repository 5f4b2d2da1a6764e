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

Files by role: this module is the public API (the functions, the modules, the operators);
``_lltm_fake.py`` registers the operators' fake kernels, ``_lltm_reference.py`` holds the
pure-PyTorch references; the bench cases are in ``lltm_ext/cli/cases/lltm.py``.
"""

import math
from typing import Any

import torch
from torch import Tensor, nn

from lltm_ext._extension import load_ops
from lltm_ext.ops import _lltm_fake  # noqa: F401  (registers the operators' fake kernels)

# The references, re-exported: tests and benchmarks import them from here.
from lltm_ext.ops._lltm_reference import _compiled_reference as _compiled_reference
from lltm_ext.ops._lltm_reference import lltm_loop as lltm_loop
from lltm_ext.ops._lltm_reference import lltm_reference as lltm_reference

__all__ = ["LLTM", "LLTMFunction", "LLTMSequence", "lltm", "lltm_sequence"]

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


def _describe_state(state: Any) -> str:
    """How a `state` that is not a pair of tensors is named in the modules' TypeErrors."""
    if isinstance(state, Tensor):
        return f"a tensor of shape {list(state.shape)}"
    length = f" of length {len(state)}" if isinstance(state, (tuple, list)) else ""
    return f"{type(state).__name__}{length}"


class _LLTMParameters(nn.Module):
    """The parameters :class:`LLTM` and :class:`LLTMSequence` share: ``weights`` (3S, S + I) and
    ``bias`` (3S,), made on `device` in `dtype`, with ``input_features`` (I) and ``state_size`` (S)
    kept as attributes. The same parameter names make a cell's ``state_dict`` load into either."""

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

    ``forward(input (B, I), (h (B, S), cell (B, S))) -> (new_h, new_cell)``. Parameters:
    ``weights`` (3S, S + I) and ``bias`` (3S,), Uniform(-1/sqrt(S), 1/sqrt(S)) at first, as in
    the tutorial (:meth:`reset_parameters`); `device` and `dtype` are the parameters'.
    """

    def forward(self, input: Tensor, state: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        """One step: `input` (B, I), `state` = (h, cell), each (B, S) -> (new_h, new_cell)."""
        if not (isinstance(state, (tuple, list)) and len(state) == 2):
            raise TypeError(
                "LLTM.forward: `state` must be a pair (h, cell) of two (batch, "
                f"{self.state_size}) tensors, as in cell(x, (h, cell)), but got "
                f"{_describe_state(state)}."
            )
        old_h, old_cell = state
        return lltm(input, self.weights, self.bias, old_h, old_cell)


lltm_sequence_op = _ops.lltm_sequence.default
"""``lltm_sequence(input (T, B, I), weights, bias, h0=None, c0=None) -> (output (T, B, S), h_n,
c_n)``: the LLTM over all T steps, any layout, with its autograd (backward through time) in C++
(``src/lltm/lltm_sequence.cpp``); h0 or c0 None is zeros, which the kernels read as such (no
tensor of zeros made)."""


def _state_pair(state: Any, where: str, state_size: int) -> tuple[Tensor, Tensor]:
    if isinstance(state, (tuple, list)) and len(state) == 2:
        return state[0], state[1]
    raise TypeError(
        f"{where}: `state` must be None or a pair (h_0, c_0) of two (batch, {state_size}) "
        f"tensors, as in nn.LSTM, but got {_describe_state(state)}."
    )


def lltm_sequence(
    input: Tensor,
    weights: Tensor,
    bias: Tensor,
    state: tuple[Tensor, Tensor] | None = None,
    *,
    batch_first: bool = False,
) -> tuple[Tensor, tuple[Tensor, Tensor]]:
    """The LLTM cell run over a whole sequence in one call, forward and backward through time.

    Args:
        input: (T, B, I), or (B, T, I) with ``batch_first``.
        weights: (3S, S + I) and bias: (3S,) or (1, 3S), as for :func:`lltm`.
        state: (h_0, c_0), each (B, S); zeros when None (read as zeros by the kernels, with no
            tensor of zeros made).
        batch_first: input and output are (B, T, ...) instead of (T, B, ...).

    Returns:
        ``(output, (h_n, c_n))``: output (T, B, S) (or (B, T, S)) holds every step's new_h; h_n and
        c_n (B, S) are the last step's state (the initial state when T = 0). All three are new
        contiguous tensors, none a view.

    The same as a Python loop of :func:`lltm` over the steps, in one call: one product for the
    input projections of all steps, per step the recurrent product and one fused gate kernel, and
    backward through time likewise. On CUDA, float32 products follow torch's matmul precision, as
    that loop does: full float32 by default, TF32 under
    ``torch.set_float32_matmul_precision("high")`` (``torch.backends.cuda.matmul.allow_tf32``);
    not cuDNN's RNN setting, whose TF32 default the LLTM's cell state (no forget gate) would add
    up over the steps. Dtypes and
    devices as for :func:`lltm` (half types computed in float); differentiable in input, weights,
    bias and state (first order).
    """
    if not isinstance(input, Tensor) or input.dim() != 3:
        layout = (
            "(batch, seq_len, input_features)"
            if batch_first
            else ("(seq_len, batch, input_features)")
        )
        got = f"shape {list(input.shape)}" if isinstance(input, Tensor) else type(input).__name__
        raise ValueError(
            f"lltm_ext.lltm_sequence: `input` must be 3-D {layout}, but got {got}"
            + (" (for one step use lltm_ext.lltm)" if isinstance(input, Tensor) else "")
            + "."
        )
    x = input.transpose(0, 1) if batch_first else input
    state_size = weights.shape[0] // 3 if weights.dim() >= 1 else 0
    if state is None:  # zeros, which the operator reads as such: no tensor of them, no fill
        h0 = c0 = None
    else:
        h0, c0 = _state_pair(state, "lltm_ext.lltm_sequence", state_size)
        if c0 is h0:  # one tensor as both: torch.compile needs distinct tensors
            c0 = c0.view_as(c0)
    output, h_n, c_n = lltm_sequence_op(x, weights, bias, h0, c0)
    if batch_first:
        # A (B, T, S) copy, not a transposed view: FSDP2 warns of a view among a module's outputs
        # (an in-place op on it would drop FSDP2's pre-backward hook). One copy of the output,
        # small beside the sequence's products; later ops read it contiguous.
        output = output.transpose(0, 1).contiguous()
    return output, (h_n, c_n)


class LLTMSequence(_LLTMParameters):
    """The LLTM over whole sequences: ``LLTMSequence(input_features, state_size)``.

    ``forward(input (T, B, I), state=None) -> (output (T, B, S), (h_n, c_n))`` (``batch_first``:
    (B, T, ...)), like ``torch.nn.LSTM``; see :func:`lltm_sequence`. Its parameters are those of
    :class:`LLTM` (``weights`` (3S, S + I), ``bias`` (3S,)), initialized as :class:`LLTM`'s: a
    cell's ``state_dict`` loads into it.
    """

    def __init__(
        self,
        input_features: int,
        state_size: int,
        *,
        batch_first: bool = False,
        device: torch.device | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(input_features, state_size, device=device, dtype=dtype)
        self.batch_first = batch_first

    def forward(
        self, input: Tensor, state: tuple[Tensor, Tensor] | None = None
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """``input`` (T, B, I) (or (B, T, I)), ``state`` (h_0, c_0) or None ->
        ``(output, (h_n, c_n))``."""
        if state is not None:
            state = _state_pair(state, "LLTMSequence.forward", self.state_size)
        return lltm_sequence(input, self.weights, self.bias, state, batch_first=self.batch_first)

    def extra_repr(self) -> str:
        return super().extra_repr() + (", batch_first=True" if self.batch_first else "")
