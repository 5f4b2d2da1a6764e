"""The LLTM cell of :mod:`lltm_ext.ops.lltm` run over whole sequences, forward and backward
through time, in one call: :func:`lltm_sequence`, and the module :class:`LLTMSequence`, which has
``torch.nn.LSTM``'s interface (layers, both directions, packed sequences) over it.

Shapes (T: steps, B: batch, I: input features, S: state size; the module: D directions, L
layers)::

    lltm_sequence: input (T, B, I), weights (3S, S + I), bias (3S,) or (1, 3S), h_0, c_0 (B, S)
                   -> output (T, B, S): every step's h;  h_n, c_n (B, S): the last step's state
    LLTMSequence:  input (T, B, I), (T, I) or a PackedSequence; h_0, c_0 (D * L, B, S)
                   -> output (T, B, D * S) (or packed);  h_n, c_n (D * L, B, S), as nn.LSTM's

The path of a call: ``lltm_sequence(...)`` (``LLTMSequence``: one call per layer and direction;
a packed sequence's go to ``lltm_sequence_packed``, whose operators mirror these) -> the operator
``torch.ops.lltm_ext.lltm_sequence``, called through its module's binding
(``lltm_ext._lltm_sequence.lltm_sequence``: PyTorch's C++ dispatcher without ``torch.ops``'s
Python boxing; torch.compile sees the operator), whose autograd kernel is C++
(``src/lltm_sequence/lltm_sequence.cpp``) -> the operators ``lltm_sequence_forward`` /
``lltm_sequence_backward`` (checks; the CPU time loop; on CUDA the time loops of
``sequence_cuda_host.cpp`` on the kernels that ``plan_cuda_host.cpp`` picks). Its fake kernels
are in ``_lltm_fake.py`` with the cell's.
"""

import itertools
import math
import numbers
import warnings
from collections.abc import Iterable
from typing import Any, NamedTuple, overload

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence

from lltm_ext._extension import load_extension, load_ops, operator_call
from lltm_ext.ops import _lltm_fake  # noqa: F401  (registers the operators' fake kernels)
from lltm_ext.ops._autocast import autocast_dtype
from lltm_ext.ops._checks import describe
from lltm_ext.ops.lltm import _describe_state

__all__ = ["LLTMSequence", "lltm_sequence"]

_ops = load_ops("lltm_sequence")
lltm_sequence_op = _ops.lltm_sequence.default
"""``lltm_sequence(input (T, B, I), weights, bias, h0=None, c0=None, tf32=False) -> (output (T, B,
S), h_n, c_n)``: the LLTM over all T steps, any layout, with its autograd (backward through time)
in C++ (``src/lltm_sequence/lltm_sequence.cpp``); h0 or c0 None is zeros, which the kernels read as
such (no tensor of zeros made); ``tf32`` runs float32's products in TF32 whatever torch's matmul
precision (its autocast kernel sets it for a float32 state, whose operands it rounds to the
autocast dtype)."""
_lltm_sequence_call = operator_call("lltm_sequence", "lltm_sequence", lltm_sequence_op)
lltm_sequence_packed_op = _ops.lltm_sequence_packed.default
"""``lltm_sequence_packed(data (N, I), batch_sizes: list[int], weights, bias, h0=None, c0=None,
tf32=False) -> (output (N, S), h_n, c_n (batch_sizes[0], S))``: the LLTM over the rows of a
PackedSequence (step t's ``batch_sizes[t]`` rows in turn, non-increasing; row j of a step is
sequence j's), in one call: one product for the input projections of all rows, the time loop over
real rows only (on CUDA a stretch of steps with one batch at a time, on the sequence's kernels),
one weight gradient over all rows. h_n, c_n: each sequence's state after its own last step."""


def _state_pair(
    state: Any, where: str, state_size: int, name: str = "state", rows: str = ""
) -> tuple[Tensor, Tensor]:
    """`state` as (h_0, c_0), or a TypeError naming the argument (`name`) and the tensors' shape
    (`rows`: what comes before (batch, state_size) in it, as "num_layers * num_directions, ")."""
    if isinstance(state, (tuple, list)) and len(state) == 2:
        return state[0], state[1]
    raise TypeError(
        f"{where}: `{name}` must be None or a pair (h_0, c_0) of two ({rows}batch, {state_size}) "
        f"tensors, as in nn.LSTM, but got {_describe_state(state)}."
    )


def lltm_sequence(
    input: Tensor,
    weights: Tensor,
    bias: Tensor,
    state: tuple[Tensor, Tensor] | None = None,
    *,
    batch_first: bool = False,
    tf32: bool = False,
) -> tuple[Tensor, tuple[Tensor, Tensor]]:
    """The LLTM cell run over a whole sequence in one call, forward and backward through time.

    Args:
        input: (T, B, I), or (B, T, I) with ``batch_first``.
        weights: (3S, S + I) and bias: (3S,) or (1, 3S), as for :func:`lltm`.
        state: (h_0, c_0), each (B, S); zeros when None (read as zeros by the kernels, with no
            tensor of zeros made).
        batch_first: input and output are (B, T, ...) instead of (T, B, ...).
        tf32: float32 products in TF32 on CUDA whatever torch's matmul precision (the kernels
            still keep full precision where that is the faster); nothing on the CPU.

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
    up over the steps. Under ``torch.autocast`` it gives what a loop of the pure-PyTorch cell gives
    there: a float32 state stays float32, its products read the operands rounded to the autocast
    dtype (in TF32, which holds them exactly), and a state in the autocast dtype runs in it. Dtypes
    and devices as for :func:`lltm` (half types computed in float); differentiable in input,
    weights, bias and state (first order).
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
    output, h_n, c_n = _lltm_sequence_call(x, weights, bias, h0, c0, tf32)
    if batch_first:
        # A (B, T, S) copy, not a transposed view: FSDP2 warns of a view among a module's outputs
        # (an in-place op on it would drop FSDP2's pre-backward hook). One copy of the output,
        # small beside the sequence's products; later ops read it contiguous.
        output = output.transpose(0, 1).contiguous()
    return output, (h_n, c_n)


# --- the module: nn.LSTM's interface over layers, directions and packed sequences ---------------


class _Packing(NamedTuple):
    """How a forward walks a PackedSequence (from its ``batch_sizes``, once per forward): each
    step's batch (``sizes``, non-increasing: step t's rows are ``data[sum(sizes[:t]) :][:
    sizes[t]]``, row j of a step sequence j's) and, for the reverse direction, the permutation of
    the rows that reverses each sequence within its own length (None when not needed). Its own
    inverse: the same index gathers the results back."""

    sizes: list[int]
    max_batch: int
    reverse_index: Tensor | None


def _packing(batch_sizes: Tensor, rows: int, device: torch.device, reverse: bool) -> _Packing:
    """The steps of a PackedSequence with `rows` rows of data and these `batch_sizes` (a CPU
    tensor, non-increasing, as torch's packing makes them), and its reversing index on `device`
    if `reverse`."""
    sizes = [int(b) for b in batch_sizes.tolist()] if batch_sizes.dim() == 1 else []
    if batch_sizes.dim() != 1 or not sizes or sizes[-1] <= 0 or sum(sizes) != rows:
        raise ValueError(
            "LLTMSequence.forward: a PackedSequence must have 1-D `batch_sizes` of positive "
            f"counts (at least one step) that add up to `data`'s {rows} rows, but got "
            f"batch_sizes {sizes[:8]}{' ...' if len(sizes) > 8 else ''} (sum {sum(sizes)})."
        )
    if any(later > earlier for earlier, later in itertools.pairwise(sizes)):
        raise ValueError(
            "LLTMSequence.forward: a PackedSequence's `batch_sizes` must not increase (as "
            "torch.nn.utils.rnn.pack_padded_sequence / pack_sequence make them), but got "
            f"{sizes[:8]}{' ...' if len(sizes) > 8 else ''}."
        )
    reverse_index = None
    if reverse:
        # Row r holds step t[r] of (sorted) sequence j[r]; reversed within its length L[j], that
        # step becomes L[j] - 1 - t, which sits at row offsets[L[j] - 1 - t] + j.
        counts = batch_sizes.to("cpu", torch.int64)
        offsets = torch.cumsum(counts, 0) - counts
        t = torch.repeat_interleave(torch.arange(len(sizes)), counts)
        j = torch.arange(rows) - offsets[t]
        lengths = torch.bincount(j, minlength=sizes[0])
        reverse_index = offsets[lengths[j] - 1 - t] + j
        if device.type == "cuda" and not torch.cuda.is_current_stream_capturing():
            # From page-locked memory the copy does not wait for the GPU. (Under CUDA graph
            # capture a graph would read that buffer at every replay, after it was freed: there
            # the blocking copy stays, which capture refuses with CUDA's error.)
            reverse_index = reverse_index.pin_memory().to(device, non_blocking=True)
        else:
            reverse_index = reverse_index.to(device)
    return _Packing(sizes, sizes[0], reverse_index)


def _check_int(value: Any, name: str, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"LLTMSequence: `{name}` must be an int, but got {type(value).__name__}.")
    if value < minimum:
        raise ValueError(f"LLTMSequence: `{name}` must be at least {minimum}, but got {value}.")
    return value


def _one_of(new: Any, old: Any, new_name: str, old_name: str) -> Any:
    """The size given by nn.LSTM's keyword (`new_name`) or by LLTMSequence's earlier one."""
    if new is not None and old is not None:
        raise TypeError(
            f"LLTMSequence: got both `{new_name}` and `{old_name}` (the same size under nn.LSTM's "
            "name and the earlier one): pass one."
        )
    if new is None and old is None:
        raise TypeError(f"LLTMSequence: missing the argument `{new_name}` (or `{old_name}`).")
    return new if new is not None else old


def _unviewed(t: Tensor) -> Tensor:
    """`t` as a new contiguous tensor, never a view: FSDP2 warns of a view among a module's outputs
    (an in-place op on it would drop FSDP2's pre-backward hook)."""
    return t.clone(memory_format=torch.contiguous_format)


# Calls at once (LLTMSequence on CUDA): the fewest steps of a wavefront's chunk, and the most
# chunks. A chunk is a call of its own each way, whose host time (a few hundred microseconds
# forward+backward) the chunk's GPU time must cover: a chunk's steps are estimated to take at least
# _WAVE_MIN_CHUNK_US on the GPU, each step the longest of _WAVE_STEP_FLOOR_US, its products' FLOP
# at _WAVE_STEP_FLOPS a second and its weights' bytes (read forward and backward) at
# _WAVE_STEP_BYTES a second: a fit to the H200's times; docs/decisions_sequence.md#layers-at-once.
_WAVE_MIN_STEPS = 32
_WAVE_MAX_CHUNKS = 8
_WAVE_MIN_CHUNK_US = 500.0
_WAVE_STEP_FLOOR_US = 2.0
_WAVE_STEP_FLOPS = 15e12
_WAVE_STEP_BYTES = 3e12
# The most of the GPU a chunk's step kernels may hold for the wavefront (plan_grid_share): a grid
# of 69 blocks of one an SM (0.52 of 132 SMs) still gained 10%, one of 0.91 lost.
_WAVE_MAX_SHARE = 0.55
_side_streams: dict[tuple[int, int], list[torch.cuda.Stream]] = {}


def _side_stream(device: torch.device, i: int, parts: int = 2) -> torch.cuda.Stream:
    """The `i`-th stream LLTMSequence keeps on `device` for calls that share the GPU `parts` ways
    (made once, reused), marked so for the planner: the tiled kernels' tiles there are planned for
    1 / parts of the SMs (plan_cuda_host.cpp: tiled_plan), so that the calls' grids fit beside
    each other."""
    index = torch.cuda.current_device() if device.index is None else device.index
    streams = _side_streams.setdefault((index, parts), [])
    while len(streams) <= i:
        stream = torch.cuda.Stream(index)
        load_extension("lltm_sequence")._mark_at_once_stream(index, stream.cuda_stream, parts)
        streams.append(stream)
    return streams[i]


def _wave_parts(layers: int) -> int:
    """How many ways a wavefront over `layers` layers shares the GPU between its calls' step
    kernels: min(layers, LLTM_EXT_SEQUENCE_AT_ONCE_PARTS), which is 2 unset."""
    return min(layers, load_extension("lltm_sequence")._at_once_parts())


def _runs_at_once(x: Tensor, parameters: Iterable[Tensor]) -> bool:
    """Whether LLTMSequence may run calls on `x` with these parameters on streams of its own: eager
    CUDA calls outside CUDA graph capture (torch.compile and graphs see one call after another), on
    plain tensors (whose memory the caching allocator can be told which streams read: not a
    tensor subclass such as DTensor), unless LLTM_EXT_SEQUENCE_AT_ONCE=off."""
    return (
        x.is_cuda
        and not torch.compiler.is_compiling()
        and not torch.cuda.is_current_stream_capturing()
        and type(x) is Tensor
        and all(type(p) in (Tensor, nn.Parameter) for p in parameters)
        and load_extension("lltm_sequence")._at_once()
    )


def _wave_count(
    steps: int, batch: int, input_size: int, state_size: int, layers: int, element_size: int
) -> int:
    """How many chunks of steps a wavefront over `layers` layers of (T = steps, B = batch,
    I = input_size, S = state_size; products' operands of `element_size` bytes) may cut, by time:
    the most, up to _WAVE_MAX_CHUNKS of _WAVE_MIN_STEPS steps or more, whose estimated GPU time a
    layer (forward+backward) is at least _WAVE_MIN_CHUNK_US; 1 where none is (no wavefront). A
    step's products are 18 B S (S + I') FLOP forward+backward over weights of 3 S (S + I')
    elements, read twice, I' the layers' mean input size."""
    width = state_size + (input_size + (layers - 1) * state_size) / max(layers, 1)
    flop_us = 18 * batch * state_size * width / _WAVE_STEP_FLOPS * 1e6
    byte_us = 6 * state_size * width * element_size / _WAVE_STEP_BYTES * 1e6
    step_us = max(_WAVE_STEP_FLOOR_US, flop_us, byte_us)
    chunks = min(_WAVE_MAX_CHUNKS, steps // _WAVE_MIN_STEPS)
    while chunks > 1 and steps / chunks * step_us < _WAVE_MIN_CHUNK_US:
        chunks -= 1
    return max(chunks, 1)


def _wave_chunks(x: Tensor, weights: Tensor, state_size: int, parts: int, layers: int) -> int:
    """How many chunks of steps a wavefront over `layers` layers of a call on x (T, B, I) cuts:
    :func:`_wave_count`'s (LLTM_EXT_SEQUENCE_AT_ONCE_CHUNKS = N: min(N, T / 32)), or 1 (no
    wavefront) where the step kernels of a chunk, planned for the wavefront's streams (the GPU
    shared `parts` ways), hold more than about half the GPU (two layers' calls could not run
    beside each other)."""
    steps, batch = x.shape[0], x.shape[1]
    if not x.is_cuda:
        return 1
    # Under autocast a float32 state runs float32 kernels on rounded operands in TF32.
    autocast = autocast_dtype(x, weights) is not None
    tf32 = x.dtype == torch.float32 and autocast
    forced = load_extension("lltm_sequence")._at_once_chunks()
    if forced:
        chunks = min(forced, steps // _WAVE_MIN_STEPS)
    else:
        element_size = min(2, x.element_size()) if autocast else x.element_size()
        chunks = _wave_count(steps, batch, x.shape[2], state_size, layers, element_size)
    if chunks < 2:
        return 1
    with torch.cuda.stream(_side_stream(x.device, 0, parts)):
        share = load_extension("lltm_sequence")._grid_share(
            x, steps // chunks, batch, state_size, tf32
        )
    return chunks if share <= _WAVE_MAX_SHARE else 1


class LLTMSequence(nn.Module):
    """The LLTM over whole sequences with ``torch.nn.LSTM``'s interface, to swap in for it.

    ``LLTMSequence(input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
    dropout=0.0, bidirectional=False, proj_size=0, device=None, dtype=None)``, as ``nn.LSTM``;
    ``input_features`` and ``state_size`` are accepted for ``input_size`` and ``hidden_size``
    (earlier names, kept as attributes too). ``proj_size`` must be 0 (the LLTM cell has no
    projection of h).

    ``forward(input, hx=None) -> (output, (h_n, c_n))``, shaped as nn.LSTM's (T: steps, B: batch,
    I: input_size, S: hidden_size, D: 2 if bidirectional else 1, L: num_layers):

    - input (T, B, I) (``batch_first``: (B, T, I)) -> output (T, B, D * S) (``batch_first``:
      (B, T, D * S)); h_n, c_n (D * L, B, S);
    - unbatched input (T, I) -> output (T, D * S); h_n, c_n (D * L, S);
    - a ``PackedSequence`` -> a ``PackedSequence`` with the same ``batch_sizes``,
      ``sorted_indices`` and ``unsorted_indices``; h_n, c_n (D * L, B, S) in the batch's own
      (unsorted) order, each sequence's state after its own last step;
    - ``hx`` = (h_0, c_0), each (D * L, B, S) (unbatched: (D * L, S)), in the batch's order;
      None: zeros.

    Row ``layer * D + direction`` of h_n and c_n (and of h_0, c_0) is that layer's forward
    (direction 0) or reverse (1) state. Layer k > 0 reads layer k - 1's output (both directions
    concatenated, the forward one first, as nn.LSTM); with ``dropout`` > 0, in training mode,
    dropout is applied to each layer's output but the last's. The reverse direction runs the
    sequence reversed in time (each packed sequence within its own length). Each layer and
    direction is one :func:`lltm_sequence` call (a packed sequence: one call of the operator
    ``lltm_sequence_packed`` over its rows, no work on padding); all of it is differentiable in
    input, hx and parameters.

    Parameters, per layer k and direction, initialized as :class:`LLTM`'s (Uniform(-1/sqrt(S),
    1/sqrt(S))): ``weights_l{k}`` (3S, S + I_k) and ``bias_l{k}`` (3S,), ``_reverse`` appended for
    the reverse direction; I_0 = I, I_k = D * S for k > 0. One exception, for compatibility: a
    single layer in one direction (the defaults) keeps the names ``weights`` and ``bias`` (so its
    ``state_dict`` is the earlier LLTMSequence's and an LLTM cell's, and theirs load into it).
    ``all_weights`` lists them per layer and direction as nn.LSTM's does. With ``bias=False``
    there is no bias parameter (nor ``state_dict`` entry; ``bias`` / ``bias_l{k}`` are None) and
    the cells run with a zero bias, made in each forward (3S elements: not a buffer, which
    ``to_empty`` would leave uninitialized). The flag is ``has_bias``: unlike nn.LSTM's, this
    module's ``bias`` attribute is the parameter (None without one), not the flag.

    Otherwise as nn.LSTM: its arguments' checks, the attributes ``input_size``, ``hidden_size``,
    ``num_layers``, ``batch_first``, ``dropout``, ``bidirectional``, ``proj_size`` (0), a warning
    for dropout with one layer, ``flatten_parameters()`` (nothing to do here); ``input_size`` may
    be 0 (the kernels take no input features; nn.LSTM refuses it).

    Not nn.LSTM's weights: the LLTM has three gates (input, output, candidate; no forget gate) in
    one (3S, S + I) matrix acting on [h, x], so an nn.LSTM ``state_dict`` does not load.
    """

    def __init__(
        self,
        input_size: int | None = None,
        hidden_size: int | None = None,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        *,
        input_features: int | None = None,
        state_size: int | None = None,
    ) -> None:
        super().__init__()
        input_size = _check_int(
            _one_of(input_size, input_features, "input_size", "input_features"), "input_size", 0
        )
        hidden_size = _check_int(
            _one_of(hidden_size, state_size, "hidden_size", "state_size"), "hidden_size", 1
        )
        num_layers = _check_int(num_layers, "num_layers", 1)
        if (
            not isinstance(dropout, numbers.Number)
            or isinstance(dropout, bool)
            or not 0 <= dropout <= 1
        ):
            raise ValueError(
                "LLTMSequence: `dropout` must be a number in [0, 1] (the probability of an "
                f"element being zeroed), but got {dropout!r}."
            )
        if dropout > 0 and num_layers == 1:
            warnings.warn(
                "dropout option adds dropout after all but last recurrent layer, so non-zero "
                f"dropout expects num_layers greater than 1, but got dropout={dropout} and "
                f"num_layers={num_layers}",
                stacklevel=2,
            )
        for name, flag in (("bias", bias), ("batch_first", batch_first)):
            if not isinstance(flag, bool):
                raise TypeError(
                    f"LLTMSequence: `{name}` must be a bool, but got {type(flag).__name__}."
                )
        if proj_size != 0:
            raise ValueError(
                f"LLTMSequence: proj_size={proj_size!r} is not supported (the LLTM cell has no "
                "projection of h): leave proj_size at 0."
            )
        self.input_size = self.input_features = input_size
        self.hidden_size = self.state_size = hidden_size
        self.num_layers = num_layers
        self.has_bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bool(bidirectional)
        self.proj_size = 0
        directions = 2 if self.bidirectional else 1
        single = num_layers == 1 and directions == 1
        factory: dict[str, Any] = {"device": device, "dtype": dtype}
        # (weights' name, bias's name) of each layer and direction, at index layer * D + direction.
        self._parameter_names: list[tuple[str, str]] = []
        for layer in range(num_layers):
            features = input_size if layer == 0 else hidden_size * directions
            for direction in range(directions):
                suffix = f"_l{layer}" + ("_reverse" if direction else "")
                names = ("weights", "bias") if single else ("weights" + suffix, "bias" + suffix)
                self._parameter_names.append(names)
                weights = torch.empty(3 * hidden_size, hidden_size + features, **factory)
                self.register_parameter(names[0], nn.Parameter(weights))
                self.register_parameter(
                    names[1],
                    nn.Parameter(torch.empty(3 * hidden_size, **factory)) if bias else None,
                )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Uniform(-1/sqrt(S), 1/sqrt(S)) for all weights and biases, as :class:`LLTM`'s."""
        stdv = 1.0 / math.sqrt(self.hidden_size)
        for weight in self.parameters():
            nn.init.uniform_(weight, -stdv, +stdv)

    @property
    def all_weights(self) -> list[list[Tensor]]:
        """[weights, bias] (bias only with ``bias=True``) per layer and direction, at index
        layer * D + direction, as nn.LSTM's ``all_weights``."""
        return [
            [getattr(self, name) for name in names if getattr(self, name) is not None]
            for names in self._parameter_names
        ]

    def flatten_parameters(self) -> None:
        """Nothing to do (nn.LSTM's packs its weights for cuDNN; each LLTM layer's weights are one
        tensor already): here so that models which call it run unchanged."""

    def _check_state(self, t: Any, name: str, shape: tuple[int, ...], unbatched: bool) -> None:
        if not isinstance(t, Tensor):
            raise TypeError(
                f"LLTMSequence.forward: `{name}` must be a tensor, but got {type(t).__name__}."
            )
        if tuple(t.shape) != shape:
            layout = "" if unbatched else "batch, "
            raise RuntimeError(
                f"LLTMSequence.forward: `{name}` must have shape {list(shape)} (num_layers * "
                f"num_directions, {layout}hidden_size), as in nn.LSTM, but got a {describe(t)}."
            )

    @overload
    def forward(
        self, input: Tensor, hx: tuple[Tensor, Tensor] | None = None
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]: ...

    @overload
    def forward(
        self, input: PackedSequence, hx: tuple[Tensor, Tensor] | None = None
    ) -> tuple[PackedSequence, tuple[Tensor, Tensor]]: ...

    def forward(
        self, input: Tensor | PackedSequence, hx: tuple[Tensor, Tensor] | None = None
    ) -> tuple[Tensor | PackedSequence, tuple[Tensor, Tensor]]:
        """``input`` (T, B, I) ((B, T, I) with ``batch_first``), (T, I) unbatched, or a
        PackedSequence; ``hx`` (h_0, c_0) each (D * L, B, S) ((D * L, S) unbatched) or None ->
        ``(output, (h_n, c_n))`` as nn.LSTM (see the class)."""
        directions = 2 if self.bidirectional else 1
        rows = self.num_layers * directions
        packing = None
        unbatched = False
        batch_sizes: Tensor | None = None
        sorted_indices: Tensor | None = None
        unsorted_indices: Tensor | None = None
        if isinstance(input, PackedSequence):
            data, batch_sizes = input.data, input.batch_sizes
            sorted_indices, unsorted_indices = input.sorted_indices, input.unsorted_indices
            if data.dim() != 2 or data.shape[1] != self.input_size:
                raise RuntimeError(
                    "LLTMSequence.forward: a PackedSequence's `data` must have shape [rows, "
                    f"{self.input_size}] (input_size = {self.input_size}), but got a "
                    f"{describe(data)}."
                )
            packing = _packing(batch_sizes, data.shape[0], data.device, self.bidirectional)
            x, batch = data, packing.max_batch
        else:
            if not isinstance(input, Tensor) or input.dim() not in (2, 3):
                got = f"a {describe(input)}" if isinstance(input, Tensor) else type(input).__name__
                raise ValueError(
                    "LLTMSequence.forward: `input` must be 3-D ("
                    + ("batch, seq_len" if self.batch_first else "seq_len, batch")
                    + ", input_size), 2-D (seq_len, input_size) for one unbatched sequence, or "
                    f"a PackedSequence, but got {got}."
                )
            unbatched = input.dim() == 2
            if input.shape[-1] != self.input_size:
                layout = (
                    "seq_len"
                    if unbatched
                    else ("batch, seq_len" if self.batch_first else "seq_len, batch")
                )
                raise RuntimeError(
                    f"LLTMSequence.forward: `input` must have shape [{layout}, {self.input_size}] "
                    f"(input_size = {self.input_size}), but got a {describe(input)}."
                )
            if unbatched:
                x = input.unsqueeze(1)
            else:
                x = input.transpose(0, 1) if self.batch_first else input
            batch = x.shape[1]
        if hx is None:
            h0 = c0 = None
        else:
            h0, c0 = _state_pair(
                hx, "LLTMSequence.forward", self.hidden_size, "hx", "num_layers * num_directions, "
            )
            shape = (rows, self.hidden_size) if unbatched else (rows, batch, self.hidden_size)
            self._check_state(h0, "h_0", shape, unbatched)
            self._check_state(c0, "c_0", shape, unbatched)
            if unbatched:
                h0, c0 = h0.unsqueeze(1), c0.unsqueeze(1)
            if sorted_indices is not None:  # the packed (sorted) order of the sequences
                h0, c0 = h0.index_select(1, sorted_indices), c0.index_select(1, sorted_indices)
        zero_bias = None if self.has_bias else x.new_zeros(3 * self.hidden_size)
        h_n: list[Tensor] = []
        c_n: list[Tensor] = []
        at_once = (directions == 2 or self.num_layers > 1) and _runs_at_once(x, self.parameters())
        chunks, parts = 1, 2
        if at_once and directions == 1 and packing is None:
            parts = _wave_parts(self.num_layers)
            weights = self._layer_parameters(0, zero_bias)[0]
            chunks = _wave_chunks(x, weights, self.hidden_size, parts, self.num_layers)
        if chunks > 1:
            x = self._wavefront(x, h0, c0, zero_bias, chunks, parts, h_n, c_n)
        for layer in range(self.num_layers if chunks == 1 else 0):
            calls = []
            for index in range(layer * directions, (layer + 1) * directions):
                state = None if h0 is None or c0 is None else (h0[index], c0[index])
                calls.append((*self._layer_parameters(index, zero_bias), state))
            if directions == 2 and at_once:
                results = self._directions_at_once(x, calls, packing)
            else:
                results = [
                    self._run(x, weights, bias, state, direction == 1, packing)
                    for direction, (weights, bias, state) in enumerate(calls)
                ]
            outputs = [output for output, _, _ in results]
            h_n += [h for _, h, _ in results]
            c_n += [c for _, _, c in results]
            x = torch.cat(outputs, dim=-1) if directions == 2 else outputs[0]
            if self.dropout > 0 and self.training and layer + 1 < self.num_layers:
                x = F.dropout(x, p=self.dropout, training=True)
        if unbatched:  # new tensors, not views of the (T, 1, ...) ones: see _unviewed
            h_n = [h[0] for h in h_n]
            c_n = [c[0] for c in c_n]
            x = _unviewed(x[:, 0])
        elif self.batch_first and packing is None:
            x = _unviewed(x.transpose(0, 1))
        h_out, c_out = torch.stack(h_n), torch.stack(c_n)
        if unsorted_indices is not None:  # back to the batch's own order
            h_out = h_out.index_select(1, unsorted_indices)
            c_out = c_out.index_select(1, unsorted_indices)
        if packing is not None:
            packed = PackedSequence(x, batch_sizes, sorted_indices, unsorted_indices)
            return packed, (h_out, c_out)
        return x, (h_out, c_out)

    def _layer_parameters(self, index: int, zero_bias: Tensor | None) -> tuple[Tensor, Tensor]:
        """Layer and direction `index`'s weights (3S, S + I) and bias (3S,) (zeros without bias)."""
        weights_name, bias_name = self._parameter_names[index]
        bias = getattr(self, bias_name) if zero_bias is None else zero_bias
        return getattr(self, weights_name), bias

    @classmethod
    def _directions_at_once(
        cls,
        x: Tensor,
        calls: list[tuple[Tensor, Tensor, tuple[Tensor, Tensor] | None]],
        packing: _Packing | None,
    ) -> list[tuple[Tensor, Tensor, Tensor]]:
        """Both directions of a layer (`_run` of each (weights, bias, state) in `calls`, forward
        then reverse) at once, each on a side stream of its own; the current stream waits for
        both. Autograd runs each call's backward on its stream too, as it ran forward."""
        current = torch.cuda.current_stream(x.device)  # x.device: not always the current one
        results = []
        for direction, (weights, bias, state) in enumerate(calls):
            side = _side_stream(x.device, direction)
            side.wait_stream(current)
            with torch.cuda.stream(side):
                results.append(cls._run(x, weights, bias, state, direction == 1, packing))
            # Each tensor read on a stream it was not made on is marked so, lest the caching
            # allocator hand its memory out while that stream may still read it.
            for t in (x, weights, bias, *(state or ())):
                t.record_stream(side)
            if packing is not None and packing.reverse_index is not None:
                packing.reverse_index.record_stream(side)
        for direction, result in enumerate(results):
            current.wait_stream(_side_stream(x.device, direction))
            for t in result:
                t.record_stream(current)
        return results

    def _wavefront(
        self,
        x: Tensor,
        h0: Tensor | None,
        c0: Tensor | None,
        zero_bias: Tensor | None,
        chunks: int,
        parts: int,
        h_n: list[Tensor],
        c_n: list[Tensor],
    ) -> Tensor:
        """The layers of a one-directional model on x (T, B, I) in a wavefront: T cut into
        `chunks`, layer l on a side stream of its own (the GPU shared `parts` ways) runs chunk k
        once layer l - 1 has run it, so that up to L calls run at once (the current stream waits
        for them all); -> the last layer's output (T, B, S), and each layer's (h_n, c_n) appended
        to h_n, c_n. The same steps as one call per layer, the state carried from chunk to chunk;
        autograd runs each chunk's backward on its stream, so backward is a wavefront too."""
        layers = self.num_layers
        current = torch.cuda.current_stream(x.device)  # x.device: not always the current one
        streams = [_side_stream(x.device, i, parts) for i in range(layers)]
        for stream in streams:
            stream.wait_stream(current)
        steps = x.shape[0]
        bounds = [steps * k // chunks for k in range(chunks + 1)]
        parameters = [self._layer_parameters(layer, zero_bias) for layer in range(layers)]
        states: list[tuple[Tensor, Tensor] | None] = [
            None if h0 is None or c0 is None else (h0[layer], c0[layer]) for layer in range(layers)
        ]
        for layer, stream in enumerate(streams):
            for t in (*parameters[layer], *(states[layer] or ())):
                t.record_stream(stream)
        x.record_stream(streams[0])
        ready: list[torch.cuda.Event | None] = [None] * layers
        outputs: list[Tensor] = []
        dropout = self.dropout > 0 and self.training
        for k in range(chunks):
            inputs = x[bounds[k] : bounds[k + 1]]
            for layer, stream in enumerate(streams):
                with torch.cuda.stream(stream):
                    if layer > 0:
                        before = ready[layer - 1]
                        assert before is not None
                        stream.wait_event(before)
                    weights, bias = parameters[layer]
                    output, (h, c) = lltm_sequence(inputs, weights, bias, states[layer])
                    states[layer] = (h, c)
                    if layer + 1 < layers:
                        if dropout:
                            output = F.dropout(output, p=self.dropout, training=True)
                        output.record_stream(streams[layer + 1])
                        event = torch.cuda.Event()
                        event.record(stream)
                        ready[layer] = event
                inputs = output
            inputs.record_stream(current)
            outputs.append(inputs)
        for stream in streams:
            current.wait_stream(stream)
        for layer in range(layers):
            state = states[layer]
            assert state is not None
            for t in state:
                t.record_stream(current)
            h_n.append(state[0])
            c_n.append(state[1])
        return torch.cat(outputs)

    @staticmethod
    def _run(
        x: Tensor,
        weights: Tensor,
        bias: Tensor,
        state: tuple[Tensor, Tensor] | None,
        reverse: bool,
        packing: _Packing | None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """One layer in one direction: x (T, B, I) or packed rows (N, I) -> (output (T, B, S) or
        (N, S), h_n, c_n (B, S)). The reverse direction runs the sequence reversed in time (each
        packed sequence within its length) and reverses its output back."""
        if packing is None:
            if reverse:
                output, (h, c) = lltm_sequence(x.flip(0), weights, bias, state)
                return output.flip(0), h, c
            output, (h, c) = lltm_sequence(x, weights, bias, state)
            return output, h, c
        # One operator call for all the packed rows (its autocast kernel casts them once).
        h0, c0 = (None, None) if state is None else state
        if reverse:
            assert packing.reverse_index is not None
            output, h, c = lltm_sequence_packed_op(
                x.index_select(0, packing.reverse_index), packing.sizes, weights, bias, h0, c0
            )
            return output.index_select(0, packing.reverse_index), h, c
        return lltm_sequence_packed_op(x, packing.sizes, weights, bias, h0, c0)

    def extra_repr(self) -> str:
        """As nn.LSTM's: the sizes, then the settings that differ from the defaults."""
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.has_bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s
