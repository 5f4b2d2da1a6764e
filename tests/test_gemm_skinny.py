"""The GEMM's skinny kernel (src/gemm/tiles/skinny_mma.cuh): bfloat16 / float16 products with a
side of at most 32 and both operands K-contiguous, as linear layers run them (x @ W.T over a few
tokens), against float64.

Forced through ``_gemm_skinny`` at every block size (1 to 8 warps) with K splits or none, both
orientations (the small side M or N), sides that end inside a tile,
strided rows, NaN-poisoned outputs; the auto path where it takes these products; clear errors for
what it cannot run.
"""

from __future__ import annotations

import pytest
import torch
from test_gemm_tensor_core import GEMV_BOUND, poisoned, ref_mm, rel_err

import lltm_ext
from lltm_ext._extension import load_extension

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def ext():
    return load_extension("gemm")


def skinny_runs() -> bool:
    """Whether the kernel runs here (mma.sync: sm_80 or newer, and this build's code for it)."""
    a = torch.ones(8, 8, dtype=torch.bfloat16, device="cuda")
    try:
        ext()._gemm_skinny(a, a.t())
    except RuntimeError:
        return False
    return True


@pytest.fixture
def needs_skinny():
    if not skinny_runs():
        pytest.skip("the skinny kernel needs mma.sync (sm_80 or newer)")


def linear_operands(m, n, k, dtype, pad=0, small_n=False):
    """x (m, k) and W (n, k), row-major with rows `pad` elements longer than k (a strided view
    when pad > 0); returns (a, b) for a @ b = x @ W.T, or with small_n the mirror product
    W @ x.T (the large side M)."""

    def make(rows):
        buf = torch.randn(rows, k + pad, dtype=torch.float64).to("cuda", dtype)
        return buf[:, :k]

    x, w = make(m), make(n)
    return (w, x.t()) if small_n else (x, w.t())


# (M, N, K): the small side 1 to 32 (ends inside an 8-column tile and at its edges), the large
# side ending inside a 16- and 32-row tile, K of one 8-element run, inside a 32-k step, a turn's
# edge and long.
SHAPES = [
    (1, 1, 8),
    (1, 16, 32),
    (3, 100, 40),
    (8, 33, 264),
    (9, 250, 1000),
    (16, 17, 4104),
    (17, 1000, 2056),
    (31, 64, 520),
    (32, 4000, 8192),
    (5, 3001, 776),
]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("small_n", [False, True], ids=["small_m", "small_n"])
def test_forced_tiles(needs_skinny, dtype, small_n):
    """Every block size (1, 3, 4 and 8 warps) with K splits of its own choice, none and 3, at every
    shape, into a NaN-poisoned output: within float accumulation's bound of float64, every element
    written, the same bits twice."""
    for m, n, k in SHAPES:
        a, b = linear_operands(m, n, k, dtype, small_n=small_n)
        ref = ref_mm(a, b)
        for warps in (1, 3, 4, 8):
            for splits in (0, 1, 3):
                out = poisoned(a.size(0), b.size(1), dtype)
                ext()._gemm_skinny(a, b, out, warps=warps, splits=splits)
                err = rel_err(out, ref)
                where = f"{tuple(a.shape)}x{b.size(1)} warps={warps} splits={splits}"
                assert err <= GEMV_BOUND[dtype], f"{where}: {err:.2e}"
        out = ext()._gemm_skinny(a, b)
        assert torch.equal(out, ext()._gemm_skinny(a, b))


def weight_kn_operands(m, n, k, dtype, pad=0, small_n=False):
    """x (m, k) and a weight stored (K, N) row-major, rows `pad` elements longer than n; returns
    (a, b) for a @ b = x @ W, or with small_n the mirror W.T @ x.T (the large operand contiguous
    along its side: the column kernel)."""
    x = torch.randn(m, k, dtype=torch.float64).to("cuda", dtype)
    w = torch.randn(k, n + pad, dtype=torch.float64).to("cuda", dtype)[:, :n]
    return (w.t(), x.t()) if small_n else (x, w)


# The column kernel's shapes: the large side a multiple of 8, ending inside a 32- and a 64-column
# block.
COLS_SHAPES = [(1, 8, 8), (3, 72, 40), (8, 136, 264), (9, 1000, 1000), (17, 512, 2056),
               (32, 4040, 8192), (5, 3000, 776)]  # fmt: skip


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("small_n", [False, True], ids=["small_m", "small_n"])
def test_forced_tiles_weight_kn(needs_skinny, dtype, small_n):
    """The column kernel (the large operand contiguous along its side: x @ W with W stored (K, N),
    and the mirror) in blocks of 32 and 64 columns and its own choice, at 1, 3, 4 and 8 warps with
    K splits of its own choice, none and 3, rows padded or not, into a NaN-poisoned output: within
    float accumulation's bound of float64, the same bits twice, and at either block width with the
    same warps and splits (each output's sum in the same k order); through lltm_ext.gemm too."""
    for m, n, k in COLS_SHAPES:
        for pad in (0, 8):
            a, b = weight_kn_operands(m, n, k, dtype, pad=pad, small_n=small_n)
            ref = ref_mm(a, b)
            for cols in (0, 32, 64):
                for warps in (1, 3, 4, 8):
                    for splits in (0, 1, 3):
                        out = poisoned(a.size(0), b.size(1), dtype)
                        ext()._gemm_skinny(a, b, out, warps=warps, splits=splits, cols=cols)
                        err = rel_err(out, ref)
                        where = f"{m}x{n}x{k} pad={pad} cols={cols} warps={warps} splits={splits}"
                        assert err <= GEMV_BOUND[dtype], f"{where}: {err:.2e}"
            assert torch.equal(ext()._gemm_skinny(a, b), ext()._gemm_skinny(a, b))
            wide = ext()._gemm_skinny(a, b, warps=4, splits=1, cols=64)
            assert torch.equal(wide, ext()._gemm_skinny(a, b, warps=4, splits=1, cols=32))
            assert rel_err(lltm_ext.gemm(a, b), ref) <= GEMV_BOUND[dtype]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_strided_rows_and_offsets(needs_skinny, dtype):
    """Rows padded past K (row strides of K + 8 and K + 64) and operands starting 16 bytes into
    their buffers: the same result as the contiguous operands."""
    for m, n, k in [(4, 300, 512), (24, 129, 1032)]:
        for pad in (8, 64):
            a, b = linear_operands(m, n, k, dtype, pad=pad)
            got = ext()._gemm_skinny(a, b)
            assert torch.equal(got, ext()._gemm_skinny(a.contiguous(), b.t().contiguous().t()))
            assert rel_err(got, ref_mm(a, b)) <= GEMV_BOUND[dtype]
        buf_a = torch.randn(8 + m * k, device="cuda").to(dtype)
        buf_w = torch.randn(8 + n * k, device="cuda").to(dtype)
        a, w = buf_a[8:].view(m, k), buf_w[8:].view(n, k)
        assert rel_err(ext()._gemm_skinny(a, w.t()), ref_mm(a, w.t())) <= GEMV_BOUND[dtype]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_linear_layer_through_gemm(dtype):
    """lltm_ext.gemm(x, W.t()) as a linear layer calls it, M of 1 to 32 at a 4096 x 4096 layer and
    a long-K one: within float accumulation's bound of float64, and within twice torch.mm's
    error."""
    for k, n in [(4096, 4096), (11008, 1024)]:
        x, wt = linear_operands(32, n, k, dtype)
        for m in (1, 2, 7, 8, 16, 31, 32):
            c = lltm_ext.gemm(x[:m], wt)
            ref = ref_mm(x[:m], wt)
            err = rel_err(c, ref)
            assert err <= GEMV_BOUND[dtype], (k, n, m, err)
            assert err <= max(2 * rel_err(x[:m] @ wt, ref), 1e-4), (k, n, m, err)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_weight_kn_in_one_wave_through_gemm(needs_skinny, dtype):
    """lltm_ext.gemm(x, W) with W stored (K, N), N = 2048 (64 blocks of 32 columns, one wave on
    any GPU of 64 SMs or more), K = 2056, M past 8 and past 16: the column kernel's bits at its
    own choices (the auto path's hand-off ahead of the narrow tile and the wgmma kernel), within
    float accumulation's bound of float64 and twice torch.mm's error; M = 8 is not handed off, and
    still right."""
    k, n = 2056, 2048
    w = torch.randn(k, n, dtype=torch.float64).to("cuda", dtype)
    x = torch.randn(32, k, dtype=torch.float64).to("cuda", dtype)
    sms = torch.cuda.get_device_properties(w.device).multi_processor_count
    for m in (8, 9, 16, 17, 24, 32):
        c = lltm_ext.gemm(x[:m], w)
        if m > 8 and (n + 31) // 32 <= sms:
            assert torch.equal(c, ext()._gemm_skinny(x[:m], w)), m
        ref = ref_mm(x[:m], w)
        err = rel_err(c, ref)
        assert err <= GEMV_BOUND[dtype], (m, err)
        assert err <= max(2 * rel_err(x[:m] @ w, ref), 1e-4), (m, err)


@pytest.mark.cuda
def test_what_it_cannot_run_is_an_error(needs_skinny):
    """K not a multiple of 8, the small operand not K-contiguous, the large one contiguous along a
    side that is not a multiple of 8, a base off 16 bytes, a row stride off 16 bytes, a side past
    32, float32, a bad knob: RuntimeErrors that say what the kernel needs; lltm_ext.gemm runs each
    on another kernel, right."""
    bf = torch.bfloat16
    x = torch.randn(4, 64, device="cuda", dtype=bf)
    w = torch.randn(256, 64, device="cuda", dtype=bf)
    ok = ext()._gemm_skinny(x, w.t())
    assert rel_err(ok, ref_mm(x, w.t())) <= GEMV_BOUND[bf]
    bad = {
        "K % 8": (x[:, :60], w[:, :60].t()),
        "a not K-contiguous": (x.t().contiguous().t(), w.t()),
        "b contiguous along N, N % 8": (x, torch.randn(64, 250, device="cuda", dtype=bf)),
        "base off 16 bytes": (
            torch.randn(4 * 64 + 1, device="cuda", dtype=bf)[1:].view(4, 64),
            w.t(),
        ),
        "row stride off 16 bytes": (torch.randn(4, 68, device="cuda", dtype=bf)[:, :64], w.t()),
        "both sides past 32": (torch.randn(33, 64, device="cuda", dtype=bf), w.t()),
    }
    for what, (a, b) in bad.items():
        with pytest.raises(RuntimeError, match="skinny kernel needs"):
            ext()._gemm_skinny(a, b)
        assert rel_err(lltm_ext.gemm(a, b), ref_mm(a, b)) <= GEMV_BOUND[bf], what
    with pytest.raises(RuntimeError, match="float16 or bfloat16"):
        ext()._gemm_skinny(x.float(), w.float().t())
    with pytest.raises(RuntimeError, match="warps is 0"):
        ext()._gemm_skinny(x, w.t(), warps=9)
    with pytest.raises(RuntimeError, match="cols is 0 \\(auto\\), 32 or 64, but got 48"):
        ext()._gemm_skinny(x, w.t(), cols=48)


@pytest.mark.cuda
def test_empty_and_k_zero(needs_skinny):
    """M = 0 writes nothing; K = 0 writes zeros."""
    bf = torch.bfloat16
    assert ext()._gemm_skinny(
        torch.empty(0, 64, device="cuda", dtype=bf), torch.empty(64, 16, device="cuda", dtype=bf)
    ).shape == (0, 16)
    z = ext()._gemm_skinny(
        torch.empty(4, 0, device="cuda", dtype=bf), torch.empty(0, 16, device="cuda", dtype=bf)
    )
    assert torch.equal(z, torch.zeros(4, 16, device="cuda", dtype=bf))


@pytest.mark.cuda
@pytest.mark.large
def test_over_2_31_elements_large(needs_skinny):
    """W of 2^31 + 2^20 elements (bfloat16, 4 GiB): row offsets into W past 2^31, and the last
    rows' products right."""
    n, k = 2**18 + 128, 8192
    free, _ = torch.cuda.mem_get_info()
    if free < 3 * n * k * 2:
        pytest.skip("needs ~13 GiB of free GPU memory")
    w = torch.empty(n, k, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1)
    x = torch.randn(3, k, device="cuda", dtype=torch.bfloat16)
    c = lltm_ext.gemm(x, w.t())
    forced = ext()._gemm_skinny(x, w.t())
    cols = torch.tensor([0, 1, n // 2, n - 129, n - 2, n - 1], device="cuda")
    for got in (c, forced):
        assert rel_err(got[:, cols], ref_mm(x, w[cols].t())) <= GEMV_BOUND[torch.bfloat16]
