"""Tests of lltm_ext.gemm: values against float64 torch.mm, layouts, edge shapes, out=, autograd,
opcheck, torch.compile and input errors, on the CPU and (marked `cuda`) on a GPU."""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import re
import sys

import pytest
import torch
from helpers import CUDA_DTYPES, device_dtypes, devices

import lltm_ext
from lltm_ext._extension import cuda_built, load_extension
from lltm_ext.ops.gemm import gemm_op, gemm_out_op

ALL_DTYPES = device_dtypes(cpu=CUDA_DTYPES)  # all four floating dtypes on both devices

# Relative Frobenius error bounds against float64 products of the same (rounded) inputs. float32
# sums in float32 (measured ~3e-7 at K = 8192 on the CPU); half types round the output (fp16
# 2^-11, bf16 2^-8 relative: measured ~2e-4 and ~1.7e-3); float64 sums in float64.
REL_BOUND = {
    torch.float64: 1e-13,
    torch.float32: 4e-6,
    torch.float16: 1e-3,
    torch.bfloat16: 6e-3,
}

# (M, N, K): odd sizes, 1-row / 1-column, tall-skinny, empty, K = 0, tile multiples and not.
EDGE_SHAPES = [
    (1, 1, 1),
    (1, 1, 300),
    (1, 257, 33),
    (257, 1, 33),
    (3, 5, 7),
    (127, 129, 131),
    (128, 128, 128),
    (300, 200, 5),
    (4099, 3, 17),
    (5, 3, 7001),
    (2, 1000, 9),
    (0, 5, 3),
    (5, 0, 3),
    (0, 0, 0),
    (4, 6, 0),
]


def ref_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b in float64 on the CPU, from the same (possibly rounded) inputs."""
    return a.detach().double().cpu() @ b.detach().double().cpu()


def rel_err(c: torch.Tensor, ref: torch.Tensor) -> float:
    c = c.detach().double().cpu()
    assert torch.isfinite(c).all(), "non-finite values in the result"
    denom = ref.norm().item()
    diff = (c - ref).norm().item()
    return diff / denom if denom > 0 else diff


def assert_gemm_close(c: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> None:
    assert tuple(c.shape) == tuple(ref.shape)
    err = rel_err(c, ref)
    assert err <= REL_BOUND[dtype], f"relative error {err:.3e} > {REL_BOUND[dtype]:.1e} ({dtype})"


def rand(shape, dtype, device, gen=None) -> torch.Tensor:
    return torch.randn(shape, dtype=torch.float64, generator=gen).to(dtype=dtype, device=device)


def operands(m, n, k, layout, dtype=torch.float32, device="cuda"):
    """Random a (m, k) and b (k, n); layout "nn", "tn", "nt" or "tt": "t" makes that operand a
    transposed view of a row-major matrix (column-major, read in place)."""
    a = rand((k, m), dtype, device).t() if layout[0] == "t" else rand((m, k), dtype, device)
    b = rand((n, k), dtype, device).t() if layout[1] == "t" else rand((k, n), dtype, device)
    return a, b


# ----------------------------------------------------------------------------------------------
# Values.
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device, dtype", ALL_DTYPES)
def test_random_shapes(device, dtype):
    gen = torch.Generator().manual_seed(1234)
    for _ in range(6):
        m, n, k = (int(x) for x in torch.randint(1, 300, (3,), generator=gen))
        a, b = rand((m, k), dtype, device, gen), rand((k, n), dtype, device, gen)
        c = lltm_ext.gemm(a, b)
        assert c.dtype == dtype and c.device == a.device and c.is_contiguous()
        assert_gemm_close(c, ref_mm(a, b), dtype)


@pytest.mark.parametrize("shape", EDGE_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("device, dtype", ALL_DTYPES)
def test_edge_shapes(device, dtype, shape):
    m, n, k = shape
    a, b = rand((m, k), dtype, device), rand((k, n), dtype, device)
    c = lltm_ext.gemm(a, b)
    assert tuple(c.shape) == (m, n)
    if k == 0:
        assert (c == 0).all()
    assert_gemm_close(c, ref_mm(a, b), dtype)


@pytest.mark.parametrize("device, dtype", ALL_DTYPES)
def test_empty_k_with_expanded_operands(device, dtype):
    """K = 0 with stride-0 (expanded) operands: an empty tensor counts as contiguous whatever its
    strides, so the kernels' layout rules must not be asked about it (the fuzz test found an
    internal assert here on CUDA); the product is zeros."""
    a = torch.ones(1, 0, dtype=dtype, device=device).expand(3, 0)
    b = torch.ones(0, 1, dtype=dtype, device=device).expand(0, 2)
    assert a.stride(0) == 0 and b.stride(1) == 0
    c = lltm_ext.gemm(a, b)
    assert tuple(c.shape) == (3, 2) and (c == 0).all()
    out = torch.full((3, 2), 7.0, dtype=dtype, device=device)
    lltm_ext.gemm(a, b, out=out)
    assert (out == 0).all()


@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "tt"])
@pytest.mark.parametrize("device, dtype", ALL_DTYPES)
def test_transposed_views(device, dtype, layout):
    """a.t() / b.t() views (column-major) are read in place and give the same product."""
    a, b = operands(67, 45, 131, layout, dtype, device)
    assert a.is_contiguous() == (layout[0] == "n") and b.is_contiguous() == (layout[1] == "n")
    assert_gemm_close(lltm_ext.gemm(a, b), ref_mm(a, b), dtype)


@pytest.mark.parametrize("device, dtype", device_dtypes())
def test_strided_and_offset_views(device, dtype):
    """Padded rows (ld > width), unaligned starts, every-other-column views and expanded rows."""
    wide = rand((70, 140), dtype, device)
    cases = [
        (wide[:, :65], rand((65, 33), dtype, device)),  # lda = 140 > K
        (wide[1:, 3:68], rand((65, 33), dtype, device)),  # unaligned start
        (wide[:, ::2], rand((70, 9), dtype, device)),  # no unit stride: copied
        (rand((1, 40), dtype, device).expand(6, 40), rand((40, 12), dtype, device)),
        (rand((9, 40), dtype, device), wide[:40, 1:12]),
        (rand((9, 40), dtype, device), wide.t()[1:41, 2:13]),  # column-major, unaligned
    ]
    for a, b in cases:
        assert_gemm_close(lltm_ext.gemm(a, b), ref_mm(a, b), dtype)


@pytest.mark.parametrize("device, dtype", ALL_DTYPES)
def test_long_k_accuracy(device, dtype):
    """K = 8192: float32 stays far under 1e-5 relative error."""
    m, n, k = 96, 80, 8192
    a, b = rand((m, k), dtype, device), rand((k, n), dtype, device)
    c = lltm_ext.gemm(a, b)
    assert_gemm_close(c, ref_mm(a, b), dtype)


# ----------------------------------------------------------------------------------------------
# out=.
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device, dtype", ALL_DTYPES)
def test_out(device, dtype):
    a, b = rand((37, 53), dtype, device), rand((53, 29), dtype, device)
    out = torch.full((37, 29), float("nan"), dtype=dtype, device=device)
    result = lltm_ext.gemm(a, b, out=out)
    assert result is out
    assert_gemm_close(out, ref_mm(a, b), dtype)
    # A non-contiguous out (a transposed view) is written too.
    out_t = torch.full((29, 37), float("nan"), dtype=dtype, device=device).t()
    assert lltm_ext.gemm(a, b, out=out_t) is out_t
    assert_gemm_close(out_t, ref_mm(a, b), dtype)


@pytest.mark.parametrize("device", devices())
def test_out_errors(device):
    a, b = rand((4, 5), torch.float32, device), rand((5, 6), torch.float32, device)
    with pytest.raises(RuntimeError, match=r"`out` must have shape \[4, 6\]"):
        lltm_ext.gemm(a, b, out=torch.empty(6, 4, device=device))
    with pytest.raises(RuntimeError, match=r"`out` is Double and `a` is Float"):
        lltm_ext.gemm(a, b, out=torch.empty(4, 6, dtype=torch.float64, device=device))
    base = torch.randn(24, device=device)
    with pytest.raises(RuntimeError, match=r"`out` must not share memory with `a`"):
        lltm_ext.gemm(base[:20].view(4, 5), b, out=base.view(4, 6))
    with pytest.raises(RuntimeError, match=r"self-overlapping"):
        lltm_ext.gemm(a, b, out=torch.empty(1, 6, device=device).expand(4, 6))
    with pytest.raises(RuntimeError, match=r"does not support automatic differentiation"):
        lltm_ext.gemm(a.requires_grad_(), b, out=torch.empty(4, 6, device=device))


@pytest.mark.cuda
def test_out_wrong_device():
    a, b = rand((4, 5), torch.float32, "cuda"), rand((5, 6), torch.float32, "cuda")
    with pytest.raises(RuntimeError, match=r"`out` is on cpu and `a` is on cuda"):
        lltm_ext.gemm(a, b, out=torch.empty(4, 6))


# ----------------------------------------------------------------------------------------------
# Autograd.
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device, dtype", ALL_DTYPES)
def test_gradients(device, dtype):
    a = rand((33, 70), dtype, device).requires_grad_()
    b = rand((70, 21), dtype, device).requires_grad_()
    grad_c = rand((33, 21), dtype, device)
    lltm_ext.gemm(a, b).backward(grad_c)
    assert_gemm_close(a.grad, ref_mm(grad_c, b.t()), dtype)
    assert_gemm_close(b.grad, ref_mm(a.t(), grad_c), dtype)


@pytest.mark.parametrize("device", devices())
def test_gradcheck(device):
    a = torch.randn(7, 9, dtype=torch.float64, device=device, requires_grad=True)
    b = torch.randn(9, 5, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(lltm_ext.gemm, (a, b))
    assert torch.autograd.gradgradcheck(lltm_ext.gemm, (a, b))
    # Transposed inputs and one input without grad.
    at = torch.randn(9, 7, dtype=torch.float64, device=device).t().requires_grad_()
    assert torch.autograd.gradcheck(lltm_ext.GemmFunction.apply, (at, b.detach()))


@pytest.mark.parametrize("device", devices())
def test_opcheck(device):
    a = torch.randn(6, 10, device=device, requires_grad=True)
    b = torch.randn(10, 4, device=device, requires_grad=True)
    torch.library.opcheck(gemm_op, (a.detach(), b.detach()))
    torch.library.opcheck(gemm_op, (a.detach().t().contiguous().t(), b.detach()))
    # The operator itself is differentiable: its Autograd kernel is C++ (no Python Function).
    torch.library.opcheck(gemm_op, (a, b))
    c = gemm_op(a, b)
    assert not isinstance(c.grad_fn, torch.autograd.function.BackwardCFunction)
    assert "Product" in c.grad_fn.name(), c.grad_fn.name()
    c.sum().backward()
    ones = torch.ones(6, 4, device=device)
    torch.testing.assert_close(a.grad, ones @ b.detach().t())
    torch.testing.assert_close(b.grad, a.detach().t() @ ones)
    torch.library.opcheck(gemm_out_op, (a.detach(), b.detach(), torch.empty(6, 4, device=device)))


@pytest.mark.parametrize("device", devices())
def test_torch_compile(device):
    def f(a, b, w):
        return torch.tanh(lltm_ext.gemm(a, b)) @ w

    a = torch.randn(12, 20, device=device, requires_grad=True)
    b = torch.randn(20, 16, device=device, requires_grad=True)
    w = torch.randn(16, 3, device=device)
    compiled = torch.compile(f, fullgraph=True)
    out = compiled(a, b, w)
    torch.testing.assert_close(out, f(a, b, w), rtol=1e-5, atol=1e-5)
    ga, gb = torch.autograd.grad(out.sum(), (a, b))
    ra, rb = torch.autograd.grad(f(a, b, w).sum(), (a, b))
    torch.testing.assert_close(ga, ra, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gb, rb, rtol=1e-5, atol=1e-5)

    def g(a, b, out):
        return lltm_ext.gemm(a, b, out=out)

    out = torch.empty(12, 16, device=device)
    with torch.no_grad():
        torch.compile(g, fullgraph=True)(a, b, out)
    torch.testing.assert_close(out, (a @ b).detach(), rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------------------------
# Input errors: raised before any kernel runs, naming the argument.
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", devices())
def test_bad_inputs(device):
    a, b = torch.randn(4, 5, device=device), torch.randn(5, 6, device=device)
    with pytest.raises(
        RuntimeError, match=r"`a` must be 2-D, but got a Float tensor of shape \[5\]"
    ):
        lltm_ext.gemm(torch.randn(5, device=device), b)
    with pytest.raises(RuntimeError, match=r"`b` must be 2-D, but got a Float tensor of shape"):
        lltm_ext.gemm(a, torch.randn(2, 5, 6, device=device))
    with pytest.raises(RuntimeError, match=r"`b` must have a.size\(1\) = 5 rows"):
        lltm_ext.gemm(a, torch.randn(4, 6, device=device))
    with pytest.raises(RuntimeError, match=r"`b` is Double and `a` is Float"):
        lltm_ext.gemm(a, b.double())
    with pytest.raises(RuntimeError, match=r"`a` must have a floating-point dtype.*Int"):
        lltm_ext.gemm(a.int(), b)
    with pytest.raises(RuntimeError, match=r"`b` must have a floating-point dtype.*Long"):
        lltm_ext.gemm(a, b.long())


@pytest.mark.cuda
def test_mixed_devices():
    a, b = torch.randn(4, 5), torch.randn(5, 6, device="cuda")
    with pytest.raises(RuntimeError, match=r"`b` is on cuda:0 and `a` is on cpu"):
        lltm_ext.gemm(a, b)


def test_cuda_tensor_on_cpu_only_build():
    if not torch.cuda.is_available() or cuda_built("gemm"):
        pytest.skip("needs a GPU and a CPU-only build of lltm_ext")
    with pytest.raises(RuntimeError, match=r"no CUDA kernels"):
        lltm_ext.gemm(torch.randn(2, 2, device="cuda"), torch.randn(2, 2, device="cuda"))


# ----------------------------------------------------------------------------------------------
# CPU: every path of the CPU kernels (src/gemm/cpu/: "packed", "rows", "dot"), in either
# orientation (C = A B, or C^T = B^T A^T written transposed), cut into parts, bfloat16 with and
# without the AVX-512 BF16 kernels, forced through the module's test knobs. The rest of this file
# runs whatever the heuristic picks; test_cpu_isa.py runs it all again in each ISA copy.
# ----------------------------------------------------------------------------------------------

CPU_PATHS = ["packed", "rows", "dot", "direct"]
CPU_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]

# (M, N, K): tiny; GEMV-like (1 or 2 rows of C or C^T, narrow and wide); a few rows; odd sizes
# with tails along every dimension (K below and above a vector); K over the blocked paths' panel
# (256 or 512) and over the dot path's chunk (8192), so that sums carry across panels.
CPU_SHAPES = [
    (1, 1, 1),
    (2, 3, 1),
    (1, 5, 300),
    (1, 300, 700),
    (300, 2, 700),
    (4, 257, 33),
    (7, 100, 300),
    (33, 40, 31),
    (70, 37, 9),
    (13, 70, 520),
    (129, 65, 600),
    (3, 5, 9000),
    (150, 2100, 20),  # short K over more than one block of rows and of columns (row-ordered tiles)
]


@contextlib.contextmanager
def cpu_knobs(
    path: str = "auto", parts: int = 0, bf16_dot: bool = True, transpose: int = -1, amx: bool = True
):
    """Forces the CPU GEMM's path, parts, bfloat16 kernels, orientation and AMX tiles inside the
    block."""
    ext = load_extension("gemm")
    ext._set_cpu_knobs(path, parts, bf16_dot, transpose, amx)
    try:
        yield ext
    finally:
        ext._set_cpu_knobs("auto", 0, True, -1, True)


def cpu_operands(
    m: int, n: int, k: int, layout: str, dtype: torch.dtype, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """CPU operands a (m, k) and b (k, n) in `layout` ("nn", "nt", "tn", "tt": "t" is a
    transposed view of a contiguous tensor, so that operand's unit stride runs along the other
    dimension)."""
    a = rand((k, m), dtype, "cpu", gen).t() if layout[0] == "t" else rand((m, k), dtype, "cpu", gen)
    b = rand((n, k), dtype, "cpu", gen).t() if layout[1] == "t" else rand((k, n), dtype, "cpu", gen)
    return a, b


def cpu_path_fits(path: str, a: torch.Tensor, b: torch.Tensor, transpose: int) -> bool:
    """Whether `path` can run a @ b in that orientation: "rows" reads the long operand in place
    along N (b's columns; for C^T, a's rows), "dot" along K (b's rows; for C^T, a's columns),
    "direct" any layout of float and double in the AVX2 and AVX-512 copies; extent-1 dimensions
    count as unit-stride."""

    def unit(t: torch.Tensor, dim: int) -> bool:
        return t.shape[dim] == 1 or t.stride(dim) == 1

    if path == "packed":
        return True
    if path == "direct":  # float and double, in the AVX2 and AVX-512 copies
        return a.dtype in (torch.float32, torch.float64) and has_direct_path()
    if path == "rows":
        return unit(a, 0) if transpose else unit(b, 1)
    return unit(a, 1) if transpose else unit(b, 0)


def has_direct_path() -> bool:
    """Whether the CPU kernels that run here have the direct path (the AVX2 and AVX-512 copies)."""
    return cpu_isa_name() in ("avx2+fma", "avx512")


def cpu_flags() -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where there is none)."""
    if not os.path.exists("/proc/cpuinfo"):
        return set()
    with open("/proc/cpuinfo") as f:
        return next((set(line.split()) for line in f if line.startswith("flags")), set())


def cpu_vendor() -> str:
    """The CPU's vendor_id from /proc/cpuinfo ("GenuineIntel", "AuthenticAMD"; "" where there is
    none)."""
    if not os.path.exists("/proc/cpuinfo"):
        return ""
    with open("/proc/cpuinfo") as f:
        return next((line.split(":")[1].strip() for line in f if line.startswith("vendor_id")), "")


def bf16_dot_expected() -> bool:
    """Whether bfloat16 runs on the AVX-512 BF16 kernels here (the avx512 copy on a CPU with
    avx512_bf16)."""
    return cpu_isa_name() == "avx512" and "avx512_bf16" in cpu_flags()


def amx_expected() -> bool:
    """Whether bfloat16's packed path runs on AMX tiles here: the avx512 copy on a CPU with
    AMX-TILE, AMX-BF16 and AVX-512 BF16 under Linux (which must grant the tile data; a kernel
    that refuses shows here as a failure)."""
    needed = {"amx_tile", "amx_bf16", "avx512_bf16"}
    return sys.platform == "linux" and cpu_isa_name() == "avx512" and needed <= cpu_flags()


def on_amx(dtype: torch.dtype) -> bool:
    """Whether products of `dtype` that are neither tiny nor a single row or column run on AMX
    tiles here."""
    return dtype == torch.bfloat16 and amx_expected()


def cpu_isa_name() -> str:
    ext = load_extension("gemm")
    ext.gemm(torch.ones(1, 1), torch.ones(1, 1))
    return ext._cpu_kernel_isa()


@pytest.mark.parametrize("dtype", CPU_DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("path", CPU_PATHS)
def test_cpu_paths(path, dtype):
    """Every path, orientation and layout at every shape of CPU_SHAPES, against float64; the forced
    orientation runs the forced path where the layout allows it, else "packed"."""
    gen = torch.Generator().manual_seed(3)
    # bfloat16: the AMX tiles (packed path), the AVX-512 BF16 kernels, and neither.
    kernels = [(True, True), (True, False), (False, False)]
    for (m, n, k), layout, transpose, (bf16_dot, amx) in itertools.product(
        CPU_SHAPES,
        ["nn", "nt", "tn", "tt"],
        [0, 1],
        kernels if dtype == torch.bfloat16 else [(True, True)],
    ):
        a, b = cpu_operands(m, n, k, layout, dtype, gen)
        with cpu_knobs(path, 0, bf16_dot, transpose, amx) as ext:
            c = lltm_ext.gemm(a, b)
            ran, transposed, parts, ran_bf16_dot, ran_amx = ext._cpu_last_run()
        where = f"{path} {m}x{n}x{k} {layout} transpose={transpose} bf16_dot={bf16_dot} amx={amx}"
        expected = path if cpu_path_fits(path, a, b, transpose) else "packed"
        assert (ran, transposed) == (expected, bool(transpose)), where
        assert parts >= 1
        on_amx = dtype == torch.bfloat16 and path == "packed" and amx and amx_expected()
        assert ran_amx == on_amx, where
        if dtype == torch.bfloat16 and ran != "rows":
            assert ran_bf16_dot == (bf16_dot and bf16_dot_expected() and not on_amx), where
        assert tuple(c.shape) == (m, n) and c.is_contiguous(), where
        err = rel_err(c, ref_mm(a, b))
        assert err <= REL_BOUND[dtype], f"{where}: relative error {err:.3e}"


# Shapes at the AMX kernels' edges: one tile (16 x 16 x 32) and one past it on every side; K of
# one and of more than one panel (1024), partial or whole steps of 32; more rows than a block (128)
# and a window (512) of rows, more columns than a block (512), and more rows than a window with K
# over two panels (the sums carried across panels in the workspace, window by window).
AMX_SHAPES = [
    (16, 16, 32),
    (17, 33, 65),
    (31, 15, 9),
    (32, 32, 1024),
    (33, 47, 1025),
    (129, 513, 2080),
    (600, 20, 300),
    (20, 600, 31),
    (520, 33, 1100),
]


@pytest.mark.skipif(not amx_expected(), reason="needs a CPU with AMX-BF16 (and Linux)")
def test_cpu_bf16_on_amx_tiles():
    """bfloat16 on AMX tiles at the kernels' edges, every layout and orientation, operands with no
    unit stride (the element-by-element packing), against float64; and the products the heuristic
    gives them (not a single row or column of C, nor K of 8 or less, nor under 4096
    multiply-adds)."""
    gen = torch.Generator().manual_seed(8)
    dtype = torch.bfloat16
    for (m, n, k), layout, transpose in itertools.product(
        AMX_SHAPES, ["nn", "nt", "tn", "tt"], [0, 1]
    ):
        a, b = cpu_operands(m, n, k, layout, dtype, gen)
        with cpu_knobs("packed", 0, True, transpose) as ext:
            c = lltm_ext.gemm(a, b)
            ran = ext._cpu_last_run()
        where = f"{m}x{n}x{k} {layout} transpose={transpose}"
        assert ran[0] == "packed" and ran[4] and ran[1] == bool(transpose), where
        err = rel_err(c, ref_mm(a, b))
        assert err <= REL_BOUND[dtype], f"{where}: relative error {err:.3e}"
    for m, n, k in [(19, 37, 70), (130, 40, 1100)]:
        a = rand((2 * m, 3 * k), dtype, "cpu", gen)[::2, ::3]
        b = rand((2 * k, 2 * n), dtype, "cpu", gen)[::2, ::2]
        with cpu_knobs("packed") as ext:
            c = lltm_ext.gemm(a, b)
            assert ext._cpu_last_run()[4], (m, n, k)
        err = rel_err(c, ref_mm(a, b))
        assert err <= REL_BOUND[dtype], f"strided {m}x{n}x{k}: relative error {err:.3e}"
    for (m, n, k), expected in [
        ((16, 16, 16), True),
        ((64, 64, 64), True),
        ((9, 9, 9), False),  # (setting up the tiles would be most of the time)
        ((1, 300, 300), False),
        ((300, 1, 300), False),
        ((300, 300, 8), False),
    ]:
        with cpu_knobs() as ext:
            lltm_ext.gemm(rand((m, k), dtype, "cpu", gen), rand((k, n), dtype, "cpu", gen))
            assert ext._cpu_last_run()[4] == expected, (m, n, k)


@pytest.mark.parametrize("dtype", CPU_DTYPES, ids=lambda d: str(d)[6:])
def test_cpu_auto_gathers_few_rows_on_the_dot_path(dtype):
    """A product with few rows of C (in its skinny orientation) whose long operand is contiguous
    along K runs the dot path even when the other operand's rows must be gathered (it is
    transposed): gathering a few rows costs no more than packing them, and the dot path was
    2-4x faster than the packed one there. Against float64."""
    gen = torch.Generator().manual_seed(5)
    for (m, n, k), layout in [((2, 7, 331), "tt"), ((10, 2, 311), "nn"), ((2, 33, 1930), "tt")]:
        a, b = cpu_operands(m, n, k, layout, dtype, gen)
        with cpu_knobs() as ext:
            c = lltm_ext.gemm(a, b)
            ran, amx = ext._cpu_last_run()[0], ext._cpu_last_run()[4]
        where = f"{m}x{n}x{k} {layout}"
        # (bfloat16 on AMX tiles runs these packed: 2-4x faster than the dot path)
        assert (ran, amx) == (("packed", True) if on_amx(dtype) else ("dot", False)), where
        err = rel_err(c, ref_mm(a, b))
        assert err <= REL_BOUND[dtype], f"{where}: relative error {err:.3e}"


@pytest.mark.parametrize("dtype", CPU_DTYPES, ids=lambda d: str(d)[6:])
def test_cpu_auto_takes_the_dot_path_only_where_k_repays_it(dtype):
    """With 8 rows of C (in the skinny orientation), a short K runs packed (each element of C
    reduced across the lanes costs more than the dot sums save) and a long K runs the dot path.
    Against float64."""
    gen = torch.Generator().manual_seed(6)
    float_lanes = {"avx512": 16, "avx2+fma": 8}.get(cpu_isa_name(), 4)
    lanes = float_lanes // 2 if dtype == torch.float64 else float_lanes
    # The shortest K the dot path takes at all (2 vectors), and one past every threshold.
    for k, expected in [(2 * lanes, "packed"), (16 * lanes, "dot")]:
        a, b = cpu_operands(1500, 8, k, "nn", dtype, gen)
        with cpu_knobs() as ext:
            c = lltm_ext.gemm(a, b)
            ran = ext._cpu_last_run()[0]
        if on_amx(dtype):  # bfloat16 on AMX tiles: packed at both
            expected = "packed"
        if expected == "packed" and dtype in (torch.float32, torch.float64):
            # (in the AVX2 and AVX-512 copies, a few columns of a small B run on the direct path)
            expected = "direct" if has_direct_path() else "packed"
        assert ran == expected, f"1500x8x{k}: {ran}"
        err = rel_err(c, ref_mm(a, b))
        assert err <= REL_BOUND[dtype], f"1500x8x{k}: relative error {err:.3e}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=lambda d: str(d)[6:])
def test_cpu_dot_path_past_eight_rows_from_a_k_that_repays_its_sums(dtype):
    """x @ W.T (W's rows along K) past 8 rows of C runs the dot path from K = max(128, M L / 2), L
    the vector's lanes in this copy of the kernels (each element of C summed across the lanes costs
    what K / L multiply-adds repay), and not one k below. Against float64."""
    lanes = {"avx512": 64, "avx2+fma": 32, "baseline": 16}[cpu_isa_name()] // dtype.itemsize
    gen = torch.Generator().manual_seed(14)
    for m in (16, 32, 64):
        k_dot = max(128, m * lanes // 2)
        for k in (k_dot - 1, k_dot):
            a, b = cpu_operands(m, 300, k, "nt", dtype, gen)
            with cpu_knobs() as ext:
                c = lltm_ext.gemm(a, b)
                ran = ext._cpu_last_run()[0]
            where = f"{m}x300x{k} nt: {ran}"
            assert (ran == "dot") == (k >= k_dot), where
            err = rel_err(c, ref_mm(a, b))
            assert err <= REL_BOUND[dtype], f"{where}: relative error {err:.3e}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=lambda d: str(d)[6:])
def test_cpu_auto_takes_the_direct_path_for_small_products(dtype):
    """float and double products too small for packing to pay run on the direct path (AVX2 and
    AVX-512 copies): few rows of C over B read along N, few rows over a short K gathered, many rows
    over a few columns of a small B; a long B, a large product, a GEMV and B gathered from K = 128
    (a linear layer's x @ W.T: the dot path) do not, nor past 8 rows on AMD's CPUs (packed).
    Against float64."""
    gen = torch.Generator().manual_seed(9)
    direct = has_direct_path()
    gathers = cpu_isa_name() == "avx512" and cpu_vendor() != "AuthenticAMD"
    cases = [
        ((6, 29, 2212), "nn", direct),
        ((4, 55, 3000), "nn", direct),
        ((2, 7449, 5), "nt", direct),
        ((112, 28, 143), "nn", direct),
        ((16, 512, 127), "nt", gathers),  # more than 8 rows, B gathered (AVX-512, not AMD)
        ((16, 512, 128), "nt", False),  # from K = 128 on the dot path
        ((32, 512, 1024), "nt", False),  # B's columns 4 KB apart
        ((10, 250, 1637), "nt", False),
        ((20, 6137, 7887), "nn", False),  # B of 190 MB: packed
        ((300, 300, 300), "nn", False),
        ((1, 1, 5000), "nt", False),  # a dot product
    ]
    for (m, n, k), layout, expected in cases:
        a, b = cpu_operands(m, n, k, layout, dtype, gen)
        with cpu_knobs() as ext:
            c = lltm_ext.gemm(a, b)
            ran = ext._cpu_last_run()[0]
        where = f"{m}x{n}x{k} {layout}: {ran}"
        assert (ran == "direct") == expected, where
        err = rel_err(c, ref_mm(a, b))
        assert err <= REL_BOUND[dtype], f"{where}: relative error {err:.3e}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=lambda d: str(d)[6:])
def test_cpu_avx2_rules(dtype):
    """The AVX2 copy's own rules (driver.h, fitted on an AMD EPYC): B gathered only over a very
    short K, or a short one for up to 4 rows of C; the direct path in the orientation that loads B
    along N (C^T written transposed); a few rows over K <= 4 on the direct path rather than
    axpy_rows; a.T @ b.T packed as C^T = B^T A^T where K repays the transposed stores, and as
    given where it does not. Against float64."""
    if cpu_isa_name() != "avx2+fma":
        pytest.skip(f"the AVX2 copy's rules (the kernels here: {cpu_isa_name()})")
    gen = torch.Generator().manual_seed(12)
    cases = [
        ((2, 7449, 5), "nt", ("direct", False)),  # 2 rows, K = 5: B gathered
        ((29, 1161, 9), "nt", ("packed", False)),  # 29 rows, K = 9: no gathers
        ((392, 13, 17), "nt", ("packed", False)),  # (AVX-512: gathered)
        ((12, 12, 1541), "tt", ("direct", True)),  # B along N only as C^T
        ((104, 40, 396), "tt", ("direct", True)),
        ((28, 1751, 8), "tt", ("packed", False)),  # K = 8: C^T's stores would be the work
        ((2, 7831, 1), "nn", ("direct", False)),  # K = 1: not axpy_rows
        ((174, 161, 2968), "tt", ("packed", True)),
        ((2343, 40, 5), "tt", ("packed", False)),
    ]
    for (m, n, k), layout, expected in cases:
        a, b = cpu_operands(m, n, k, layout, dtype, gen)
        with cpu_knobs() as ext:
            c = lltm_ext.gemm(a, b)
            ran = ext._cpu_last_run()[:2]
        where = f"{m}x{n}x{k} {layout}: {ran}"
        assert tuple(ran) == expected, where
        err = rel_err(c, ref_mm(a, b))
        assert err <= REL_BOUND[dtype], f"{where}: relative error {err:.3e}"


@pytest.mark.parametrize("dtype", CPU_DTYPES, ids=lambda d: str(d)[6:])
def test_cpu_single_row_dot_tiles(dtype):
    """A single row of C on the dot path (x @ w.T, or w @ x as C^T): its tiles of a vector's worth
    of columns and the columns past the last whole one, a K of one partial vector to two chunks,
    cut into parts whose edges fall inside a tile. Against float64."""
    gen = torch.Generator().manual_seed(13)
    for (m, n, k), layout, parts in itertools.product(
        [(1, 8, 8), (1, 19, 9), (1, 300, 37), (1, 17, 9000), (23, 1, 12), (1, 4, 40)],
        ["nt", "tn", "tt"],
        [1, 3],
    ):
        a, b = cpu_operands(m, n, k, layout, dtype, gen)
        transpose = 1 if n == 1 else 0  # the single row of C in the dot orientation
        with cpu_knobs("dot", parts, True, transpose) as ext:
            c = lltm_ext.gemm(a, b)
            ran = ext._cpu_last_run()[0]
        where = f"{m}x{n}x{k} {layout} parts={parts}: {ran}"
        if cpu_path_fits("dot", a, b, transpose):
            assert ran == "dot", where
        err = rel_err(c, ref_mm(a, b))
        assert err <= REL_BOUND[dtype], f"{where}: relative error {err:.3e}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("path", CPU_PATHS)
def test_cpu_parts(path, dtype):
    """A product cut into 2, 3 or 7 parts (rows and columns of C, as the threads get them; more
    parts than threads run several to a thread) gives the product."""
    gen = torch.Generator().manual_seed(4)
    for (m, n, k), layout, parts, transpose in itertools.product(
        [(5, 300, 70), (100, 90, 300), (300, 3, 520), (40, 41, 9000)],
        ["nn", "tt", "nt"],
        [2, 3, 7],
        [0, 1],
    ):
        a, b = cpu_operands(m, n, k, layout, dtype, gen)
        with cpu_knobs(path, parts, True, transpose) as ext:
            c = lltm_ext.gemm(a, b)
            ran_parts = ext._cpu_last_run()[2]
        where = f"{path} {m}x{n}x{k} {layout} parts={parts} transpose={transpose}"
        assert 1 <= ran_parts <= parts, where
        err = rel_err(c, ref_mm(a, b))
        assert err <= REL_BOUND[dtype], f"{where}: relative error {err:.3e}"


@pytest.mark.parametrize("dtype", CPU_DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("path", CPU_PATHS)
def test_cpu_reads_and_writes_only_the_views(path, dtype):
    """Operands that are views into NaN-filled storage (a margin on every side, rows of the parent
    longer than the view), written into an out= that sits inside storage filled with a sentinel:
    any element read outside a view would make the product NaN, any written outside `out` would
    change the sentinel (a contiguous `out` is where the kernels write directly)."""
    gen = torch.Generator().manual_seed(5)
    nan = float("nan")

    def embedded(rows: int, cols: int, transposed: bool) -> torch.Tensor:
        r, c = (cols, rows) if transposed else (rows, cols)
        parent = torch.full((r + 6, c + 11), nan, dtype=dtype)
        view = parent[3 : 3 + r, 5 : 5 + c]
        view.copy_(rand((r, c), dtype, "cpu", gen))
        return view.t() if transposed else view

    for (m, n, k), layout, transpose in itertools.product(
        [(1, 37, 19), (5, 70, 300), (37, 21, 17), (70, 45, 600), (3, 2, 40)],
        ["nn", "nt", "tn", "tt"],
        [0, 1],
    ):
        a = embedded(m, k, layout[0] == "t")
        b = embedded(k, n, layout[1] == "t")
        storage = torch.full((m * n + 64,), 7.0, dtype=dtype)
        out = storage[32 : 32 + m * n].view(m, n)
        with cpu_knobs(path, 0, True, transpose):
            lltm_ext.gemm(a, b, out=out)
        where = f"{path} {m}x{n}x{k} {layout} transpose={transpose}"
        err = rel_err(out, ref_mm(a, b))
        assert err <= REL_BOUND[dtype], f"{where}: relative error {err:.3e}"
        assert (storage[:32] == 7.0).all() and (storage[32 + m * n :] == 7.0).all(), where


def test_cpu_small_products_run_on_one_thread():
    """Work too small to share (the issue's 1 x 88 x 1300 and 1 x 21 x 390, a 64^3 product) runs in
    one part on the calling thread, whatever the thread count; a large one is cut into parts for
    the threads."""
    ext = load_extension("gemm")
    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for m, n, k in [(1, 88, 1300), (1, 21, 390), (64, 64, 64), (4, 3, 28)]:
            lltm_ext.gemm(torch.randn(m, k), torch.randn(k, n))
            assert ext._cpu_last_run()[2] == 1, (m, n, k)
        if torch.get_num_threads() == 2:
            lltm_ext.gemm(torch.randn(512, 512), torch.randn(512, 512))
            assert ext._cpu_last_run()[2] >= 2
    finally:
        torch.set_num_threads(saved)


def test_cpu_knob_errors():
    ext = load_extension("gemm")
    with pytest.raises(
        RuntimeError, match=r"must be 'auto', 'packed', 'rows', 'dot' or 'direct', not 'fast'"
    ):
        ext._set_cpu_knobs("fast")
    with pytest.raises(RuntimeError, match=r"transpose must be -1, 0 or 1, not 2"):
        ext._set_cpu_knobs("auto", 0, True, 2)
    ext._set_cpu_knobs()  # back to the defaults


# ----------------------------------------------------------------------------------------------
# CUDA: the two float32 paths (cp.async on sm_80+, register-staged before), every tile config and
# split, determinism, 64-bit offsets.
# ----------------------------------------------------------------------------------------------


@contextlib.contextmanager
def gemm_path(path: str):
    """Forces the float32 CUDA path ('auto', 'async', 'staged') inside the block; afterwards the
    setting the process started with (LLTM_EXT_GEMM_PATH, else auto) comes back."""
    ext = load_extension("gemm")
    ext._set_gemm_path(path)
    try:
        yield ext
    finally:
        ext._set_gemm_path(os.environ.get("LLTM_EXT_GEMM_PATH", "auto"))


def is_async_config(ext, config: int) -> bool:
    return "staged" not in ext._cuda_configs()[config]


def expected_auto_path() -> str:
    """The path the loaded GPU code allows on this device: the driver runs the SASS of the same
    major and the highest minor <= the device's, else JIT-compiles the highest PTX <= the device's;
    cp.async exists in code compiled for 8.0 and newer."""
    major, minor = torch.cuda.get_device_capability()
    targets = lltm_ext.build_info()["cuda_targets"]
    # sm_90a / compute_90a (architecture-specific code) count as 90.
    sass = [int(m[1]) for t in targets if (m := re.fullmatch(r"sm_(\d+)[a-z]?", t))]
    ptx = [int(m[1]) for t in targets if (m := re.fullmatch(r"compute_(\d+)[a-z]?", t))]
    same_major = [v for v in sass if v // 10 == major and v % 10 <= minor]
    image = max(same_major) if same_major else max(v for v in ptx if v <= 10 * major + minor)
    return "async" if image >= 80 else "staged"


@pytest.mark.cuda
def test_cuda_path_follows_the_loaded_code():
    with gemm_path("auto") as ext:
        assert ext._gemm_path() == expected_auto_path()
        config, *_ = ext._cuda_choose(1024, 1024, 1024, False)
        assert is_async_config(ext, config) == (ext._gemm_path() == "async")
    with gemm_path("staged") as ext:
        assert ext._gemm_path() == "staged"
        config, *_ = ext._cuda_choose(4096, 4096, 4096, True)
        assert not is_async_config(ext, config)
        a, b = torch.randn(8, 8, device="cuda"), torch.randn(8, 8, device="cuda")
        with pytest.raises(RuntimeError, match=r"uses cp\.async"):
            ext._gemm_with_config(a, b, 0, 1)
    with pytest.raises(RuntimeError, match="must be auto, async or staged, but got 'fast'"):
        load_extension("gemm")._set_gemm_path("fast")


@pytest.mark.cuda
@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "tt"])
def test_cuda_staged_path(layout):
    """The pre-sm_80 path (forced on this GPU) vs float64: odd, tile-unaligned and edge shapes,
    split-K from the heuristic, every dtype (half types and float64 run staged on every GPU)."""
    shapes = [(131, 259, 77), (1, 129, 300), (64, 64, 20000), (3, 5, 7), (257, 1, 33), (4, 6, 0)]
    with gemm_path("staged"):
        for (m, n, k), dtype in itertools.product(shapes, CUDA_DTYPES):
            a, b = operands(m, n, k, layout, dtype)
            assert_gemm_close(lltm_ext.gemm(a, b), ref_mm(a, b), dtype)


@pytest.mark.cuda
@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "tt"])
def test_cuda_every_config(layout):
    """All float32 tile configs (not only the heuristic's picks), with and without split-K."""
    ext = load_extension("gemm")
    # Unaligned leading dimensions (scalar loads), ragged tiles with 16-byte loads (130, 252, 84),
    # whole tiles, single rows and columns.
    shapes = [(131, 259, 77), (130, 252, 84), (1, 129, 300), (256, 128, 512), (300, 5, 1)]
    for m, n, k in shapes:
        a, b = operands(m, n, k, layout)
        ref = ref_mm(a, b)
        for config in range(len(ext._cuda_configs())):
            if is_async_config(ext, config) and ext._gemm_path() == "staged":
                with pytest.raises(RuntimeError, match=r"uses cp\.async"):
                    ext._gemm_with_config(a, b, config, 1)
                continue
            for splits in (1, 3):
                c = ext._gemm_with_config(a, b, config, splits)
                err = rel_err(c, ref)
                assert err <= REL_BOUND[torch.float32], (config, splits, (m, n, k), err)


@pytest.mark.cuda
def test_cuda_heuristic_and_determinism():
    ext = load_extension("gemm")
    n_configs = len(ext._cuda_configs())
    shapes = [(1024, 1024, 1024), (4096, 4096, 4096), (64, 64, 100000), (1, 1, 1)]
    for shape, b_k_contig in itertools.product(shapes, (False, True)):
        config, splits, tail_tiles, tail_splits = ext._cuda_choose(*shape, b_k_contig)
        assert 0 <= config < n_configs and splits >= 1
        assert tail_tiles >= 0 and (tail_splits == 0 or (splits == 1 and tail_splits >= 2))
    a, b = torch.randn(64, 20000, device="cuda"), torch.randn(20000, 48, device="cuda")
    c1, c2 = lltm_ext.gemm(a, b), lltm_ext.gemm(a, b)
    assert torch.equal(c1, c2), "split-K must be deterministic"
    assert_gemm_close(c1, ref_mm(a, b), torch.float32)


@pytest.mark.cuda
@pytest.mark.parametrize("layout", ["nn", "tn", "nt"])
def test_cuda_tail_split_k(layout):
    """Tail split-K: the last tiles split along K, the others whole; vs float64, deterministic."""
    ext = load_extension("gemm")
    n_configs = len(ext._cuda_configs())
    cases = [  # (m, n, k), tail tiles, tail splits
        ((1600, 2560, 256), 104, 3),  # 500 tiles of 64 x 128: exact tiles
        ((1601, 2563, 77), 37, 2),  # ragged edges, K not a multiple of BK
        ((300, 600, 1000), 10**6, 4),  # every tile in the tail (capped at the tile count)
        ((129, 257, 4096), 5, 8),
    ]
    for (m, n, k), tail_tiles, tail_splits in cases:
        a, b = operands(m, n, k, layout)
        ref = ref_mm(a, b)
        for config in range(n_configs):
            if is_async_config(ext, config) and ext._gemm_path() == "staged":
                continue  # not run on this path (test_cuda_every_config checks the error)
            c1 = ext._gemm_with_config(a, b, config, 1, tail_tiles, tail_splits)
            err = rel_err(c1, ref)
            assert err <= REL_BOUND[torch.float32], (config, (m, n, k), tail_tiles, err)
            c2 = ext._gemm_with_config(a, b, config, 1, tail_tiles, tail_splits)
            assert torch.equal(c1, c2), ("tail split-K must be deterministic", config, (m, n, k))
    # A shape the heuristic runs with a tail split on a 132-SM GPU (68 tiles x 3; elsewhere
    # whatever it picks).
    a, b = torch.randn(4096, 512, device="cuda"), torch.randn(512, 4096, device="cuda")
    c1, c2 = lltm_ext.gemm(a, b), lltm_ext.gemm(a, b)
    assert torch.equal(c1, c2)
    assert_gemm_close(c1, ref_mm(a, b), torch.float32)
    with pytest.raises(RuntimeError, match="tail_tiles"):
        ext._gemm_with_config(a, b, 0, 2, 4, 2)


@pytest.mark.cuda
@pytest.mark.large
def test_cuda_over_2_31_elements_large():
    """a has 2^31 + 2^15 elements (fp16, 4 GiB): offsets past 2^31 must be 64-bit."""
    m, k, n = 2**16 + 1, 2**15, 8
    free, _ = torch.cuda.mem_get_info()
    if free < 3 * m * k * 2:
        pytest.skip("needs ~12 GiB of free GPU memory")
    a = torch.empty(m, k, dtype=torch.float16, device="cuda").uniform_(-1, 1)
    b = torch.empty(k, n, dtype=torch.float16, device="cuda").uniform_(-1, 1)
    c = lltm_ext.gemm(a, b)
    rows = torch.tensor([0, 1, m // 2, m - 2, m - 1], device="cuda")
    assert_gemm_close(c[rows], ref_mm(a[rows], b), torch.float16)
    # a.t() as the K-contiguous B of b^T a^T (n, m): its columns start up to 2^31 elements in.
    ct = lltm_ext.gemm(b.t(), a.t())
    assert_gemm_close(ct[:, rows], ref_mm(b.t(), a[rows].t()), torch.float16)
    # a.t() as a column-major A (k, m) @ y (m, n): its k rows reach past 2^31 elements.
    y = torch.empty(m, n, dtype=torch.float16, device="cuda").uniform_(-1, 1)
    cy = lltm_ext.gemm(a.t(), y)
    cols = torch.tensor([0, k // 2, k - 1], device="cuda")
    assert_gemm_close(cy[cols], ref_mm(a[:, cols].t(), y), torch.float16)
    assert math.isfinite(c.float().abs().max().item())


# ----------------------------------------------------------------------------------------------
# CUDA, bfloat16 / float16: the Hopper tensor-core path (wgmma, sm_90a), the sm_80+ one (mma.sync,
# cp.async) and the SIMT one.
# ----------------------------------------------------------------------------------------------

HALF_DTYPES = [torch.bfloat16, torch.float16]


@contextlib.contextmanager
def half_path(path: str):
    """Forces the bfloat16 / float16 CUDA path ('auto', 'wgmma', 'mma', 'simt', 'wgmma64',
    'wgmma128', 'wgmma192', 'wgmma256', 'mma64', 'mma128', 'mma256') inside the block; afterwards
    LLTM_EXT_GEMM_HALF_PATH's setting (else auto)."""
    ext = load_extension("gemm")
    ext._set_gemm_half_path(path)
    try:
        yield ext
    finally:
        ext._set_gemm_half_path(os.environ.get("LLTM_EXT_GEMM_HALF_PATH", "auto"))


def wgmma_expected() -> bool:
    """Whether the auto path should be wgmma here: a compute capability 9.0 GPU and a build that
    compiled sm_90a code (beside sm_90 code too: the driver loads the sm_90a image then)."""
    targets = lltm_ext.build_info()["cuda_targets"]
    return torch.cuda.get_device_capability() == (9, 0) and "sm_90a" in targets


def require_wgmma() -> None:
    """Skips unless the wgmma path runs here (fails instead under LLTM_EXT_REQUIRE_WGMMA=1)."""
    if wgmma_expected():
        return
    if os.environ.get("LLTM_EXT_REQUIRE_WGMMA") == "1":
        pytest.fail("LLTM_EXT_REQUIRE_WGMMA=1, but the wgmma path cannot run here.")
    pytest.skip("needs a compute capability 9.0 GPU and a build with sm_90a code")


def mma_expected() -> bool:
    """Whether the mma.sync path can run here: the image of the build the driver loads for this
    GPU was compiled for sm_80 or newer. That is the GPU's own major with a minor no newer than
    its own (cubin compatibility; '9.0a' counts for 9.0 exactly), else the newest PTX no newer than
    the GPU, compiled by the driver."""
    major, minor = torch.cuda.get_device_capability()
    if major * 10 + minor < 80:
        return False
    built = lltm_ext.build_info()["cuda_targets"]  # a list ('sm_90', 'compute_90', ...)
    found = re.findall(r"(sm|compute)_(\d+)([af]?)", " ".join(built))
    targets = [(kind, int(num), suffix) for kind, num, suffix in found]
    for kind, num, suffix in targets:
        if kind == "sm" and num // 10 == major and num % 10 <= minor:
            if not suffix or num == major * 10 + minor:
                return True  # the same major's machine code, which is >= 8.0 here
    ptx = [num for kind, num, _ in targets if kind == "compute" and num <= major * 10 + minor]
    return bool(ptx) and max(ptx) >= 80


def require_mma() -> None:
    """Skips unless the mma path runs here (fails instead under LLTM_EXT_REQUIRE_MMA=1)."""
    if mma_expected():
        return
    if os.environ.get("LLTM_EXT_REQUIRE_MMA") == "1":
        pytest.fail("LLTM_EXT_REQUIRE_MMA=1, but the mma path cannot run here.")
    pytest.skip("needs a GPU of compute capability 8.0 or newer and a build with code for it")


def require_path(path: str) -> str:
    """Skips unless the forced half path `path` can run here; returns the kernel that
    _gemm_half_path() then names ('wgmma', 'mma' or 'simt')."""
    if path.startswith("wgmma"):
        require_wgmma()
        return "wgmma"
    if path.startswith("mma"):
        require_mma()
        return "mma"
    return "simt"


def padded(rows: int, cols: int, dtype, device="cuda") -> torch.Tensor:
    """A random (rows, cols) view whose row stride is cols rounded up to 8 (16 bytes for 16-bit
    types): any sizes, with the strides TMA needs."""
    stride = (cols + 7) // 8 * 8
    return rand((rows, stride), dtype, device)[:, :cols]


def padded_operands(m, n, k, layout, dtype):
    """a (m, k), b (k, n) as in `operands`, from row-padded storage."""
    a = padded(k, m, dtype).t() if layout[0] == "t" else padded(m, k, dtype)
    b = padded(n, k, dtype).t() if layout[1] == "t" else padded(k, n, dtype)
    return a, b


def assert_half_close(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """c within twice torch.mm's own relative error (same inputs, same dtype) of the float64
    product, plus a small floor; every element written and finite."""
    ref = ref_mm(a, b)
    torch_err = rel_err(torch.mm(a, b), ref)
    err = rel_err(c, ref)
    assert err <= 2 * torch_err + 1e-4, f"relative error {err:.3e} vs torch.mm's {torch_err:.3e}"


@pytest.mark.cuda
def test_cuda_half_path_follows_the_loaded_code():
    auto = "wgmma" if wgmma_expected() else "mma" if mma_expected() else "simt"
    with half_path("auto") as ext:
        assert ext._gemm_half_path() == auto
    with half_path("simt") as ext:
        assert ext._gemm_half_path() == "simt"
    with pytest.raises(RuntimeError, match=r"must be auto, wgmma, mma, simt, .* mma128 or mma256"):
        load_extension("gemm")._set_gemm_half_path("tensor")
    if not wgmma_expected():
        with half_path("wgmma") as ext, pytest.raises(RuntimeError, match="sm_90a"):
            ext._gemm_half_path()
    for path in ("mma", "mma64", "mma128", "mma256"):
        if mma_expected():
            with half_path(path) as ext:
                assert ext._gemm_half_path() == "mma"
        else:
            with half_path(path) as ext, pytest.raises(RuntimeError, match="sm_80 or newer"):
                ext._gemm_half_path()


# (M, N, K): tails of every dimension (1, odd, one past a tile, below one tile), a K of one
# partial 64-step (mma: 32-step; K % 8 != 0 ends in a partial 16-byte chunk), K longer than the
# ring, and more tiles than SMs (wgmma: persistent blocks). wgmma: N % 8 == 0 stores C through TMA,
# other N element by element; mma: odd N stores its last column element by element.
WGMMA_SHAPES = [
    (1, 1, 1),
    (1, 8, 1),
    (65, 72, 3),
    (130, 264, 100),
    (3, 5, 7),
    (129, 257, 65),
    (127, 255, 63),
    (64, 128, 1000),
    (300, 17, 200),
    (17, 300, 33),
    (1000, 1100, 520),
    (2100, 2200, 130),
]


@pytest.mark.cuda
@pytest.mark.parametrize(
    "path", ["wgmma64", "wgmma128", "wgmma192", "wgmma256", "mma64", "mma128", "mma256", "simt"]
)
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=lambda d: str(d)[6:])
def test_cuda_half_paths(dtype, layout, path):
    """Each forced path (and tile) vs float64 (relative to torch.mm's own error): all layouts,
    tails; the output poisoned first so that an unwritten element fails."""
    kernel = require_path(path)
    with half_path(path) as ext:
        assert ext._gemm_half_path() == kernel
        for m, n, k in WGMMA_SHAPES:
            if path == "simt" and m * n * k > 2e8:
                continue  # the SIMT kernel is slow; its shapes are covered above
            a, b = padded_operands(m, n, k, layout, dtype)
            out = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
            gemm_out_op(a, b, out)
            assert_half_close(out, a, b)
            assert_half_close(gemm_op(a, b), a, b)


@pytest.mark.cuda
@pytest.mark.parametrize(
    "path, dtype",
    [
        ("wgmma", torch.bfloat16),
        ("wgmma", torch.float16),
        ("wgmma", torch.float32),
        ("mma", torch.bfloat16),
        ("mma", torch.float16),
    ],
    ids=["wgmma-bf16", "wgmma-fp16", "wgmma-tf32", "mma-bf16", "mma-fp16"],
)
def test_cuda_tensor_core_edge_cases(path, dtype):
    """K = 0 (zeros), empty M / N, out= with strides, unaligned operands (copied first for the
    wgmma kernel, read by register-staged loads on the mma kernel), the contiguous (unpadded)
    operands of the backward, and determinism. float32 with TF32 allowed."""
    require_path(path)
    close = assert_tf32_close if dtype == torch.float32 else assert_half_close
    tf32 = tf32_matmuls() if dtype == torch.float32 else contextlib.nullcontext()
    with half_path(path), tf32:
        for m, n in [(5, 7), (130, 260)]:
            a = torch.empty(m, 0, dtype=dtype, device="cuda")
            b = torch.empty(0, n, dtype=dtype, device="cuda")
            c = lltm_ext.gemm(a, b)
            assert c.shape == (m, n) and bool((c == 0).all())
        assert lltm_ext.gemm(padded(0, 8, dtype), padded(8, 16, dtype)).shape == (0, 16)
        # out= a transposed view (written through a contiguous temporary).
        a, b = padded_operands(200, 136, 96, "nn", dtype)
        out = torch.full((136, 200), float("nan"), dtype=dtype, device="cuda").t()
        lltm_ext.gemm(a, b, out=out)
        close(out, a, b)
        # out= contiguous but 2 bytes (4 for float32) off alignment: stored one element at a time.
        buf = torch.full((1 + 200 * 136,), float("nan"), dtype=dtype, device="cuda")
        out = buf[1:].view(200, 136)
        lltm_ext.gemm(a, b, out=out)
        close(out, a, b)
        # Base one element off 16 bytes, or an odd leading dimension.
        base = rand((65 * 72 + 1,), dtype, "cuda")
        a_off = base[1:].view(65, 72)
        b = padded(72, 40, dtype)
        close(lltm_ext.gemm(a_off, b), a_off, b)
        a_odd, b_odd = operands(33, 35, 37, "nn", dtype)
        close(lltm_ext.gemm(a_odd, b_odd), a_odd, b_odd)
        a_odd, b_odd = operands(33, 35, 37, "tn", dtype)  # tf32: both copied K-major
        close(lltm_ext.gemm(a_odd, b_odd), a_odd, b_odd)
        # Vectors (a size-1 dimension reads as either layout) and a 1 x 1 x 1 product.
        for m, n, k in [(1, 35, 37), (33, 1, 37), (33, 35, 1), (1, 1, 1), (1, 1, 64)]:
            for layout in ("nn", "tn", "nt", "tt"):
                a_v, b_v = operands(m, n, k, layout, dtype)
                close(lltm_ext.gemm(a_v, b_v), a_v, b_v)
        # b misaligned beside an aligned a (the other way round is a_off above). After the vectors,
        # so that their random inputs (tf32: a single 64-term dot product) stay as they were.
        b_off = base[1:].view(72, 65)
        a_ok = padded(33, 72, dtype)
        close(lltm_ext.gemm(a_ok, b_off), a_ok, b_off)
        # Backward's layouts on contiguous tensors: grad_a = g @ b.T, grad_b = a.T @ g.
        a, b = operands(384, 512, 320, "nn", dtype)
        g = rand((384, 512), dtype, "cuda")
        close(lltm_ext.gemm(g, b.t()), g, b.t())
        close(lltm_ext.gemm(a.t(), g), a.t(), g)
        # Same bits run to run (a fixed order of the K sum, split-K partials summed in order).
        a, b = operands(1000, 1500, 2000, "nn", dtype)
        c1, c2 = lltm_ext.gemm(a, b), lltm_ext.gemm(a, b)
        assert torch.equal(c1, c2)
        close(c1, a, b)


@pytest.mark.cuda
@pytest.mark.parametrize("path", ["wgmma", "mma"])
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=lambda d: str(d)[6:])
def test_cuda_half_paths_agree_on_gradients(dtype, path):
    """Autograd through each tensor-core path: the forward and the backward's two products (the
    transposed views g @ b.T and a.T @ g, read in place) against float64, and the gradients equal
    to those of the same products computed directly."""
    require_path(path)
    with half_path(path):
        a = rand((256, 200), dtype, "cuda").requires_grad_()
        b = rand((200, 328), dtype, "cuda").requires_grad_()
        g = rand((256, 328), dtype, "cuda")
        c = lltm_ext.gemm(a, b)
        assert_half_close(c, a.detach(), b.detach())
        c.backward(g)
        assert_half_close(a.grad, g, b.detach().t())
        assert_half_close(b.grad, a.detach().t(), g)
        assert torch.equal(a.grad, lltm_ext.gemm(g, b.detach().t()))
        assert torch.equal(b.grad, lltm_ext.gemm(a.detach().t(), g))


@contextlib.contextmanager
def tf32_matmuls():
    """torch.backends.cuda.matmul.allow_tf32 = True inside the block (torch.mm and lltm_ext.gemm
    both read it), the caller's setting restored after."""
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def assert_tf32_close(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """c within twice torch.mm's own error of the float64 product, or within TF32's (inputs
    rounded to 10 mantissa bits: ~1e-3 for one product, less for sums), whichever is larger:
    cuBLAS keeps some small products exact even with TF32 allowed."""
    ref = ref_mm(a, b)
    torch_err = rel_err(torch.mm(a, b), ref)
    err = rel_err(c, ref)
    assert err <= max(2 * torch_err, 2e-3), f"relative error {err:.3e} vs torch's {torch_err:.3e}"


@pytest.mark.cuda
@pytest.mark.parametrize("path", ["wgmma64", "wgmma128", "wgmma192", "wgmma256"])
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
def test_cuda_tf32(layout, path):
    """float32 with TF32 allowed runs as tf32 on the wgmma kernel (an operand that is not K-major
    copied K-major first by the transpose kernel): within twice torch.mm's own TF32 error of
    float64, every element written, the same bits run to run; with TF32 off ("highest", the
    default) float32 stays exact."""
    require_wgmma()
    with half_path(path), tf32_matmuls():
        for m, n, k in WGMMA_SHAPES:
            a, b = padded_operands(m, n, k, layout, torch.float32)
            out = torch.full((m, n), float("nan"), device="cuda")
            gemm_out_op(a, b, out)
            assert_tf32_close(out, a, b)
            # Unpadded (contiguous) operands: copied into aligned K-major rows first.
            a, b = operands(m, n, k, layout)
            assert_tf32_close(gemm_op(a, b), a, b)
        a, b = operands(300, 200, 4000, layout)
        c = lltm_ext.gemm(a, b)
        assert rel_err(c, ref_mm(a, b)) > 1e-5, "TF32 allowed but the result is exact float32"
        assert torch.equal(c, lltm_ext.gemm(a, b))
    with half_path(path):
        assert not torch.backends.cuda.matmul.allow_tf32
        assert_gemm_close(lltm_ext.gemm(a, b), ref_mm(a, b), torch.float32)


@contextlib.contextmanager
def float32_matmul_precision(precision: str):
    """torch.set_float32_matmul_precision(precision) inside the block, restored after."""
    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(saved)


@pytest.mark.cuda
def test_cuda_float32_follows_torch_precision(monkeypatch):
    """float32 uses TF32 exactly when torch.mm does: set_float32_matmul_precision "high" and
    "medium" (and allow_tf32) give TF32's error on the wgmma kernel, "highest" (the default) exact
    float32; so do the SIMT path (forced) and LLTM_EXT_GEMM_TF32=0, whatever the setting."""
    require_wgmma()
    monkeypatch.delenv("LLTM_EXT_GEMM_TF32", raising=False)
    a, b = operands(300, 200, 4000, "nn")
    ref = ref_mm(a, b)
    assert torch.get_float32_matmul_precision() == "highest"  # torch's default
    assert_gemm_close(lltm_ext.gemm(a, b), ref, torch.float32)
    for precision in ("high", "medium"):
        with float32_matmul_precision(precision):
            assert torch.backends.cuda.matmul.allow_tf32
            c = lltm_ext.gemm(a, b)
            assert rel_err(c, ref) > 1e-5, f"{precision}: the result is exact float32"
            assert_tf32_close(c, a, b)
            with half_path("simt"):
                assert_gemm_close(lltm_ext.gemm(a, b), ref, torch.float32)
            monkeypatch.setenv("LLTM_EXT_GEMM_TF32", "0")
            assert_gemm_close(lltm_ext.gemm(a, b), ref, torch.float32)
            monkeypatch.delenv("LLTM_EXT_GEMM_TF32")
            assert rel_err(lltm_ext.gemm(a, b), ref) > 1e-5
    with float32_matmul_precision("highest"):
        assert_gemm_close(lltm_ext.gemm(a, b), ref, torch.float32)


# ----------------------------------------------------------------------------------------------
# CUDA, float32 as TF32 on the sm_80+ mma.sync kernel (the path of GPUs without the sm_90a image;
# forced here with LLTM_EXT_GEMM_HALF_PATH's mma settings, which pick float32's kernel too when
# TF32 is allowed).
# ----------------------------------------------------------------------------------------------


@pytest.fixture
def allow_tf32():
    """torch.backends.cuda.matmul.allow_tf32 = True for the test, the setting restored after."""
    with tf32_matmuls():
        yield


@pytest.mark.cuda
@pytest.mark.parametrize("path", ["mma64", "mma128", "mma256"])
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
def test_cuda_tf32_mma(layout, path, allow_tf32):
    """float32 with TF32 allowed on each forced mma tile, every layout read in place: within twice
    torch.mm's own TF32 error of float64 (tails of M / N / K, K % 4 != 0 ending in a partial
    16-byte chunk, sizes 1), every element of a NaN-poisoned out= written, really TF32 (not exact),
    the same bits run to run."""
    require_mma()
    with half_path(path) as ext:
        assert ext._gemm_half_path() == "mma"
        for m, n, k in WGMMA_SHAPES + [(70, 90, 6), (33, 65, 130)]:
            a, b = padded_operands(m, n, k, layout, torch.float32)
            out = torch.full((m, n), float("nan"), device="cuda")
            gemm_out_op(a, b, out)
            assert_tf32_close(out, a, b)
            assert_tf32_close(gemm_op(a, b), a, b)
            # Contiguous operands: the mma kernel, cp.async copies where the rows are 16-byte
            # multiples, else register-staged loads.
            a, b = operands(m, n, k, layout)
            assert_tf32_close(gemm_op(a, b), a, b)
        a, b = operands(300, 200, 4000, layout)
        c = lltm_ext.gemm(a, b)
        assert rel_err(c, ref_mm(a, b)) > 1e-5, "TF32 allowed but the result is exact float32"
        assert_tf32_close(c, a, b)
        assert torch.equal(c, lltm_ext.gemm(a, b))


@pytest.mark.cuda
def test_cuda_tf32_mma_gradients(allow_tf32):
    """Autograd through the tf32 mma path: the forward and the backward's g @ b.T and a.T @ g
    (transposed views, read in place) within TF32's error, and equal to the same products computed
    directly."""
    require_mma()
    with half_path("mma"):
        a = rand((256, 200), torch.float32, "cuda").requires_grad_()
        b = rand((200, 328), torch.float32, "cuda").requires_grad_()
        g = rand((256, 328), torch.float32, "cuda")
        c = lltm_ext.gemm(a, b)
        assert_tf32_close(c, a.detach(), b.detach())
        assert rel_err(c, ref_mm(a.detach(), b.detach())) > 1e-5
        c.backward(g)
        assert_tf32_close(a.grad, g, b.detach().t())
        assert_tf32_close(b.grad, a.detach().t(), g)
        assert torch.equal(a.grad, lltm_ext.gemm(g, b.detach().t()))
        assert torch.equal(b.grad, lltm_ext.gemm(a.detach().t(), g))


@pytest.mark.cuda
def test_cuda_tf32_mma_edge_cases(allow_tf32):
    """K = 0, empty M / N, out= a transposed view and a misaligned buffer, operands the 16-byte
    copies cannot read (base off 16 bytes, rows not a multiple of 16 bytes: register-staged
    loads), vectors, the backward's layouts on contiguous tensors."""
    require_mma()
    dtype = torch.float32
    with half_path("mma"):
        for m, n in [(5, 7), (130, 260)]:
            c = lltm_ext.gemm(torch.empty(m, 0, device="cuda"), torch.empty(0, n, device="cuda"))
            assert c.shape == (m, n) and bool((c == 0).all())
        assert lltm_ext.gemm(padded(0, 8, dtype), padded(8, 16, dtype)).shape == (0, 16)
        assert lltm_ext.gemm(padded(8, 8, dtype), padded(8, 0, dtype)).shape == (8, 0)
        a, b = padded_operands(200, 136, 96, "nn", dtype)
        out = torch.full((136, 200), float("nan"), device="cuda").t()
        lltm_ext.gemm(a, b, out=out)
        assert_tf32_close(out, a, b)
        buf = torch.full((1 + 200 * 136,), float("nan"), device="cuda")
        out = buf[1:].view(200, 136)  # 4 bytes off: stored one element at a time
        lltm_ext.gemm(a, b, out=out)
        assert_tf32_close(out, a, b)
        # Operands the 16-byte copies cannot read (base off 16 bytes, rows not a multiple of 16
        # bytes): TF32 too, on the register-staged loads.
        base = rand((65 * 72 + 1,), dtype, "cuda")
        a_off, b_ok = base[1:].view(65, 72), padded(72, 40, dtype)
        assert_tf32_close(lltm_ext.gemm(a_off, b_ok), a_off, b_ok)
        a_odd, b_odd = operands(33, 35, 37, "tn", dtype)
        assert_tf32_close(lltm_ext.gemm(a_odd, b_odd), a_odd, b_odd)
        for m, n, k in [(1, 36, 40), (36, 1, 40), (36, 40, 1), (1, 1, 1), (1, 1, 64)]:
            for layout in ("nn", "tn", "nt", "tt"):
                a_v, b_v = operands(m, n, k, layout, dtype)
                assert_tf32_close(lltm_ext.gemm(a_v, b_v), a_v, b_v)
        a, b = operands(384, 512, 320, "nn", dtype)
        g = rand((384, 512), dtype, "cuda")
        assert_tf32_close(lltm_ext.gemm(g, b.t()), g, b.t())
        assert_tf32_close(lltm_ext.gemm(a.t(), g), a.t(), g)


@pytest.mark.cuda
def test_cuda_tf32_mma_follows_torch_precision(monkeypatch):
    """With the mma path (forced, as on a GPU without the sm_90a image): "highest" (the default)
    keeps float32 exact, bit for bit the SIMT kernel's result; "high" / "medium" run TF32;
    LLTM_EXT_GEMM_TF32=0 turns it off again."""
    require_mma()
    monkeypatch.delenv("LLTM_EXT_GEMM_TF32", raising=False)
    a, b = operands(300, 200, 4000, "nn")
    ref = ref_mm(a, b)
    with float32_matmul_precision("highest"):
        with half_path("simt"):
            exact = lltm_ext.gemm(a, b)
        with half_path("mma"):
            assert torch.equal(lltm_ext.gemm(a, b), exact)
        assert_gemm_close(exact, ref, torch.float32)
    for precision in ("high", "medium"):
        with float32_matmul_precision(precision), half_path("mma"):
            c = lltm_ext.gemm(a, b)
            assert rel_err(c, ref) > 1e-5, f"{precision}: the result is exact float32"
            assert_tf32_close(c, a, b)
            monkeypatch.setenv("LLTM_EXT_GEMM_TF32", "0")
            assert torch.equal(lltm_ext.gemm(a, b), exact)
            monkeypatch.delenv("LLTM_EXT_GEMM_TF32")


@pytest.mark.cuda
def test_cuda_tf32_auto_uses_tensor_cores(allow_tf32):
    """The auto path with TF32 allowed runs TF32 wherever a tensor-core kernel can run (wgmma with
    the sm_90a image, else mma.sync from sm_80 on: an A100, RTX 30xx / 40xx or a 9.0-only build),
    in every layout; exact float32 only where neither can."""
    with half_path("auto") as ext:
        tensor_cores = ext._gemm_half_path() != "simt"
        assert tensor_cores == (wgmma_expected() or mma_expected())
        for layout in ("nn", "nt", "tn", "tt"):
            a, b = operands(300, 200, 4000, layout)
            c = lltm_ext.gemm(a, b)
            if tensor_cores:
                assert rel_err(c, ref_mm(a, b)) > 1e-5, f"{layout}: exact float32, not TF32"
                assert_tf32_close(c, a, b)
            else:
                assert_gemm_close(c, ref_mm(a, b), torch.float32)


@pytest.mark.cuda
@pytest.mark.parametrize("layout", ["nn", "tt"])
def test_cuda_tf32_mma_nonfinite(layout, allow_tf32):
    """Inf and NaN operands propagate as in float64 through the tf32 rounding (a NaN whose mantissa
    is all ones too: a rounding that carried into the sign would make it a zero)."""
    require_mma()
    a, b = padded_operands(40, 48, 36, layout, torch.float32)
    b = b.abs() + 0.5  # no zeros or sign changes: Inf * b stays one Inf
    all_ones_nan = torch.tensor([-1], dtype=torch.int32).view(torch.float32).item()
    for (i, k), v in [((3, 5), float("nan")), ((7, 2), float("inf")), ((9, 1), all_ones_nan)]:
        a[i, k] = v
    with half_path("mma"):
        c = lltm_ext.gemm(a, b)
    ref = ref_mm(a, b)
    assert torch.equal(torch.isnan(c).cpu(), torch.isnan(ref).cpu())
    assert torch.equal(torch.isposinf(c).cpu(), torch.isposinf(ref).cpu())
    finite = torch.isfinite(ref)
    assert rel_err(c.cpu()[finite], ref[finite]) < 2e-3
