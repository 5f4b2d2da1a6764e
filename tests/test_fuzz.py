"""Property-based fuzzing (hypothesis) of every op through its public API, against float64
pure-PyTorch references: values and gradients.

Drawn: shapes (0, 1, primes, sizes around the tile sizes 16/32/64/128 and 2^k +- 1), memory
layouts (contiguous, a storage offset of 1-3 elements, transposed / permuted, sliced with a step,
padded rows, expanded with stride 0), values (element-wise ops: NaN, +-inf, denormals, huge and
tiny scales; the others: random normal), and for gemm the `out=` layout. One test per op x device
x dtype (a shard): CPU and CUDA, float32, float64, float16 and bfloat16 on both (the CPU kernels
run the half types too, computed in float).

References (float64, on the CPU, from the same dtype-rounded inputs): torch.relu, torch.sigmoid,
floor(x + 1/2) evaluated exactly (floor(x) + (x - floor(x) >= 1/2): in float64, x + 0.5 itself
rounds, e.g. 0.49999999999999994 + 0.5 == 1.0), a.double() @ b.double(), and
lltm_ext.ops.lltm.lltm_reference; gradients by autograd through the references. Tolerances:
relu and round_ste exact; sigmoid helpers.TOLERANCES; gemm the rounding-error bound of a length-K
dot product (|c - ref| <= 2 (K + 2) u_acc (|a| @ |b|) + u_out |ref|, u_acc the unit roundoff of the
accumulation type and u_out of the output type), so it grows with K; lltm a bound in units of
the dtype's roundoff, relative to the tensor's largest value and, for gradients, to the absolute
values of the terms summed, growing with the lengths of the sums (S + I forward; B and 3S too for
gradients), see assert_lltm_close.

Budget (a settings profile, picked by LLTM_EXT_FUZZ_PROFILE):
  ci  (default) a few dozen examples per shard; the whole file runs in well under a minute on two
      CPU cores, derandomized (the same examples every run).
  gpu 10,000 examples per op and device (split over its dtype shards: 2,500 per dtype), for a GPU
      machine: LLTM_EXT_FUZZ_PROFILE=gpu python3 -m pytest -q -n 8 -m cuda tests/test_fuzz.py
Every shard records how many examples ran; the totals per op are printed at the end of the run
and written as JSON to the path in LLTM_EXT_FUZZ_REPORT, if set (tests/conftest.py).
"""

from __future__ import annotations

import math
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from helpers import TOLERANCES
from torch import Tensor

import lltm_ext
from lltm_ext.ops.lltm import lltm_reference

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
OPS = ("relu", "sigmoid", "round_ste", "gemm", "lltm")

# ---------------------------------------------------------------------------------------------
# Budget.
# ---------------------------------------------------------------------------------------------

PROFILE = os.environ.get("LLTM_EXT_FUZZ_PROFILE", "ci")
# Examples per op and device, split over the dtype shards.
EXAMPLES_PER_OP = {
    "ci": {"relu": 1200, "sigmoid": 1200, "round_ste": 1200, "gemm": 600, "lltm": 400},
    "gpu": dict.fromkeys(OPS, 10_000),
}
_COMMON = dict(
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("ci", max_examples=30, **_COMMON)
settings.register_profile("gpu", max_examples=2_500, **_COMMON)
if PROFILE not in EXAMPLES_PER_OP:
    raise pytest.UsageError(f"LLTM_EXT_FUZZ_PROFILE must be ci or gpu, not {PROFILE!r}")


def shard_settings(op: str) -> settings:
    """The profile, with max_examples = the op's examples over its dtype shards (rounded up)."""
    per_shard = math.ceil(EXAMPLES_PER_OP[PROFILE][op] / len(DTYPES))
    return settings(settings.get_profile(PROFILE), max_examples=per_shard)


def shards() -> list:
    """(device, dtype) for parametrize; CUDA shards carry the `cuda` marker."""
    out = []
    for device in ("cpu", "cuda"):
        marks = [pytest.mark.cuda] if device == "cuda" else []
        for dtype in DTYPES:
            out.append(pytest.param(device, dtype, id=f"{device}-{str(dtype)[6:]}", marks=marks))
    return out


class Counter:
    """Examples run by one shard (hypothesis calls the test body once per example)."""

    def __init__(self) -> None:
        self.n = 0


def run_shard(request, op: str, device: str, dtype: torch.dtype, body: Callable) -> None:
    """Runs `body(case)` for every example of `op`'s strategy in one shard, under the profile's
    budget, and records the count for the report (tests/conftest.py)."""
    counter = Counter()
    strategy = STRATEGIES[op]

    def example(case) -> None:
        counter.n += 1
        body(case, device, dtype)

    # A derandomized run's seed comes from the test function's source, the same for every shard:
    # a fixed seed per shard instead, so that the shards of an op draw different examples (still
    # the same ones on every run).
    shard_seed = zlib.crc32(f"{op}-{device}-{dtype}".encode())
    test = seed(shard_seed)(shard_settings(op)(given(strategy)(example)))
    try:
        test()
    finally:
        request.node.user_properties.append(
            (
                "fuzz_examples",
                {"op": op, "device": device, "dtype": str(dtype)[6:], "examples": counter.n},
            )
        )


# ---------------------------------------------------------------------------------------------
# Layouts: a base tensor (made on the CPU, moved to the device) and a view of it.
# ---------------------------------------------------------------------------------------------

SIZES = (0, 1, 2, 3, 5, 7, 8, 13, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129)
LONG_SIZES = (255, 256, 257, 1023, 1025, 4099, 32767, 32769, 65537)  # past a CPU grain (32768)


@dataclass(frozen=True)
class Layout:
    """How a tensor of `shape` sits in memory: `kind` with its parameter `arg`.

    contiguous; offset (arg elements of storage before it: a misaligned pointer); permuted (a
    contiguous tensor of permuted shape, permuted back: arg is the permutation); step (dim
    arg[0] is every arg[1]-th element of a longer base); padded (2-D: rows of a wider base,
    starting arg columns in); expanded (dim arg has stride 0)."""

    kind: str
    arg: object = None

    def base_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        if self.kind == "offset":
            return (math.prod(shape) + self.arg,)
        if self.kind == "permuted":
            return tuple(shape[p] for p in self.arg)
        if self.kind == "step":
            dim, step = self.arg
            return tuple(s * step if i == dim else s for i, s in enumerate(shape))
        if self.kind == "padded":
            return (shape[0], shape[1] + self.arg + 3)
        if self.kind == "expanded":
            return tuple(1 if i == self.arg else s for i, s in enumerate(shape))
        return shape

    def view(self, base: Tensor, shape: tuple[int, ...]) -> Tensor:
        if self.kind == "offset":
            return base[self.arg :].view(shape)
        if self.kind == "permuted":
            inverse = sorted(range(len(shape)), key=lambda i: self.arg[i])
            return base.permute(inverse)
        if self.kind == "step":
            dim, step = self.arg
            index = [slice(None)] * base.dim()
            index[dim] = slice(None, None, step)
            return base[tuple(index)]
        if self.kind == "padded":
            return base[:, self.arg : self.arg + shape[1]]
        if self.kind == "expanded":
            return base.expand(shape)
        return base


@st.composite
def layouts(draw, shape: tuple[int, ...], expand: bool = True) -> Layout:
    """A layout for a tensor of `shape` (expanded only where the op allows it, `expand`)."""
    ndim = len(shape)
    kinds = ["contiguous", "offset"]
    if ndim >= 1:
        kinds.append("step")
    if ndim >= 2:
        kinds.append("permuted")
    if ndim == 2:
        kinds.append("padded")
    if ndim >= 1 and expand:
        kinds.append("expanded")
    kind = draw(st.sampled_from(kinds))
    if kind == "offset":
        return Layout(kind, draw(st.integers(1, 3)))
    if kind == "permuted":
        perm = tuple(draw(st.permutations(range(ndim))))
        return Layout(kind, perm)
    if kind == "step":
        return Layout(kind, (draw(st.integers(0, ndim - 1)), draw(st.integers(2, 3))))
    if kind == "padded":
        return Layout(kind, draw(st.integers(0, 2)))
    if kind == "expanded":
        return Layout(kind, draw(st.integers(0, ndim - 1)))
    return Layout(kind)


def check_layout(x: Tensor, layout: Layout) -> None:
    """The view is what the layout says (so the kernels see what the case claims)."""
    if x.numel() <= 1:
        return
    if layout.kind == "offset":
        assert x.storage_offset() == layout.arg
    if layout.kind == "expanded" and x.shape[layout.arg] > 1:
        assert x.stride(layout.arg) == 0


def make(
    shape: tuple[int, ...],
    layout: Layout,
    base_values: Callable[[int], Tensor],
    dtype: torch.dtype,
    device: str,
) -> tuple[Tensor, Tensor]:
    """(base, view): base filled with base_values(numel) (float64, on the CPU), rounded to
    `dtype`, moved to `device`, requiring grad; view laid out as `layout` says."""
    base_shape = layout.base_shape(shape)
    values = base_values(math.prod(base_shape)).reshape(base_shape)
    base = values.to(dtype).to(device).requires_grad_()
    x = layout.view(base, shape)
    assert tuple(x.shape) == tuple(shape), (x.shape, shape, layout)
    check_layout(x, layout)
    return base, x


def randn(seed: int, scale: float = 1.0) -> Callable[[int], Tensor]:
    def values(n: int) -> Tensor:
        gen = torch.Generator().manual_seed(seed)
        return torch.randn(n, generator=gen, dtype=torch.float64) * scale

    return values


def as_reference(base: Tensor, t: Tensor, layout: Layout) -> Tensor:
    """The float64 CPU twin of `t`, a view of `base`: the same layout over a float64 copy of base,
    requiring grad."""
    return layout.view(base.detach().double().cpu().requires_grad_(), tuple(t.shape))


# ---------------------------------------------------------------------------------------------
# Element-wise ops: relu, sigmoid, round_ste.
# ---------------------------------------------------------------------------------------------

# NaN, +-inf, signed zeros, halves (rounding ties), denormals of each dtype (float64 ~1e-310,
# float32 ~1e-40, float16 ~1e-7), the largest finite values, values that overflow float16 or
# float32, integers past 2^23 / 2^52, and a float32 just below 1/2.
SPECIALS = (
    math.nan,
    math.inf,
    -math.inf,
    0.0,
    -0.0,
    0.5,
    -0.5,
    1.5,
    -2.5,
    1e-310,
    -1e-310,
    1e-40,
    -3e-42,
    1e-7,
    -6e-8,
    65504.0,
    70000.0,
    3.4e38,
    -3.5e38,
    1.7e308,
    -1.7e308,
    2.0**23 + 1,
    2.0**52 + 1,
    0.49999997,
    0.49999999999999994,
    -88.7,
    89.0,
    -745.2,
    710.0,
)
SCALES = (1.0, 3.0, 1e-3, 1e3, 1e-6, 1e-40, 1e-310, 1e30, 1e300)


@dataclass(frozen=True)
class ElementwiseCase:
    shape: tuple[int, ...]
    layout: Layout
    seed: int
    scale: float
    specials: tuple[tuple[int, float], ...]

    def values(self, n: int) -> Tensor:
        v = randn(self.seed, self.scale)(n)
        for i, value in self.specials:
            if n:
                v[i % n] = value
        return v


@st.composite
def shapes(draw, max_numel: int = 8192, max_ndim: int = 3) -> tuple[int, ...]:
    """0-d to max_ndim-d shapes of at most max_numel elements; now and then one long dim."""
    ndim = draw(st.integers(0, max_ndim))
    if ndim >= 1 and draw(st.integers(0, 7)) == 0:
        return (draw(st.sampled_from(LONG_SIZES)),) + (1,) * (ndim - 1)
    shape = []
    budget = max_numel
    for _ in range(ndim):
        size = draw(st.sampled_from([s for s in SIZES if s <= max(budget, 1)]))
        shape.append(size)
        budget //= max(size, 1)
    return tuple(shape)


@st.composite
def elementwise_cases(draw) -> ElementwiseCase:
    shape = draw(shapes())
    return ElementwiseCase(
        shape=shape,
        layout=draw(layouts(shape)),
        seed=draw(st.integers(0, 2**32 - 1)),
        scale=draw(st.sampled_from(SCALES)),
        specials=tuple(
            draw(
                st.lists(
                    st.tuples(
                        st.integers(0, 2**20),
                        st.one_of(st.sampled_from(SPECIALS), st.floats(width=64)),
                    ),
                    max_size=12,
                )
            )
        ),
    )


def round_half_up(x: Tensor) -> Tensor:
    """floor(x + 1/2), exactly, in float64 (x - floor(x) is exact; x + 0.5 is not)."""
    r = torch.floor(x)
    return r + (x - r >= 0.5).to(x.dtype)


def autograd_grad(fn: Callable[[Tensor], Tensor]) -> Callable[[Tensor, Tensor], Tensor]:
    """(x, grad) -> the gradient of fn at x by autograd (float64)."""

    def grad_fn(x: Tensor, grad: Tensor) -> Tensor:
        x = x.detach().requires_grad_()
        return torch.autograd.grad(fn(x), x, grad)[0]

    return grad_fn


ELEMENTWISE = {
    # name: (public function, float64 reference, its gradient (x, grad) -> dx, exact)
    "relu": (lltm_ext.relu, torch.relu, autograd_grad(torch.relu), True),
    "sigmoid": (lltm_ext.sigmoid, torch.sigmoid, autograd_grad(torch.sigmoid), False),
    # Straight-through: the incoming gradient, unchanged.
    "round_ste": (lltm_ext.round_ste, round_half_up, lambda x, grad: grad, True),
}


def check_elementwise(op: str, case: ElementwiseCase, device: str, dtype: torch.dtype) -> None:
    fn, ref_fn, ref_grad, exact = ELEMENTWISE[op]
    tol = dict(rtol=0.0, atol=0.0) if exact else TOLERANCES[dtype]
    _, x = make(case.shape, case.layout, case.values, dtype, device)
    y = fn(x)
    assert y.shape == x.shape and y.dtype == dtype and y.device == x.device
    x64 = x.detach().double().cpu()
    torch.testing.assert_close(y.detach().cpu().double(), ref_fn(x64), equal_nan=True, **tol)
    grad = randn(case.seed + 1)(x.numel()).reshape(x.shape).to(dtype)
    (dx,) = torch.autograd.grad(y, x, grad.to(device))
    dx64 = ref_grad(x64, grad.double())
    assert dx.shape == x.shape and dx.dtype == dtype
    torch.testing.assert_close(dx.cpu().double(), dx64, equal_nan=True, **tol)


# ---------------------------------------------------------------------------------------------
# GEMM.
# ---------------------------------------------------------------------------------------------

GEMM_SIZES = SIZES + (255, 256, 257)
LONG_K = (511, 512, 513, 1025, 2049, 4097)  # split-K where the grid is small
GEMM_MAX_MACS = 1 << 19


@dataclass(frozen=True)
class GemmCase:
    m: int
    n: int
    k: int
    a_layout: Layout
    b_layout: Layout
    out: Layout | None  # gemm(a, b, out=...) with out laid out so; None: no out=
    seed: int


@st.composite
def gemm_cases(draw) -> GemmCase:
    m, n = draw(st.sampled_from(GEMM_SIZES)), draw(st.sampled_from(GEMM_SIZES))
    k_sizes = GEMM_SIZES + (LONG_K if m * n <= 1024 else ())
    k = draw(st.sampled_from(k_sizes))
    while m * n * k > GEMM_MAX_MACS:  # keep the float64 reference cheap: shrink the largest
        if m >= n and m >= k:
            m //= 2
        elif n >= k:
            n //= 2
        else:
            k //= 2
    out = None
    if draw(st.integers(0, 3)) == 0:
        out = draw(layouts((m, n), expand=False))
    return GemmCase(
        m,
        n,
        k,
        draw(layouts((m, k))),
        draw(layouts((k, n))),
        out,
        draw(st.integers(0, 2**32 - 1)),
    )


# Unit roundoff of the accumulation (float32 for float32 and the half types) and of the output.
U_ACC = {torch.float64: 2.0**-53, torch.float32: 2.0**-24, torch.float16: 2.0**-24}
U_ACC[torch.bfloat16] = 2.0**-24
U_OUT = {torch.float64: 0.0, torch.float32: 0.0, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}


def assert_product_close(
    got: Tensor, ref: Tensor, abs_product: Tensor, k: int, dtype: torch.dtype
) -> None:
    """|got - ref| <= 2 (k + 2) u_acc |a||b| + u_out |ref| + tiny, elementwise (a length-k dot
    product's rounding-error bound, any summation order, and the output's rounding)."""
    got = got.detach().double().cpu()
    assert got.shape == ref.shape
    bound = 2 * (k + 2) * U_ACC[dtype] * abs_product + U_OUT[dtype] * ref.abs()
    bound += torch.finfo(dtype).tiny
    err = (got - ref).abs()
    bad = ~(err <= bound)
    assert not bad.any(), (
        f"{int(bad.sum())} of {got.numel()} elements off: worst error {err.max().item():.3e}, "
        f"bound there {bound.flatten()[int((err - bound).argmax())].item():.3e} (k = {k})"
    )


def check_gemm(case: GemmCase, device: str, dtype: torch.dtype) -> None:
    m, n, k = case.m, case.n, case.k
    base_a, a = make((m, k), case.a_layout, randn(case.seed), dtype, device)
    base_b, b = make((k, n), case.b_layout, randn(case.seed + 1), dtype, device)
    a64 = as_reference(base_a, a, case.a_layout)
    b64 = as_reference(base_b, b, case.b_layout)
    c64 = a64 @ b64
    abs_c = (a64.abs() @ b64.abs()).detach()
    if case.out is not None:
        base_out = torch.full(case.out.base_shape((m, n)), math.nan, dtype=dtype, device=device)
        out = case.out.view(base_out, (m, n))
        with torch.no_grad():
            c = lltm_ext.gemm(a, b, out=out)
        assert c is out
        assert_product_close(out, c64.detach(), abs_c, k, dtype)
        return
    c = lltm_ext.gemm(a, b)
    assert c.shape == (m, n) and c.dtype == dtype and c.device == a.device and c.is_contiguous()
    assert_product_close(c, c64.detach(), abs_c, k, dtype)
    grad = randn(case.seed + 2)(m * n).reshape(m, n).to(dtype)
    da, db = torch.autograd.grad(c, (a, b), grad.to(device))
    da64, db64 = torch.autograd.grad(c64, (a64, b64), grad.double())
    g = grad.double().abs()
    assert_product_close(da, da64, g @ b64.detach().abs().t(), n, dtype)  # grad_c @ b.T
    assert_product_close(db, db64, a64.detach().abs().t() @ g, m, dtype)  # a.T @ grad_c


# ---------------------------------------------------------------------------------------------
# LLTM.
# ---------------------------------------------------------------------------------------------

LLTM_BATCH = (0, 1, 2, 3, 5, 8, 16, 17, 33)
LLTM_FEATURES = (0, 1, 2, 3, 7, 16, 31, 32, 33)
LLTM_STATE = (0, 1, 2, 3, 5, 8, 16, 17, 31, 32, 33, 64, 65)
LLTM_ARGS = ("input", "weights", "bias", "old_h", "old_cell")


@dataclass(frozen=True)
class LLTMCase:
    batch: int
    features: int
    state: int
    layouts: tuple[Layout, ...]  # one per argument, LLTM_ARGS order
    bias_2d: bool  # bias (1, 3S) instead of (3S,)
    alias: str  # "": distinct tensors; "h=c": old_cell is old_h; "x=h": old_h is input
    gate_scale: float  # bias scale: large values saturate the gates
    seed: int

    def shapes(self) -> list[tuple[int, ...]]:
        b, f, s = self.batch, self.features, self.state
        bias = (1, 3 * s) if self.bias_2d else (3 * s,)
        return [(b, f), (3 * s, s + f), bias, (b, s), (b, s)]


@st.composite
def lltm_cases(draw) -> LLTMCase:
    b = draw(st.sampled_from(LLTM_BATCH))
    f = draw(st.sampled_from(LLTM_FEATURES))
    s = draw(st.sampled_from(LLTM_STATE))
    bias_2d = draw(st.booleans())
    alias = draw(st.sampled_from(["", "h=c"] + (["x=h"] if f == s else [])))
    shapes_ = [(b, f), (3 * s, s + f), (1, 3 * s) if bias_2d else (3 * s,), (b, s), (b, s)]
    # Weights are a module's parameter: any layout but expanded (which the others may be).
    lay = tuple(
        draw(layouts(shape, expand=(name != "weights")))
        for name, shape in zip(LLTM_ARGS, shapes_, strict=True)
    )
    return LLTMCase(
        b,
        f,
        s,
        lay,
        bias_2d,
        alias,
        draw(st.sampled_from([1.0, 4.0, 100.0])),
        draw(st.integers(0, 2**32 - 1)),
    )


# Unit roundoff of each dtype, and the LLTM's error allowance in units of it (assert_lltm_close).
UNIT = {torch.float64: 2.0**-53, torch.float32: 2.0**-24, torch.float16: 2.0**-11}
UNIT[torch.bfloat16] = 2.0**-8
LLTM_ULPS = {torch.float64: 64, torch.float32: 256, torch.float16: 64, torch.bfloat16: 32}


def assert_lltm_close(
    got: Tensor, want: Tensor, magnitude: Tensor | None, dtype: torch.dtype, length: int, what: str
) -> None:
    """|got - want| <= c u (magnitude + max(max |want|, 1)) max(1, sqrt(length / 32)) element-wise:
    c = LLTM_ULPS[dtype] roundings of the sum of the absolute values of the terms behind each
    element (`magnitude`, for the gradients that are sums: the error of a sum that cancels is
    relative to its terms, not to its result) and of the tensor's largest value (or 1, for tensors
    near 0 such as a saturated gate's output), growing with the length of the sums.

    Calibrated on the CPU kernels without the magnitude term: the worst of ~400 random cases per
    dtype was 57 u (float32, saturated gates), 12 u (float64), 23 u (float16) and 7 u (bfloat16)
    of max(max |want|, 1); the bias gradient of a 16-row batch in bfloat16 was 56 u off.
    """
    got = got.detach().double().cpu()
    want = want.detach()
    assert got.shape == want.shape, what
    if want.numel() == 0:
        return
    assert torch.equal(got.isnan(), want.isnan()), f"{what}: NaNs differ"
    got, want = got.nan_to_num(0.0), want.nan_to_num(0.0)
    scale = max(want.abs().max().item(), 1.0)
    mag = scale if magnitude is None else magnitude + scale
    bound = LLTM_ULPS[dtype] * UNIT[dtype] * max(1.0, math.sqrt(length / 32)) * mag
    err = (got - want).abs()
    bad = ~(err <= bound)
    assert not bad.any(), (
        f"{what}: {int(bad.sum())} of {got.numel()} elements off, worst by "
        f"{(err - bound).max().item():.3e} (max error {err.max().item():.3e}, "
        f"max |ref| {scale:.3e})"
    )


def lltm_grad_magnitudes(args64: list[Tensor], grads64: list[Tensor]) -> list[Tensor]:
    """Per argument, the sum of the absolute values of the terms of its float64 gradient: with
    d_gates (B, 3S) the gradient wrt X W^T + b, bias: sum_b |d_gates|, weights: |d_gates|^T |X|,
    input and old_h: |d_gates| |W| (their columns of W), old_cell: |its gradient| (no sum)."""
    input, weights, bias, old_h, old_cell = (a.detach() for a in args64)
    state = old_h.shape[1]
    X = torch.cat([old_h, input], dim=1)
    gates = (X @ weights.t() + bias.reshape(-1)).requires_grad_()
    old_cell = old_cell.clone().requires_grad_()
    z_i, z_o, z_c = gates.chunk(3, dim=1)
    new_cell = old_cell + torch.nn.functional.elu(z_c) * torch.sigmoid(z_i)
    new_h = torch.tanh(new_cell) * torch.sigmoid(z_o)
    d_gates, d_old_cell = torch.autograd.grad((new_h, new_cell), (gates, old_cell), grads64)
    d_gates = d_gates.abs()
    d_x = d_gates @ weights.abs()
    return [
        d_x[:, state:],
        d_gates.t() @ X.abs(),
        d_gates.sum(0).reshape(bias.shape),
        d_x[:, :state],
        d_old_cell.abs(),
    ]


def check_lltm(case: LLTMCase, device: str, dtype: torch.dtype) -> None:
    stdv = 1.0 / math.sqrt(max(case.state, 1))
    scales = {"input": 1.0, "weights": stdv, "bias": stdv * case.gate_scale}
    scales |= {"old_h": 1.0, "old_cell": 1.0}
    args, args64 = [], []
    for i, (name, shape, layout) in enumerate(
        zip(LLTM_ARGS, case.shapes(), case.layouts, strict=True)
    ):
        base, x = make(shape, layout, randn(case.seed + i, scales[name]), dtype, device)
        args.append(x)
        args64.append(as_reference(base, x, layout))
    # uses[i]: the argument slot whose tensor is passed as argument i (itself, or an alias).
    uses = list(range(len(LLTM_ARGS)))
    if case.alias == "h=c":
        uses[4] = 3
    elif case.alias == "x=h":
        uses[3] = 0
    args = [args[j] for j in uses]
    args64 = [args64[j] for j in uses]
    new_h, new_cell = lltm_ext.lltm(*args)
    ref_h, ref_cell = lltm_reference(*args64)
    # Sums behind each result: S + I per gate forward; backward also B (weights, bias) and 3S
    # (input, old_h).
    forward_length = case.state + case.features
    backward_length = max(forward_length, case.batch, 3 * case.state)
    for name, got, want in (("new_h", new_h, ref_h), ("new_cell", new_cell, ref_cell)):
        assert got.dtype == dtype and got.device.type == device, name
        assert_lltm_close(got, want, None, dtype, forward_length, f"`{name}`")
    grads = [randn(case.seed + 10 + i)(new_h.numel()).reshape(new_h.shape) for i in range(2)]
    grads = [g.to(dtype) for g in grads]
    grads64 = [g.double() for g in grads]
    # Gradients wrt each distinct argument (an aliased one gets the sum of its uses).
    distinct = sorted(set(uses))
    ours = torch.autograd.grad(
        (new_h, new_cell), [args[i] for i in distinct], [g.to(device) for g in grads]
    )
    refs = torch.autograd.grad((ref_h, ref_cell), [args64[i] for i in distinct], grads64)
    magnitudes = lltm_grad_magnitudes(args64, grads64)
    for i, got, want in zip(distinct, ours, refs, strict=True):
        assert got.shape == args[i].shape and got.dtype == dtype, LLTM_ARGS[i]
        magnitude = sum(m for j, m in enumerate(magnitudes) if uses[j] == i)
        what = f"gradient of `{LLTM_ARGS[i]}`"
        assert_lltm_close(got, want, magnitude, dtype, backward_length, what)


# ---------------------------------------------------------------------------------------------
# The tests: one per op, sharded by device and dtype.
# ---------------------------------------------------------------------------------------------

STRATEGIES = {
    "relu": elementwise_cases(),
    "sigmoid": elementwise_cases(),
    "round_ste": elementwise_cases(),
    "gemm": gemm_cases(),
    "lltm": lltm_cases(),
}


@pytest.mark.parametrize("device,dtype", shards())
@pytest.mark.parametrize("op", ["relu", "sigmoid", "round_ste"])
def test_fuzz_elementwise(request, op, device, dtype):
    run_shard(request, op, device, dtype, lambda case, d, t: check_elementwise(op, case, d, t))


@pytest.mark.parametrize("device,dtype", shards())
def test_fuzz_gemm(request, device, dtype):
    run_shard(request, "gemm", device, dtype, check_gemm)


@pytest.mark.parametrize("device,dtype", shards())
def test_fuzz_lltm(request, device, dtype):
    run_shard(request, "lltm", device, dtype, check_lltm)
