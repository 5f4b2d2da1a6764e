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
import warnings
from typing import Any

import torch
from torch import Tensor, nn

from lltm_ext._extension import load_ops, register_fake
from lltm_ext.ops._checks import check_inputs

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


def _state_message(op: str, what: str, t: Tensor, batch: int, state: int) -> str:
    return (
        f"lltm_ext.{op}: {what} must have shape [{batch}, {state}] ([batch, state_size]: batch "
        f"from `input`, state_size = weights.size(0) / 3), but got shape {list(t.shape)}."
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
            f"input_features], but got shape {list(weights.shape)}."
        ),
    )
    state = weights.shape[0] // 3
    features = weights.shape[1] - state
    layout = "seq_len, batch" if sequence else "batch"
    torch._check(
        input.dim() == (3 if sequence else 2) and input.shape[-1] == features,
        lambda: (
            f"lltm_ext.{op}: `input` must have shape [{layout}, {features}] (input_features = "
            f"weights.size(1) - state_size = {weights.shape[1]} - {state}), but got shape "
            f"{list(input.shape)}."
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
            f"(3 * state_size), but got shape {list(bias.shape)}."
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


def _check_sequence_shapes(input: Tensor, weights: Tensor, bias: Tensor, h0: Tensor, c0: Tensor):
    """The sequence's checks (``src/lltm/lltm_sequence.cpp``), for the fake kernels."""
    states = {"h0": ("the state's `h_0`", h0), "c0": ("the state's `c_0`", c0)}
    _check_lltm_shapes("lltm_sequence", input, weights, bias, states, sequence=True)


@register_fake(_ops, "lltm_ext::lltm_sequence_forward")
def _(input, weights, bias, h0, c0):
    _check_sequence_shapes(input, weights, bias, h0, c0)
    steps, batch, _ = input.shape
    state = h0.shape[1]
    seq = input.new_empty((steps, batch, state))
    return (
        seq,
        h0.new_empty((batch, state)),
        h0.new_empty((batch, state)),
        input.new_empty((steps, batch, state)),
        input.new_empty((steps, batch, 3 * state)),
    )


@register_fake(_ops, "lltm_ext::lltm_sequence_backward")
def _(grad_output, grad_h_n, grad_c_n, input, weights, bias, h0, output, cells, gates):
    check_inputs(
        input=input,
        grad_output=grad_output,
        grad_h_n=grad_h_n,
        grad_c_n=grad_c_n,
        weights=weights,
        bias=bias,
        h0=h0,
        output=output,
        cells=cells,
        gates=gates,
    )
    return (
        input.new_empty(tuple(input.shape)),
        input.new_empty(tuple(weights.shape)),
        input.new_empty((weights.shape[0],)),
        input.new_empty(tuple(h0.shape)),
        input.new_empty(tuple(h0.shape)),
    )


@register_fake(_ops, "lltm_ext::lltm_sequence")
def _(input, weights, bias, h0, c0):
    _check_sequence_shapes(input, weights, bias, h0, c0)
    steps, batch, _ = input.shape
    state = h0.shape[1]
    return (
        input.new_empty((steps, batch, state)),
        h0.new_empty((batch, state)),
        h0.new_empty((batch, state)),
    )


lltm_sequence_op = _ops.lltm_sequence.default
"""``lltm_sequence(input (T, B, I), weights, bias, h0, c0) -> (output (T, B, S), h_n, c_n)``: the
LLTM over all T steps, any layout, with its autograd (backward through time) in C++
(``src/lltm/lltm_sequence.cpp``)."""


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
        state: (h_0, c_0), each (B, S); zeros when None.
        batch_first: input and output are (B, T, ...) instead of (T, B, ...).

    Returns:
        ``(output, (h_n, c_n))``: output (T, B, S) (or (B, T, S)) holds every step's new_h; h_n and
        c_n (B, S) are the last step's state (the initial state when T = 0). All three are new
        contiguous tensors, none a view.

    The same as a Python loop of :func:`lltm` over the steps, in one call: one product for the
    input projections of all steps, per step the recurrent product and one fused gate kernel, and
    backward through time likewise. On CUDA, float32 products follow
    ``torch.backends.cudnn.rnn.fp32_precision``, as ``torch.nn.LSTM`` does: "tf32" (torch's
    default) uses TF32 tensor cores; set it to "ieee" for full float32 products. Dtypes and
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
    if state is None:
        h0 = x.new_zeros((x.shape[1], state_size))
        c0 = x.new_zeros((x.shape[1], state_size))
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


BENCH_OPS = ("lltm", "lltm_sequence")
"""The `op` names of this module's bench cases (``lltm-ext bench --ops`` takes either)."""


def benchmarks(device: torch.device, quick: bool) -> list:
    """The cell's cases (op ``lltm``, :func:`cell_benchmarks`) and the sequence's (op
    ``lltm_sequence``, :func:`sequence_benchmarks`)."""
    return cell_benchmarks(device, quick) + sequence_benchmarks(device, quick)


def cell_benchmarks(device: torch.device, quick: bool) -> list:
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


def sequence_benchmarks(device: torch.device, quick: bool) -> list:
    """lltm_ext.lltm_sequence over T = 128 steps, forward+backward (gradients of input, weights
    and bias), against ``torch.nn.LSTM(I, S)`` (cuDNN on CUDA, run as users run it: default
    settings) and Python loops of the pure-PyTorch cell and of lltm_ext.lltm.

    CUDA: B in {16, 64, 256} x S in {128, 512, 1024} (I = S), float32 and bfloat16; the loops at
    B = 16, S = 128. CPU: B = 16, S = 128, float32. The first reference is nn.LSTM on CUDA and the
    pure-PyTorch loop on CPU (each platform's target).
    """
    from lltm_ext._bench import BenchCase

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
