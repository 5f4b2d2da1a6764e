"""LLTMSequence as a drop-in for torch.nn.LSTM: its arguments, parameter names, and output shapes
against an nn.LSTM of the same configuration; layers, both directions, unbatched input and
PackedSequence against a pure-PyTorch float64 loop of the LLTM cell written here (and against a
hand-made composition of lltm_ext.lltm_sequence calls), forward and gradients; dropout, bias=False,
bad arguments and torch.compile."""

import math

import pytest
import torch
import torch.nn.functional as F
from helpers import assert_compiled_matches_eager, devices
from torch.nn.utils.rnn import PackedSequence, pack_sequence, pad_packed_sequence

import lltm_ext
from lltm_ext.ops.lltm import lltm_reference

F64 = torch.float64


def names(layers, directions):
    """The parameter names (weights, bias) per layer and direction, as the class documents them:
    nn.LSTM's suffixes, but `weights` and `bias` for one layer in one direction."""
    if layers == 1 and directions == 1:
        return [("weights", "bias")]
    return [
        (f"weights_l{k}{s}", f"bias_l{k}{s}")
        for k in range(layers)
        for s in ([""] if directions == 1 else ["", "_reverse"])
    ]


def layer_params(module):
    """[(weights, bias or None)] at index layer * D + direction, looked up by name."""
    directions = 2 if module.bidirectional else 1
    return [
        (getattr(module, w), getattr(module, b)) for w, b in names(module.num_layers, directions)
    ]


def reference(module, x, hx=None, between=None):
    """nn.LSTM's semantics over the LLTM cell, by hand: a Python loop of the pure-PyTorch cell
    per layer and direction (the reverse one walks the steps from the last), x (T, B, I)
    time-major -> (output (T, B, D * S), h_n, c_n (D * L, B, S)). `between(layer, output)` is
    applied to each layer's output but the last's (dropout)."""
    directions = 2 if module.bidirectional else 1
    steps, batch, state = x.shape[0], x.shape[1], module.hidden_size
    rows = module.num_layers * directions
    zeros = x.new_zeros(rows, batch, state)
    h0, c0 = hx if hx is not None else (zeros, zeros)
    params = layer_params(module)
    layer_input, h_n, c_n = x, [], []
    for layer in range(module.num_layers):
        outputs = []
        for direction in range(directions):
            w, b = params[layer * directions + direction]
            b = torch.zeros(3 * state, dtype=w.dtype, device=w.device) if b is None else b
            h, c = h0[layer * directions + direction], c0[layer * directions + direction]
            out = [None] * steps
            order = range(steps) if direction == 0 else range(steps - 1, -1, -1)
            for t in order:
                h, c = lltm_reference(layer_input[t], w, b, h, c)
                out[t] = h
            outputs.append(torch.stack(out) if steps else x.new_zeros(0, batch, state))
            h_n.append(h)
            c_n.append(c)
        layer_input = torch.cat(outputs, 2)
        if between is not None and layer + 1 < module.num_layers:
            layer_input = between(layer, layer_input)
    return layer_input, torch.stack(h_n), torch.stack(c_n)


def composed(module, x, hx):
    """The same from lltm_ext.lltm_sequence calls, one per layer and direction (torch.flip for
    the reverse one), as a user would stack them by hand."""
    directions = 2 if module.bidirectional else 1
    params = layer_params(module)
    layer_input, h_n, c_n = x, [], []
    for layer in range(module.num_layers):
        outputs = []
        for direction in range(directions):
            i = layer * directions + direction
            w, b = params[i]
            seq = layer_input if direction == 0 else layer_input.flip(0)
            out, (h, c) = lltm_ext.lltm_sequence(seq, w, b, (hx[0][i], hx[1][i]))
            outputs.append(out if direction == 0 else out.flip(0))
            h_n.append(h)
            c_n.append(c)
        layer_input = torch.cat(outputs, 2)
    return layer_input, torch.stack(h_n), torch.stack(c_n)


def make(layers, bidirectional, device, features=3, state=4, **kwargs):
    torch.manual_seed(1)
    return lltm_ext.LLTMSequence(
        features, state, layers, bidirectional=bidirectional, device=device, dtype=F64, **kwargs
    )


def state_of(module, batch, device, unbatched=False):
    rows = module.num_layers * (2 if module.bidirectional else 1)
    shape = (rows, module.hidden_size) if unbatched else (rows, batch, module.hidden_size)
    return tuple(torch.randn(shape, device=device, dtype=F64, requires_grad=True) for _ in "hc")


def grads_of(outputs, wrt, seed=2):
    """Gradients of sum(output * g) over `outputs` (random g drawn from `seed`) wrt `wrt`."""
    gen = torch.Generator().manual_seed(seed)
    weights = [torch.randn(o.shape, generator=gen, dtype=F64).to(o.device) for o in outputs]
    loss = sum((o * g).sum() for o, g in zip(outputs, weights, strict=True))
    return torch.autograd.grad(loss, wrt)


CONFIGS = [(1, False), (2, False), (1, True), (3, True)]
CONFIG_IDS = ["1layer", "2layers", "1layer-bi", "3layers-bi"]


# --- construction ---------------------------------------------------------------------------


@pytest.mark.parametrize("layers", [1, 2, 3])
@pytest.mark.parametrize("bidirectional", [False, True], ids=["uni", "bi"])
def test_parameters_named_and_shaped_per_layer_and_direction(layers, bidirectional):
    module = lltm_ext.LLTMSequence(3, 4, layers, bidirectional=bidirectional)
    directions = 2 if bidirectional else 1
    expected = {}
    for k, (w, b) in enumerate(names(layers, directions)):
        features = 3 if k < directions else 4 * directions
        expected[w] = (12, 4 + features)
        expected[b] = (12,)
    got = {n: tuple(p.shape) for n, p in module.named_parameters()}
    assert got == expected
    assert list(module.state_dict()) == list(expected)
    assert [[p.shape for p in ps] for ps in module.all_weights] == [
        [torch.Size(expected[w]), torch.Size(expected[b])] for w, b in names(layers, directions)
    ]
    bound = 1 / math.sqrt(4)  # Uniform(-1/sqrt(S), 1/sqrt(S)), as the cell's
    for p in module.parameters():
        assert p.abs().max() <= bound and p.std() > bound / 4
    module.flatten_parameters()  # nn.LSTM's; nothing to do, but models call it


def test_nn_lstm_keywords_and_the_earlier_names():
    lstm_style = lltm_ext.LLTMSequence(
        input_size=3,
        hidden_size=4,
        num_layers=2,
        bias=False,
        batch_first=True,
        dropout=0.25,
        bidirectional=True,
        proj_size=0,
        device="cpu",
        dtype=F64,
    )
    assert (lstm_style.input_size, lstm_style.hidden_size, lstm_style.num_layers) == (3, 4, 2)
    assert (lstm_style.input_features, lstm_style.state_size) == (3, 4)
    assert lstm_style.batch_first and lstm_style.bidirectional and not lstm_style.has_bias
    assert lstm_style.dropout == 0.25 and lstm_style.weights_l1.dtype == F64
    assert repr(lstm_style) == (
        "LLTMSequence(3, 4, num_layers=2, bias=False, batch_first=True, dropout=0.25, "
        "bidirectional=True)"
    )
    positional = lltm_ext.LLTMSequence(3, 4, 2, True, True, 0.0, True)
    assert (
        repr(positional) == "LLTMSequence(3, 4, num_layers=2, batch_first=True, bidirectional=True)"
    )
    old = lltm_ext.LLTMSequence(input_features=3, state_size=4, batch_first=True)
    assert (old.input_size, old.hidden_size, old.weights.shape) == (3, 4, (12, 7))
    assert repr(old) == "LLTMSequence(3, 4, batch_first=True)"
    with pytest.raises(TypeError, match=r"both `input_size` and `input_features`"):
        lltm_ext.LLTMSequence(3, 4, input_features=3)
    with pytest.raises(TypeError, match=r"missing the argument `hidden_size` \(or `state_size`\)"):
        lltm_ext.LLTMSequence(3)


def test_an_earlier_state_dict_loads():
    """One layer, one direction: `weights` and `bias` as before, so the earlier LLTMSequence's
    state_dict (and an LLTM cell's) loads, and the module computes the cell's loop from it."""
    cell = lltm_ext.LLTM(3, 4, dtype=F64)
    module = lltm_ext.LLTMSequence(3, 4, dtype=F64)
    module.load_state_dict(cell.state_dict())
    assert torch.equal(module.weights, cell.weights) and torch.equal(module.bias, cell.bias)
    x = torch.randn(5, 2, 3, dtype=F64)
    output, (h_n, _) = module(x)
    want, want_h, _ = reference(module, x)
    torch.testing.assert_close(output, want)
    torch.testing.assert_close(h_n, want_h)
    with pytest.raises(RuntimeError, match=r"Missing key\(s\).*weights_l0"):
        lltm_ext.LLTMSequence(3, 4, 2).load_state_dict(cell.state_dict())


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(proj_size=2), ValueError, r"proj_size=2 is not supported"),
        (dict(num_layers=0), ValueError, r"`num_layers` must be at least 1, but got 0"),
        (dict(num_layers=2.0), TypeError, r"`num_layers` must be an int, but got float"),
        (dict(num_layers=True), TypeError, r"`num_layers` must be an int, but got bool"),
        (dict(hidden_size=0), ValueError, r"`hidden_size` must be at least 1"),
        (dict(input_size=-1), ValueError, r"`input_size` must be at least 0"),
        (dict(dropout=1.5), ValueError, r"`dropout` must be a number in \[0, 1\].*1.5"),
        (dict(dropout=-0.1), ValueError, r"`dropout` must be a number in \[0, 1\]"),
        (dict(dropout=True), ValueError, r"`dropout` must be a number in \[0, 1\]"),
        (dict(bias=1), TypeError, r"`bias` must be a bool, but got int"),
        (dict(batch_first=None), TypeError, r"`batch_first` must be a bool"),
    ],
    ids=lambda v: "" if not isinstance(v, dict) else ",".join(f"{k}={v[k]}" for k in v),
)
def test_bad_arguments(kwargs, error, message):
    args = dict(input_size=3, hidden_size=4, num_layers=2) | kwargs
    with pytest.raises(error, match=message):
        lltm_ext.LLTMSequence(**args)


def test_dropout_with_one_layer_warns_as_nn_lstm():
    with pytest.warns(UserWarning, match=r"non-zero dropout expects num_layers greater than 1"):
        lltm_ext.LLTMSequence(3, 4, dropout=0.5)


# --- shapes: those of an nn.LSTM of the same configuration -----------------------------------


@pytest.mark.parametrize("layers", [1, 2, 3])
@pytest.mark.parametrize("bidirectional", [False, True], ids=["uni", "bi"])
@pytest.mark.parametrize("batch_first", [False, True], ids=["time_first", "batch_first"])
def test_shapes_are_nn_lstms(layers, bidirectional, batch_first):
    kwargs = dict(num_layers=layers, bidirectional=bidirectional, batch_first=batch_first)
    ours = lltm_ext.LLTMSequence(3, 4, **kwargs)
    lstm = torch.nn.LSTM(3, 4, **kwargs)
    rows = layers * (2 if bidirectional else 1)
    x = torch.randn((2, 5, 3) if batch_first else (5, 2, 3))
    hx = (torch.randn(rows, 2, 4), torch.randn(rows, 2, 4))
    seqs = [torch.randn(n, 3) for n in (2, 5, 1)]
    cases = {
        "batched": (x, None),
        "batched, hx": (x, hx),
        "unbatched": (x[0] if batch_first else x[:, 0], None),
        "unbatched, hx": (x[0] if batch_first else x[:, 0], (hx[0][:, 0], hx[1][:, 0])),
        "packed": (pack_sequence(seqs, enforce_sorted=False), None),
        "packed, hx": (
            pack_sequence(seqs, enforce_sorted=False),
            (torch.randn(rows, 3, 4), torch.randn(rows, 3, 4)),
        ),
    }
    for case, (inputs, state) in cases.items():
        output, (h_n, c_n) = ours(inputs, state)
        want, (want_h, want_c) = lstm(inputs, state)
        assert (h_n.shape, c_n.shape) == (want_h.shape, want_c.shape), case
        if isinstance(inputs, PackedSequence):
            assert isinstance(output, PackedSequence), case
            assert output.data.shape == want.data.shape, case
            for field in ("batch_sizes", "sorted_indices", "unsorted_indices"):
                assert torch.equal(getattr(output, field), getattr(want, field)), (case, field)
        else:
            assert output.shape == want.shape, case


# --- values and gradients against the references ---------------------------------------------


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("layers, bidirectional", CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("batch_first", [False, True], ids=["time_first", "batch_first"])
def test_matches_the_reference_loop(device, layers, bidirectional, batch_first):
    """Output, h_n, c_n and the gradients of input, h_0, c_0 and every parameter against the
    float64 loop of the pure-PyTorch cell, and the forward against lltm_sequence calls composed
    by hand."""
    module = make(layers, bidirectional, device, batch_first=batch_first)
    x = torch.randn(6, 3, 3, device=device, dtype=F64, requires_grad=True)
    hx = state_of(module, 3, device)
    inputs = x.transpose(0, 1) if batch_first else x
    output, (h_n, c_n) = module(inputs, hx)
    if batch_first:
        output = output.transpose(0, 1)
    want = reference(module, x, hx)
    for got, ref in zip((output, h_n, c_n), want, strict=True):
        torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-12)
    with torch.no_grad():
        for got, ref in zip((output, h_n, c_n), composed(module, x, hx), strict=True):
            torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-13)
    wrt = (x, *hx, *module.parameters())
    for got, ref in zip(grads_of((output, h_n, c_n), wrt), grads_of(want, wrt), strict=True):
        torch.testing.assert_close(got, ref, rtol=1e-9, atol=1e-11)


@pytest.mark.cuda
@pytest.mark.parametrize(
    "layers, bidirectional, steps, batch_first",
    [(2, False, 70, False), (3, False, 100, True), (4, False, 300, False), (2, True, 40, True)],
    ids=["2layers-2chunks", "3layers-3chunks-batch_first", "4layers-8chunks", "2layers-bi"],
)
def test_calls_at_once_on_cuda(monkeypatch, layers, bidirectional, steps, batch_first):
    """On CUDA the module runs both directions of a layer at once, and the layers of a
    one-directional model in a wavefront over chunks of steps, on side streams: output,
    h_n, c_n and every gradient against the float64 reference loop, the module called from a
    stream other than the default one; that the wavefront and the side stream ran; and
    LLTM_EXT_SEQUENCE_AT_ONCE=off, one call after another, agrees."""
    import lltm_ext.ops.lltm_sequence as seq_module

    ran = {"chunks": [], "at_once": 0}
    wave_chunks = seq_module._wave_chunks
    at_once = seq_module.LLTMSequence._directions_at_once

    def spy_chunks(*args):
        ran["chunks"].append(wave_chunks(*args))
        return ran["chunks"][-1]

    def spy_at_once(*args):
        ran["at_once"] += 1
        return at_once(*args)

    monkeypatch.setattr(seq_module, "_wave_chunks", spy_chunks)
    monkeypatch.setattr(seq_module.LLTMSequence, "_directions_at_once", staticmethod(spy_at_once))
    # Chunks however short their GPU time (these sizes are far below _WAVE_MIN_CHUNK_US's).
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_AT_ONCE_CHUNKS", "8")
    module = make(layers, bidirectional, "cuda", batch_first=batch_first)
    x = torch.randn(steps, 3, 3, device="cuda", dtype=F64, requires_grad=True)
    hx = state_of(module, 3, "cuda")
    inputs = x.transpose(0, 1) if batch_first else x
    wrt = (x, *hx, *module.parameters())
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        output, (h_n, c_n) = module(inputs, hx)
        if batch_first:
            output = output.transpose(0, 1)
        grads = grads_of((output, h_n, c_n), wrt)
    torch.cuda.current_stream().wait_stream(stream)
    if bidirectional:
        assert ran["at_once"] == layers and not ran["chunks"]
    else:
        assert ran["chunks"] == [min(8, steps // 32)] and ran["at_once"] == 0
    want = reference(module, x, hx)
    for got, ref in zip((output, h_n, c_n), want, strict=True):
        torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-12)
    for got, ref in zip(grads, grads_of(want, wrt), strict=True):
        torch.testing.assert_close(got, ref, rtol=1e-9, atol=1e-11)
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_AT_ONCE", "off")
    one_by_one = module(inputs, hx)
    assert ran["at_once"] == (layers if bidirectional else 0) and len(ran["chunks"]) <= 1
    first = one_by_one[0].transpose(0, 1) if batch_first else one_by_one[0]
    torch.testing.assert_close(first, output, rtol=1e-12, atol=1e-13)


@pytest.mark.cuda
@pytest.mark.parametrize(
    "layers, bidirectional, parts",
    [(2, False, 2), (2, True, 2), (4, False, 4)],
    ids=["wavefront", "bi", "wavefront-quarters"],
)
def test_shared_gpu_tiles_on_the_at_once_streams(monkeypatch, layers, bidirectional, parts):
    """The tiled kernels (forced) in float32 on the module's streams, where the planner takes tiles
    for 1 / parts of the SMs at small batches (LLTM_EXT_SEQUENCE_AT_ONCE_PARTS): their grid holds
    at most that share of the GPU there, and the layers (in a wavefront of two chunks, or both
    directions at once) give the float64 loop's output, final state and gradients within
    float32's reach: within 4x the error of a float32 loop of the pure cell against float64 (the
    gradients are sums over T x B terms of up to thousands; measured on the H200: at most 2.3x,
    or 2.7e-6 of the largest value, and the same to the bit with the calls one after another)."""
    import lltm_ext.ops.lltm_sequence as seq_module
    from lltm_ext._extension import load_extension

    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("the tiled kernels need an sm_90 GPU")
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_PATH", "tiled")
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_AT_ONCE_PARTS", str(parts))
    like = torch.empty(0, device="cuda")
    with torch.cuda.stream(seq_module._side_stream(like.device, 0, parts)):
        assert load_extension("lltm_sequence")._grid_share(like, 32, 17, 261) <= 1 / parts
    check_against_float64_and_a_loop(layers, bidirectional, batch=17, state=261)


@pytest.mark.cuda
@pytest.mark.parametrize("layers, bidirectional", [(2, False), (1, True)], ids=["wavefront", "bi"])
def test_shared_gpu_tiles_at_batches_of_up_to_128(layers, bidirectional):
    """On auto, at B = 98 (7 m-tiles) and S = 518, the module's streams take the tiled kernels'
    tile for half the SMs (64 rows x 16 columns: past the bound of a call alone, under the shared
    one), so that two layers' or directions' grids fit beside each other; the layers give the
    float64 loop's results within float32's reach."""
    import lltm_ext.ops.lltm_sequence as seq_module
    from lltm_ext._extension import load_extension

    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("the tiled kernels need an sm_90 GPU")
    like = torch.empty(0, device="cuda")
    ext = load_extension("lltm_sequence")
    assert ext._grid_share(like, 32, 98, 518) > 0.55  # a call alone: the whole GPU
    with torch.cuda.stream(seq_module._side_stream(like.device, 0, 2)):
        assert ext._grid_share(like, 32, 98, 518) <= 0.5
        assert ext._grid_share(like, 32, 129, 518) > 0.55  # 9 m-tiles: the whole GPU
    check_against_float64_and_a_loop(layers, bidirectional, batch=98, state=518)


def check_against_float64_and_a_loop(layers: int, bidirectional: bool, batch: int, state: int):
    """A float32 module of `layers` (T = 64, I = 3) on CUDA against the float64 loop: output,
    final state and gradients within 4x a float32 loop of the pure cell's error (see above)."""
    torch.manual_seed(3)
    module = lltm_ext.LLTMSequence(3, state, layers, bidirectional=bidirectional, device="cuda")
    x = torch.randn(64, batch, 3, device="cuda", requires_grad=True)
    output, (h_n, c_n) = module(x)
    wrt = (x, *module.parameters())
    grads = grads_of((output, h_n, c_n), wrt)
    exact = make(layers, bidirectional, "cuda", features=3, state=state)
    with torch.no_grad():
        for mine, theirs in zip(module.parameters(), exact.parameters(), strict=True):
            theirs.copy_(mine)
    x64 = x.detach().double().requires_grad_()
    want = reference(exact, x64)
    for got, ref in zip((output, h_n, c_n), want, strict=True):
        torch.testing.assert_close(got.double(), ref, rtol=2e-4, atol=2e-4)
    want_grads = grads_of(want, (x64, *exact.parameters()))
    x32 = x.detach().clone().requires_grad_()
    in_a_loop = reference(module, x32)
    loop_grads = grads_of(in_a_loop, (x32, *module.parameters()))
    for got, ref, loop in zip(
        (output, h_n, c_n, *grads), (*want, *want_grads), (*in_a_loop, *loop_grads), strict=True
    ):
        error, loop_error = ((t.double() - ref).abs().max().item() for t in (got, loop))
        # The floor, 1e-5 of the largest value, is float32's rounding over a hundred operations:
        # for a loop that happens to land closer; a race or a TF32 product is 1e-3 of it or more.
        assert error <= 4 * loop_error + 1e-5 * ref.abs().max().item(), (error, loop_error)


@pytest.mark.cuda
def test_wavefront_dropout_one_zeroes_the_inputs_of_later_layers():
    """dropout=1.0 in training within the wavefront (its chunks drop each layer's output on that
    layer's stream): the reference with zeros between the layers."""
    module = make(3, False, "cuda", dropout=1.0)
    x = torch.randn(96, 2, 3, device="cuda", dtype=F64)
    output, (h_n, c_n) = module.train()(x)
    want = reference(module, x, between=lambda _, out: torch.zeros_like(out))
    for got, ref in zip((output, h_n, c_n), want, strict=True):
        torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-12)


def test_no_wavefront_on_the_cpu_or_short_sequences():
    """The CPU runs one call after another; sequences of fewer than two chunks' steps are not
    cut."""
    import lltm_ext.ops.lltm_sequence as seq_module

    weights = torch.zeros(12, 7, dtype=F64)
    assert seq_module._wave_chunks(torch.zeros(300, 2, 3, dtype=F64), weights, 4, 2, 2) == 1
    assert not seq_module._runs_at_once(torch.zeros(3, 2, 3), [weights])
    if torch.cuda.is_available():
        on_gpu = weights.cuda()
        assert seq_module._wave_chunks(torch.zeros(63, 2, 3, device="cuda"), on_gpu, 4, 2, 2) == 1


@pytest.mark.parametrize(
    "steps, batch, inputs, state, layers, size, chunks",
    [
        (442, 20, 11, 80, 2, 4, 1),  # 2 us a step (the floor): 442 steps in all under 2 chunks
        (1000, 4, 32, 128, 2, 4, 4),  # 250 steps of 2 us
        (1000, 4, 32, 128, 4, 2, 4),
        (230, 44, 64, 358, 2, 4, 4),  # products of 161 MFLOP a step: 10.8 us
        (131, 25, 88, 480, 2, 4, 2),  # 11 us a step: 4 chunks of 32 steps would be 360 us
        (135, 508, 4, 529, 4, 4, 4),  # long steps: T / 32 chunks
        (4000, 508, 4, 529, 2, 2, 8),  # at most 8
        (253, 1, 253, 970, 4, 4, 6),  # B = 1: the weights' bytes, 20 us a step in float32
        (253, 1, 253, 970, 4, 2, 3),  # half the bytes in half precision
        (63, 4096, 64, 1024, 2, 4, 1),  # under two chunks of 32 steps
    ],
)
def test_wave_count_by_time(steps, batch, inputs, state, layers, size, chunks):
    """The wavefront cuts the most chunks (at most 8, of 32 steps or more) whose estimated GPU time
    a layer covers a chunk's host time: a step's time is the longest of a floor, its products' FLOP
    and its weights' bytes at fitted rates."""
    import lltm_ext.ops.lltm_sequence as seq_module

    assert seq_module._wave_count(steps, batch, inputs, state, layers, size) == chunks


@pytest.mark.cuda
def test_wave_chunks_follow_the_setting(monkeypatch):
    """LLTM_EXT_SEQUENCE_AT_ONCE_CHUNKS = N cuts min(N, T / 32) chunks whatever their time (1: no
    wavefront); unset, short chunks are not cut; a value outside 1..8 is an error that names the
    setting."""
    import lltm_ext.ops.lltm_sequence as seq_module

    weights = torch.zeros(12, 7, device="cuda")
    x = torch.zeros(300, 2, 3, device="cuda")
    monkeypatch.delenv("LLTM_EXT_SEQUENCE_AT_ONCE_CHUNKS", raising=False)
    assert seq_module._wave_chunks(x, weights, 4, 2, 2) == 1  # 300 steps of 2 us: 600 us in all
    for value, chunks in (("1", 1), ("3", 3), ("8", 8)):
        monkeypatch.setenv("LLTM_EXT_SEQUENCE_AT_ONCE_CHUNKS", value)
        assert seq_module._wave_chunks(x, weights, 4, 2, 2) == chunks
        assert seq_module._wave_chunks(x[:100], weights, 4, 2, 2) == min(chunks, 3)
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_AT_ONCE_CHUNKS", "9")
    with pytest.raises(RuntimeError, match="LLTM_EXT_SEQUENCE_AT_ONCE_CHUNKS"):
        seq_module._wave_chunks(x, weights, 4, 2, 2)


def test_wave_parts_follow_the_setting(monkeypatch):
    """A wavefront of L layers shares the GPU min(L, LLTM_EXT_SEQUENCE_AT_ONCE_PARTS) ways, 2
    unset; a value outside 2..4 is an error that names the setting."""
    import lltm_ext.ops.lltm_sequence as seq_module

    monkeypatch.delenv("LLTM_EXT_SEQUENCE_AT_ONCE_PARTS", raising=False)
    assert [seq_module._wave_parts(layers) for layers in (2, 3, 4)] == [2, 2, 2]
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_AT_ONCE_PARTS", "4")
    assert [seq_module._wave_parts(layers) for layers in (2, 3, 4, 6)] == [2, 3, 4, 4]
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_AT_ONCE_PARTS", "5")
    with pytest.raises(RuntimeError, match="LLTM_EXT_SEQUENCE_AT_ONCE_PARTS"):
        seq_module._wave_parts(4)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("layers, bidirectional", [(2, True), (1, False)], ids=["2bi", "1"])
def test_unbatched_input(device, layers, bidirectional):
    """(T, I) with h_0, c_0 (D * L, S): what the batch of one gives, without the batch dim."""
    module = make(layers, bidirectional, device)
    x = torch.randn(5, 3, device=device, dtype=F64, requires_grad=True)
    hx = state_of(module, 1, device, unbatched=True)
    output, (h_n, c_n) = module(x, hx)
    want_out, want_h, want_c = reference(module, x[:, None], (hx[0][:, None], hx[1][:, None]))
    torch.testing.assert_close(output, want_out[:, 0], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(h_n, want_h[:, 0], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(c_n, want_c[:, 0], rtol=1e-10, atol=1e-12)
    wrt = (x, *hx, *module.parameters())
    ref_outs = (want_out[:, 0], want_h[:, 0], want_c[:, 0])
    for got, ref in zip(grads_of((output, h_n, c_n), wrt), grads_of(ref_outs, wrt), strict=True):
        torch.testing.assert_close(got, ref, rtol=1e-9, atol=1e-11)
    none_given = module(x)
    ref_none = reference(module, x[:, None].detach())
    torch.testing.assert_close(none_given[0], ref_none[0][:, 0], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("device", devices())
def test_empty_sequence_returns_the_initial_state(device):
    module = make(2, True, device)
    hx = state_of(module, 3, device)
    output, (h_n, c_n) = module(torch.empty(0, 3, 3, device=device, dtype=F64), hx)
    assert output.shape == (0, 3, 8)
    assert torch.equal(h_n, hx[0]) and torch.equal(c_n, hx[1])


@pytest.mark.parametrize("device", devices())
def test_gradcheck(device):
    """torch.autograd.gradcheck of a two-layer bidirectional module in float64, batched with hx,
    and packed (unsorted lengths 3, 1, 2) with hx: input, h_0, c_0 and every parameter (packed:
    gradcheck's fast mode, a random projection of the Jacobian, as its full one takes seconds)."""
    module = make(2, True, device, features=2, state=2)
    params = dict(module.named_parameters())

    def run(inputs, h0, c0, weights):
        out, (h_n, c_n) = torch.func.functional_call(
            module, dict(zip(params, weights, strict=True)), (inputs, (h0, c0))
        )
        return (out.data if isinstance(out, PackedSequence) else out), h_n, c_n

    x = torch.randn(3, 2, 2, device=device, dtype=F64, requires_grad=True)
    h0, c0 = state_of(module, 2, device)
    weights = tuple(p.detach().clone().requires_grad_() for p in params.values())
    assert torch.autograd.gradcheck(lambda x, h0, c0, *w: run(x, h0, c0, w), (x, h0, c0, *weights))
    seqs = [torch.randn(n, 2, device=device, dtype=F64, requires_grad=True) for n in (3, 1, 2)]
    h0, c0 = state_of(module, 3, device)

    def packed(a, b, c, h0, c0, *w):
        return run(pack_sequence([a, b, c], enforce_sorted=False), h0, c0, w)

    assert torch.autograd.gradcheck(packed, (*seqs, h0, c0, *weights), fast_mode=True)


# --- packed sequences ------------------------------------------------------------------------


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("layers, bidirectional", CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize(
    "lengths",
    [(4, 1, 7, 7, 2, 4), (7, 5, 5, 1), (3,), (1, 1)],
    ids=["mixed", "sorted", "one", "ones"],
)
def test_packed_equals_each_sequence_alone(device, layers, bidirectional, lengths):
    """A PackedSequence (enforce_sorted=False; lengths 1 and T among them; a batch of one) gives
    each sequence's output as the reference gives it for that sequence alone (unpadded), h_n and
    c_n in the batch's own order from a given hx in that order; gradients of every sequence, hx
    and the parameters likewise; the same packing fields come back. A sorted batch packed with
    enforce_sorted=True (no indices) too."""
    module = make(layers, bidirectional, device)
    seqs = [torch.randn(n, 3, device=device, dtype=F64, requires_grad=True) for n in lengths]
    hx = state_of(module, len(seqs), device)
    packed = pack_sequence(seqs, enforce_sorted=False)
    output, (h_n, c_n) = module(packed, hx)
    assert isinstance(output, PackedSequence)
    assert output.batch_sizes is packed.batch_sizes
    assert output.sorted_indices is packed.sorted_indices
    assert output.unsorted_indices is packed.unsorted_indices
    padded, got_lengths = pad_packed_sequence(output)
    assert got_lengths.tolist() == list(lengths)
    ref_outs, ref_h, ref_c = [], [], []
    for i, seq in enumerate(seqs):
        state = (hx[0][:, i : i + 1], hx[1][:, i : i + 1])
        out, h, c = reference(module, seq[:, None], state)
        ref_outs.append(out[:, 0])
        ref_h.append(h[:, 0])
        ref_c.append(c[:, 0])
        torch.testing.assert_close(padded[: len(seq), i], out[:, 0], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(h_n, torch.stack(ref_h, 1), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(c_n, torch.stack(ref_c, 1), rtol=1e-10, atol=1e-12)
    # Gradients: the same weights on each step's output (the padded positions weigh nothing).
    gen = torch.Generator().manual_seed(3)
    g = torch.randn(padded.shape, generator=gen, dtype=F64).to(device)
    g_h, g_c = (torch.randn(h_n.shape, generator=gen, dtype=F64).to(device) for _ in "hc")
    wrt = (*seqs, *hx, *module.parameters())
    ours = torch.autograd.grad((padded * g).sum() + (h_n * g_h).sum() + (c_n * g_c).sum(), wrt)
    ref_loss = sum((o * g[: len(o), i]).sum() for i, o in enumerate(ref_outs))
    ref_loss = ref_loss + (torch.stack(ref_h, 1) * g_h).sum() + (torch.stack(ref_c, 1) * g_c).sum()
    for got, want in zip(ours, torch.autograd.grad(ref_loss, wrt), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-11)
    # Sorted by length and packed as such: no indices, the same values.
    order = sorted(range(len(seqs)), key=lambda i: -lengths[i])
    in_order = pack_sequence([seqs[i] for i in order])
    assert in_order.sorted_indices is None
    out_sorted, (h_sorted, _) = module(in_order, (hx[0][:, order], hx[1][:, order]))
    assert out_sorted.sorted_indices is None and out_sorted.unsorted_indices is None
    torch.testing.assert_close(pad_packed_sequence(out_sorted)[0], padded[:, order])
    torch.testing.assert_close(h_sorted, h_n[:, order])


@pytest.mark.parametrize("device", devices())
def test_packed_without_hx_and_batch_first_ignored(device):
    """hx None is zeros; a packed input's layout is its own (batch_first does not apply)."""
    module = make(2, True, device, batch_first=True)
    seqs = [torch.randn(n, 3, device=device, dtype=F64) for n in (2, 5, 3)]
    output, (h_n, _) = module(pack_sequence(seqs, enforce_sorted=False))
    padded, _ = pad_packed_sequence(output, batch_first=True)
    for i, seq in enumerate(seqs):
        out, h, _ = reference(module, seq[:, None])
        torch.testing.assert_close(padded[i, : len(seq)], out[:, 0], rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(h_n[:, i], h[:, 0], rtol=1e-10, atol=1e-12)


def test_packed_runs_no_padding(monkeypatch):
    """A packed forward makes one operator call per layer and direction over the packed rows
    themselves (no padding, no copy in the forward direction), with the batch of each step."""
    import lltm_ext.ops.lltm_sequence as module_file

    calls = []
    real = module_file.lltm_sequence_packed_op

    def spy(x, sizes, *args):
        calls.append((x, list(sizes)))
        return real(x, sizes, *args)

    monkeypatch.setattr(module_file, "lltm_sequence_packed_op", spy)
    module = lltm_ext.LLTMSequence(3, 4, 2, bidirectional=True)
    packed = pack_sequence([torch.randn(n, 3) for n in (6, 1, 4, 4)], enforce_sorted=False)
    module(packed)
    assert [sizes for _, sizes in calls] == [[4, 3, 3, 3, 1, 1]] * 4
    assert all(x.shape[0] == packed.data.shape[0] for x, _ in calls)
    assert calls[0][0] is packed.data  # layer 0, forward: the data itself


@pytest.mark.parametrize("device", devices())
def test_packed_under_autocast_equals_each_sequence_alone(device):
    """Under autocast (float32 module, input and hx) a packed batch gives each sequence what it
    gets run alone there, outputs, final state and gradients: the packed operator's autocast kernel
    rounds the operands once for all rows, and no state is rounded past h_0 (a stretch of steps
    whose start state were rounded again moved outputs by ~4e-4 here)."""
    torch.manual_seed(0)
    module = lltm_ext.LLTMSequence(8, 16, 2, bidirectional=True, device=device)
    seqs = [torch.randn(n, 8, device=device, requires_grad=True) for n in (9, 3, 6, 6, 1)]
    hx = tuple((0.5 * torch.randn(4, 5, 16, device=device)).requires_grad_() for _ in "hc")
    params = list(module.parameters())
    with torch.autocast(device, dtype=torch.bfloat16):
        out, (h_n, c_n) = module(pack_sequence(seqs, enforce_sorted=False), hx)
        padded, _ = pad_packed_sequence(out)
        alone = [
            module(q[:, None], (hx[0][:, i : i + 1], hx[1][:, i : i + 1]))
            for i, q in enumerate(seqs)
        ]
    assert out.data.dtype == h_n.dtype == c_n.dtype == torch.float32
    tol = {"rtol": 1e-4, "atol": 3e-5}
    for i, (o, (h, c)) in enumerate(alone):
        torch.testing.assert_close(padded[: len(seqs[i]), i], o[:, 0], **tol)
        torch.testing.assert_close(h_n[:, i], h[:, 0], **tol)
        torch.testing.assert_close(c_n[:, i], c[:, 0], **tol)
    wrt = (*seqs, *hx, *params)
    loss = padded.square().sum() + h_n.sum() + c_n.square().sum()
    ref = sum(o.square().sum() + h.sum() + c.square().sum() for o, (h, c) in alone)
    grads = zip(torch.autograd.grad(loss, wrt), torch.autograd.grad(ref, wrt), strict=True)
    for k, (got, want) in enumerate(grads):
        assert got.dtype == want.dtype == torch.float32
        if k < len(seqs) + 2 and device == "cpu":  # each row's gradient through its own cast
            torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-4)
        elif k < len(seqs) + 2:  # CUDA: a product's kernel and its order of sums depend on its
            # rows (a packed step has more than a sequence alone), so a bfloat16 result can round
            # an ulp apart; an input's gradient adds two directions' in bfloat16 (measured on the
            # H200: 3 of 48 elements 2^-9 apart, an ulp of an addend in [0.25, 0.5)); atol: an
            # ulp of an addend below 2
            torch.testing.assert_close(got, want, rtol=1e-3, atol=2**-7)
        else:  # the parameters': summed over all rows and rounded to bfloat16 (the cast's
            # backward) once, against once per sequence: bfloat16 apart
            assert (got - want).norm() <= 1e-2 * want.norm()


def packed_reference(data, sizes, weights, bias, h0, c0):
    """The packed operator's semantics by hand: each sequence j (rows j of the steps whose batch
    exceeds j) through a loop of the pure-PyTorch cell from its own state -> (output (N, S), h_n,
    c_n (B, S))."""
    offsets = [sum(sizes[:t]) for t in range(len(sizes))]
    out = [None] * data.shape[0]
    h_n, c_n = [], []
    for j in range(sizes[0]):
        h, c = h0[j : j + 1], c0[j : j + 1]
        for t in range(len(sizes)):
            if sizes[t] <= j:
                break
            h, c = lltm_reference(data[offsets[t] + j : offsets[t] + j + 1], weights, bias, h, c)
            out[offsets[t] + j] = h[0]
        h_n.append(h[0])
        c_n.append(c[0])
    return torch.stack(out), torch.stack(h_n), torch.stack(c_n)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [F64, torch.float32])
@pytest.mark.parametrize(
    ("state", "lengths"),
    [
        (5, [7, 7, 5, 2, 2, 2, 1]),
        (48, [9, 8, 8, 6, 5, 3, 3, 2] * 3),
        (160, [12, 11, 9, 9, 4, 4, 4, 1] * 5),
        (300, [6, 5, 5, 5, 2, 1]),
    ],
)
def test_packed_operator_against_the_cell_loop(device, dtype, state, lengths):
    """lltm_sequence_packed against each sequence's loop of the pure-PyTorch cell in float64,
    outputs, final states and every gradient; batches that shrink step by step and in long
    stretches (on CUDA each stretch of one batch runs on the kernels planned for it)."""
    torch.manual_seed(state)
    from lltm_ext.ops.lltm_sequence import lltm_sequence_packed_op as op

    features, batch = 6, len(lengths)
    sizes = [sum(n > t for n in lengths) for t in range(max(lengths))]
    rows = sum(sizes)
    scale = state**-0.5

    def leaf(*shape, s=1.0):
        return (s * torch.randn(*shape, dtype=F64)).requires_grad_()

    args64 = [
        leaf(rows, features),
        leaf(3 * state, state + features, s=scale),
        leaf(3 * state, s=scale),
        leaf(batch, state, s=0.5),
        leaf(batch, state, s=0.5),
    ]
    args = [a.detach().to(device, dtype).requires_grad_() for a in args64]
    got = op(args[0], sizes, *args[1:])
    want = packed_reference(args64[0], sizes, *args64[1:])
    seeds = [torch.randn_like(w) for w in want]
    tol = {"rtol": 1e-10, "atol": 1e-12} if dtype == F64 else {"rtol": 1e-4, "atol": 1e-5}
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.double().cpu(), w, **tol)
    got_grads = torch.autograd.grad(got, args, [s.to(device, dtype) for s in seeds])
    want_grads = torch.autograd.grad(want, args64, seeds)
    for g, w in zip(got_grads, want_grads, strict=True):
        error = (g.double().cpu() - w).norm() / w.norm()
        assert error <= (1e-12 if dtype == F64 else 1e-5), error


def test_packed_operator_under_autocast():
    """The packed operator's autocast kernel: with a float32 state, exactly what the operator gives
    below autocast on the operands rounded to bfloat16 (one cast of all rows) with TF32 products;
    with a bfloat16 state, bfloat16 throughout."""
    from lltm_ext.ops.lltm_sequence import lltm_sequence_packed_op as op

    torch.manual_seed(0)
    sizes = [3, 3, 3, 2, 1, 1]
    data, weights, bias = torch.randn(13, 3), torch.randn(12, 7), torch.randn(12)
    state = [torch.randn(3, 4) for _ in "hc"]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = op(data, sizes, weights, bias, *state)
        got_half = op(data, sizes, weights, bias, *(t.bfloat16() for t in state))

    def rounded(t):
        return t.bfloat16().float()

    want = op(rounded(data), sizes, rounded(weights), rounded(bias), rounded(state[0]), state[1])
    for g, w in zip(got, want, strict=True):
        assert g.dtype == torch.float32
        torch.testing.assert_close(g, w, rtol=0, atol=0)
    half = [t.bfloat16() for t in (data, weights, bias, *state)]
    want_half = op(half[0], sizes, *half[1:])
    for g, w in zip(got_half, want_half, strict=True):
        assert g.dtype == torch.bfloat16
        torch.testing.assert_close(g, w, rtol=0, atol=0)


def _packed_mixed_operands(device, lengths, features, state, lower, seed=0):
    """Packed rows of `lengths` (sorted longest first), weights and bias in `lower`, a float32
    state: the packed operator's mixed call -> (data, sizes, weights, bias, h0, c0), leaves."""
    torch.manual_seed(seed)
    sizes = [sum(n > t for n in lengths) for t in range(max(lengths))]
    data = torch.randn(sum(sizes), features, device=device)
    weights = torch.randn(3 * state, state + features, device=device) / (state + features) ** 0.5
    bias = 0.1 * torch.randn(3 * state, device=device)
    h0 = 0.5 * torch.randn(len(lengths), state, device=device)
    c0 = torch.randn(len(lengths), state, device=device)
    return (
        data.to(lower).requires_grad_(),
        sizes,
        weights.to(lower).requires_grad_(),
        bias.to(lower).requires_grad_(),
        h0.requires_grad_(),
        c0.requires_grad_(),
    )


@pytest.mark.parametrize("lower", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("given", [True, False], ids=["state", "no-state"])
def test_packed_mixed_call_is_the_sequences_on_the_cpu(lower, given):
    """Half data, weights and bias with a float32 state: on the CPU the packed operator runs the
    sequence's mixed loop, so a batch of equal lengths gives the unpacked mixed call's bits, forward
    and every gradient."""
    T, B, features, state = 7, 12, 10, 96
    data, sizes, weights, bias, h0, c0 = _packed_mixed_operands(
        "cpu", [T] * B, features, state, lower
    )
    hs = (h0, c0) if given else (None, torch.zeros(B, state))
    packed = torch.ops.lltm_ext.lltm_sequence_packed(data, sizes, weights, bias, *hs)
    x = data.view(T, B, features)
    alone = torch.ops.lltm_ext.lltm_sequence(x, weights, bias, *hs)
    assert [t.dtype for t in packed] == [torch.float32] * 3
    for got, want in zip(packed, alone, strict=True):
        assert torch.equal(got.view_as(want), want)
    probes = [torch.randn_like(t) for t in packed]
    wrt = [t for t in (data, weights, bias, *hs) if t is not None and t.requires_grad]
    grads = torch.autograd.grad(packed, wrt, probes)
    want = torch.autograd.grad(
        alone, wrt, [p.view_as(a) for p, a in zip(probes, alone, strict=True)]
    )
    for g, w, leaf in zip(grads, want, wrt, strict=True):
        assert g.dtype == leaf.dtype and torch.equal(g, w)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("lower", [torch.bfloat16, torch.float16])
def test_packed_mixed_call_within_the_loops_error(monkeypatch, device, lower):
    """The packed mixed call over uneven lengths against each sequence's loop of the pure cell in
    float64 and under autocast: outputs, final state and the weights' and bias's gradients within
    2x that loop's own error (on the CPU the mixed loop; on CUDA, and on the CPU with
    LLTM_EXT_SEQUENCE_MIXED=off, the float32 sequence on the operands in float32)."""
    lengths = [11, 11, 9, 8, 8, 6, 5, 5, 3, 2, 2, 1] * 2
    leaves = _packed_mixed_operands(device, lengths, 9, 80, lower)
    data, sizes, weights, bias, h0, c0 = leaves
    tensors = (data, weights, bias, h0, c0)
    leaves64 = [t.detach().double().cpu().requires_grad_() for t in tensors]
    want = packed_reference(leaves64[0], sizes, *leaves64[1:])
    with torch.autocast(device, dtype=lower):
        # the loop on the same values, as float32 tensors (autocast rounds its products' operands)
        loop = packed_reference(data.float(), sizes, weights.float(), bias.float(), h0, c0)
    probes = [torch.randn_like(w) for w in want]
    g64 = torch.autograd.grad(want, leaves64, probes)
    g_loop = torch.autograd.grad(loop, (weights, bias), [p.to(device).float() for p in probes])
    for mixed in ("auto", "off") if device == "cpu" else ("auto",):
        monkeypatch.setenv("LLTM_EXT_SEQUENCE_MIXED", mixed)
        got = torch.ops.lltm_ext.lltm_sequence_packed(data, sizes, weights, bias, h0, c0)
        assert [t.dtype for t in got] == [torch.float32] * 3
        for g, w, lp in zip(got, want, loop, strict=True):
            err, loop_err = (g.double().cpu() - w).abs().max(), (lp.double().cpu() - w).abs().max()
            assert err <= 2 * loop_err, (mixed, err, loop_err)
        grads = torch.autograd.grad(got, tensors, [p.to(device).float() for p in probes])
        assert [g.dtype for g in grads] == [t.dtype for t in tensors]
        for g, w, lp in zip(grads[1:3], g64[1:3], g_loop, strict=True):
            err, loop_err = (g.double().cpu() - w).abs().max(), (lp.double().cpu() - w).abs().max()
            assert err <= 2 * loop_err, (mixed, err, loop_err)
        for g, w in zip(grads[3:], g64[3:], strict=True):
            torch.testing.assert_close(g.double().cpu(), w, rtol=0.05, atol=0.05 * w.abs().max())


@pytest.mark.parametrize("lower", [torch.bfloat16, torch.float16])
def test_packed_under_cpu_autocast_runs_mixed_where_it_pays(monkeypatch, lower):
    """CPU autocast with a float32 state: past a step's product of 2^17 multiply-adds (rows per
    step on average) the packed operator's autocast kernel makes the mixed call (the same bits as
    by hand: the operands in `lower`, the state float32); below it, or with
    LLTM_EXT_SEQUENCE_MIXED=off, the float32 sequence on the rounded operands."""
    op = torch.ops.lltm_ext.lltm_sequence_packed
    leaves = _packed_mixed_operands("cpu", [9, 8, 8, 7, 4, 4, 3, 1] * 3, 6, 96, torch.float32)
    data, sizes, weights, bias, h0, c0 = leaves
    for given in ((h0, c0), (None, None)):
        with torch.autocast("cpu", dtype=lower):
            got = op(data, sizes, weights, bias, *given)
        by_hand = op(
            data.to(lower),
            sizes,
            weights.to(lower),
            bias.to(lower),
            given[0],
            torch.zeros(24, 96) if given[1] is None else given[1],
        )
        for g, w in zip(got, by_hand, strict=True):
            assert g.dtype == torch.float32 and torch.equal(g, w)
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_MIXED", "off")
    with torch.autocast("cpu", dtype=lower):
        got = op(data, sizes, weights, bias, h0, c0)

    def rounded(t):
        return t.to(lower).float()

    want = op(rounded(data), sizes, rounded(weights), rounded(bias), rounded(h0), c0)
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w)


@pytest.mark.parametrize("device", devices())
def test_packed_mixed_call_opcheck_and_dtypes_checked(device):
    """The packed operators' mixed call through torch.library.opcheck (fake kernels: float32
    outputs and state gradients, half gradients of data, weights and bias); a state in neither
    data's dtype nor float32 named."""
    ops = torch.ops.lltm_ext
    data, sizes, weights, bias, h0, c0 = (
        t.detach() if isinstance(t, torch.Tensor) else t
        for t in _packed_mixed_operands(device, [4, 3, 3, 1], 3, 4, torch.bfloat16)
    )
    args = [data, sizes, weights, bias, h0, c0]
    torch.library.opcheck(ops.lltm_sequence_packed_forward.default, args)
    grad_args = [t.clone().requires_grad_() if isinstance(t, torch.Tensor) else t for t in args]
    torch.library.opcheck(ops.lltm_sequence_packed.default, grad_args)
    output, h_n, c_n, cells, gates = ops.lltm_sequence_packed_forward(*args)
    assert output.dtype == cells.dtype == gates.dtype == h_n.dtype == torch.float32
    grads = [torch.randn_like(output), torch.randn_like(h_n), torch.randn_like(c_n)]
    saved = [data, sizes, weights, bias, h0, output, cells, gates]
    torch.library.opcheck(ops.lltm_sequence_packed_backward.default, [*grads, *saved, [True] * 5])
    with pytest.raises(RuntimeError, match=r"state \(h_0, c_0\) is Half and `data` is BFloat16"):
        ops.lltm_sequence_packed(data, sizes, weights, bias, h0.half(), c0.half())
    with pytest.raises(RuntimeError, match=r"`h_0` is Double and the state is Float"):
        ops.lltm_sequence_packed(data, sizes, weights, bias, h0.double(), c0)


def test_bad_packed_sequences():
    module = lltm_ext.LLTMSequence(3, 4)
    data = torch.randn(5, 3)
    with pytest.raises(ValueError, match=r"`batch_sizes` must not increase.*\[2, 3\]"):
        module(PackedSequence(data, torch.tensor([2, 3])))
    with pytest.raises(ValueError, match=r"add up to `data`'s 5 rows.*\[2, 2\] \(sum 4\)"):
        module(PackedSequence(data, torch.tensor([2, 2])))
    with pytest.raises(ValueError, match=r"must have 1-D `batch_sizes`"):
        module(PackedSequence(data, torch.tensor([[3, 2]])))
    with pytest.raises(RuntimeError, match=r"`data` must have shape \[rows, 3\].*\[5, 2\]"):
        module(PackedSequence(torch.randn(5, 2), torch.tensor([3, 2])))
    with pytest.raises(RuntimeError, match=r"`h_0` must have shape \[1, 3, 4\].*\[1, 2, 4\]"):
        module(PackedSequence(data, torch.tensor([3, 2])), (torch.zeros(1, 2, 4),) * 2)


# --- dropout, bias=False ---------------------------------------------------------------------


def test_dropout_between_layers_in_training_only():
    module = make(3, True, "cpu", dropout=0.5)
    x = torch.randn(4, 2, 3, dtype=F64)
    module.eval()
    torch.testing.assert_close(module(x)[0], reference(module, x)[0], rtol=1e-10, atol=1e-12)
    module.train()
    torch.manual_seed(7)
    output, (h_n, _) = module(x)
    # The same masks, drawn in the same order: F.dropout on each layer's output but the last's.
    torch.manual_seed(7)
    want, want_h, _ = reference(module, x, between=lambda _, out: F.dropout(out, 0.5))
    torch.testing.assert_close(output, want, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(h_n, want_h, rtol=1e-10, atol=1e-12)
    assert not torch.allclose(output, reference(module, x)[0])  # dropout did something


def test_dropout_one_zeroes_the_inputs_of_later_layers():
    """dropout=1.0 in training: layers 1 and up see zeros (and only them); eval mode: no dropout.
    No random masks to match: what the module gives is the reference with zero inputs there."""
    module = make(2, True, "cpu", dropout=1.0)
    x = torch.randn(4, 2, 3, dtype=F64)
    output, (h_n, c_n) = module.train()(x)
    want = reference(module, x, between=lambda _, out: torch.zeros_like(out))
    for got, ref in zip((output, h_n, c_n), want, strict=True):
        torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-12)
    assert output.abs().min() > 0  # the last layer's output is not dropped
    torch.testing.assert_close(h_n[:2], reference(module, x)[1][:2])  # layer 0 is unaffected
    evaluated = module.eval()(x)[0]
    torch.testing.assert_close(evaluated, reference(module, x)[0], rtol=1e-10, atol=1e-12)
    assert not torch.allclose(evaluated, output)


@pytest.mark.parametrize("device", devices())
def test_bias_false(device):
    """No bias parameters (nor state_dict entries, nor buffers); the reference with a zero bias,
    forward and gradients; a packed input too."""
    module = make(2, True, device, bias=False)
    assert [n for n, _ in module.named_parameters()] == [w for w, _ in names(2, 2)]
    assert list(module.state_dict()) == [w for w, _ in names(2, 2)]
    assert list(module.buffers()) == [] and module.bias_l0 is None
    assert all(len(p) == 1 for p in module.all_weights)
    single = lltm_ext.LLTMSequence(3, 4, bias=False)
    assert single.bias is None and list(single.state_dict()) == ["weights"]
    x = torch.randn(5, 2, 3, device=device, dtype=F64, requires_grad=True)
    output, (h_n, c_n) = module(x)
    want = reference(module, x)
    for got, ref in zip((output, h_n, c_n), want, strict=True):
        torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-12)
    wrt = (x, *module.parameters())
    for got, ref in zip(grads_of((output, h_n, c_n), wrt), grads_of(want, wrt), strict=True):
        torch.testing.assert_close(got, ref, rtol=1e-9, atol=1e-11)
    seqs = [x[:3, 0], x[:, 1]]
    packed_out, (packed_h, _) = module(pack_sequence(seqs, enforce_sorted=False))
    torch.testing.assert_close(pad_packed_sequence(packed_out)[0][:, 1], want[0][:, 1])
    torch.testing.assert_close(packed_h[:, 1], want[1][:, 1])


# --- outputs, errors, torch.compile ----------------------------------------------------------


def test_outputs_are_new_tensors():
    """No output is a view (FSDP2 warns of views among a module's outputs): batched, batch_first,
    unbatched, packed."""
    x = torch.randn(4, 2, 3)
    for module, inputs in (
        (lltm_ext.LLTMSequence(3, 4), x),
        (lltm_ext.LLTMSequence(3, 4, batch_first=True), x[:1]),  # B = 1: a transpose is contiguous
        (lltm_ext.LLTMSequence(3, 4, 2, bidirectional=True, batch_first=True), x),
        (lltm_ext.LLTMSequence(3, 4), x[:, 0]),
        (lltm_ext.LLTMSequence(3, 4, 2, bidirectional=True), x[:, 0]),
        (lltm_ext.LLTMSequence(3, 4), pack_sequence([x[:, 0], x[:2, 1]])),
    ):
        output, (h_n, c_n) = module(inputs)
        data = output.data if isinstance(output, PackedSequence) else output
        assert data._base is None and h_n._base is None and c_n._base is None, module


def test_bad_inputs_and_states():
    module = lltm_ext.LLTMSequence(3, 5, 2)
    x = torch.randn(6, 4, 3)
    with pytest.raises(
        RuntimeError, match=r"`input` must have shape \[seq_len, batch, 3\].*\[6, 4, 2\]"
    ):
        module(torch.randn(6, 4, 2))
    with pytest.raises(RuntimeError, match=r"`input` must have shape \[seq_len, 3\].*\[6, 2\]"):
        module(torch.randn(6, 2))
    with pytest.raises(RuntimeError, match=r"`input` must have shape \[batch, seq_len, 3\]"):
        lltm_ext.LLTMSequence(3, 5, batch_first=True)(torch.randn(4, 6, 2))
    with pytest.raises(ValueError, match=r"`input` must be 3-D \(seq_len, batch, input_size\).*4"):
        module(torch.randn(6, 4, 3, 1))
    with pytest.raises(ValueError, match=r"3-D \(batch, seq_len, input_size\).*list"):
        lltm_ext.LLTMSequence(3, 5, batch_first=True)([1.0])
    good = torch.zeros(2, 4, 5)
    message = r"`h_0` must have shape \[2, 4, 5\] \(num_layers \* num_directions, batch, hidden"
    for bad in (
        torch.zeros(4, 5),
        torch.zeros(1, 4, 5),
        torch.zeros(2, 3, 5),
        torch.zeros(2, 4, 6),
    ):
        with pytest.raises(
            RuntimeError, match=message + rf".*{list(bad.shape)}".replace("[", r"\[")
        ):
            module(x, (bad, good))
    with pytest.raises(RuntimeError, match=r"`c_0` must have shape \[2, 4, 5\].*\[2, 4\]"):
        module(x, (good, good[:, :, 0]))
    with pytest.raises(RuntimeError, match=r"`h_0` must have shape \[2, 5\] \(num_layers \* num_"):
        module(x[:, 0], (good, good))  # unbatched input: a 3-D state
    with pytest.raises(TypeError, match=r"`hx` must be None or a pair \(h_0, c_0\).*tensor"):
        module(x, good)
    with pytest.raises(TypeError, match=r"`h_0` must be a tensor, but got int"):
        module(x, (0, good))
    with pytest.raises(RuntimeError, match=r"one dtype"):  # the operator's own checks remain
        module(x, (good.double(), good.double()))


@pytest.mark.parametrize("backend", ["aot_eager"])
def test_torch_compile_fullgraph(backend):
    """A two-layer bidirectional batch_first module with hx under torch.compile(fullgraph=True):
    the eager loss and gradients of input, hx and the parameters."""
    module = lltm_ext.LLTMSequence(3, 4, 2, bidirectional=True, batch_first=True)
    x = torch.randn(2, 5, 3, requires_grad=True)
    h0, c0 = (torch.randn(4, 2, 4, requires_grad=True) for _ in "hc")

    def loss_fn(x, h0, c0):
        output, (h_n, c_n) = module(x, (h0, c0))
        return (output * 2).sum() + h_n.square().sum() + c_n.sum()

    assert_compiled_matches_eager(
        loss_fn, (x, h0, c0), backend, wrt=(x, h0, c0, *module.parameters())
    )


@pytest.mark.parametrize("backend", ["aot_eager"])
def test_packed_operator_torch_compile_fullgraph(backend):
    """The packed operator under torch.compile(fullgraph=True) (its fake kernels: shapes from
    batch_sizes): the eager loss and gradients of data, weights, bias and the state."""
    from lltm_ext.ops.lltm_sequence import lltm_sequence_packed_op as op

    sizes = [3, 3, 2, 1]
    args = [torch.randn(*shape, requires_grad=True) for shape in ((9, 3), (12, 7), (12,))]
    args += [torch.randn(3, 4, requires_grad=True) for _ in "hc"]

    def loss_fn(data, weights, bias, h0, c0):
        output, h_n, c_n = op(data, sizes, weights, bias, h0, c0)
        return output.square().sum() + h_n.sum() + (c_n * 3).sum()

    assert_compiled_matches_eager(loss_fn, args, backend)


@pytest.mark.parametrize("device", devices())
def test_packed_operators_opcheck(device):
    """torch.library.opcheck over the packed operators: schema, fake kernels (shapes from
    batch_sizes), autograd registration; with a state and with None, every backward mask."""
    ops = torch.ops.lltm_ext
    sizes = [3, 3, 2, 1]
    torch.manual_seed(0)
    data, weights, bias = (torch.randn(*s, device=device) for s in ((9, 3), (12, 7), (12,)))
    state = [torch.randn(3, 4, device=device) for _ in "hc"]
    for h0, c0 in (state, (None, None)):
        args = [data, sizes, weights, bias, h0, c0]
        grad_args = [t.requires_grad_() if isinstance(t, torch.Tensor) else t for t in args]
        torch.library.opcheck(ops.lltm_sequence_packed.default, grad_args)
        detached = [t.detach() if isinstance(t, torch.Tensor) else t for t in args]
        torch.library.opcheck(ops.lltm_sequence_packed_forward.default, detached)
        output, h_n, c_n, cells, gates = ops.lltm_sequence_packed_forward(*detached)
        grads = [torch.randn_like(output), torch.randn_like(h_n), torch.randn_like(c_n)]
        saved = [detached[0], sizes, detached[2], detached[3], detached[4], output, cells, gates]
        masks = ([True] * 5, [False, True, True, False, False], [True, False, False, True, True])
        for mask in masks:
            torch.library.opcheck(ops.lltm_sequence_packed_backward.default, [*grads, *saved, mask])


def test_bad_packed_operator_arguments():
    """The packed operator's checks name its own arguments (data, batch_sizes, the state)."""
    op = torch.ops.lltm_ext.lltm_sequence_packed
    data, weights, bias = torch.randn(9, 3), torch.randn(12, 7), torch.randn(12)
    sizes = [3, 3, 2, 1]
    bad = [
        ((torch.randn(9), sizes, weights, bias), r"`data` must be 2-D .*shape \[9\]"),
        ((torch.randn(9, 4), sizes, weights, bias), r"`data` must have shape \[rows, 3\]"),
        ((data.double(), sizes, weights, bias), r"one dtype.*`weights` is Float and `data`"),
        ((data, sizes, weights, torch.randn(11)), r"`bias` must have shape \[12\] or \[1, 12\]"),
        ((data, [3, 3, 2], weights, bias), r"add up to `data`'s 9 rows.*\[3, 3, 2\] \(sum 8\)"),
        ((data, [2, 3, 3, 1], weights, bias), r"non-increasing.*\[2, 3, 3, 1\] \(sum 9\)"),
        ((data, [9, 0], weights, bias), r"positive.*\[9, 0\]"),
        ((data, [], weights, bias), r"at least one step"),
        ((data, sizes, weights, bias, torch.randn(2, 4)), r"`h_0` must have shape \[3, 4\]"),
        (
            (data, sizes, weights, bias, None, torch.randn(3, 4).double()),
            r"state \(h_0, c_0\) is Double and `data` is Float",
        ),
        ((data.long(), sizes, weights.long(), bias.long()), r"`data` must have a floating-point"),
    ]
    for args, message in bad:
        with pytest.raises(RuntimeError, match=message):
            op(*args)
