"""LLTM op: values and all five gradients vs a float64 pure-PyTorch reference, on every device and
dtype; gradcheck, opcheck, torch.compile, the nn.Module, and errors for bad input."""

import math

import pytest
import torch
from helpers import (
    assert_close,
    assert_compiled_matches_eager,
    assert_same_loss_and_grads,
    device_dtypes,
    devices,
)

import lltm_ext
from lltm_ext._extension import cuda_built
from lltm_ext.ops.lltm import lltm_backward, lltm_forward, lltm_reference

SIZES = [(8, 12, 16), (5, 3, 7), (1, 1, 1), (0, 4, 6), (3, 0, 5), (33, 64, 130)]


def make_args(batch, features, state, device, dtype, bias_2d=False):
    """Random (input, weights, bias, old_h, old_cell) requiring grad; weights scaled as in LLTM."""
    stdv = 1.0 / math.sqrt(max(state, 1))
    bias_shape = (1, 3 * state) if bias_2d else (3 * state,)
    tensors = [
        torch.randn(batch, features),
        torch.rand(3 * state, features + state) * 2 * stdv - stdv,
        torch.rand(bias_shape) * 2 * stdv - stdv,
        torch.randn(batch, state),
        torch.randn(batch, state),
    ]
    return [t.to(device=device, dtype=dtype).requires_grad_() for t in tensors]


def reference_with_grads(args, grads):
    """Outputs and the five gradients of the pure-PyTorch LLTM in float64 on the CPU."""
    ref_args = [a.detach().cpu().double().requires_grad_() for a in args]
    outs = lltm_reference(*ref_args)
    d = torch.autograd.grad(outs, ref_args, [g.cpu().double() for g in grads])
    return outs, d


def grads_run_twice(args):
    """The cell's outputs on `args`, random gradients of them and the five input gradients; a
    second run must give the same bits."""
    outs = lltm_ext.lltm(*args)
    grads = [torch.randn_like(outs[0]), torch.randn_like(outs[1])]
    ours = torch.autograd.grad(outs, args, grads)
    again = torch.autograd.grad(lltm_ext.lltm(*args), args, grads)
    for got, repeat in zip(ours, again, strict=True):
        assert torch.equal(got, repeat)
    return outs, grads, ours


@pytest.mark.parametrize("device,dtype", device_dtypes())
@pytest.mark.parametrize("size", SIZES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("bias_2d", [False, True], ids=["bias1d", "bias2d"])
def test_matches_reference(device, dtype, size, bias_2d):
    args = make_args(*size, device, dtype, bias_2d)
    new_h, new_cell = lltm_ext.lltm(*args)
    assert new_h.dtype == dtype and new_h.device.type == device
    grads = [torch.randn_like(new_h), torch.randn_like(new_cell)]
    ours = torch.autograd.grad((new_h, new_cell), args, grads)
    (ref_h, ref_c), ref_grads = reference_with_grads(args, grads)
    # Low precision: the products run in `dtype` (accumulated in float), so allow a few roundings
    # per reduction over S + I (forward) or B (weight gradients).
    scale = 1.0 if dtype in (torch.float32, torch.float64) else 2.0
    assert_close(new_h, ref_h, dtype, scale)
    assert_close(new_cell, ref_c, dtype, scale)
    for name, got, want, arg in zip(
        ["input", "weights", "bias", "old_h", "old_cell"], ours, ref_grads, args, strict=False
    ):
        assert got.shape == arg.shape, name
        assert got.dtype == dtype, name
        assert_close(got, want, dtype, scale * 4)


@pytest.mark.parametrize("device", devices())
def test_gradcheck_float64(device):
    args = make_args(4, 5, 6, device, torch.float64)
    assert torch.autograd.gradcheck(lltm_ext.lltm, args)
    assert torch.autograd.gradcheck(
        lltm_ext.LLTMFunction.apply, make_args(3, 2, 4, device, torch.float64, True)
    )


@pytest.mark.parametrize("device", devices())
def test_gates_at_extremes(device):
    """Saturated gates stay finite; ELU's gradient at z == 0 is torch's (1)."""
    args = make_args(2, 3, 4, device, torch.float32)
    with torch.no_grad():
        args[2].copy_(torch.tensor([1000.0, -1000.0, 0.0, 0.0] * 3))
    new_h, new_cell = lltm_ext.lltm(*args)
    assert torch.isfinite(new_h).all() and torch.isfinite(new_cell).all()
    grads = [torch.ones_like(new_h), torch.ones_like(new_cell)]
    ours = torch.autograd.grad((new_h, new_cell), args, grads)
    _, ref = reference_with_grads(args, grads)
    for got, want in zip(ours, ref, strict=False):
        assert torch.isfinite(got).all()
        assert_close(got, want, torch.float32, 4)


@pytest.mark.parametrize("device", devices())
def test_non_contiguous_inputs(device):
    args = make_args(6, 5, 4, device, torch.float64)
    # Same values, transposed storage.
    nc = [a.detach().t().contiguous().t().requires_grad_() if a.dim() == 2 else a for a in args]
    assert not nc[0].is_contiguous()
    outs = lltm_ext.lltm(*nc)
    (ref_h, ref_c), _ = reference_with_grads(args, [torch.zeros_like(o) for o in outs])
    assert_close(outs[0], ref_h, torch.float64)
    assert_close(outs[1], ref_c, torch.float64)
    grads = torch.autograd.grad(outs, nc, [torch.ones_like(o) for o in outs])
    for g, a in zip(grads, nc, strict=False):
        assert g.shape == a.shape


@pytest.mark.parametrize("device,dtype", device_dtypes())
def test_steps_chained(device, dtype):
    """Three steps, the state carried: each step's d_old_h reaches the step before as a column
    block of its d_X (read with a row stride, not copied); gradients of all steps' arguments."""
    args = make_args(6, 5, 9, device, dtype)
    ref_args = [a.detach().cpu().double().requires_grad_() for a in args]
    outs = []
    for fn, (x, w, b, h, c) in ((lltm_ext.lltm, args), (lltm_reference, ref_args)):
        for _ in range(3):
            h, c = fn(x, w, b, h, c)
        outs.append((h, c))
    weights = [torch.randn(6, 9), torch.randn(6, 9)]
    for h, c in outs:
        ((h * weights[0].to(h)).sum() + (c * weights[1].to(c)).sum()).backward()
    scale = 1.0 if dtype in (torch.float32, torch.float64) else 2.0
    names = ["input", "weights", "bias", "old_h", "old_cell"]
    for name, got, want in zip(names, args, ref_args, strict=True):
        assert got.grad.dtype == dtype, name
        assert_close(got.grad, want.grad, dtype, scale * 8)


@pytest.mark.parametrize("device,dtype", device_dtypes())
@pytest.mark.parametrize(
    "size", [(3000, 20, 70), (20000, 3, 33)], ids=lambda s: "x".join(map(str, s))
)
def test_bias_gradient_over_many_rows(device, dtype, size):
    """Batches whose bias gradient the CUDA backward sums in many row chunks (partial sums, then
    their sum): all five gradients vs float64 (relative to each gradient's norm: the weight and
    bias gradients sum thousands of rows), and the same bits on a second run (on the CPU, whose
    tasks sum blocks of columns, also on one thread)."""
    args = make_args(*size, device, dtype)
    _, grads, ours = grads_run_twice(args)
    if device == "cpu":
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            single = torch.autograd.grad(lltm_ext.lltm(*args), args, grads)
        finally:
            torch.set_num_threads(threads)
        assert torch.equal(single[2], ours[2])
    _, ref_grads = reference_with_grads(args, grads)
    budget = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 3e-2}
    for name, got, want in zip(
        ["input", "weights", "bias", "old_h", "old_cell"], ours, ref_grads, strict=True
    ):
        assert got.dtype == dtype and got.shape == want.shape, name
        err = (got.double().cpu() - want).norm() / want.norm()
        assert err < budget[dtype], f"{name}: relative error {err:.3g}"


@pytest.mark.parametrize("device", devices())
def test_backward_reads_grad_h_with_a_row_stride(device):
    args = [a.detach() for a in make_args(4, 3, 5, device, torch.float64)]
    new_cell, gates, X = lltm_forward(*args)[1:]
    wide = torch.randn(4, 12, device=device, dtype=torch.float64)
    grad_h, grad_cell = wide[:, 2:7], torch.randn_like(new_cell)  # row stride 12, not 5
    saved = [new_cell, gates, X, args[1]]
    strided = lltm_backward(grad_h, grad_cell, *saved)
    dense = lltm_backward(grad_h.contiguous(), grad_cell, *saved)
    for got, want in zip(strided, dense, strict=True):
        assert torch.equal(got, want)
    with pytest.raises(RuntimeError, match="`grad_h` must have contiguous rows"):
        lltm_backward(grad_h.t().contiguous().t(), grad_cell, *saved)


@pytest.mark.parametrize("device", devices())
def test_opcheck(device):
    args = [a.detach() for a in make_args(4, 3, 5, device, torch.float32)]
    torch.library.opcheck(lltm_forward, args)
    outs = lltm_forward(*args)
    new_cell, gates, X = outs[1:]
    grads = [torch.randn_like(new_cell), torch.randn_like(new_cell)]
    torch.library.opcheck(lltm_backward, [*grads, new_cell, gates, X, args[1]])
    torch.library.opcheck(
        lltm_forward, [a.detach() for a in make_args(4, 3, 5, device, torch.float64)]
    )
    # Gradients come from LLTMFunction; backward through the bare operator raises.
    out = lltm_forward(*make_args(4, 3, 5, device, torch.float64))
    with pytest.raises(RuntimeError, match="not implemented"):
        out[0].sum().backward()


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_fullgraph(device, backend):
    args = make_args(4, 3, 5, device, torch.float32)

    def step(input, weights, bias, old_h, old_cell):
        h, c = lltm_ext.lltm(input, weights, bias, old_h, old_cell)
        return (h * 2 + c).sum()

    assert_compiled_matches_eager(step, args, backend)


@pytest.mark.parametrize("device", devices())
def test_module(device):
    cell = lltm_ext.LLTM(7, 9).to(device)
    assert cell.weights.shape == (27, 16) and cell.bias.shape == (27,)
    bound = 1 / math.sqrt(9)
    assert all(p.abs().max() <= bound for p in cell.parameters())
    x = torch.randn(4, 7, device=device)
    h, c = torch.randn(4, 9, device=device), torch.randn(4, 9, device=device)
    new_h, new_cell = cell(x, (h, c))
    ref_h, ref_c = lltm_reference(x, cell.weights, cell.bias, h, c)
    torch.testing.assert_close(new_h, ref_h)
    torch.testing.assert_close(new_cell, ref_c)
    (new_h.sum() + new_cell.sum()).backward()
    assert cell.weights.grad is not None and cell.bias.grad.shape == (27,)
    assert "input_features=7, state_size=9" in repr(cell)


def test_bad_inputs():
    good = [a.detach() for a in make_args(4, 3, 5, "cpu", torch.float32)]

    def call(**changes):
        names = ["input", "weights", "bias", "old_h", "old_cell"]
        args = [changes.get(n, a) for n, a in zip(names, good, strict=False)]
        return lltm_ext.lltm(*args)

    # Each message blames the argument that is wrong against the weights (3S, S + I), which fix
    # state_size S = 5 and input_features I = 3 here.
    with pytest.raises(RuntimeError, match=r"`input` must have shape \[batch, 3\].*\[4, 4\]"):
        call(input=torch.randn(4, 4))
    with pytest.raises(RuntimeError, match=r"`input` must have shape \[batch, 3\].*\[4, 3, 1\]"):
        call(input=torch.randn(4, 3, 1))
    with pytest.raises(RuntimeError, match=r"`old_h` must have shape \[4, 5\].*\[4, 6\]"):
        call(old_h=torch.randn(4, 6))
    with pytest.raises(RuntimeError, match=r"`old_cell` must have shape \[4, 5\].*\[3, 5\]"):
        call(old_cell=torch.randn(3, 5))
    with pytest.raises(RuntimeError, match=r"`bias` must have shape \[15\] or \[1, 15\]"):
        call(bias=torch.randn(2, 15))
    with pytest.raises(RuntimeError, match=r"`weights` must have shape \[3 \* state_size"):
        call(weights=torch.randn(14, 8))
    # Weights of another cell (S = 5, I = 2): the message says how I follows from them.
    with pytest.raises(RuntimeError, match=r"weights.size\(1\) - state_size = 7 - 5"):
        call(weights=torch.randn(15, 7))
    with pytest.raises(RuntimeError, match=r"one dtype.*`weights` is Double"):
        call(weights=good[1].double())
    with pytest.raises(RuntimeError, match=r"`input` must have a floating-point dtype.*Int"):
        lltm_ext.lltm(*[a.to(torch.int32) for a in good])
    with pytest.raises(RuntimeError, match="`input` must be contiguous"):
        lltm_forward(torch.randn(3, 4).t(), *good[1:])


def test_module_state_must_be_a_pair():
    cell = lltm_ext.LLTM(3, 5)
    x, h = torch.randn(4, 3), torch.randn(4, 5)
    with pytest.raises(
        TypeError, match=r"`state` must be None \(zeros\) or a pair \(h, cell\).*shape \[4, 5\]"
    ):
        cell(x, h)
    with pytest.raises(TypeError, match=r"`state` must be None \(zeros\) or a pair.*length 3"):
        cell(x, (h, h, h))


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_module_without_state_starts_from_zeros(device, compiled):
    """cell(x) and cell(x, None) are cell(x, (zeros, zeros)), as nn.LSTMCell's hx=None: the
    reference's values and gradients; an input of the wrong rank still meets lltm's check."""
    torch._dynamo.reset()
    cell = lltm_ext.LLTM(3, 5, device=device, dtype=torch.float64)
    step = torch.compile(cell, fullgraph=True) if compiled else cell
    x = torch.randn(4, 3, device=device, dtype=torch.float64, requires_grad=True)
    zero = torch.zeros(4, 5, device=device, dtype=torch.float64)
    ref = lltm_reference(x, cell.weights, cell.bias, zero, zero)
    ref_grads = torch.autograd.grad(ref[0].sum() + ref[1].sum(), (x, cell.weights))
    for out in (step(x), step(x, None)):
        torch.testing.assert_close(out, ref)
        grads = torch.autograd.grad(out[0].sum() + out[1].sum(), (x, cell.weights))
        torch.testing.assert_close(grads, ref_grads)
    with pytest.raises(RuntimeError, match=r"`input` must have shape \[batch, 3\].*\[3\]"):
        cell(torch.randn(3, device=device, dtype=torch.float64))


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_aliased_arguments(device, compiled):
    """One tensor passed as several arguments (a zero state `h = c = zeros`, or an input that is
    also the state): eager and torch.compile(fullgraph=True) give the reference's values and
    gradients."""
    torch._dynamo.reset()
    cell = lltm_ext.LLTM(5, 5, device=device, dtype=torch.float64)

    def step(x, h):
        h1, c1 = cell(x, (h, h))  # h is both states
        h2, c2 = cell(h1, (h1, c1))  # h1 is input and hidden state
        return (h2 * 2 + c2).sum()

    def ref(x, h):
        h1, c1 = lltm_reference(x, cell.weights, cell.bias, h, h)
        h2, c2 = lltm_reference(h1, cell.weights, cell.bias, h1, c1)
        return (h2 * 2 + c2).sum()

    x = torch.randn(3, 5, device=device, dtype=torch.float64, requires_grad=True)
    h = torch.randn(3, 5, device=device, dtype=torch.float64, requires_grad=True)
    fn = torch.compile(step, fullgraph=True, backend="aot_eager") if compiled else step
    assert_same_loss_and_grads(fn, ref, (x, h), wrt=(x, h, cell.weights))


@pytest.mark.cuda
def test_mixed_devices():
    good = [a.detach() for a in make_args(4, 3, 5, "cuda", torch.float32)]
    with pytest.raises(RuntimeError, match=r"one device.*`weights` is on cpu.*`input` is on cuda"):
        lltm_ext.lltm(good[0], good[1].cpu(), *good[2:])
    # Gradients arriving on another device than the saved tensors.
    outs = lltm_forward(*good)
    with pytest.raises(RuntimeError, match="one device"):
        lltm_backward(outs[0].cpu(), outs[1], *outs[1:4], good[1])


@pytest.mark.cuda
def test_cuda_tensor_on_cpu_only_build():
    """Run against a CPU-only build (LLTM_EXT_CUDA=0) on a GPU machine: a clear error."""
    if cuda_built("lltm"):
        pytest.skip(
            "this build has CUDA kernels; tools/ci/gpu_check.sh runs this on a CPU-only build"
        )
    args = [a.detach() for a in make_args(2, 3, 4, "cuda", torch.float32)]
    with pytest.raises(RuntimeError, match=r"built without CUDA support.*LLTM_EXT_CUDA=1"):
        lltm_ext.lltm(*args)


@pytest.mark.cuda
def test_cuda_uses_current_stream_and_device_guard():
    """Work goes on the current stream; a tensor on device 0 works while another stream is set."""
    args = [a.detach() for a in make_args(64, 32, 128, "cuda", torch.float32)]
    expected = lltm_ext.lltm(*args)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        got = lltm_ext.lltm(*args)
    torch.cuda.current_stream().wait_stream(side)
    torch.testing.assert_close(got[0], expected[0])
    torch.testing.assert_close(got[1], expected[1])


# (B, I, S) for both CUDA cell paths: a batch not a multiple of the fused kernels' 8-row blocks,
# states not a multiple of their 32 columns, K = S + I of one to several 32-column tiles, I = 0,
# B = 1 and S = 1, and a cell past the fused path's default size (B * 3S * K > 2^23).
CELL_PATH_SIZES = [(9, 31, 33), (1, 1, 1), (16, 0, 40), (5, 70, 3), (16, 32, 128), (130, 200, 300)]


@pytest.mark.cuda
@pytest.mark.parametrize("path", ["fused", "cublas"])
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16], ids=str
)
@pytest.mark.parametrize("size", CELL_PATH_SIZES, ids=lambda s: "x".join(map(str, s)))
def test_cuda_cell_paths(monkeypatch, path, dtype, size):
    """Each CUDA cell path forced (LLTM_EXT_CELL_PATH: the small cell's two kernels, or cat, cuBLAS
    and the gate kernels) against float64, forward and all five gradients, 1-D and 2-D bias; the
    same bits on a second run."""
    monkeypatch.setenv("LLTM_EXT_CELL_PATH", path)
    for bias_2d in (False, True):
        args = make_args(*size, "cuda", dtype, bias_2d)
        outs, grads, ours = grads_run_twice(args)
        (ref_h, ref_c), ref_grads = reference_with_grads(args, grads)
        scale = 1.0 if dtype in (torch.float32, torch.float64) else 2.0
        assert_close(outs[0], ref_h, dtype, scale)
        assert_close(outs[1], ref_c, dtype, scale)
        names = ["input", "weights", "bias", "old_h", "old_cell"]
        # The weight and bias gradients sum B rows: their rounding grows as sqrt(B).
        rows = max(1.0, math.sqrt(size[0] / 8))
        for name, got, want, arg in zip(names, ours, ref_grads, args, strict=True):
            assert got.shape == arg.shape and got.dtype == dtype, name
            assert_close(got, want, dtype, scale * 4 * rows)


@pytest.mark.cuda
@pytest.mark.parametrize("path", ["auto", "fused", "cublas"])
def test_cuda_cell_path_setting(monkeypatch, path):
    """Every path writes X = [old_h, input] for backward, the same bits as cat; an unknown
    LLTM_EXT_CELL_PATH lists the valid ones."""
    monkeypatch.setenv("LLTM_EXT_CELL_PATH", path)
    args = [a.detach() for a in make_args(16, 32, 128, "cuda", torch.float32)]
    assert torch.equal(lltm_forward(*args)[3], torch.cat([args[3], args[0]], 1))
    monkeypatch.setenv("LLTM_EXT_CELL_PATH", "sideways")
    with pytest.raises(RuntimeError, match=r"must be auto, fused or cublas.*'sideways'"):
        lltm_forward(*args)


def test_double_backward_raises():
    """The backward kernels are not differentiable: a 2nd derivative raises, saying so."""
    args = make_args(2, 3, 4, "cpu", torch.float64)
    new_h, _ = lltm_ext.lltm(*args)
    grads = torch.autograd.grad(new_h.sum(), args, create_graph=True)
    for g in grads:  # each gradient depends on the inputs, and differentiating it raises
        with pytest.raises(RuntimeError, match=r"lltm_ext.lltm: second derivatives are not"):
            torch.autograd.grad(g.sum(), args, allow_unused=True)
    # With a differentiable incoming gradient too.
    new_h, _ = lltm_ext.lltm(*args)
    v = torch.ones_like(new_h, requires_grad=True)
    grads = torch.autograd.grad(new_h, args, v, create_graph=True)
    with pytest.raises(RuntimeError, match="first-order only"):
        grads[1].sum().backward()
    # Only the input asking (the weights frozen): its gradient's derivative by the input raises.
    x, w, b, h, c = [a.detach() for a in args]
    x.requires_grad_()
    new_h, _ = lltm_ext.lltm(x, w, b, h, c)
    (d_x,) = torch.autograd.grad(new_h.square().sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match=r"lltm_ext.lltm: second derivatives are not"):
        torch.autograd.grad(d_x.square().sum(), x)
    # Without create_graph nothing is added: plain gradients.
    new_h, _ = lltm_ext.lltm(*args)
    assert not any(g.requires_grad for g in torch.autograd.grad(new_h.sum(), args))


@pytest.mark.cuda
@pytest.mark.large
def test_cuda_more_than_2_31_gate_elements():
    """bfloat16, B = 2^22 rows of state 200: the gates (B, 3S) have 2.5e9 elements, so the gate
    kernels index in 64 bits; rows checked in chunks against the pure-PyTorch LLTM (float32 math
    on the same products), forward and the row-wise gradients (old_h, old_cell)."""
    batch, features, state = 2**22, 1, 200
    if torch.cuda.mem_get_info()[0] < 40 * 2**30:
        pytest.skip("needs about 40 GiB of free GPU memory")
    args = make_args(batch, features, state, "cuda", torch.bfloat16)
    assert 3 * batch * state > 2**31
    new_h, new_cell = lltm_ext.lltm(*args)
    grads = [torch.randn_like(new_h), torch.randn_like(new_cell)]
    d_old_h, d_old_cell = torch.autograd.grad((new_h, new_cell), (args[3], args[4]), grads)
    chunk = 2**18
    for i in range(0, batch, chunk):
        rows = slice(i, i + chunk)
        part = [a.detach()[rows] if a.shape[0] == batch else a.detach() for a in args]
        part = [p.float().requires_grad_() for p in part]
        ref_h, ref_c = lltm_reference(*part)
        ref = torch.autograd.grad(
            (ref_h, ref_c), (part[3], part[4]), [g[rows].float() for g in grads]
        )
        for got, want in (
            (new_h, ref_h),
            (new_cell, ref_c),
            (d_old_h, ref[0]),
            (d_old_cell, ref[1]),
        ):
            assert_close(got[rows], want, torch.bfloat16, 4)
