"""The LLTM cell of :mod:`lltm_ext.ops.lltm` run over whole sequences, forward and backward
through time, in one call: :func:`lltm_sequence` and the module :class:`LLTMSequence`.

Shapes (T: steps, B: batch, I: input features, S: state size)::

    input (T, B, I), weights (3S, S + I), bias (3S,) or (1, 3S), h_0, c_0 (B, S)
    output (T, B, S): every step's h;  h_n, c_n (B, S): the last step's state

The path of a call: ``lltm_sequence(...)`` (or ``LLTMSequence``) -> the operator
``torch.ops.lltm_ext.lltm_sequence``, called through its module's binding
(``lltm_ext._lltm_sequence.lltm_sequence``: PyTorch's C++ dispatcher without ``torch.ops``'s
Python boxing; torch.compile sees the operator), whose autograd kernel is C++
(``src/lltm_sequence/lltm_sequence.cpp``) -> the operators ``lltm_sequence_forward`` /
``lltm_sequence_backward`` (checks; the CPU time loop; on CUDA the time loops of
``sequence_cuda_host.cpp`` on the kernels that ``plan_cuda_host.cpp`` picks). Its fake kernels
are in ``_lltm_fake.py`` with the cell's.
"""

from typing import Any

import torch
from torch import Tensor

from lltm_ext._extension import load_ops, operator_call
from lltm_ext.ops import _lltm_fake  # noqa: F401  (registers the operators' fake kernels)
from lltm_ext.ops.lltm import _describe_state, _LLTMParameters

__all__ = ["LLTMSequence", "lltm_sequence"]

_ops = load_ops("lltm_sequence")
lltm_sequence_op = _ops.lltm_sequence.default
"""``lltm_sequence(input (T, B, I), weights, bias, h0=None, c0=None) -> (output (T, B, S), h_n,
c_n)``: the LLTM over all T steps, any layout, with its autograd (backward through time) in C++
(``src/lltm_sequence/lltm_sequence.cpp``); h0 or c0 None is zeros, which the kernels read as such
(no tensor of zeros made)."""
_lltm_sequence_call = operator_call("lltm_sequence", "lltm_sequence", lltm_sequence_op)


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
    output, h_n, c_n = _lltm_sequence_call(x, weights, bias, h0, c0)
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
