"""lltm_ext's ops under torch.autocast, against what PyTorch gives there: gemm against torch.mm
(autocast's lower-precision list); the LLTM cell and sequence against a Python loop of the
pure-PyTorch cell under the same autocast (its dtypes, and within 2x its own error against
float64); gradients reaching float32 parameters in float32; torch.compile; a GradScaler float16
run that trains."""

import pytest
import torch

import lltm_ext
from lltm_ext._extension import load_extension
from lltm_ext.ops.lltm import lltm_loop, lltm_reference

# (device, autocast dtype): the CPU's and CUDA's lower-precision dtypes.
MODES = [
    pytest.param("cpu", torch.bfloat16, id="cpu-bfloat16"),
    pytest.param("cpu", torch.float16, id="cpu-float16"),
    pytest.param("cuda", torch.bfloat16, id="cuda-bfloat16", marks=pytest.mark.cuda),
    pytest.param("cuda", torch.float16, id="cuda-float16", marks=pytest.mark.cuda),
]


def _max_error(results, references) -> float:
    pairs = zip(results, references, strict=True)
    return max((r.double() - e).abs().max().item() for r, e in pairs)


@pytest.mark.parametrize("device, lower", MODES)
@pytest.mark.parametrize("layout", ["a @ b", "x @ W.T"])
def test_gemm_casts_as_torch_mm(device, lower, layout):
    a = torch.randn(37, 61, device=device)
    b = torch.randn(61, 29, device=device) if layout == "a @ b" else torch.randn(29, 61).t()
    b = b.to(device).requires_grad_()
    with torch.autocast(device, dtype=lower):
        ours, theirs = lltm_ext.gemm(a, b), torch.mm(a, b)
    assert ours.dtype == theirs.dtype == lower
    exact = a.double() @ b.detach().double()
    # the same rounded operands, added up in float32 either way: within 2x of torch.mm's error
    assert _max_error([ours], [exact]) <= 2 * _max_error([theirs], [exact]) + 1e-6
    ours.float().sum().backward()
    assert b.grad is not None and b.grad.dtype == torch.float32


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_gemm_leaves_float64_alone(device):
    a = torch.randn(5, 7, device=device, dtype=torch.float64)
    b = torch.randn(7, 3, device=device, dtype=torch.float64)
    with torch.autocast(device, dtype=torch.bfloat16):
        out = lltm_ext.gemm(a, b)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, a @ b)


def _cell_operands(device, B=16, F=48, S=64, cell_scale=1.0):
    x = torch.randn(B, F, device=device)
    weights = (torch.randn(3 * S, S + F, device=device) / (S + F) ** 0.5).requires_grad_()
    bias = (0.1 * torch.randn(3 * S, device=device)).requires_grad_()
    h = 0.5 * torch.randn(B, S, device=device)
    c = cell_scale * torch.randn(B, S, device=device)
    return x, weights, bias, h, c


def _float64(*ts):
    return [t.detach().double() for t in ts]


@pytest.mark.parametrize("device, lower", MODES)
@pytest.mark.parametrize("cell_scale", [0.5, 5.0])
def test_cell_matches_the_pure_cell_under_autocast(device, lower, cell_scale):
    # A large old_cell is where a state rounded to `lower` would be ~8x the loop's error: the
    # state must stay float32, as in the loop.
    x, weights, bias, h, c = _cell_operands(device, cell_scale=cell_scale)
    exact = lltm_reference(*_float64(x, weights, bias, h, c))
    with torch.autocast(device, dtype=lower):
        ours = lltm_ext.lltm(x, weights, bias, h, c)
        loop = lltm_reference(x, weights, bias, h, c)
    assert [t.dtype for t in ours] == [t.dtype for t in loop] == [torch.float32] * 2
    for o, r, e in zip(ours, loop, exact, strict=True):
        assert _max_error([o], [e]) <= 2 * _max_error([r], [e])
    # gradients reach the float32 parameters in float32, close to the loop's
    (ours[0].sum() + ours[1].sum()).backward()
    ours_grad = weights.grad.clone()
    assert ours_grad.dtype == bias.grad.dtype == torch.float32
    weights.grad = None
    (loop[0].sum() + loop[1].sum()).backward()
    w64 = weights.detach().double().requires_grad_()
    sum(t.sum() for t in lltm_reference(*_float64(x), w64, *_float64(bias, h, c))).backward()
    assert _max_error([ours_grad], [w64.grad]) <= 2 * _max_error([weights.grad], [w64.grad])


@pytest.mark.parametrize("device, lower", MODES)
def test_cell_with_a_state_in_the_autocast_dtype_runs_in_it(device, lower):
    x, weights, bias, h, c = _cell_operands(device)
    with torch.autocast(device, dtype=lower):
        ours = lltm_ext.lltm(x, weights, bias, h.to(lower), c.to(lower))
        loop = lltm_reference(x, weights, bias, h.to(lower), c.to(lower))
    assert [t.dtype for t in ours] == [t.dtype for t in loop] == [lower] * 2
    exact = lltm_reference(*_float64(x, weights, bias, h.to(lower), c.to(lower)))
    for o, r, e in zip(ours, loop, exact, strict=True):
        assert _max_error([o], [e]) <= 2 * _max_error([r], [e]) + 1e-3


def _sequence_operands(device, T, B=8, F=32, S=48, state_scale=0.0):
    x = torch.randn(T, B, F, device=device)
    weights = (torch.randn(3 * S, S + F, device=device) / (S + F) ** 0.5).requires_grad_()
    bias = (0.1 * torch.randn(3 * S, device=device)).requires_grad_()
    h0 = state_scale * 0.5 * torch.randn(B, S, device=device)
    c0 = state_scale * torch.randn(B, S, device=device)
    return x, weights, bias, h0, c0


@pytest.mark.parametrize("device, lower", MODES)
@pytest.mark.parametrize("steps, state", [(1, None), (12, None), (12, 4.0), (48, 1.0)])
def test_sequence_matches_the_pure_cell_loop_under_autocast(device, lower, steps, state):
    x, weights, bias, h0, c0 = _sequence_operands(device, steps, state_scale=state or 0.0)
    given = None if state is None else (h0, c0)
    out64 = lltm_loop(lltm_reference, *_float64(x, weights, bias, h0, c0))
    with torch.autocast(device, dtype=lower):
        out, (h_n, c_n) = lltm_ext.lltm_sequence(x, weights, bias, given)
        loop = lltm_loop(lltm_reference, x, weights, bias, h0, c0)
    assert out.dtype == h_n.dtype == c_n.dtype == loop.dtype == torch.float32
    assert _max_error([out], [out64]) <= 2 * _max_error([loop], [out64])
    assert _max_error([h_n], [out64[-1]]) <= 2 * _max_error([loop[-1]], [out64[-1]])
    (out.sum() + c_n.sum()).backward()
    assert weights.grad.dtype == bias.grad.dtype == torch.float32
    assert torch.isfinite(weights.grad).all()


@pytest.mark.parametrize("lower", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    "steps, batch, features, state",
    [(12, 16, 20, 96), (40, 4, 7, 181), (6, 33, 0, 64)],
    ids=["even", "odd", "no-input"],
)
def test_cpu_sequence_under_autocast_mixed_loop_within_the_loops_error(
    lower, steps, batch, features, state
):
    # Past a step's product of 2^17 multiply-adds CPU autocast takes the mixed loop (products in
    # `lower`, each rounded to it; float32 state): forward, the final state and the gradients of
    # the weights, bias, input and initial state within 2x the pure loop's own error.
    x, weights, bias, h0, c0 = _sequence_operands(
        "cpu", steps, B=batch, F=features, S=state, state_scale=1.0
    )
    x.requires_grad_()
    h0.requires_grad_()
    c0.requires_grad_()
    leaves = (x, weights, bias, h0, c0)
    with torch.autocast("cpu", dtype=lower):
        assert (
            "each rounded to it"
            in lltm_ext.explain(lltm_ext.lltm_sequence, x, weights, bias, (h0, c0)).precision
        )
        out, (h_n, c_n) = lltm_ext.lltm_sequence(x, weights, bias, (h0, c0))
        loop = lltm_loop(lltm_reference, x, weights, bias, h0, c0)
    leaves64 = [t.detach().double().requires_grad_() for t in leaves]
    out64 = lltm_loop(lltm_reference, *leaves64)
    assert out.dtype == h_n.dtype == c_n.dtype == torch.float32
    err, loop_err = _max_error([out], [out64]), _max_error([loop], [out64])
    assert err <= 2 * loop_err, (err, loop_err)
    torch.testing.assert_close(h_n, out[-1], rtol=0, atol=0)
    probe = torch.randn_like(out64)
    grads = torch.autograd.grad((out * probe).sum(), leaves)
    loop_grads = torch.autograd.grad((loop.float() * probe).sum(), leaves)
    grads64 = torch.autograd.grad((out64 * probe.double()).sum(), leaves64)
    for name, g, g_loop, g64 in zip("x w b h0 c0".split(), grads, loop_grads, grads64, strict=True):
        assert g.dtype == torch.float32 and g.shape == g64.shape, name
        if g.numel() == 0:  # no input features: an empty input gradient
            continue
        g_err, g_loop_err = _max_error([g], [g64]), _max_error([g_loop], [g64])
        assert g_err <= 2 * g_loop_err, (name, g_err, g_loop_err)


# Shapes for each CUDA kernel family whose float32 products TF32 changes (the small-state kernels
# compute in float32 at every setting), at a small batch (where the planner keeps full-precision
# products) and past 64 rows (one TF32 pass): (T, B, F, S).
_TF32_SHAPES = [
    pytest.param(24, 8, 32, 200, id="cluster-small"),
    pytest.param(24, 96, 32, 200, id="cluster-large"),
    pytest.param(16, 16, 64, 520, id="wide-small"),
    pytest.param(12, 128, 64, 1100, id="tiled"),
    pytest.param(10, 4, 16, 1600, id="steps-small"),
    pytest.param(6, 100, 16, 1600, id="steps-large"),
]


@pytest.mark.cuda
@pytest.mark.parametrize("lower", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("steps, batch, features, state", _TF32_SHAPES)
def test_sequence_tf32_products_within_the_loops_error(lower, steps, batch, features, state):
    # Under autocast a float32 state's products run in TF32 on the rounded operands; every kernel
    # family must stay within 2x the pure loop's own error against float64, forward and the
    # weights' gradient.
    x, weights, bias, h0, c0 = _sequence_operands(
        "cuda", steps, B=batch, F=features, S=state, state_scale=1.0
    )
    path = lltm_ext.explain(lltm_ext.lltm_sequence, x, weights, bias, (h0, c0)).path
    x64, w64, b64, h64, c64 = (
        t.detach().double().requires_grad_() for t in (x, weights, bias, h0, c0)
    )
    out64 = lltm_loop(lltm_reference, x64, w64, b64, h64, c64)
    (g64,) = torch.autograd.grad(out64.sum(), w64)
    with torch.autocast("cuda", dtype=lower):
        out, _ = lltm_ext.lltm_sequence(x, weights, bias, (h0, c0))
        loop = lltm_loop(lltm_reference, x, weights, bias, h0, c0)
    (g,) = torch.autograd.grad(out.sum(), weights)
    (g_loop,) = torch.autograd.grad(loop.float().sum(), weights)
    err, loop_err = _max_error([out], [out64]), _max_error([loop], [out64])
    assert err <= 2 * loop_err, (path, err, loop_err)
    g_err, g_loop_err = _max_error([g], [g64]), _max_error([g_loop], [g64])
    assert g_err <= 2 * g_loop_err, (path, g_err, g_loop_err)


@pytest.mark.cuda
# Past S = 512 at B < 40 autocast's float32 state takes the mixed call on the cuBLAS path
# (docs/decisions_sequence.md#half-small-batch-cublas): a small batch here stays at S = 500.
@pytest.mark.parametrize(
    "steps, batch, features, state",
    [_TF32_SHAPES[1], pytest.param(16, 16, 64, 500, id="small-batch")],
)
def test_sequence_under_autocast_is_the_tf32_op_on_rounded_operands(steps, batch, features, state):
    # The autocast kernel's float32-state call, made by hand: the operands rounded to bfloat16,
    # the operator's tf32 argument; the same bits forward and backward. And that argument runs
    # what torch's "high" matmul precision runs.
    x, weights, bias, h0, c0 = _sequence_operands(
        "cuda", steps, B=batch, F=features, S=state, state_scale=1.0
    )
    op = torch.ops.lltm_ext.lltm_sequence

    def grads(out):
        return torch.autograd.grad(out[0].sum() + out[2].sum(), (weights, bias))

    with torch.autocast("cuda", dtype=torch.bfloat16):
        auto = lltm_ext.lltm_sequence(x, weights, bias, (h0, c0))
        explained = lltm_ext.explain(lltm_ext.lltm_sequence, x, weights, bias, (h0, c0))
    auto = (auto[0], *auto[1])
    assert "TF32" in explained.precision, explained.precision

    def r(t):
        return t.to(torch.bfloat16).float()

    by_hand = op(r(x), r(weights), r(bias), r(h0), c0, True)
    for a, b in zip(auto, by_hand, strict=True):
        assert torch.equal(a, b)
    for a, b in zip(grads(auto), grads(by_hand), strict=True):
        assert torch.equal(a, b)
    exact = op(x, weights, bias, h0, c0)
    tf32 = op(x, weights, bias, h0, c0, True)
    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        high = op(x, weights, bias, h0, c0)
        high_grads = grads(high)
    finally:
        torch.set_float32_matmul_precision(saved)
    # TF32 ran (the input projection at least; past 64 rows the recurrent product too).
    assert not torch.equal(tf32[0], exact[0])
    for a, b in zip(tf32, high, strict=True):
        assert torch.equal(a, b)
    for a, b in zip(grads(tf32), high_grads, strict=True):
        assert torch.equal(a, b)


def _rounding_operands(device):
    # Sizes 0, 1, odd, an unaligned view (storage offset 1), a transposed view, ties and specials;
    # six tensors: two launches of the CUDA kernel (four a launch).
    gen = torch.Generator().manual_seed(0)
    ties = torch.tensor([1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-11, 1 + 3 * 2**-11, 65519.0, 3e38])
    specials = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-40])
    base = (torch.randn(4 * 1031 + 1, generator=gen) * 100).to(device)
    tensors = [
        torch.cat([ties, -ties, specials, torch.randn(1000, generator=gen)]).to(device),
        torch.randn(0, 3, device=device),
        torch.randn(1, generator=gen).to(device),
        base[1:],
        torch.randn(37, 19, generator=gen).to(device).t(),
        torch.randn(3, 5, 7, generator=gen).to(device),
    ]
    return [t.requires_grad_() for t in tensors]


@pytest.mark.parametrize("device, lower", MODES)
@pytest.mark.parametrize("name", ["lltm_rounded", "lltm_sequence_rounded"])
def test_rounded_operands_are_the_casts(device, lower, name):
    # The autocast kernels' operand rounding (one kernel on CUDA; the cell's module and the
    # sequence's each have it) gives the bits of the casts to the half type and back, contiguous,
    # and its gradient is the casts' gradient.
    rounded = getattr(torch.ops.lltm_ext, name)
    tensors = _rounding_operands(device)
    out = rounded(tensors, lower)
    for got, t in zip(out, tensors, strict=True):
        want = t.to(lower).float()
        assert got.dtype == torch.float32 and got.is_contiguous() and got.device == t.device
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    # A copy of a tensor that needs no gradient needs none.
    plain = rounded([tensors[0].detach(), tensors[1]], lower)
    assert [o.requires_grad for o in plain] == [False, True]
    needs = tensors[:2] + tensors[3:]  # tensors[2]'s output gets no gradient
    grads = [torch.randn_like(o) * 1000 for o in out]
    got = torch.autograd.grad(out[:2] + out[3:], needs, grads[:2] + grads[3:])
    want = torch.autograd.grad([t.to(lower).float() for t in needs], needs, grads[:2] + grads[3:])
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w)
    with pytest.raises(RuntimeError, match=r"must be torch\.float16 or torch\.bfloat16"):
        rounded(tensors, torch.float64)


@pytest.mark.cuda
@pytest.mark.large
def test_rounded_operands_past_2_31_elements():
    n = 2**31 + 5
    if torch.cuda.mem_get_info()[0] < 20 * 2**30:
        pytest.skip("needs about 20 GiB of free GPU memory")
    x = torch.empty(n, device="cuda").uniform_(-4, 4)
    (out,) = torch.ops.lltm_ext.lltm_sequence_rounded([x[3:]], torch.bfloat16)
    for part in (slice(0, 2**20), slice(n - 3 - 2**20, n - 3)):
        assert torch.equal(out[part], x[3:][part].bfloat16().float())


# Mixed calls: a float32 state with float16 / bfloat16 input, weights and bias. On CUDA where the
# plan is the cuBLAS path (forced, a short call, or a small batch past S = 512) the products run in
# the half type; elsewhere the float32 time loop runs between half products (input projections,
# d input, d W); on the CPU the float32 sequence runs on the operands in float32.
# (device, lower, path setting, (T, B, F, S))
def _cuda_mixed(lower, path, shape, name):
    return pytest.param("cuda", lower, path, shape, id=name, marks=pytest.mark.cuda)


_MIXED = [
    pytest.param("cpu", torch.bfloat16, None, (9, 5, 12, 24), id="cpu-bfloat16"),
    pytest.param("cpu", torch.float16, None, (9, 5, 12, 24), id="cpu-float16"),
    _cuda_mixed(torch.bfloat16, "cublas", (24, 40, 20, 72), "cuda-cublas-bfloat16"),
    _cuda_mixed(torch.float16, "cublas", (24, 40, 20, 72), "cuda-cublas-float16"),
    _cuda_mixed(torch.bfloat16, "cublas", (7, 37, 13, 37), "cuda-cublas-odd"),
    _cuda_mixed(torch.float16, "cublas", (5, 41, 9, 45), "cuda-cublas-odd-float16"),
    _cuda_mixed(torch.bfloat16, None, (2, 64, 32, 520), "cuda-short-call"),
    _cuda_mixed(torch.bfloat16, None, (12, 6, 20, 520), "cuda-half-small-batch-cublas"),
    _cuda_mixed(torch.bfloat16, "small", (9, 5, 12, 24), "cuda-small-float32-loop"),
    _cuda_mixed(torch.float16, "small", (6, 9, 0, 40), "cuda-small-no-input"),
    _cuda_mixed(torch.bfloat16, "tiled", (40, 25, 88, 480), "cuda-tiled-float32-loop"),
    _cuda_mixed(torch.float16, "wide", (12, 20, 33, 258), "cuda-wide-odd-float16"),
]


@pytest.mark.parametrize("device, lower, path, shape", _MIXED)
@pytest.mark.parametrize("given", [True, False], ids=["state", "no-state"])
def test_sequence_mixed_call_within_the_loops_error(monkeypatch, device, lower, path, shape, given):
    if path is not None:
        monkeypatch.setenv("LLTM_EXT_SEQUENCE_PATH", path)
    T, B, F, S = shape
    x, weights, bias, h0, c0 = _sequence_operands(device, T, B=B, F=F, S=S, state_scale=1.0)
    if not given:
        h0, c0 = torch.zeros_like(h0), torch.zeros_like(c0)
    x64, w64, b64, h64, c64 = (
        t.detach().double().requires_grad_() for t in (x, weights, bias, h0, c0)
    )
    out64 = lltm_loop(lltm_reference, x64, w64, b64, h64, c64)
    g64 = torch.autograd.grad(out64.sum(), (w64, b64, h64, c64))
    # the loop under autocast: its own error against float64 is the bound
    with torch.autocast(device, dtype=lower):
        loop = lltm_loop(lltm_reference, x, weights, bias, h0, c0)
    g_loop = torch.autograd.grad(loop.float().sum(), (weights, bias))
    # the mixed call by hand: the operands in `lower`, the state float32
    xl, wl, bl = (t.detach().to(lower).requires_grad_() for t in (x, weights, bias))
    # (no state: c0 of zeros alone says the state is float32)
    hs = (
        (h0.clone().requires_grad_(), c0.clone().requires_grad_())
        if given
        else (None, torch.zeros(B, S, device=device))
    )
    out, h_n, c_n = torch.ops.lltm_ext.lltm_sequence(xl, wl, bl, *hs)
    assert out.dtype == h_n.dtype == c_n.dtype == torch.float32
    err, loop_err = _max_error([out], [out64]), _max_error([loop], [out64])
    assert err <= 2 * loop_err, (err, loop_err)
    torch.testing.assert_close(h_n, out[-1], rtol=0, atol=0)
    wanted = (wl, bl, *(t for t in hs if t is not None and t.requires_grad))
    grads = torch.autograd.grad(out.sum(), (*wanted, xl))
    assert [g.dtype for g in grads] == [t.dtype for t in (*wanted, xl)]
    grads = grads[:-1]
    for g, g_ref, g_l in zip(grads[:2], g64[:2], g_loop, strict=True):
        g_err, g_loop_err = _max_error([g], [g_ref]), _max_error([g_l], [g_ref])
        assert g_err <= 2 * g_loop_err, (g_err, g_loop_err)
    for g, g_ref in zip(grads[2:], g64[2 : len(grads)], strict=True):  # the state's: float32 sums
        torch.testing.assert_close(g.double(), g_ref, rtol=0.05, atol=0.05 * g_ref.abs().max())


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("lower", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(3, 0, 4, 5), (0, 2, 4, 5), (3, 2, 0, 5), (1, 1, 1, 1)], ids=str)
def test_sequence_mixed_call_at_empty_and_unit_sizes(device, lower, shape):
    # No batch rows, no steps, no input features, one of each: the mixed call's shapes and dtypes,
    # forward and backward, and its values against the float64 loop where there are any.
    T, B, F, S = shape
    x, weights, bias, h0, c0 = _sequence_operands(device, T, B=B, F=F, S=S, state_scale=1.0)
    xl, wl, bl = (t.to(lower).requires_grad_() for t in (x, weights, bias))
    h0.requires_grad_()
    c0.requires_grad_()
    out, h_n, c_n = torch.ops.lltm_ext.lltm_sequence(xl, wl, bl, h0, c0)
    assert out.shape == (T, B, S) and h_n.shape == c_n.shape == (B, S)
    assert out.dtype == h_n.dtype == c_n.dtype == torch.float32
    out64 = lltm_loop(lltm_reference, *_float64(xl, wl, bl, h0, c0))
    if out.numel():
        torch.testing.assert_close(out.double(), out64, rtol=0, atol=0.05)
    leaves = (xl, wl, bl, h0, c0)
    grads = torch.autograd.grad(out.sum() + h_n.sum() + c_n.sum(), leaves, allow_unused=True)
    for g, leaf in zip(grads, leaves, strict=True):
        assert g is None or (g.shape == leaf.shape and g.dtype == leaf.dtype)
        assert g is None or torch.isfinite(g).all()


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_sequence_mixed_call_dtypes_checked(device):
    x, weights, bias, h0, c0 = _sequence_operands(device, 3)
    op = torch.ops.lltm_ext.lltm_sequence
    half = (x.half(), weights.half(), bias.half())
    with pytest.raises(RuntimeError, match=r"state \(h0, c0\) is Double and `input` is Half"):
        op(*half, h0.double(), c0.double())
    with pytest.raises(RuntimeError, match=r"state \(h0, c0\) is BFloat16 and `input` is Float"):
        op(x, weights, bias, h0.bfloat16(), c0.bfloat16())
    with pytest.raises(RuntimeError, match=r"`h0` is Half and the state is Float"):
        op(*half, h0.half(), c0)
    with pytest.raises(RuntimeError, match="all tensors must have one dtype"):
        op(x.half(), weights, bias.half(), h0, c0)
    # the fake kernels (torch.compile's tracing) check alike
    with torch._subclasses.FakeTensorMode() as mode:
        fakes = [mode.from_tensor(t) for t in (*half, h0, c0)]
        out = op(*fakes)
        assert [t.dtype for t in out] == [torch.float32] * 3
        with pytest.raises(RuntimeError, match=r"`h0` is Half and the state is Float"):
            op(*fakes[:3], fakes[3].half(), fakes[4])


@pytest.mark.cuda
def test_sequence_under_autocast_on_the_cublas_path_runs_mixed(monkeypatch):
    # The autocast kernel's call on the cuBLAS path is the mixed call: the same bits as by hand,
    # and explain says so.
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_PATH", "cublas")
    x, weights, bias, h0, c0 = _sequence_operands("cuda", 10, B=48, F=24, S=64, state_scale=1.0)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out, (h_n, c_n) = lltm_ext.lltm_sequence(x, weights, bias, (h0, c0))
        explained = lltm_ext.explain(lltm_ext.lltm_sequence, x, weights, bias, (h0, c0))
    assert "products in bfloat16" in explained.precision, explained.precision
    by_hand = torch.ops.lltm_ext.lltm_sequence(
        x.bfloat16(), weights.bfloat16(), bias.bfloat16(), h0, c0
    )
    for a, b in zip((out, h_n, c_n), by_hand, strict=True):
        assert a.dtype == torch.float32 and torch.equal(a, b)
    out.sum().backward()
    assert weights.grad.dtype == bias.grad.dtype == torch.float32


@pytest.mark.cuda
@pytest.mark.parametrize("lower", [torch.bfloat16, torch.float16])
def test_sequence_under_autocast_off_the_cublas_path_runs_mixed_where_set(monkeypatch, lower):
    # Off the cuBLAS path the autocast kernel's call is the mixed call where its products outside
    # the time loop are large (LLTM_EXT_SEQUENCE_MIXED=products: at every size): the same bits as
    # by hand, and explain says so; with the setting off, the rounded operands in float32.
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_PATH", "tiled")
    x, weights, bias, h0, c0 = _sequence_operands("cuda", 20, B=24, F=40, S=200, state_scale=1.0)
    ext = load_extension("lltm_sequence")
    assert ext._autocast_mixed(x, weights) == ""  # small: the rounded operands pay
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_MIXED", "products")
    assert ext._autocast_mixed(x, weights) == "loop"
    with torch.autocast("cuda", dtype=lower):
        out, (h_n, c_n) = lltm_ext.lltm_sequence(x, weights, bias, (h0, c0))
        explained = lltm_ext.explain(lltm_ext.lltm_sequence, x, weights, bias, (h0, c0))
    assert "outside the time loop in" in explained.precision, explained.precision
    by_hand = torch.ops.lltm_ext.lltm_sequence(
        x.to(lower), weights.to(lower), bias.to(lower), h0, c0
    )
    for a, b in zip((out, h_n, c_n), by_hand, strict=True):
        assert a.dtype == torch.float32 and torch.equal(a, b)
    out.sum().backward()
    assert weights.grad.dtype == bias.grad.dtype == torch.float32
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_MIXED", "off")
    with torch.autocast("cuda", dtype=lower):
        explained = lltm_ext.explain(lltm_ext.lltm_sequence, x, weights, bias, (h0, c0))
    assert "on the operands rounded to" in explained.precision, explained.precision


def test_sequence_tf32_argument_changes_nothing_on_the_cpu():
    x, weights, bias, h0, c0 = _sequence_operands("cpu", 5, state_scale=1.0)
    op = torch.ops.lltm_ext.lltm_sequence
    for a, b in zip(op(x, weights, bias, h0, c0, True), op(x, weights, bias, h0, c0), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("device, lower", MODES)
def test_sequence_in_the_autocast_dtype_stays_in_it(device, lower):
    # input already in the autocast dtype, no state: the loop's zeros are in that dtype, and so
    # its state and outputs
    x, weights, bias, _, _ = _sequence_operands(device, 6)
    with torch.autocast(device, dtype=lower):
        out, (h_n, c_n) = lltm_ext.lltm_sequence(x.to(lower), weights, bias)
    assert out.dtype == h_n.dtype == c_n.dtype == lower
    out.float().sum().backward()
    assert weights.grad.dtype == torch.float32


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_float64_and_mixed_float64_pass_through(device):
    x, weights, bias, _, _ = _sequence_operands(device, 3)
    with torch.autocast(device, dtype=torch.bfloat16):
        out, _ = lltm_ext.lltm_sequence(*_float64(x, weights, bias), None)
        assert out.dtype == torch.float64
        with pytest.raises(RuntimeError, match="all tensors must have one dtype"):
            lltm_ext.lltm_sequence(x.double(), weights, bias)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_under_autocast_matches_eager(device, backend):
    lower = torch.bfloat16
    x, weights, bias, h0, c0 = _sequence_operands(device, 5, state_scale=1.0)
    a = torch.randn(9, weights.shape[1], device=device)

    def step(x, weights, bias, h0, c0, a):
        with torch.autocast(device, dtype=lower):
            out, (_, c_n) = lltm_ext.lltm_sequence(x, weights, bias, (h0, c0))
            h, c = lltm_ext.lltm(x[0], weights, bias, h0, c0)
            p = lltm_ext.gemm(a, weights.t())
        assert out.dtype == h.dtype == torch.float32 and p.dtype == lower
        return out.sum() + c_n.sum() + h.sum() + c.sum() + p.float().sum()

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend=backend)
    inputs = (x, weights, bias, h0, c0, a)
    loss = compiled(*inputs)
    grads = torch.autograd.grad(loss, (weights, bias))
    ref = step(*inputs)
    ref_grads = torch.autograd.grad(ref, (weights, bias))
    # The gemm's products add up in other orders compiled and eager: float32 sums of bfloat16
    # products, a few ulps apart.
    torch.testing.assert_close(loss, ref, rtol=2e-3, atol=1e-3)
    # The product's share of the weight gradient is a bfloat16 product (its backward): a few of
    # its ulps (1/64 at magnitudes 2 to 4) apart where compiled and eager add up in other orders.
    for g, r in zip(grads, ref_grads, strict=True):
        assert g.dtype == torch.float32
        torch.testing.assert_close(g, r, rtol=2e-2, atol=0.1)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_compiled_lltm_under_autocast_keeps_the_rounding(device):
    # The cell's and the sequence's operands go through one operator (lltm_rounded,
    # lltm_sequence_rounded), which inductor keeps (it drops a round trip of casts float32 ->
    # bfloat16 -> float32): compiled and eager read the same rounded operands, the same bits out.
    x, weights, bias, h0, c0 = _sequence_operands(device, 5, state_scale=1.0)

    def run(x, weights, bias, h0, c0):
        with torch.autocast(device, dtype=torch.bfloat16):
            out, (h_n, c_n) = lltm_ext.lltm_sequence(x, weights, bias, (h0, c0))
            h, c = lltm_ext.lltm(x[0], weights, bias, h0, c0)
        return out, h_n, c_n, h, c

    torch._dynamo.reset()
    compiled = torch.compile(run, fullgraph=True, backend="inductor")(x, weights, bias, h0, c0)
    for got, want in zip(compiled, run(x, weights, bias, h0, c0), strict=True):
        assert torch.equal(got, want)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_gradscaler_float16_training_lowers_the_loss(device):
    # A model that swaps nn.LSTM for LLTMSequence, trained under float16 autocast with a
    # GradScaler: the task (the running mean of the input's first feature) is learnable, and the
    # loss must fall to under half its first value.
    torch.manual_seed(0)
    T, B, F, S = 12, 16, 4, 32
    rnn = lltm_ext.LLTMSequence(F, S).to(device)
    head = torch.nn.Linear(S, 1).to(device)
    params = list(rnn.parameters()) + list(head.parameters())
    opt = torch.optim.Adam(params, lr=1e-2)
    scaler = torch.amp.GradScaler(device)
    x = torch.randn(T, B, F, device=device)
    target = x[..., :1].cumsum(0) / torch.arange(1, T + 1, device=device).view(T, 1, 1)
    losses = []
    for _ in range(60):
        opt.zero_grad()
        with torch.autocast(device, dtype=torch.float16):
            out, _ = rnn(x)
            loss = torch.nn.functional.mse_loss(head(out).float(), target)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    assert all(p.dtype == torch.float32 for p in params)
    assert losses[-1] < 0.5 * losses[0], losses
