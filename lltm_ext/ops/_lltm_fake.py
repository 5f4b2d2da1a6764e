"""The LLTM operators' fake kernels (output shapes for torch.compile's tracing and meta tensors),
with the checks of ``src/lltm/lltm.cpp`` and ``src/lltm_sequence/lltm_sequence.cpp`` and their
messages.

Imported by :mod:`lltm_ext.ops.lltm` and :mod:`lltm_ext.ops.lltm_sequence`, whose operators they
describe (the two ops share their checks).
"""

import functools
import itertools

import torch
from torch import Tensor

from lltm_ext._extension import load_ops, register_fake
from lltm_ext.ops._checks import check_floating, check_inputs, describe, dtype_name

_ops = load_ops("lltm")
_sequence_ops = load_ops("lltm_sequence")


def _state_message(op: str, what: str, t: Tensor, batch: int, state: int) -> str:
    return (
        f"lltm_ext.{op}: {what} must have shape [{batch}, {state}] ([batch, state_size]: batch "
        f"from `input`, state_size = weights.size(0) / 3), but got a {describe(t)}."
    )


def _check_lltm_shapes(
    op: str,
    input: Tensor,
    weights: Tensor,
    bias: Tensor,
    states: dict[str, tuple[str, Tensor]],
    sequence: bool,
) -> None:
    """The checks of ``src/lltm/lltm.cpp`` (op ``lltm``) or ``lltm_sequence.cpp`` (op
    ``lltm_sequence``, input (T, B, I)), with their messages, for torch.compile's tracing (and meta
    tensors): dtypes and devices, then shapes. `states`: argument name -> (how its shape error
    names it, the tensor)."""
    check_inputs(input=input, weights=weights, bias=bias, **{k: t for k, (_, t) in states.items()})
    torch._check(
        weights.dim() == 2
        and weights.shape[0] % 3 == 0
        and weights.shape[1] >= weights.shape[0] // 3,
        lambda: (
            f"lltm_ext.{op}: `weights` must have shape [3 * state_size, state_size + "
            f"input_features], but got a {describe(weights)}."
        ),
    )
    state = weights.shape[0] // 3
    features = weights.shape[1] - state
    layout = "seq_len, batch" if sequence else "batch"
    torch._check(
        input.dim() == (3 if sequence else 2) and input.shape[-1] == features,
        lambda: (
            f"lltm_ext.{op}: `input` must have shape [{layout}, {features}] (input_features = "
            f"weights.size(1) - state_size = {weights.shape[1]} - {state}), but got a "
            f"{describe(input)}."
        ),
    )
    batch = input.shape[-2]
    for what, t in states.values():
        torch._check(
            t.dim() == 2 and t.shape[0] == batch and t.shape[1] == state,
            functools.partial(_state_message, op, what, t, batch, state),
        )
    torch._check(
        bias.numel() == 3 * state and (bias.dim() == 1 or (bias.dim() == 2 and bias.shape[0] == 1)),
        lambda: (
            f"lltm_ext.{op}: `bias` must have shape [{3 * state}] or [1, {3 * state}] "
            f"(3 * state_size), but got a {describe(bias)}."
        ),
    )


def _check_shapes(input: Tensor, weights: Tensor, bias: Tensor, old_h: Tensor, old_cell: Tensor):
    """The cell's checks (``src/lltm/lltm.cpp``)."""
    states = {"old_h": ("`old_h`", old_h), "old_cell": ("`old_cell`", old_cell)}
    _check_lltm_shapes("lltm", input, weights, bias, states, sequence=False)


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


_HALF = (torch.float16, torch.bfloat16)


def _state_dtype(input: Tensor, *states: Tensor | None) -> torch.dtype:
    """The sequence's state dtype (``lltm_sequence.cpp``: state_dtype): the first given of
    `states` (backward's saved output, c0, h0), else the input's."""
    return next((t.dtype for t in states if t is not None), input.dtype)


def _check_state_dtypes(
    input: Tensor,
    state: torch.dtype,
    names: tuple[str, str, str] = ("input", "h0", "c0"),
    **tensors: Tensor | None,
) -> None:
    """The state's tensors in the state's dtype, which is the input's, or float32 with float16 or
    bfloat16 input (a mixed call), as ``check_state`` checks them; `names`: the input's, h0's and
    c0's in the messages."""
    input_name, h0_name, c0_name = names
    for name, t in tensors.items():
        if t is None:
            continue
        check_floating(t, name)
        device = (
            f"lltm_ext: all tensors must be on one device, but `{name}` is on {t.device} and "
            f"`{input_name}` is on {input.device}."
        )
        torch._check(t.device == input.device, functools.partial(str, device))
        dtype = (
            f"lltm_ext: all tensors must have one dtype, but `{name}` is {dtype_name(t.dtype)} "
            f"and the state is {dtype_name(state)} ({c0_name}'s, else {h0_name}'s)."
        )
        torch._check(t.dtype == state, functools.partial(str, dtype))
    torch._check(
        state == input.dtype or (state == torch.float32 and input.dtype in _HALF),
        lambda: (
            f"lltm_ext: all tensors must have one dtype, but the state ({h0_name}, {c0_name}) is "
            f"{dtype_name(state)} and `{input_name}` is {dtype_name(input.dtype)} (a float32 "
            f"state may go with float16 or bfloat16 {input_name}, weights and bias: their "
            "products then run in that dtype)."
        ),
    )


def _check_sequence_shapes(
    input: Tensor,
    weights: Tensor,
    bias: Tensor,
    h0: Tensor | None,
    c0: Tensor | None,
    output: Tensor | None = None,
) -> int:
    """The sequence's checks (``src/lltm_sequence/lltm_sequence.cpp``; h0 or c0 None: zeros;
    `output`: backward's saved output, which gives the state's dtype), for the fake kernels.
    Returns the state size S."""
    states = {
        name: (f"the state's `{shown}`", t)
        for name, shown, t in (("h0", "h_0", h0), ("c0", "c_0", c0))
        if t is not None
    }
    _check_lltm_shapes("lltm_sequence", input, weights, bias, {}, sequence=True)
    _check_state_dtypes(input, _state_dtype(input, output, c0, h0), h0=h0, c0=c0)
    batch, state = input.shape[-2], weights.shape[0] // 3
    for what, t in states.values():
        torch._check(
            t.dim() == 2 and t.shape[0] == batch and t.shape[1] == state,
            functools.partial(_state_message, "lltm_sequence", what, t, batch, state),
        )
    return state


def _sequence_outputs(
    like: Tensor, rows: tuple[int, ...], batch: int, state: int, saved: bool
) -> tuple[Tensor, ...]:
    """The sequence operators' outputs: output rows + (S,), h_n, c_n (B, S) and, where `saved`,
    cells rows + (S,) and gates rows + (3S,); rows (T, B) for a sequence, (N,) for packed rows."""
    out: tuple[Tensor, ...] = (
        like.new_empty((*rows, state)),
        like.new_empty((batch, state)),
        like.new_empty((batch, state)),
    )
    if saved:
        out += (like.new_empty((*rows, state)), like.new_empty((*rows, 3 * state)))
    return out


_BACKWARD_TENSORS = (
    "grad_output",
    "grad_h_n",
    "grad_c_n",
    "weights",
    "bias",
    "h0",
    "output",
    "cells",
    "gates",
)


def _sequence_gradients(
    input_name: str,
    input: Tensor,
    batch: int,
    tensors: tuple[Tensor | None, ...],
    output_mask: tuple[bool, ...],
) -> tuple[Tensor | None, ...]:
    """The backward operators' results after their checks (input under `input_name`; `tensors`:
    the other tensor arguments in the schemas' order, _BACKWARD_TENSORS, None for an absent one,
    which reads as zeros): d_input, d_weights, d_bias in input's dtype, d_h0, d_c0 (B, S) in the
    state's; None (undefined) where output_mask says not wanted, as the operators
    return them."""
    named = dict(zip(_BACKWARD_TENSORS, tensors, strict=True))
    weights, bias, output = named.pop("weights"), named.pop("bias"), named["output"]
    assert weights is not None and bias is not None and output is not None
    check_inputs(**{input_name: input}, weights=weights, bias=bias)
    # the saved tensors and gradients in the state's dtype: output's (float32 in a mixed call)
    _check_state_dtypes(input, output.dtype, (input_name, "h0", "c0"), **named)
    state = (batch, weights.shape[0] // 3)
    shapes = (tuple(input.shape), tuple(weights.shape), (weights.shape[0],), state, state)
    likes = (input, input, input, output, output)
    return tuple(
        like.new_empty(tuple(shape)) if wanted else None
        for shape, like, wanted in zip(shapes, likes, output_mask, strict=True)
    )


def _state_like(input: Tensor, h0: Tensor | None, c0: Tensor | None) -> Tensor:
    """A tensor of the state's dtype on input's device, for _sequence_outputs."""
    return input.new_empty((), dtype=_state_dtype(input, c0, h0))


@register_fake(_sequence_ops, "lltm_ext::lltm_sequence_forward")
def _(input, weights, bias, h0=None, c0=None, tf32=False):
    state = _check_sequence_shapes(input, weights, bias, h0, c0)
    like = _state_like(input, h0, c0)
    return _sequence_outputs(like, tuple(input.shape[:2]), input.shape[1], state, saved=True)


@register_fake(_sequence_ops, "lltm_ext::lltm_sequence_backward")
def _(
    grad_output,
    grad_h_n,
    grad_c_n,
    input,
    weights,
    bias,
    h0,
    output,
    cells,
    gates,
    output_mask=(True,) * 5,
    tf32=False,
):
    tensors = (grad_output, grad_h_n, grad_c_n, weights, bias, h0, output, cells, gates)
    return _sequence_gradients("input", input, input.shape[1], tensors, output_mask)


@register_fake(_sequence_ops, "lltm_ext::lltm_sequence")
def _(input, weights, bias, h0=None, c0=None, tf32=False):
    state = _check_sequence_shapes(input, weights, bias, h0, c0)
    like = _state_like(input, h0, c0)
    return _sequence_outputs(like, tuple(input.shape[:2]), input.shape[1], state, saved=False)


def _rounded(op: str, tensors: list[Tensor], dtype: torch.dtype) -> list[Tensor]:
    """The autocast kernels' rounded operands (src/lltm/rounded_op.h): float32, contiguous."""
    if dtype not in (torch.float16, torch.bfloat16):
        raise RuntimeError(
            f"lltm_ext.{op}: `dtype` must be torch.float16 or torch.bfloat16, but got "
            f"{dtype_name(dtype)}."
        )
    return [torch.empty(t.shape, dtype=torch.float32, device=t.device) for t in tensors]


@register_fake(_ops, "lltm_ext::lltm_rounded")
def _(tensors, dtype):
    return _rounded("lltm_rounded", tensors, dtype)


@register_fake(_sequence_ops, "lltm_ext::lltm_sequence_rounded")
def _(tensors, dtype):
    return _rounded("lltm_sequence_rounded", tensors, dtype)


def _check_packed_shapes(
    data: Tensor,
    batch_sizes: list[int],
    weights: Tensor,
    bias: Tensor,
    h0: Tensor | None,
    c0: Tensor | None,
    output: Tensor | None = None,
) -> tuple[int, int]:
    """The packed sequence's checks (``src/lltm_sequence/lltm_sequence.cpp``: data (N, I), the
    state (batch_sizes[0], S) in data's dtype or, with half data, float32; `output`: backward's
    saved output, which gives the state's dtype), for the fake kernels. Returns (B, S)."""
    sizes = list(batch_sizes)
    torch._check(
        data.dim() == 2,
        lambda: (
            "lltm_ext.lltm_sequence_packed: `data` must be 2-D (rows, input_features), a "
            f"PackedSequence's data, but got a {describe(data)}."
        ),
    )
    # data's rows as one step of a sequence (T = 1, B = N), the state apart.
    _check_sequence_shapes(data.unsqueeze(0), weights, bias, None, None)
    torch._check(
        len(sizes) > 0
        and all(b > 0 for b in sizes)
        and all(b <= a for a, b in itertools.pairwise(sizes))
        and sum(sizes) == data.shape[0],
        lambda: (
            "lltm_ext.lltm_sequence_packed: `batch_sizes` must be positive, non-increasing "
            f"counts that add up to `data`'s {data.shape[0]} rows, but got {sizes[:8]}."
        ),
    )
    state_dtype = _state_dtype(data, output, c0, h0)
    _check_state_dtypes(data, state_dtype, ("data", "h_0", "c_0"), h_0=h0, c_0=c0)
    state = weights.shape[0] // 3
    for name, t in (("h_0", h0), ("c_0", c0)):
        if t is not None:
            message = (
                f"lltm_ext.lltm_sequence_packed: the state's `{name}` must have shape "
                f"[{sizes[0]}, {state}], but got a {describe(t)}."
            )
            torch._check(tuple(t.shape) == (sizes[0], state), functools.partial(str, message))
    return sizes[0], state


@register_fake(_sequence_ops, "lltm_ext::lltm_sequence_packed_forward")
def _(data, batch_sizes, weights, bias, h0=None, c0=None, tf32=False):
    batch, state = _check_packed_shapes(data, batch_sizes, weights, bias, h0, c0)
    like = _state_like(data, h0, c0)
    return _sequence_outputs(like, (data.shape[0],), batch, state, saved=True)


@register_fake(_sequence_ops, "lltm_ext::lltm_sequence_packed_backward")
def _(
    grad_output,
    grad_h_n,
    grad_c_n,
    data,
    batch_sizes,
    weights,
    bias,
    h0,
    output,
    cells,
    gates,
    output_mask=(True,) * 5,
    tf32=False,
):
    batch, _ = _check_packed_shapes(data, batch_sizes, weights, bias, h0, None, output)
    tensors = (grad_output, grad_h_n, grad_c_n, weights, bias, h0, output, cells, gates)
    return _sequence_gradients("data", data, batch, tensors, output_mask)


@register_fake(_sequence_ops, "lltm_ext::lltm_sequence_packed")
def _(data, batch_sizes, weights, bias, h0=None, c0=None, tf32=False):
    batch, state = _check_packed_shapes(data, batch_sizes, weights, bias, h0, c0)
    like = _state_like(data, h0, c0)
    return _sequence_outputs(like, (data.shape[0],), batch, state, saved=False)
