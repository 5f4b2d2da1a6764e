"""LLTM over whole sequences (lltm_ext.lltm_sequence, LLTMSequence): outputs, final state and all
gradients (backward through time) vs a Python loop of the float64 pure-PyTorch cell, on every
device and dtype; gradcheck, opcheck, torch.compile, the module, precision and bad input."""

import contextlib
import copy
import math

import pytest
import torch
from helpers import assert_close, assert_compiled_matches_eager, device_dtypes, devices

import lltm_ext
from lltm_ext._extension import load_extension
from lltm_ext.ops.lltm import lltm_loop, lltm_reference
from lltm_ext.ops.lltm_sequence import lltm_sequence_packed_op

_ops = torch.ops.lltm_ext

# (T, B, I, S): odd, one of each, empty sequence, empty batch, no input features, S past a block;
# on CUDA, partial tiles of the fused step kernels in both dimensions (B = 19, S = 45), and S =
# 300 past their limit (kFusedStepMaxState: cuBLAS and the gate kernels per step).
SIZES = [
    (5, 4, 3, 6),
    (1, 1, 1, 1),
    (0, 3, 2, 4),
    (4, 0, 3, 5),
    (3, 2, 0, 4),
    (9, 5, 33, 17),
    (4, 19, 5, 45),
    (3, 5, 7, 300),
]


@contextlib.contextmanager
def matmul_tf32(allow: bool, rnn: str | None = None):
    """torch.backends.cuda.matmul.allow_tf32 (which lltm_sequence follows) set for the block, and
    torch.backends.cudnn.rnn.fp32_precision too when `rnn` is given ("ieee" or "tf32")."""
    matmul, cudnn_rnn = torch.backends.cuda.matmul, torch.backends.cudnn.rnn
    old_allow, old_rnn = matmul.allow_tf32, cudnn_rnn.fp32_precision
    matmul.allow_tf32 = allow
    if rnn is not None:
        cudnn_rnn.fp32_precision = rnn
    try:
        yield
    finally:
        matmul.allow_tf32 = old_allow
        cudnn_rnn.fp32_precision = old_rnn


@pytest.fixture(autouse=True)
def full_float32():
    """Full float32 products (torch's default, pinned in case the environment changed it):
    tolerances below are float32's; test_cuda_float32_follows_matmul_precision covers TF32."""
    with matmul_tf32(False):
        yield


def make_args(steps, batch, features, state, device, dtype, bias_2d=False):
    """Random (input (T, B, I), weights, bias, h0, c0) requiring grad; weights scaled as in LLTM."""
    stdv = 1.0 / math.sqrt(max(state, 1))
    tensors = [
        torch.randn(steps, batch, features),
        torch.rand(3 * state, features + state) * 2 * stdv - stdv,
        torch.rand((1, 3 * state) if bias_2d else (3 * state,)) * 2 * stdv - stdv,
        torch.randn(batch, state),
        torch.randn(batch, state),
    ]
    return [t.to(device=device, dtype=dtype).requires_grad_() for t in tensors]


def reference(args, grads):
    """(output, h_n, c_n) and the five gradients of a loop of the float64 pure-PyTorch cell."""
    ref_args = [a.detach().cpu().double().requires_grad_() for a in args]
    x, w, b, h, c = ref_args
    steps = []
    for t in range(x.shape[0]):
        h, c = lltm_reference(x[t], w, b, h, c)
        steps.append(h)
    output = torch.stack(steps) if steps else x.new_empty((0, *h.shape))
    outs = (output, h * 1, c * 1)
    # An empty output (T = 0) is a leaf of no graph: only the outputs that need a gradient.
    pairs = [(o, g.cpu().double()) for o, g in zip(outs, grads, strict=True) if o.requires_grad]
    d = torch.autograd.grad(
        [o for o, _ in pairs], ref_args, [g for _, g in pairs], allow_unused=True
    )
    d = [torch.zeros_like(a) if g is None else g for g, a in zip(d, ref_args, strict=True)]
    return outs, d


@pytest.mark.parametrize("device,dtype", device_dtypes())
@pytest.mark.parametrize("size", SIZES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("bias_2d", [False, True], ids=["bias1d", "bias2d"])
def test_matches_loop_of_reference(device, dtype, size, bias_2d):
    check_against_reference(size, device, dtype, bias_2d)


def check_against_reference(size, device, dtype, bias_2d=False):
    """lltm_sequence's outputs and five gradients for (T, B, I, S) vs the float64 loop; the
    weights' and bias's gradients are sums over T * B rows, whose rounding grows with them."""
    args = make_args(*size, device, dtype, bias_2d)
    output, (h_n, c_n) = lltm_ext.lltm_sequence(args[0], args[1], args[2], (args[3], args[4]))
    assert output.shape == (size[0], size[1], size[3])
    assert output.dtype == dtype and output.device.type == device
    grads = [torch.randn_like(output), torch.randn_like(h_n), torch.randn_like(c_n)]
    ours = torch.autograd.grad((output, h_n, c_n), args, grads, allow_unused=True)
    ref_outs, ref_grads = reference(args, grads)
    # Low precision: rounding at every step compounds over T steps (and over T * B rows for the
    # weight gradients), as it does in a loop of the cell.
    scale = 1.0 if dtype in (torch.float32, torch.float64) else 4.0
    for got, want in zip((output, h_n, c_n), ref_outs, strict=True):
        assert_close(got, want, dtype, scale)
    names = ["input", "weights", "bias", "h0", "c0"]
    rows_scale = 8 if size[0] * size[1] <= 256 else 32
    for name, got, want, arg in zip(names, ours, ref_grads, args, strict=True):
        assert got is not None, name
        assert got.shape == arg.shape and got.dtype == dtype, name
        assert_close(got, want, dtype, scale * rows_scale)


# Which of (input, weights, bias, h0, c0) require grad: the backward computes only their
# gradients (the others' products are skipped), and the rest must still be right.
SUBSETS = [
    (False, True, True, False, False),  # a first layer from a state of zeros
    (True, False, False, False, False),
    (False, False, False, True, True),
    (True, True, False, False, True),
]


@pytest.mark.parametrize("device,dtype", device_dtypes())
@pytest.mark.parametrize("size", [(5, 4, 3, 6), (0, 3, 2, 4), (4, 19, 5, 45), (3, 5, 7, 300)])
@pytest.mark.parametrize(
    "wanted", SUBSETS, ids=lambda w: "".join("xwbhc"[i] for i in range(5) if w[i])
)
@pytest.mark.parametrize("final_grads", [False, True], ids=["output_only", "with_final_state"])
def test_gradients_of_a_subset(device, dtype, size, wanted, final_grads):
    """Gradients when only some arguments require them, from the output alone (h_n's and c_n's
    gradients undefined) or from all three, against the float64 loop."""
    args = make_args(*size, device, dtype)
    args = [a.detach().requires_grad_(w) for a, w in zip(args, wanted, strict=True)]
    output, (h_n, c_n) = lltm_ext.lltm_sequence(args[0], args[1], args[2], (args[3], args[4]))
    grads = [torch.randn_like(output), torch.randn_like(h_n), torch.randn_like(c_n)]
    if not final_grads:
        grads[1] = torch.zeros_like(h_n)
        grads[2] = torch.zeros_like(c_n)
    outs = (output, h_n, c_n) if final_grads else (output,)
    needing = [a for a in args if a.requires_grad]
    if size[0] == 0 and not final_grads:  # an empty output is in no graph
        return
    ours = torch.autograd.grad(outs, needing, grads[: len(outs)], allow_unused=True)
    _, ref_grads = reference([a.detach().requires_grad_() for a in args], grads)
    scale = 1.0 if dtype in (torch.float32, torch.float64) else 4.0
    rows_scale = 8 if size[0] * size[1] <= 256 else 32
    wanted_refs = [r for r, w in zip(ref_grads, wanted, strict=True) if w]
    for got, want, arg in zip(ours, wanted_refs, needing, strict=True):
        got = torch.zeros_like(arg) if got is None else got
        assert got.shape == arg.shape and got.dtype == dtype
        assert_close(got, want, dtype, scale * rows_scale)


@pytest.mark.parametrize("device", devices())
def test_equals_loop_of_lltm_cell(device):
    """The same values as a Python loop of lltm_ext.lltm (float64: to rounding)."""
    x, w, b, h, c = make_args(6, 3, 4, 5, device, torch.float64)
    output, (h_n, _) = lltm_ext.lltm_sequence(x, w, b, (h, c))
    loop = lltm_loop(lltm_ext.lltm, x, w, b, h, c)
    torch.testing.assert_close(output, loop, rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(h_n, loop[-1], rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("batch_first", [False, True], ids=["time_first", "batch_first"])
def test_state_none_and_batch_first(device, batch_first):
    x, w, b, _, _ = make_args(4, 3, 2, 5, device, torch.float64)
    zeros = torch.zeros(3, 5, device=device, dtype=torch.float64)
    xin = x.transpose(0, 1) if batch_first else x
    output, (h_n, c_n) = lltm_ext.lltm_sequence(xin, w, b, batch_first=batch_first)
    loop = lltm_loop(lltm_reference, x, w, b, zeros, zeros)
    torch.testing.assert_close(output, loop.transpose(0, 1) if batch_first else loop)
    torch.testing.assert_close(h_n, loop[-1])
    (output.sum() + c_n.sum()).backward()
    assert x.grad.shape == x.shape and w.grad.shape == w.shape


# Each path that runs the steps, with its settings, and a (T, B, I, S) where it applies: the
# zero state None is read as zeros by its kernels (no tensor of zeros made), and the final state's
# gradients None likewise (grad_h_n, grad_c_n: the output's alone requires them).
ZERO_STATE_PATHS = {
    "auto": ({}, (5, 3, 4, 40)),
    "small": ({"LLTM_EXT_SEQUENCE_PATH": "small"}, (5, 3, 4, 40)),
    "cluster": ({"LLTM_EXT_SEQUENCE_PATH": "cluster"}, (5, 19, 4, 120)),
    "cluster-simt": (
        {"LLTM_EXT_SEQUENCE_PATH": "cluster", "LLTM_EXT_SEQUENCE_PRODUCT": "simt"},
        (4, 3, 2, 45),
    ),
    "grid": ({"LLTM_EXT_SEQUENCE_PATH": "grid"}, (5, 19, 4, 45)),
    "wide": ({"LLTM_EXT_SEQUENCE_PATH": "wide"}, (4, 5, 3, 300)),
    "wide-simt": (
        {"LLTM_EXT_SEQUENCE_PATH": "wide", "LLTM_EXT_SEQUENCE_PRODUCT": "simt"},
        (4, 5, 3, 261),
    ),
    "tiled": ({"LLTM_EXT_SEQUENCE_PATH": "tiled"}, (3, 17, 3, 261)),
    "cublas": ({"LLTM_EXT_SEQUENCE_PATH": "cublas"}, (4, 5, 3, 40)),
    # S not a multiple of 8: the half types' padded step products (bfloat16 here)
    "cublas-padded": ({"LLTM_EXT_SEQUENCE_PATH": "cublas"}, (5, 7, 3, 45)),
    "cublas-own": (
        {"LLTM_EXT_SEQUENCE_PATH": "cublas", "LLTM_EXT_SEQUENCE_STEP_GEMM": "own"},
        (4, 5, 3, 40),
    ),
    "cublas-tensor": (
        {"LLTM_EXT_SEQUENCE_PATH": "cublas", "LLTM_EXT_SEQUENCE_STEP_GEMM": "tensor"},
        (4, 5, 3, 40),
    ),
    "cublas-wgmma": (
        {"LLTM_EXT_SEQUENCE_PATH": "cublas", "LLTM_EXT_SEQUENCE_STEP_GEMM": "wgmma"},
        (4, 5, 3, 40),
    ),
    "wgrad-cublas": ({"LLTM_EXT_SEQUENCE_WGRAD": "cublas"}, (5, 3, 4, 40)),
    "wgrad-tensor": ({"LLTM_EXT_SEQUENCE_WGRAD": "tensor"}, (5, 3, 4, 40)),
}


@pytest.mark.parametrize("device,dtype", device_dtypes(cuda=(torch.float32, torch.bfloat16)))
@pytest.mark.parametrize("path", list(ZERO_STATE_PATHS))
def test_zero_state_as_none(monkeypatch, device, dtype, path):
    """state=None (the operator's h0 = c0 = None) on every path against the float64 loop from a
    state of zeros, and against an explicit state of zeros: outputs, the final state, and the
    gradients of input, weights and bias from the output alone (h_n's and c_n's gradients None)
    and from all three."""
    settings, size = ZERO_STATE_PATHS[path]
    if device == "cpu" and path != "auto":
        pytest.skip("the CPU has one path")
    if device == "cuda":
        major = torch.cuda.get_device_capability()[0]
        if major < 9 and settings.get("LLTM_EXT_SEQUENCE_PATH") in ("cluster", "tiled"):
            pytest.skip("these kernels need an sm_90 GPU")
        if dtype != torch.float32 and "LLTM_EXT_SEQUENCE_STEP_GEMM" in settings:
            pytest.skip("the own step products are float32's")
        if settings.get("LLTM_EXT_SEQUENCE_STEP_GEMM") == "wgmma" and major != 9:
            pytest.skip("Hopper's step product needs an sm_90 GPU")
        if settings.get("LLTM_EXT_SEQUENCE_WGRAD") == "tensor" and (
            dtype != torch.float32 or major != 9
        ):
            pytest.skip("the tensor-core weight gradient is float32's, on Hopper")
    for key, value in settings.items():
        monkeypatch.setenv(key, value)
    x, w, b, _, _ = make_args(*size, device, dtype)
    zeros = torch.zeros(size[1], size[3], device=device, dtype=dtype)
    output, (h_n, c_n) = lltm_ext.lltm_sequence(x, w, b)
    given = lltm_ext.lltm_sequence(x, w, b, (zeros, zeros.clone()))
    grads = [torch.randn_like(output), torch.randn_like(h_n), torch.randn_like(c_n)]
    ref_outs, ref_grads = reference([x, w, b, zeros, zeros], grads)
    scale = 1.0 if dtype in (torch.float32, torch.float64) else 4.0
    for got, explicit, want in zip(
        (output, h_n, c_n), (given[0], *given[1]), ref_outs, strict=True
    ):
        assert_close(got, want, dtype, scale)
        assert_close(got, explicit, dtype, scale)
    ours = torch.autograd.grad((output, h_n, c_n), (x, w, b), grads, retain_graph=True)
    for got, want in zip(ours, ref_grads[:3], strict=True):
        assert_close(got, want, dtype, scale * 8)
    only_output = torch.autograd.grad(output, (x, w, b), grads[0])
    zero = torch.zeros_like(grads[1])
    _, ref_only = reference([x, w, b, zeros, zeros], [grads[0], zero, zero])
    for got, want in zip(only_output, ref_only[:3], strict=True):
        assert_close(got, want, dtype, scale * 8)


def _kernel_names(fn):
    """The CUDA kernels `fn` launches, by name (the profiler's)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return {e.name for e in prof.events()}


@pytest.mark.cuda
@pytest.mark.parametrize("size", [(6, 7, 37, 45), (4, 8, 64, 64), (3, 150, 130, 50)])
def test_input_products_on_hoppers_tensor_cores(monkeypatch, size):
    """float32 at full precision with the input products (gates = x W_i^T, d input = dG W_i)
    forced onto Hopper's 3xTF32 kernel (LLTM_EXT_SEQUENCE_INPUT_GEMM=tensor): outputs, final state
    and the five gradients against the float64 loop at float32's bound, on rows that are 16-byte
    aligned (I = 64) and not (I = 37, S = 45: the padded copies), more rows than one tile (130 x
    150 x 3); the kernel is the one that ran, and cuBLAS's setting runs it nowhere."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the 3xTF32 kernel is Hopper's")
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_INPUT_GEMM", "tensor")
    args = make_args(*size, "cuda", torch.float32)
    outs = lltm_ext.lltm_sequence(*args[:3], (args[3], args[4]))
    output, (h_n, c_n) = outs
    grads = [torch.randn_like(output), torch.randn_like(h_n), torch.randn_like(c_n)]
    ref_outs, ref_grads = reference(args, grads)
    for got, want in zip((output, h_n, c_n), ref_outs, strict=True):
        assert_close(got, want, torch.float32, 1.0)
    ours = torch.autograd.grad((output, h_n, c_n), args, grads)
    for got, want in zip(ours, ref_grads, strict=True):
        assert_close(got, want, torch.float32, 8.0)

    def call():
        out, _ = lltm_ext.lltm_sequence(*args[:3], (args[3], args[4]))
        out.backward(grads[0])

    assert any("step_gemm_sm90" in name for name in _kernel_names(call))
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_INPUT_GEMM", "cublas")
    assert not any("step_gemm_sm90" in name for name in _kernel_names(call))


@pytest.mark.cuda
def test_input_products_on_tensor_cores_in_layers_and_packed(monkeypatch):
    """Two layers (the second's input products S wide) and a packed batch, the input products on
    Hopper's 3xTF32 kernel, against the same module with them in cuBLAS's exact float32: outputs
    and gradients within float32's bound of each other."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the 3xTF32 kernel is Hopper's")
    torch.manual_seed(3)
    module = lltm_ext.LLTMSequence(29, 45, num_layers=2).cuda()
    seqs = [torch.randn(n, 29, device="cuda") for n in (9, 7, 4)]
    packed = torch.nn.utils.rnn.pack_sequence(seqs)
    results = []
    for setting in ("tensor", "cublas"):
        monkeypatch.setenv("LLTM_EXT_SEQUENCE_INPUT_GEMM", setting)
        module.zero_grad()
        out, (h_n, _) = module(packed)
        (out.data.square().sum() + h_n.sum()).backward()
        results.append([out.data, h_n, *(p.grad for p in module.parameters())])
    for got, want in zip(*results, strict=True):
        assert_close(got, want, torch.float32, 8.0)


@pytest.mark.parametrize("device", devices())
def test_gradcheck_float64(device):
    args = make_args(4, 2, 3, 4, device, torch.float64)
    assert torch.autograd.gradcheck(lambda *a: _ops.lltm_sequence(*a), args)
    args = make_args(3, 3, 2, 3, device, torch.float64, bias_2d=True)
    assert torch.autograd.gradcheck(
        lambda x, w, b, h, c: lltm_ext.lltm_sequence(x, w, b, (h, c), batch_first=True)[0], args
    )


@pytest.mark.parametrize("device", devices())
def test_opcheck(device):
    args = make_args(4, 3, 2, 5, device, torch.float32)
    torch.library.opcheck(_ops.lltm_sequence.default, args)
    detached = [a.detach() for a in args]
    torch.library.opcheck(_ops.lltm_sequence_forward.default, detached)
    x, w, b, h0, _ = detached
    output, h_n, c_n, cells, gates = _ops.lltm_sequence_forward(*detached)
    grads = [torch.randn_like(output), torch.randn_like(h_n), torch.randn_like(c_n)]
    saved = [x, w, b, h0, output, cells, gates]
    for mask in ([True] * 5, [False, True, True, False, False], [True, False, False, True, True]):
        torch.library.opcheck(_ops.lltm_sequence_backward.default, [*grads, *saved, mask])
    # A zero state as None, and the final state's gradients as None.
    no_state = [x, w, b, None, None]
    torch.library.opcheck(_ops.lltm_sequence.default, [*args[:3], None, None])
    torch.library.opcheck(_ops.lltm_sequence_forward.default, no_state)
    output, h_n, c_n, cells, gates = _ops.lltm_sequence_forward(*no_state)
    saved = [x, w, b, None, output, cells, gates]
    for mask in ([True] * 5, [False, True, True, False, False]):
        torch.library.opcheck(
            _ops.lltm_sequence_backward.default,
            [torch.randn_like(output), None, None, *saved, mask],
        )
    # The tf32 argument (TF32 products on CUDA whatever torch's setting; nothing on the CPU).
    torch.library.opcheck(_ops.lltm_sequence.default, [*args, True])
    torch.library.opcheck(_ops.lltm_sequence_forward.default, [*detached, True])
    output, h_n, c_n, cells, gates = _ops.lltm_sequence_forward(*detached, True)
    saved = [x, w, b, h0, output, cells, gates]
    torch.library.opcheck(_ops.lltm_sequence_backward.default, [*grads, *saved, [True] * 5, True])
    # Gradients come from the C++ autograd of lltm_sequence; through the bare operator it raises.
    out = _ops.lltm_sequence_forward(*args)
    with pytest.raises(RuntimeError, match="not implemented"):
        out[0].sum().backward()


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_fullgraph(device, backend):
    model = lltm_ext.LLTMSequence(3, 5, batch_first=True, device=device)
    x = torch.randn(2, 6, 3, device=device, requires_grad=True)

    def loss_fn(x):
        output, (h_n, c_n) = model(x)
        return (output * 2).sum() + h_n.sum() + (c_n * c_n).sum()

    assert_compiled_matches_eager(loss_fn, (x,), backend, wrt=(x, model.weights, model.bias))


@pytest.mark.parametrize("device", devices())
def test_module_loads_a_cells_state_dict(device):
    cell = lltm_ext.LLTM(4, 6, device=device, dtype=torch.float64)
    seq = lltm_ext.LLTMSequence(4, 6, device=device, dtype=torch.float64)
    seq.load_state_dict(cell.state_dict())
    x = torch.randn(5, 3, 4, device=device, dtype=torch.float64)
    h, c = torch.randn(3, 6, device=x.device, dtype=x.dtype), torch.zeros(3, 6).to(x)
    output, (h_n, c_n) = seq(x, (h[None], c[None]))  # nn.LSTM's (layers, batch, state)
    loop = lltm_loop(lambda xt, w, b, h, c: cell(xt, (h, c)), x, cell.weights, cell.bias, h, c)
    torch.testing.assert_close(output, loop)
    assert h_n.shape == c_n.shape == (1, 3, 6)
    torch.testing.assert_close(h_n[0], loop[-1])
    assert repr(seq) == "LLTMSequence(4, 6)"
    assert "batch_first=True" in repr(lltm_ext.LLTMSequence(4, 6, batch_first=True))
    assert all(p.abs().max() <= 1 / math.sqrt(6) for p in lltm_ext.LLTMSequence(4, 6).parameters())
    (output.sum() + c_n.sum()).backward()
    assert seq.weights.grad.shape == seq.weights.shape and seq.bias.grad.shape == (18,)


def test_bad_inputs():
    x, w, b, h, c = [a.detach() for a in make_args(6, 4, 3, 5, "cpu", torch.float32)]
    seq = lltm_ext.lltm_sequence
    with pytest.raises(ValueError, match=r"`input` must be 3-D \(seq_len, batch.*\[4, 3\].*lltm"):
        seq(x[0], w, b)
    with pytest.raises(ValueError, match=r"3-D \(batch, seq_len, input_features\)"):
        seq(x[0], w, b, batch_first=True)
    with pytest.raises(RuntimeError, match=r"`input` must have shape \[seq_len, batch, 3\]"):
        seq(torch.randn(6, 4, 2), w, b)
    with pytest.raises(RuntimeError, match=r"`weights` must have shape \[3 \* state_size"):
        seq(x, torch.randn(14, 8), b)
    with pytest.raises(RuntimeError, match=r"`bias` must have shape \[15\] or \[1, 15\]"):
        seq(x, w, torch.randn(2, 15))
    with pytest.raises(RuntimeError, match=r"state's `h_0` must have shape \[4, 5\].*\[4, 6\]"):
        seq(x, w, b, (torch.randn(4, 6), c))
    with pytest.raises(RuntimeError, match=r"state's `c_0` must have shape \[4, 5\].*\[3, 5\]"):
        seq(x, w, b, (h, torch.randn(3, 5)))
    with pytest.raises(TypeError, match=r"`state` must be None or a pair \(h_0, c_0\).*tensor"):
        seq(x, w, b, h)
    with pytest.raises(TypeError, match=r"LLTMSequence.forward: `hx` must be.*length 3"):
        lltm_ext.LLTMSequence(3, 5)(x, (h, c, c))
    with pytest.raises(RuntimeError, match=r"one dtype.*`weights` is Double"):
        seq(x, w.double(), b)
    with pytest.raises(RuntimeError, match=r"`input` must have a floating-point dtype.*Int"):
        seq(x.int(), w, b)
    with pytest.raises(RuntimeError, match=r"one device.*`weights` is on meta.*`input` is on cpu"):
        seq(x, w.to("meta"), b)


def test_double_backward_raises():
    args = make_args(3, 2, 3, 4, "cpu", torch.float64)
    output, _ = lltm_ext.lltm_sequence(args[0], args[1], args[2], (args[3], args[4]))
    grads = torch.autograd.grad(output.sum(), args, create_graph=True)
    with pytest.raises(RuntimeError, match=r"lltm_ext.lltm_sequence: second derivatives are not"):
        torch.autograd.grad(grads[1].sum(), args, allow_unused=True)
    # Only the weights requiring grad: the others' gradients are not computed, and the weights'
    # still refuses a second derivative.
    x, w, b, h, c = [a.detach().requires_grad_(a is args[1]) for a in args]
    output, _ = lltm_ext.lltm_sequence(x, w, b, (h, c))
    (d_w,) = torch.autograd.grad(output.sum(), (w,), create_graph=True)
    ref_w = torch.autograd.grad(lltm_ext.lltm_sequence(x, w, b, (h, c))[0].sum(), (w,))[0]
    torch.testing.assert_close(d_w, ref_w)
    with pytest.raises(RuntimeError, match=r"lltm_ext.lltm_sequence: second derivatives are not"):
        torch.autograd.grad(d_w.sum(), (w,))


@pytest.mark.parametrize("wants", ["input", "h0", "all"])
@pytest.mark.parametrize("packed", [False, True])
def test_double_backward_by_any_input_raises(wants, packed):
    """A second derivative by the input or the state alone (weights frozen, or not asked for: a
    Hessian-vector product in the input, say) raises too, never comes back as a silent zero."""
    x, w, b, h, c = [a.detach() for a in make_args(4, 3, 3, 5, "cpu", torch.float64)]
    asked = {"input": [x], "h0": [h], "all": [x, w, b, h, c]}[wants]
    for a in asked:
        a.requires_grad_()
    if packed:  # the packed operator, as LLTMSequence calls it on a PackedSequence
        data = torch.nn.utils.rnn.pack_padded_sequence(x, torch.tensor([4, 3, 1]))
        sizes = data.batch_sizes.tolist()
        output = lltm_sequence_packed_op(data.data, sizes, w, b, h, c)[0]
    else:
        output = lltm_ext.lltm_sequence(x, w, b, (h, c))[0]
    first = torch.autograd.grad(output.square().sum(), asked, create_graph=True)
    for g in first:
        with pytest.raises(RuntimeError, match=r"lltm_ext.lltm_sequence\w*: second derivatives"):
            torch.autograd.grad(g.square().sum(), asked, allow_unused=True)


def test_module_double_backward_raises():
    """The module as nn.LSTM is used (layers, both directions, parameters that want
    gradients): a second derivative by its input raises."""
    rnn = lltm_ext.LLTMSequence(3, 4, num_layers=2, bidirectional=True).double()
    x = torch.randn(5, 2, 3, dtype=torch.float64, requires_grad=True)
    (d_x,) = torch.autograd.grad(rnn(x)[0].sum(), (x,), create_graph=True)
    with pytest.raises(RuntimeError, match=r"lltm_ext.lltm_sequence: second derivatives are not"):
        torch.autograd.grad(d_x.square().sum(), (x,))


@pytest.mark.cuda
def test_mixed_devices():
    x, w, b, h, c = [a.detach() for a in make_args(3, 4, 3, 5, "cuda", torch.float32)]
    with pytest.raises(RuntimeError, match=r"one device.*`h0` is on cpu.*`input` is on cuda"):
        lltm_ext.lltm_sequence(x, w, b, (h.cpu(), c))


@pytest.mark.cuda
def test_cuda_float32_follows_matmul_precision():
    """float32 products use TF32 exactly when torch's float32 matmuls may
    (torch.backends.cuda.matmul.allow_tf32), as the loop of lltm cells does, whatever cuDNN's RNN
    setting (which nn.LSTM follows): with TF32 allowed the error against float64 is that of TF32
    (10-bit mantissa), else that of float32."""
    x, w, b, h, c = [a.detach() for a in make_args(3, 64, 512, 512, "cuda", torch.float32)]
    ref = lltm_loop(lltm_reference, *[a.double() for a in (x, w, b, h, c)])
    errors = {}
    for allow, rnn in ((False, "tf32"), (False, "ieee"), (True, "ieee"), (True, "tf32")):
        with matmul_tf32(allow, rnn):
            output, _ = lltm_ext.lltm_sequence(x, w, b, (h, c))
        errors[allow, rnn] = (output.double() - ref).abs().max().item()
    assert max(errors[False, "tf32"], errors[False, "ieee"]) < 2e-5, errors
    assert min(errors[True, "tf32"], errors[True, "ieee"]) > 10 * errors[False, "ieee"], errors


@pytest.mark.cuda
@pytest.mark.parametrize("path", ["auto", "small", "cluster", "wide", "grid", "cublas"])
def test_cuda_float32_at_torch_defaults_is_accurate_over_long_sequences(monkeypatch, path):
    """At torch's default settings (cuDNN's RNN setting "tf32", matmuls in full float32) a float32
    sequence of 200 steps stays within 1e-3 of float64 (max |error| / max |output|), as nn.LSTM
    does, on every path (the wide-state kernels run their product as 3xTF32 there); with TF32
    products the LLTM's cell state (no forget gate) adds their rounding up over the steps to
    ~2e-2 (measured on an H100)."""
    torch.manual_seed(0)
    seq = lltm_ext.LLTMSequence(32, 64).cuda()
    x = torch.randn(200, 16, 32, device="cuda")
    with torch.no_grad():
        ref = copy.deepcopy(seq).double()(x.double())[0]
        sequence_path(monkeypatch, path)
        if path == "cluster":  # the tensor cores take slices of 8 or 16 rows
            monkeypatch.setenv("LLTM_EXT_SEQUENCE_CLUSTER_ROWS", "16")
        with matmul_tf32(False, "tf32"):
            output = seq(x)[0]
    error = ((output.double() - ref).abs().max() / ref.abs().max()).item()
    assert error < 1e-4, error


@pytest.mark.cuda
def test_cuda_uses_current_stream_and_device_guard():
    args = [a.detach() for a in make_args(16, 32, 64, 128, "cuda", torch.float32)]
    expected = _ops.lltm_sequence(*args)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        got = _ops.lltm_sequence(*args)
    torch.cuda.current_stream().wait_stream(side)
    for g, e in zip(got, expected, strict=True):
        assert torch.equal(g, e)


def sequence_path(monkeypatch, path):
    """LLTM_EXT_SEQUENCE_PATH for the test: "small" (the small-state kernels), "grid" (the fused
    step kernels, never the cluster ones), "cluster" (the sm_90 cluster kernels, their recurrent
    product where auto puts it: the tensor cores for slices of 8 or 16 rows, in three TF32 passes
    for float32 at torch's defaults) or "wide" (the wide-state kernels, likewise; each an error
    where they do not apply), either with "-simt" (the product on the SIMT cores,
    LLTM_EXT_SEQUENCE_PRODUCT=simt) or "-tensor" (LLTM_EXT_SEQUENCE_PRODUCT=tensor, the same as
    auto), "cublas" (cuBLAS and the gate kernel every step)."""
    if path.startswith("cluster") and torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("the cluster kernels need an sm_90 GPU")
    for product in ("simt", "tensor"):
        if path.endswith("-" + product):
            path = path.removesuffix("-" + product)
            monkeypatch.setenv("LLTM_EXT_SEQUENCE_PRODUCT", product)
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_PATH", path)


# (T, B, I, S) for the sm_90 cluster kernels (clusters of 8 blocks, each a slice of 2, 4, 8 or 16
# batch rows): B = 1, B not a multiple of the slice (19, 37), T = 1, S not a multiple of 8 (100,
# 45), S < 8 (blocks without columns), S = 256 (their limit) and B = 700 (more clusters than run
# at once: they run in turns).
CLUSTER_SIZES = [
    (5, 1, 3, 6),
    (1, 19, 4, 100),
    (7, 37, 5, 45),
    (4, 3, 2, 3),
    (6, 16, 8, 128),
    (3, 5, 7, 256),
    (2, 700, 3, 256),
]


@pytest.mark.cuda
@pytest.mark.parametrize("path", ["grid", "cluster", "cluster-simt"])
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str
)
@pytest.mark.parametrize("size", CLUSTER_SIZES, ids=lambda s: "x".join(map(str, s)))
def test_cuda_step_kernels(monkeypatch, path, dtype, size):
    """Both small-state paths on CUDA, each forced, against the float64 loop: the fused step
    kernels (grid barrier or a launch per step) and the sm_90 cluster kernels (auto's choice on
    sm_90) with the recurrent product where auto puts it (the tensor cores in slices of 8 or 16
    rows: one pass for the half types, three for float32 at its full precision) and on the SIMT
    cores, forward and all gradients."""
    sequence_path(monkeypatch, path)
    check_against_reference(size, "cuda", dtype)


# (T, B, I, S) for the small-state kernels (a block per 1, 2 or 4 batch rows, 2 or 4 lanes per
# column for float32 and 8 for the half types, each lane's k covering S = 32, 48, 64, 88 or,
# float32 only, 96): B = 1 and odd (a block with fewer rows than the others), each size's edges (S
# = 1, 16, 17, 32, 33, 48, 49, 64, 65, 88, 89, 96: the largest), S not a multiple of 4 (37, 45), T
# = 1, and B = 300 (more blocks than the GPU's SMs). Longer sequences: below.
SMALL_SIZES = [
    (5, 1, 3, 1),
    (1, 3, 4, 16),
    (7, 37, 5, 17),
    (4, 2, 2, 32),
    (6, 5, 8, 33),
    (3, 16, 7, 45),
    (4, 9, 3, 48),
    (3, 6, 2, 49),
    (5, 4, 3, 64),
    (4, 7, 6, 65),
    (6, 3, 5, 88),
    (3, 300, 4, 37),
]
SMALL_SIZES_FLOAT32 = [(4, 5, 3, 89), (3, 301, 2, 96)]


@pytest.mark.cuda
@pytest.mark.parametrize("rows", ["", "2", "4"])
@pytest.mark.parametrize(
    "dtype,size",
    [
        (dtype, size)
        for dtype in (torch.float32, torch.bfloat16, torch.float16)
        for size in SMALL_SIZES + (SMALL_SIZES_FLOAT32 if dtype == torch.float32 else [])
    ],
    ids=lambda v: str(v) if isinstance(v, torch.dtype) else "x".join(map(str, v)),
)
def test_cuda_small_state_kernels(monkeypatch, rows, dtype, size):
    """The small-state kernels, forced (an error where they do not apply: so they ran), in the
    planner's rows per block ("": one at these batches) and in 2 and 4
    (LLTM_EXT_SEQUENCE_SMALL_ROWS), against the float64 loop, forward and all gradients."""
    sequence_path(monkeypatch, "small")
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_SMALL_ROWS", rows)
    check_against_reference(size, "cuda", dtype)


@pytest.mark.cuda
@pytest.mark.parametrize("path", ["small", "cluster", "grid", "wide", "tiled", "cublas"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_cuda_step_kernels_saturated_gates(monkeypatch, path, dtype):
    """Gate pre-activations far out on both sides through each path's step kernels, forced,
    against the float64 loop: the step kernels' sigmoid takes 1 / (1 + e^-z) as one approximate
    reciprocal, whose argument is inf for z below -89 (the sigmoid then 0) and past 2^126 from z
    below -87 (0 where the quotient is a denormal); ELU's expm1 at -1000 (-1) and a cell state that
    grows by up to 1000 a step. Outputs and all gradients finite and within the tolerance."""
    if path == "tiled":
        tiled_path(monkeypatch)
    else:
        sequence_path(monkeypatch, path)
    size = (5, 6, 4, 40)
    args = make_args(*size, "cuda", dtype)
    with torch.no_grad():  # each gate's bias cycles through the extremes, its columns shifted
        extremes = torch.tensor([-1000.0, -95.0, -88.0, -20.0, 0.0, 20.0, 88.0, 1000.0])
        index = torch.arange(3 * size[3]) * 3 % len(extremes)
        args[2].copy_(extremes[index].to(args[2]))
    output, (h_n, c_n) = lltm_ext.lltm_sequence(args[0], args[1], args[2], (args[3], args[4]))
    grads = [torch.randn_like(output), torch.randn_like(h_n), torch.randn_like(c_n)]
    ours = torch.autograd.grad((output, h_n, c_n), args, grads)
    ref_outs, ref_grads = reference(args, grads)
    scale = 1.0 if dtype == torch.float32 else 4.0
    for got, want in zip((output, h_n, c_n), ref_outs, strict=True):
        assert torch.isfinite(got).all()
        assert_close(got, want, dtype, scale)
    for name, got, want in zip(
        ("input", "weights", "bias", "h0", "c0"), ours, ref_grads, strict=True
    ):
        assert torch.isfinite(got).all(), name
        assert_close(got, want, dtype, scale * 8)


@pytest.mark.cuda
def test_cuda_small_state_path_refuses_what_it_cannot_run(monkeypatch):
    """Forced, the small-state path says why it does not apply (a state past 96 for float32, past
    88 for the half types, float64) instead of running another path."""
    sequence_path(monkeypatch, "small")
    for state, dtype in ((97, torch.float32), (89, torch.bfloat16), (16, torch.float64)):
        args = [a.detach() for a in make_args(2, 3, 4, state, "cuda", dtype)]
        with pytest.raises(RuntimeError, match=rf"LLTM_EXT_SEQUENCE_PATH=small.*state {state}"):
            _ops.lltm_sequence(*args)


@pytest.mark.cuda
@pytest.mark.parametrize("rows", ["2", "4", "8", "16"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_cuda_cluster_batch_slices(monkeypatch, rows, dtype):
    """Each batch slice per cluster (LLTM_EXT_SEQUENCE_CLUSTER_ROWS forces what auto chooses by
    occupancy), B = 37 a multiple of none, S = 100 not a multiple of the cluster's 8 blocks; the
    product on the SIMT cores in 2- and 4-row slices and on the tensor cores in 8- and 16-row
    slices (8 rows fill half of an mma tile; float32 at torch's default full precision in three
    TF32 passes)."""
    sequence_path(monkeypatch, "cluster")
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_CLUSTER_ROWS", rows)
    check_against_reference((4, 37, 5, 100), "cuda", dtype)


@pytest.mark.cuda
@pytest.mark.parametrize(
    "blocks,rows", [("1", "2"), ("2", "2"), ("4", "2"), ("8", "2"), ("4", "16"), ("8", "16")]
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize(
    "size", [(4, 37, 5, 100), (9, 3, 2, 37)], ids=lambda s: "x".join(map(str, s))
)
def test_cuda_cluster_blocks(monkeypatch, blocks, rows, dtype, size):
    """Each number of blocks per cluster (LLTM_EXT_SEQUENCE_CLUSTER_BLOCKS forces what auto
    chooses by batch and state; one block exchanges nothing across blocks), in SIMT 2-row slices
    and, where a block's 16 rows x columns fit its 256 threads twice, 16-row slices (the tensor
    cores); S = 100 and 37 multiples of none of them."""
    sequence_path(monkeypatch, "cluster")
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_CLUSTER_BLOCKS", blocks)
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_CLUSTER_ROWS", rows)
    check_against_reference(size, "cuda", dtype)


@pytest.mark.cuda
@pytest.mark.parametrize(
    "path,size",
    [
        ("cluster", (4, 37, 5, 100)),
        ("cluster", (6, 16, 8, 128)),
        ("cluster", (3, 5, 7, 256)),
        ("cluster", (5, 2, 3, 6)),
        ("cluster", (3, 80, 5, 100)),
        ("wide", (4, 17, 3, 260)),
        ("wide", (3, 72, 4, 260)),
        ("wide", (3, 33, 8, 512)),
        ("wide", (3, 5, 2, 1024)),
    ],
    ids=str,
)
@pytest.mark.parametrize("passes", ["tf32", "3xtf32"])
def test_cuda_float32_tensor_cores(monkeypatch, path, size, passes):
    """The cluster and wide-state kernels' float32 recurrent products, forward and backward, run on
    the tensor cores: in one TF32 pass with TF32 allowed (torch.backends.cuda.matmul.allow_tf32)
    past 64 batch rows, in three (3xTF32) at torch's default and at up to 64 rows (the planner's
    rule, docs/decisions_sequence.md#tf32-one-pass-batch). With one pass the outputs and all
    gradients differ from those of the SIMT product and stay within TF32's error of the float64
    loop (TF32 keeps 10 mantissa bits: relative rounding 2^-11 per operand; a wrong fragment layout
    would be off by the values' own size); with three they differ from the SIMT product's (other
    units ran) and stay within a few times its float32 error (a dropped or doubled pass would leave
    TF32's error)."""
    args = make_args(*size, "cuda", torch.float32)
    grads = [torch.randn(size[0], size[1], size[3], device="cuda")] + [
        torch.randn(size[1], size[3], device="cuda") for _ in range(2)
    ]
    ref_outs, ref_grads = reference(args, grads)

    if path == "cluster":  # the tensor cores take slices of 8 or 16 rows
        monkeypatch.setenv("LLTM_EXT_SEQUENCE_CLUSTER_ROWS", "16")

    def run(path):
        sequence_path(monkeypatch, path)
        with matmul_tf32(passes == "tf32"):
            output, (h_n, c_n) = lltm_ext.lltm_sequence(*args[:3], (args[3], args[4]))
            d = torch.autograd.grad((output, h_n, c_n), args, grads)
        return [output, h_n, c_n, *d]

    tensor, simt = run(path + "-tensor"), run(path + "-simt")
    names = ["output", "h_n", "c_n", "d_input", "d_weights", "d_bias", "d_h0", "d_c0"]
    differs = []
    for name, ours, other, ref in zip(names, tensor, simt, [*ref_outs, *ref_grads], strict=True):
        differs.append(not torch.equal(ours, other))
        error = (ours.double().cpu() - ref).abs().max().item()
        scale = max(ref.abs().max().item(), 1.0)
        if passes == "tf32" and size[1] > 64:  # one pass
            assert differs[-1], name  # the products ran on other units
            assert error <= 1e-2 * scale, (name, error)
        else:
            simt_error = (other.double().cpu() - ref).abs().max().item()
            assert error <= max(4 * simt_error, 1e-6 * scale), (name, error, simt_error)
    assert any(differs), "3xTF32 gave the SIMT product's results bit for bit"


@pytest.mark.cuda
def test_cuda_3xtf32_does_not_drift_over_many_steps(monkeypatch):
    """Over 230 steps the wide kernels' three TF32 passes (torch's default) stay as close to the
    float64 loop as cuBLAS's float32 every step: each k step's passes are summed from zero and
    added on the SIMT cores. Chained in the tensor core's accumulators (which truncate), their
    error drifted one way through the cell state, which has no forget gate: 7x cuBLAS's at this
    shape in the sweep (0.3x-1.4x now, over five seeds of this test's inputs)."""
    size = (230, 44, 3, 358)
    args = make_args(*size, "cuda", torch.float32)
    ref_args = [a.detach().cpu().double() for a in args]
    h, c = ref_args[3], ref_args[4]
    for t in range(size[0]):
        h, c = lltm_reference(ref_args[0][t], ref_args[1], ref_args[2], h, c)
    errors = {}
    with torch.no_grad():
        for path in ("wide", "cublas"):
            sequence_path(monkeypatch, path)
            h_n = lltm_ext.lltm_sequence(*args[:3], (args[3], args[4]))[1][0]
            errors[path] = (h_n.double().cpu() - h).abs().max().item()
    assert errors["wide"] <= 2.5 * errors["cublas"], errors


# (T, B, I, S) for the wide-state kernels (blocks of 16 batch rows x 4, 8 or 16 state columns,
# K split into 16 parts of whole groups of four): S = 4 (one block's columns past S), S = 260
# (parts past K backward), B = 1, B = 17 and 33 (row blocks past the batch), S = 512, T = 1;
# states that are not multiples of 4 (rows of x read element by element, the last group of four
# partly past K): S = 6, 261 and 339, and 530 (past 512: the half types' tensor cores).
WIDE_SIZES = [
    (3, 2, 5, 4),
    (4, 17, 3, 260),
    (1, 1, 6, 512),
    (3, 33, 8, 512),
    (5, 5, 2, 300),
    (3, 2, 4, 6),
    (4, 17, 3, 261),
    (3, 5, 7, 339),
    (3, 18, 2, 530),
]


@pytest.mark.cuda
@pytest.mark.parametrize("path", ["wide", "wide-simt"])
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str
)
@pytest.mark.parametrize("size", WIDE_SIZES, ids=lambda s: "x".join(map(str, s)))
def test_cuda_wide_kernels(monkeypatch, path, dtype, size):
    """The wide-state kernels (auto's choice past S = 256), forced, against the float64 loop,
    forward and all gradients; the product where auto puts it (the tensor cores for the half
    types; float32 here is full float32) and on the SIMT cores."""
    sequence_path(monkeypatch, path)
    check_against_reference(size, "cuda", dtype)


@pytest.mark.cuda
@pytest.mark.parametrize("cols", ["4", "8", "16", ""])
def test_cuda_wide_columns(monkeypatch, cols):
    """Each block width of the wide-state kernels (LLTM_EXT_SEQUENCE_WIDE_COLS forces what auto
    picks by occupancy; set but empty, it forces nothing), S = 260 a multiple of none of them but
    4 (65 blocks at most: the grid runs at once on any GPU with 65 SMs)."""
    sequence_path(monkeypatch, "wide")
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_WIDE_COLS", cols)
    check_against_reference((3, 9, 5, 260), "cuda", torch.float32)


@pytest.mark.cuda
@pytest.mark.parametrize("path", ["wide", "tiled"])
def test_cuda_wide_many_steps_over_rows_of_blocks(monkeypatch, path):
    """The wide and tiled kernels wait, each step, for their own row of blocks only. B = 70: five
    rows of blocks (the tiled kernels' tile held to one m-tile), the last one partly past the
    batch. T = 16 steps against the float64 loop (float32's rounding over more steps outgrows the
    tolerance); T = 64 steps twice, the same bits in what the kernels alone compute (the outputs,
    the c0 gradient), which a block reading another's rows before they were written would not give
    run to run: before each run the caching allocator's free blocks of the sizes of the kernels'
    buffers (h and c of all steps, the gates and their gradients) are filled with NaN, so such a
    read would see NaN, not the last run's values."""
    if path == "tiled":
        tiled_path(monkeypatch, tiles="1")
    else:
        sequence_path(monkeypatch, path)
    check_against_reference((16, 70, 3, 132), "cuda", torch.float32)
    size = (64, 70, 3, 132)
    args = make_args(*size, "cuda", torch.float32)
    grads = [torch.randn(size[0], size[1], size[3], device="cuda")] + [
        torch.randn(size[1], size[3], device="cuda") for _ in range(2)
    ]
    steps_by_batch = size[0] * size[1]

    def run() -> list[torch.Tensor]:
        nan = float("nan")
        junk = [torch.full((steps_by_batch * k * size[3],), nan, device="cuda") for k in (1, 3)]
        junk += [torch.full_like(j, nan) for j in junk for _ in range(3)]
        del junk  # back to the cache, NaN-filled
        output, (h_n, c_n) = lltm_ext.lltm_sequence(*args[:3], (args[3], args[4]))
        d_c0 = torch.autograd.grad((output, h_n, c_n), args[4], grads)[0]
        return [output.detach(), h_n.detach(), c_n.detach(), d_c0]

    first, second = run(), run()
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)


@pytest.mark.cuda
@pytest.mark.parametrize("path", ["wide", "wide-simt"])
def test_cuda_wide_kernels_states_in_turn(monkeypatch, path):
    """S = 520, then 132, then 520 again, in one process (each takes blocks of 4 columns at B = 3):
    the kernels' shared-memory limit, set when a state's plan is first made, must still admit the
    larger state when it comes back (it was once set to each state's own size, and the third call
    failed to launch)."""
    sequence_path(monkeypatch, path)
    for state in (520, 132, 520):
        check_against_reference((2, 3, 2, state), "cuda", torch.bfloat16)


@pytest.mark.cuda
@pytest.mark.parametrize("state", [1024, 1022])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_cuda_wide_kernels_largest_state(monkeypatch, dtype, state):
    """S = 1024, the wide kernels' largest state, on the tensor cores (the half types): K in two
    staged chunks forward and six backward, against the float64 loop; S = 1022, the same with the
    last chunk's last group of four partly past K."""
    sequence_path(monkeypatch, "wide")
    check_against_reference((3, 5, 2, state), "cuda", dtype)


@pytest.mark.cuda
@pytest.mark.parametrize(
    "dtype,state", [(torch.float32, 512), (torch.bfloat16, 1024), (torch.float32, 339)], ids=str
)
def test_cuda_wide_misaligned_h0(dtype, state):
    """h0 a view one element into its storage (not aligned to four elements): the wide kernels'
    first step reads it element by element (float32 here: the SIMT product; bfloat16 at S = 1024:
    the tensor-core product's staging); the same values as an aligned copy."""
    x, w, b, h, c = make_args(3, 4, 5, state, "cuda", dtype)
    storage = torch.empty(h.numel() + 1, device="cuda", dtype=dtype)
    h_view = storage[1:].view_as(h).copy_(h)
    assert h_view.data_ptr() % (4 * h.element_size()) != 0
    got = lltm_ext.lltm_sequence(x, w, b, (h_view, c))[0]
    want = lltm_ext.lltm_sequence(x, w, b, (h.clone(), c))[0]
    assert torch.equal(got, want)


@pytest.mark.cuda
def test_cuda_wide_path_refuses_what_it_cannot_run(monkeypatch):
    """Forced, the wide path says why it does not apply (a state past 1024)."""
    sequence_path(monkeypatch, "wide")
    for state in (1025, 1028):
        args = [a.detach() for a in make_args(2, 3, 4, state, "cuda", torch.float32)]
        with pytest.raises(RuntimeError, match=rf"LLTM_EXT_SEQUENCE_PATH=wide.*state {state}"):
            _ops.lltm_sequence(*args)


def tiled_path(monkeypatch, tiles="", cols="", stages=""):
    """The tiled kernels forced (LLTM_EXT_SEQUENCE_PATH=tiled; sm_90 only), their tile restricted
    to `tiles` m-tiles of 16 rows, `cols` state columns and `stages` stages of x's ring where
    given."""
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("the tiled kernels need an sm_90 GPU")
    sequence_path(monkeypatch, "tiled")
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_TILED_TILES", tiles)
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_TILED_COLS", cols)
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_TILED_STAGES", stages)


# (T, B, I, S, m-tiles, columns) for the tiled kernels ("": the planner's choice): S = 4 (one block
# of columns), S not a multiple of 4 (261, 1217: x rows padded in its float buffer, K's last chunk
# partly past K), B not a multiple of 16, one m-tile a block over five rows of blocks (B = 70), two
# (B = 33: the second row of blocks holds one row), eight with 100 of 128 rows, 16 columns x 128
# rows (eight gate-math elements a thread, the most), states past 1024 (1100, 1217: K = 3651
# backward), T = 1, and 2 cp.async stages (S = 1397 at B = 2 leaves room for no third).
TILED_SIZES = [
    (3, 2, 5, 4, "", ""),
    (4, 17, 3, 261, "", ""),
    (3, 70, 3, 132, "1", ""),
    (3, 33, 6, 300, "2", ""),
    (3, 100, 4, 64, "8", ""),
    (2, 130, 2, 96, "8", "16"),
    (2, 5, 7, 1100, "", ""),
    (2, 3, 3, 1217, "", ""),
    (1, 9, 3, 40, "", ""),
    (2, 2, 3, 1397, "", ""),
]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("size", TILED_SIZES, ids=lambda s: "x".join(map(str, s)))
def test_cuda_tiled_kernels(monkeypatch, dtype, size):
    """The tiled kernels, forced, against the float64 loop, forward and all gradients (float32 at
    torch's default: three TF32 passes; the half types in one)."""
    tiled_path(monkeypatch, size[4], size[5])
    check_against_reference(size[:4], "cuda", dtype)


# (T, B, I, S, m-tiles) at each depth of x's ring: K = S forward, 3S backward in chunks of 256 / mt
# k, so S = 640 at one m-tile is 3 chunks forward, 8 backward (every chunk in flight at once from
# 9 stages: 8 is the most, one fewer); S = 261 at two m-tiles ends both ways in a partial chunk.
@pytest.mark.cuda
@pytest.mark.parametrize("stages", ["2", "3", "4", "5", "6", "8"])
@pytest.mark.parametrize("size", [(3, 16, 5, 640, "1"), (2, 20, 3, 261, "2")], ids=str)
def test_cuda_tiled_kernels_at_each_ring_depth(monkeypatch, size, stages):
    """The tiled kernels with each number of stages of x's ring, bfloat16 and float32, against the
    float64 loop; the explanation names the stages that ran."""
    tiled_path(monkeypatch, size[4], "", stages)
    for dtype in (torch.bfloat16, torch.float32):
        check_against_reference(size[:4], "cuda", dtype)
    x, w, b = (a.detach() for a in make_args(*size[:4], "cuda", torch.bfloat16)[:3])
    assert f"{stages} cp.async stages" in str(lltm_ext.explain("lltm_sequence", x, w, b))


@pytest.mark.cuda
@pytest.mark.parametrize("size", [(4, 17, 3, 261), (3, 40, 5, 1100), (3, 70, 5, 261)], ids=str)
@pytest.mark.parametrize("tf32", [True, False], ids=["tf32", "3xtf32"])
def test_cuda_tiled_float32_products(monkeypatch, size, tf32):
    """The tiled kernels' float32 products against the float64 loop. With TF32 allowed they take
    one TF32 pass at every batch (they run four chains of mma either way:
    decisions_sequence.md#tf32-one-pass-batch): within TF32's error (a wrong fragment layout would
    be off by the values' own size) and well past three passes' (three passes left there would
    not be). At torch's default (three passes) within a few times the error of cuBLAS's float32
    every step (one pass left there would leave TF32's error)."""
    args = make_args(*size, "cuda", torch.float32)
    grads = [torch.randn(size[0], size[1], size[3], device="cuda")] + [
        torch.randn(size[1], size[3], device="cuda") for _ in range(2)
    ]
    ref_outs, ref_grads = reference(args, grads)

    def run(path, allow_tf32):
        if path == "tiled":
            tiled_path(monkeypatch)
        else:
            sequence_path(monkeypatch, path)
        with matmul_tf32(allow_tf32):
            output, (h_n, c_n) = lltm_ext.lltm_sequence(*args[:3], (args[3], args[4]))
            d = torch.autograd.grad((output, h_n, c_n), args, grads)
        return [output, h_n, c_n, *d]

    def errors(outs):
        refs = [*ref_outs, *ref_grads]
        return [(o.double().cpu() - r).abs().max().item() for o, r in zip(outs, refs, strict=True)]

    scales = [max(r.abs().max().item(), 1.0) for r in [*ref_outs, *ref_grads]]
    names = ["output", "h_n", "c_n", "d_input", "d_weights", "d_bias", "d_h0", "d_c0"]
    three = errors(run("tiled", False))
    if tf32:
        one = errors(run("tiled", True))
        for name, error, scale in zip(names, one, scales, strict=True):
            assert error <= 1e-2 * scale, (name, error)
        assert one[0] > 8 * three[0], ("three passes ran with TF32 allowed", one[0], three[0])
    else:
        cublas = errors(run("cublas", False))
        for name, error, cublas_error, scale in zip(names, three, cublas, scales, strict=True):
            assert error <= max(4 * cublas_error, 1e-6 * scale), (name, error, cublas_error)


@pytest.mark.cuda
def test_cuda_tiled_kernels_states_in_turn(monkeypatch):
    """S = 1100, then 132, then 1100 again in one process: the kernels' shared-memory limit is the
    device's, whichever state planned first."""
    tiled_path(monkeypatch)
    for state in (1100, 132, 1100):
        check_against_reference((2, 3, 2, state), "cuda", torch.bfloat16)


@pytest.mark.cuda
def test_cuda_tiled_path_refuses_what_it_cannot_run(monkeypatch):
    """Forced, the tiled path says why it does not apply: float64 (no tensor-core product), a state
    whose slice fits no SM, a tile restricted to what cannot hold the batch; a bad tile setting
    names the valid ones."""
    tiled_path(monkeypatch)
    for dtype, batch, state in ((torch.float64, 3, 64), (torch.float32, 3, 4000)):
        args = [a.detach() for a in make_args(2, batch, 4, state, "cuda", dtype)]
        with pytest.raises(RuntimeError, match=rf"LLTM_EXT_SEQUENCE_PATH=tiled.*state {state}"):
            _ops.lltm_sequence(*args)
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_TILED_TILES", "1")  # 600 rows: 38 rows of blocks
    args = [a.detach() for a in make_args(2, 600, 4, 512, "cuda", torch.float32)]
    with pytest.raises(RuntimeError, match=r"LLTM_EXT_SEQUENCE_PATH=tiled.*batch 600"):
        _ops.lltm_sequence(*args)
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_TILED_TILES", "3")
    with pytest.raises(RuntimeError, match=r"TILED_TILES must be 1, 2, 4 or 8.*'3'"):
        _ops.lltm_sequence(*args)
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_TILED_TILES", "")
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_TILED_COLS", "30")
    with pytest.raises(RuntimeError, match=r"TILED_COLS must be an integer from 4 to 24.*'30'"):
        _ops.lltm_sequence(*args)


# (T, B, I, S) past the wide kernels' largest state (auto: cuBLAS and the gate kernel every step):
# S = 1025 (one past), 1100, and 2048 (the sweep's largest), B = 1 and odd.
LARGE_STATE_SIZES = [(3, 5, 7, 1025), (2, 1, 4, 1100), (2, 3, 3, 2048)]


@pytest.mark.cuda
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str
)
@pytest.mark.parametrize("size", LARGE_STATE_SIZES, ids=lambda s: "x".join(map(str, s)))
def test_cuda_states_past_the_wide_kernels(dtype, size):
    """States past 1024 at auto's choice, against the float64 loop, forward and all gradients."""
    check_against_reference(size, "cuda", dtype)


def long_sequence_errors(monkeypatch, size, paths):
    """{path: {name: max |error| / max |value|}} of float32 at torch's defaults (cuDNN's RNN
    setting "tf32", matmuls in full float32) against float64 (the same module and inputs in float64
    on the GPU): outputs, final state and the gradients of input, weights and h0, each path forced
    (LLTM_EXT_SEQUENCE_PATH)."""
    steps, batch, features, state = size
    torch.manual_seed(0)
    seq = lltm_ext.LLTMSequence(features, state).cuda()
    x = torch.randn(steps, batch, features, device="cuda", requires_grad=True)
    h0 = torch.randn(batch, state, device="cuda")
    grad = torch.randn(steps, batch, state, device="cuda")

    def run(module, inputs):
        h = h0.to(inputs.dtype).requires_grad_()
        output, (h_n, c_n) = module(inputs, (h[None], torch.zeros_like(h)[None]))
        d = torch.autograd.grad(output, (inputs, module.weights, h), grad.to(inputs.dtype))
        return {
            "output": output,
            "h_n": h_n,
            "c_n": c_n,
            **dict(zip(("d_input", "d_weights", "d_h0"), d, strict=True)),
        }

    want = run(copy.deepcopy(seq).double(), x.detach().double().requires_grad_())
    errors = {}
    for path in paths:
        sequence_path(monkeypatch, path)
        with matmul_tf32(False, "tf32"):
            got = run(seq, x)
        errors[path] = {
            k: ((got[k].double() - w).abs().max() / w.abs().max()).item() for k, w in want.items()
        }
    return errors


@pytest.mark.cuda
@pytest.mark.parametrize(
    "size",
    [(256, 4, 8, 1100), (2048, 2, 13, 37), (1000, 4, 16, 64), (1000, 8, 16, 88)]
    + [(1000, 4, 16, 300), (512, 4, 8, 1100)],
    ids=str,
)
def test_cuda_long_sequences_at_torch_defaults(monkeypatch, size):
    """Long sequences (T up to 2048) and a state past 1024, float32 at torch's defaults, at auto's
    choice (S <= 88: the small-state kernels; 300: the wide kernels' three TF32 passes; 1100:
    cuBLAS every step) against float64: outputs, final state and gradients within 1e-3 (max
    |error| / max |value|: nn.LSTM's at T <= 256) where T <= 256. Past that float32 itself strays:
    the cell state (no forget gate) adds up every step's rounding, by how much depends on the
    weights and the length, and the order of a sum moves it several times over (H100, T = 2048, B
    = 3, S = 64: d_input 2.3e-4 off with cuBLAS's products, 1.2e-3 and 3.1e-3 with the small-state
    kernels' two lane layouts; T = 2048, S = 300: 0.1-0.3). So there each result is held within
    10x the largest error of the cuBLAS path (full float32 products every step: the loop of cells'
    arithmetic), and at least 1e-3 (measured: within 1/15 of that bound at these sizes); a wrong
    step or gradient is off by its own size."""
    errors = long_sequence_errors(monkeypatch, size, ("auto", "cublas"))
    bound = 1e-3 if size[0] <= 256 else max(1e-3, 10 * max(errors["cublas"].values()))
    for name, error in errors["auto"].items():
        assert error < bound, (name, errors)


@pytest.mark.cuda
@pytest.mark.parametrize("rows", ["", "2", "4"])
@pytest.mark.parametrize("size", [(31, 3, 5, 70), (32, 3, 5, 70), (40, 5, 3, 93)], ids=str)
def test_cuda_small_state_kernels_on_both_sides_of_32_steps(monkeypatch, rows, size):
    """float32's small-state kernels, forced, in the planner's rows per block ("") and in 2 and 4,
    at 31 and 32 steps (from 32 the backward kernel past 64 columns takes 2 lanes a column where a
    block owns 1 or 2 rows, 4 below): outputs, final state and gradients within 1e-3 of float64
    (max |error| / max |value|), as test_cuda_long_sequences_at_torch_defaults holds T <= 256
    (check_against_reference's element-wise tolerances, set for a few steps, did not hold for the
    weights' gradient at 40 steps, 4 lanes or 2: 1.5e-5 to 2.3e-5 against 8e-6); a wrong step or
    gradient is off by its own size."""
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_SMALL_ROWS", rows)
    errors = long_sequence_errors(monkeypatch, size, ("small",))
    for name, error in errors["small"].items():
        assert error < 1e-3, (name, errors)


@pytest.mark.cuda
@pytest.mark.parametrize("path", ["wide", "grid", "cublas"])
def test_cuda_other_paths_at_small_states(monkeypatch, path):
    """The paths auto does not take at S = 128 on sm_90 (it takes the cluster kernels there), each
    forced, against the float64 loop, forward and gradients."""
    sequence_path(monkeypatch, path)
    check_against_reference((4, 9, 6, 128), "cuda", torch.float32)


# (T, B, I, S) whose products cuBLAS 13 (H100) would cut into K pieces of a few elements, and so
# run through cuBLASLt unsplit: the input projection 18 x 141 x 126 (88 pieces), d h0 9 x 65 x 195
# (176), and with cuBLAS every step, a step's 16 x 333 x 111 (132) and d h0 16 x 111 x 333 (264).
UNSPLIT_SIZES = [(9, 2, 126, 47), (9, 9, 169, 65), (5, 16, 119, 111)]


@pytest.mark.cuda
@pytest.mark.parametrize("unsplit", ["auto", "off"])
@pytest.mark.parametrize("path", ["auto", "cublas"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("size", UNSPLIT_SIZES, ids=lambda s: "x".join(map(str, s)))
def test_cuda_small_products_unsplit(monkeypatch, unsplit, path, dtype, size):
    """Small products through cuBLASLt without split-K where cuBLAS would split them finely
    (LLTM_EXT_CUBLAS_UNSPLIT=auto, the default), and as cuBLAS picks them (off): forward and all
    gradients against the float64 loop either way. Which products go unsplit is cuBLAS's heuristic
    (the sizes above are where it splits on an H100); bad settings are errors."""
    monkeypatch.setenv("LLTM_EXT_CUBLAS_UNSPLIT", unsplit)
    sequence_path(monkeypatch, path)
    check_against_reference(size, "cuda", dtype)
    monkeypatch.setenv("LLTM_EXT_CUBLAS_UNSPLIT", "sometimes")
    args = [a.detach() for a in make_args(*size, "cuda", dtype)]
    with pytest.raises(RuntimeError, match=r"LLTM_EXT_CUBLAS_UNSPLIT must be auto or off"):
        _ops.lltm_sequence(*args)


# (T, B, I, S) for the half types' padded step products (the cuBLAS path at S not a multiple of 8,
# calls of 4 or more steps): W_h, h_{t-1} and dG_t in rows of 40 and 112 (S = 37), 48 and 136
# (S = 45), 520 and 1560 (S = 518); B = 1 and odd, T = 4 (the fewest padded) and T = 3 (as they
# are), and S = 40 (a multiple of 8: never padded).
PADDED_SIZES = [(4, 1, 3, 37), (9, 13, 5, 37), (6, 70, 9, 518), (3, 5, 4, 45), (5, 3, 2, 40)]


@pytest.mark.cuda
@pytest.mark.parametrize("pad", ["auto", "off"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("size", PADDED_SIZES, ids=lambda s: "x".join(map(str, s)))
def test_cuda_padded_step_products(monkeypatch, pad, dtype, size):
    """The cuBLAS path's step products for the half types on zero-padded copies
    (LLTM_EXT_SEQUENCE_STEP_PAD=auto, the default) and on the tensors as they are (off): forward
    and all gradients against the float64 loop either way, and the two within the half type's
    rounding of each other; bad settings are errors."""
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_STEP_PAD", pad)
    sequence_path(monkeypatch, "cublas")
    check_against_reference(size, "cuda", dtype)
    args = make_args(*size, "cuda", dtype)
    padded = lltm_ext.lltm_sequence(args[0], args[1], args[2], (args[3], args[4]))[0]
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_STEP_PAD", "off" if pad == "auto" else "auto")
    other = lltm_ext.lltm_sequence(args[0], args[1], args[2], (args[3], args[4]))[0]
    assert_close(padded, other, dtype, 4.0)
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_STEP_PAD", "sometimes")
    with pytest.raises(RuntimeError, match=r"LLTM_EXT_SEQUENCE_STEP_PAD"):
        _ops.lltm_sequence(*[a.detach() for a in args])


# (T, B, I, S) for the split step product (cuBLAS path, float32 at full precision): every row
# tile (B <= 16, 32, 64 and 128, and two tiles of 128 at B = 130; the tensor-core kernel's tiles of
# 64 two and three times), columns that leave a block's 128 partly empty, and K = S or 3S that no
# stage of 16 or 32 divides; W_h read from a zero-padded copy (S or S + I not a multiple of 4) and
# in place (36 + 8, 100 + 12, 300 + 5 with its 3S = 900 columns over 8 blocks).
STEP_GEMM_SIZES = [(4, 1, 5, 33), (3, 13, 7, 131), (3, 29, 2, 70), (2, 50, 3, 45), (2, 111, 4, 37)]
STEP_GEMM_SIZES += [(2, 130, 3, 21), (3, 7, 8, 36), (2, 20, 12, 100), (2, 70, 5, 300)]


@pytest.mark.cuda
@pytest.mark.parametrize("kernel", ["own", "tensor", "wgmma"])
@pytest.mark.parametrize("splits", ["", "1", "3", "64"])
@pytest.mark.parametrize("size", STEP_GEMM_SIZES, ids=lambda s: "x".join(map(str, s)))
def test_cuda_step_gemm(monkeypatch, size, splits, kernel):
    """The cuBLAS path's step products through our split float32 kernels (forced: own, the SIMT
    cores; tensor, 3xTF32 on the tensor cores, sm_80+; wgmma, 3xTF32 on Hopper's tensor cores, its
    tiles of 128 rows once, twice at B = 130, and 3 - 128 rows of one), their K split as the
    planner picks ("") or as forced (64: as many as K allows): forward and all five gradients
    against the float64 loop, and the same bits from run to run."""
    if kernel == "tensor" and torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("the 3xTF32 step product needs sm_80+")
    if kernel == "wgmma" and torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("Hopper's step product needs an sm_90 GPU")
    sequence_path(monkeypatch, "cublas")
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_STEP_GEMM", kernel)
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_STEP_SPLITS", splits)
    check_against_reference(size, "cuda", torch.float32)
    args = make_args(*size, "cuda", torch.float32)
    runs = []
    for _ in range(2):
        output, (h_n, _) = lltm_ext.lltm_sequence(args[0], args[1], args[2], (args[3], args[4]))
        runs.append([output, *torch.autograd.grad(output.sum() + h_n.sum(), args)])
    for first, second in zip(*runs, strict=True):
        assert torch.equal(first, second)


@pytest.mark.cuda
def test_cuda_step_gemm_settings(monkeypatch):
    """LLTM_EXT_SEQUENCE_STEP_GEMM=own and =tensor are float32 at full precision only, and bad
    settings are errors that say what is allowed; cublas runs cuBLAS (checked against the float64
    loop)."""
    sequence_path(monkeypatch, "cublas")
    size = (2, 3, 4, 40)
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_STEP_GEMM", "cublas")
    check_against_reference(size, "cuda", torch.float32)
    half = [a.detach() for a in make_args(*size, "cuda", torch.bfloat16)]
    args = [a.detach() for a in make_args(*size, "cuda", torch.float32)]
    for kernel in ("own", "tensor", "wgmma"):
        monkeypatch.setenv("LLTM_EXT_SEQUENCE_STEP_GEMM", kernel)
        with pytest.raises(RuntimeError, match=rf"STEP_GEMM={kernel} needs float32 at full"):
            _ops.lltm_sequence(*half)
        with matmul_tf32(True):
            with pytest.raises(RuntimeError, match=r"with TF32 allowed"):
                _ops.lltm_sequence(*args)
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_STEP_GEMM", "mine")
    with pytest.raises(RuntimeError, match=r"must be auto, cublas, own, tensor or wgmma.*'mine'"):
        _ops.lltm_sequence(*args)
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_STEP_GEMM", "own")
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_STEP_SPLITS", "65")
    with pytest.raises(RuntimeError, match=r"STEP_SPLITS must be an integer from 1 to 64.*'65'"):
        _ops.lltm_sequence(*args)


# (T, B, I, S) and dtype for the step loops' CUDA graphs (LLTM_EXT_SEQUENCE_GRAPHS), on the cuBLAS
# path: float32 with the split step product (our kernels, launched with programmatic dependence)
# and with cuBLAS's (B past 32), bfloat16 at a state that is not a multiple of 8 (the padded
# products), and the mixed loops (a float32 state with bfloat16 products under autocast).
GRAPH_CASES = [
    ((10, 5, 7, 37), torch.float32, False),
    ((12, 40, 16, 64), torch.float32, False),
    ((9, 13, 5, 37), torch.bfloat16, False),
    ((12, 40, 16, 64), torch.float32, True),
]


def _sequence_step(args, grads, autocast, keep=True):
    """One forward and backward: (output, h_n, c_n) and the five gradients, detached (copies, so
    that the next call's allocations do not meet them); nothing where not `keep`."""
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        output, (h_n, c_n) = lltm_ext.lltm_sequence(args[0], args[1], args[2], (args[3], args[4]))
    d = torch.autograd.grad((output, h_n, c_n), args, grads)
    return [t.detach().clone() for t in (output, h_n, c_n, *d)] if keep else None


@pytest.mark.cuda
@pytest.mark.parametrize("case", GRAPH_CASES, ids=lambda c: "x".join(map(str, c[0])) + str(c[1:]))
def test_cuda_step_graphs(monkeypatch, case):
    """The per-step loops as CUDA graphs: calls of one shape on the same memory run directly
    first, are captured at the second sighting and replayed from then on, forward and backward,
    with outputs and gradients equal to the loops launched step by step (=off) and, through
    check_against_reference, to the float64 loop; a loop of fewer than 8 steps always runs
    directly; a bad value is an error."""
    size, dtype, autocast = case
    ext = load_extension("lltm_sequence")
    sequence_path(monkeypatch, "cublas")
    monkeypatch.setenv("LLTM_EXT_CUBLAS_UNSPLIT", "off")  # its products refuse capture (below)
    check_against_reference(size, "cuda", dtype)
    args = make_args(*size, "cuda", dtype)
    grads = [torch.randn(size[0], size[1], size[3], device="cuda")]
    grads += [torch.randn(size[1], size[3], device="cuda") for _ in range(2)]
    grads = [g.to(torch.float32 if autocast else dtype) for g in grads]
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_GRAPHS", "off")
    before = ext._step_graph_counts()
    direct = _sequence_step(args, grads, autocast)
    after = ext._step_graph_counts()
    assert after[0] - before[0] == 2 and after[1:] == before[1:]  # forward and backward loops
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_GRAPHS", "auto")
    # As in a training loop, each call's results dropped before the next: its allocations come
    # back at the same addresses after a few calls, and both loops are captured, then replayed.
    before = ext._step_graph_counts()
    calls = 0
    while calls < 24:
        calls += 1
        _sequence_step(args, grads, autocast, keep=False)
        after = ext._step_graph_counts()
        if after[1] - before[1] >= 2 and after[2] - before[2] >= 2:
            break
    assert after[1] - before[1] >= 2 and after[2] - before[2] >= 2, (calls, before, after)
    assert sum(after) - sum(before) == 2 * calls
    run = _sequence_step(args, grads, autocast)
    assert ext._step_graph_counts()[0] == after[0]  # this call's loops: graphs too
    # The loops' own results bit for bit (outputs, and the gradients of input, h0 and c0); the
    # weights' and bias's sums over all rows, made after the loop, within their rounding.
    for i, (got, want) in enumerate(zip(run, direct, strict=True)):
        if i in (4, 5):
            assert_close(got, want, got.dtype, 8.0)
        else:
            torch.testing.assert_close(got, want, rtol=0, atol=0)
    # Fewer than 8 steps: directly, however often seen.
    short = [a.detach()[:7].clone().requires_grad_() if i == 0 else a for i, a in enumerate(args)]
    before = ext._step_graph_counts()
    for _ in range(3):
        _sequence_step(short, [grads[0][:7], *grads[1:]], autocast)
    after = ext._step_graph_counts()
    assert after[0] - before[0] == 6 and after[1:] == before[1:]
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_GRAPHS", "always")
    with pytest.raises(RuntimeError, match=r"LLTM_EXT_SEQUENCE_GRAPHS must be auto or off"):
        _sequence_step(args, grads, autocast)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_cuda_step_graphs_with_unsplit_products(monkeypatch, dtype):
    """Where the cuBLAS path's step products go through cuBLASLt unsplit (small products at an
    unaligned state, unpadded), a loop is not captured (the product refuses it) and every call's
    output equals the loop launched step by step."""
    sequence_path(monkeypatch, "cublas")
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_STEP_PAD", "off")
    args = [a.detach() for a in make_args(9, 13, 5, 37, "cuda", dtype)]
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_GRAPHS", "off")
    direct = _ops.lltm_sequence(*args)[0]
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_GRAPHS", "auto")
    for _ in range(6):
        torch.testing.assert_close(_ops.lltm_sequence(*args)[0], direct, rtol=0, atol=0)


@pytest.mark.cuda
def test_cuda_step_graphs_inside_a_callers_graph(monkeypatch):
    """A forward captured in the caller's torch.cuda.CUDAGraph after its loop was seen twice
    (so ours would capture or replay it): it runs directly into the caller's graph, which
    replays it on new input like the direct call."""
    ext = load_extension("lltm_sequence")
    sequence_path(monkeypatch, "cublas")
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_GRAPHS", "auto")
    args = [a.detach() for a in make_args(12, 40, 16, 64, "cuda", torch.float32)]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            _ops.lltm_sequence(*args)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    before = ext._step_graph_counts()
    with torch.cuda.graph(graph):
        output = _ops.lltm_sequence(*args)[0]
    after = ext._step_graph_counts()
    assert after[0] - before[0] == 1 and after[1:] == before[1:]
    args[0].copy_(torch.randn_like(args[0]))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(output, _ops.lltm_sequence(*args)[0], rtol=0, atol=0)


@pytest.mark.cuda
def test_cuda_cluster_path_refuses_what_it_cannot_run(monkeypatch):
    """Forced, the cluster path says why it does not apply (S past kClusterMaxState) instead of
    running another path; auto runs cuBLAS there. Unknown settings of the path and of the
    product are errors that list the valid ones."""
    sequence_path(monkeypatch, "cluster")
    args = [a.detach() for a in make_args(2, 3, 4, 300, "cuda", torch.float32)]
    with pytest.raises(RuntimeError, match=r"LLTM_EXT_SEQUENCE_PATH=cluster.*state 300"):
        _ops.lltm_sequence(*args)
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_PATH", "sideways")
    with pytest.raises(
        RuntimeError, match=r"must be auto, small, cluster, wide, tiled, grid or cublas.*'sideways'"
    ):
        _ops.lltm_sequence(*args)
    sequence_path(monkeypatch, "cluster")
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_PRODUCT", "sideways")
    small = [a.detach() for a in make_args(2, 3, 4, 16, "cuda", torch.float32)]
    with pytest.raises(
        RuntimeError,
        match=r"LLTM_EXT_SEQUENCE_PRODUCT must be auto, simt, tensor or tf32.*'sideways'",
    ):
        _ops.lltm_sequence(*small)
    monkeypatch.delenv("LLTM_EXT_SEQUENCE_PRODUCT")
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_CLUSTER_BLOCKS", "3")
    with pytest.raises(
        RuntimeError, match=r"LLTM_EXT_SEQUENCE_CLUSTER_BLOCKS must be 1, 2, 4 or 8.*'3'"
    ):
        _ops.lltm_sequence(*small)
    monkeypatch.delenv("LLTM_EXT_SEQUENCE_CLUSTER_BLOCKS")
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_CLUSTER_ROWS", "3")
    with pytest.raises(
        RuntimeError, match=r"LLTM_EXT_SEQUENCE_CLUSTER_ROWS must be 2, 4, 8 or 16.*'3'"
    ):
        _ops.lltm_sequence(*small)


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [40, 40000], ids=["one_launch", "launch_per_step"])
def test_cuda_fused_steps_one_launch_or_per_step(monkeypatch, batch):
    """Small state sizes run the fused step kernels: all steps in one cooperative launch when the
    grid fits on the GPU at once (B = 40), one launch per step when it does not (B = 40000, S = 16:
    5000 blocks); both against the float64 loop, forward and gradients."""
    sequence_path(monkeypatch, "grid")
    args = make_args(5, batch, 3, 16, "cuda", torch.float32)
    output, (h_n, c_n) = lltm_ext.lltm_sequence(args[0], args[1], args[2], (args[3], args[4]))
    grads = [torch.randn_like(output), torch.randn_like(h_n), torch.randn_like(c_n)]
    ours = torch.autograd.grad((output, h_n, c_n), args, grads)
    ref_outs, ref_grads = reference(args, grads)
    for got, want in zip((output, h_n, c_n), ref_outs, strict=True):
        assert_close(got, want, torch.float32)
    for got, want in zip(ours, ref_grads, strict=True):  # weights: sums over T * B rows
        torch.testing.assert_close(got.double().cpu(), want, rtol=1e-4, atol=1e-4)


# (T, B, I, S) for the weight gradients in one kernel: one split of k and several (T B up to 1476
# rows, split for the GPU's SMs), gate rows and columns that leave 64 x 64 tiles partly empty (3S =
# 270 over five, S + I + 1 = 331 over six), no input features (the bias column right after h's),
# B = 1 (h0's block a single row); S = 32 with S + I = 37 (cuBLAS writes the recurrent block into
# an aligned copy).
WEIGHT_GRAD_SIZES = [(5, 4, 3, 6), (1, 1, 1, 1), (3, 2, 0, 4), (9, 5, 33, 17), (12, 123, 70, 45)]
WEIGHT_GRAD_SIZES += [(7, 130, 5, 90), (2, 3, 200, 130), (33, 4, 2, 20), (9, 8, 5, 32)]


@pytest.mark.cuda
@pytest.mark.parametrize("wgrad", ["fused", "cublas"])
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str
)
@pytest.mark.parametrize("size", WEIGHT_GRAD_SIZES, ids=lambda s: "x".join(map(str, s)))
def test_cuda_weight_grad(monkeypatch, wgrad, dtype, size):
    """The weight and bias gradients in one kernel (LLTM_EXT_SEQUENCE_WGRAD=fused) and through
    cuBLAS's products and a column sum (cublas): forward and all five gradients against the float64
    loop, the weights' without the bias's and the bias's without the weights', the same bits from
    run to run; bad settings are errors."""
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_WGRAD", wgrad)
    check_against_reference(size, "cuda", dtype)
    args = make_args(*size, "cuda", dtype)
    rows_scale = 8 if size[0] * size[1] <= 256 else 32
    scale = (1.0 if dtype in (torch.float32, torch.float64) else 4.0) * rows_scale
    grads = [torch.randn(size[0], size[1], size[3], device="cuda", dtype=dtype)]
    _, ref = reference(args, grads + [torch.zeros(size[1], size[3], dtype=dtype)] * 2)
    for wanted in ((False, True, False, False, False), (False, False, True, False, False)):
        subset = [a.detach().requires_grad_(w) for a, w in zip(args, wanted, strict=True)]
        runs = []
        for _ in range(2):
            output, _ = lltm_ext.lltm_sequence(*subset[:3], (subset[3], subset[4]))
            runs.append(torch.autograd.grad(output, [a for a in subset if a.requires_grad], grads))
        assert torch.equal(runs[0][0], runs[1][0])
        assert_close(runs[0][0], ref[wanted.index(True)], dtype, scale)
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_WGRAD", "sometimes")
    with pytest.raises(RuntimeError, match=r"SEQUENCE_WGRAD must be auto, fused, tensor or"):
        torch.autograd.grad(
            lltm_ext.lltm_sequence(*args[:3], (args[3], args[4]))[0], args[1], grads
        )


# (T, B, I, S) for the Hopper weight gradient's 128 x 128 tiles and 32-row stages: one tile (3S =
# 12) and one row, 3S = 141 and S + I + 1 = 69 (a second tile row mostly empty) over T B = 1480
# rows (not a multiple of 32) in several splits, 3S = 390 and 331 columns (three tile rows and
# columns) with h0's rows spanning five stages, no input features (the bias column right after h's).
TENSOR_WEIGHT_GRAD_SIZES = [(1, 1, 1, 4), (40, 37, 21, 47), (11, 130, 200, 130), (300, 8, 0, 70)]


@pytest.mark.cuda
@pytest.mark.parametrize("size", TENSOR_WEIGHT_GRAD_SIZES, ids=lambda s: "x".join(map(str, s)))
def test_cuda_weight_grad_on_tensor_cores(monkeypatch, size):
    """float32's weight and bias gradients on Hopper's tensor cores (LLTM_EXT_SEQUENCE_WGRAD=tensor,
    three TF32 passes with float32 sums) against the float64 loop, from a given state and from
    none: within twice the error of cuBLAS's exact float32 products (cublas) on the same inputs
    (max |error| / max |value|; the float32 sequence's own drift over 300 steps is 3.5e-4 of it)
    and within 1e-3; the same bits from run to run; the other dtypes, and GPUs other than Hopper,
    are refused."""
    args = make_args(*size, "cuda", torch.float32)
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_WGRAD", "tensor")
    if torch.cuda.get_device_capability()[0] != 9:
        with pytest.raises(RuntimeError, match=r"WGRAD=tensor runs float32 on Hopper's tensor"):
            torch.autograd.grad(lltm_ext.lltm_sequence(*args[:3])[0].sum(), args[1])
        return
    grads = [torch.randn(size[0], size[1], size[3], device="cuda")]
    zeros = torch.zeros(size[1], size[3], device="cuda")
    for state in ((args[3], args[4]), None):
        given = [args[3], args[4]] if state is not None else [zeros, zeros]
        _, ref = reference([*args[:3], *given], grads + [zeros, zeros])
        errors, runs = {}, []
        for wgrad in ("tensor", "tensor", "cublas"):
            monkeypatch.setenv("LLTM_EXT_SEQUENCE_WGRAD", wgrad)
            w, b = args[1].detach().requires_grad_(), args[2].detach().requires_grad_()
            output, _ = lltm_ext.lltm_sequence(args[0].detach(), w, b, state)
            got = torch.autograd.grad(output, (w, b), grads)
            runs.append(got)
            errors[wgrad] = [
                ((g.double().cpu() - want).abs().max() / want.abs().max()).item()
                for g, want in zip(got, ref[1:3], strict=True)
            ]
        assert all(torch.equal(g, f) for g, f in zip(runs[0], runs[1], strict=True))
        for tensor, exact in zip(errors["tensor"], errors["cublas"], strict=True):
            assert tensor < 1e-3 and tensor <= 2 * exact + 1e-7, errors
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_WGRAD", "tensor")
    args = make_args(*size, "cuda", torch.bfloat16)
    with pytest.raises(RuntimeError, match=r"WGRAD=tensor runs float32 on Hopper's tensor"):
        torch.autograd.grad(lltm_ext.lltm_sequence(*args[:3])[0].sum(), args[1])


@pytest.mark.cuda
def test_cuda_deterministic():
    args = make_args(8, 16, 32, 64, "cuda", torch.float32)
    runs = []
    for _ in range(2):
        output, (_, c_n) = lltm_ext.lltm_sequence(args[0], args[1], args[2], (args[3], args[4]))
        grads = torch.autograd.grad(output.sum() + c_n.sum(), args)
        runs.append([output, *grads])
    for a, b in zip(*runs, strict=True):
        assert torch.equal(a, b)


@pytest.mark.cuda
@pytest.mark.large
def test_cuda_more_than_2_31_elements():
    """T = 64, B = 12000, S = 1024: the saved gates (T, B, 3S) and their gradients have 2.4e9
    elements, the input projections and the weight gradients are products over T * B rows (in
    pieces: no cuBLAS operand spans 2^31 elements); outputs and all gradients against a loop of
    lltm_ext.lltm (itself tested against the pure-PyTorch cell), float32."""
    steps, batch, features, state = 64, 12000, 1, 1024
    if torch.cuda.mem_get_info()[0] < 64 * 2**30:
        pytest.skip("needs 64 GiB of free GPU memory")
    args = make_args(steps, batch, features, state, "cuda", torch.float32)
    x, w, b, h, c = args
    output, (_, c_n) = lltm_ext.lltm_sequence(x, w, b, (h, c))
    assert output.shape == (steps, batch, state)
    weight = torch.randn(steps, 1, state, device="cuda")
    ours = torch.autograd.grad((output * weight).sum() + c_n.sum(), args)
    output = output.detach()
    loop_h, loop_c = h, c
    loop = []
    for t in range(steps):
        loop_h, loop_c = lltm_ext.lltm(x[t], w, b, loop_h, loop_c)
        loop.append(loop_h)
    loop = torch.stack(loop)
    want = torch.autograd.grad((loop * weight).sum() + loop_c.sum(), args)
    # Sums over T * B = 768000 rows in another order: compared as a whole and to the largest.
    for got, ref in ((output, loop), *zip(ours, want, strict=True)):
        assert ((got - ref).norm() / ref.norm()).item() < 1e-4
        assert (got - ref).abs().max().item() <= 1e-3 * ref.abs().max().item()
