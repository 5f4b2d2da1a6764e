"""The wgmma kernel's narrow tiles (src/gemm/tiles/kernel_sm90.cuh with BN = 16, and 32 for a side
of 17 to 32): bfloat16 / float16 products with a side of at most 32 (a linear layer over a few
tokens), the large operand streamed through 128-row tiles by TMA, against float64.

Forced through ``_gemm_narrow`` with K splits of its own choice and forced ones, both orientations
(the small side M: operands swapped, C stored transposed; the small side N: as is), the large
operand K-major (``x @ W.T``) and along its side (``x @ W``, W stored (K, N)), sides that end inside
a tile, strided rows, NaN-poisoned outputs; the auto path where it takes these products; clear
errors for what it cannot run. Needs a Hopper GPU (skipped elsewhere, a failure under
LLTM_EXT_REQUIRE_WGMMA=1).
"""

from __future__ import annotations

import pytest
import torch
from test_gemm_skinny import linear_operands, weight_kn_operands
from test_gemm_tensor_core import GEMV_BOUND, poisoned, ref_mm, rel_err, tc_runs

import lltm_ext
from lltm_ext._extension import load_extension

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def ext():
    return load_extension("gemm")


@pytest.fixture
def needs_wgmma():
    if not tc_runs("wgmma"):
        pytest.skip("the narrow tile needs the wgmma kernel (a Hopper GPU and sm_90a code)")


# (M, N, K), M the small side: 1 to 32 (both tiles, each width's edge), the large side ending
# inside a 64- and 128-row tile or on its edge, K of one partial step, a step's edge, long (splits
# of several steps).
SHAPES = [
    (1, 8, 8),
    (1, 128, 64),
    (3, 1000, 1000),
    (8, 4104, 520),
    (9, 136, 4104),
    (16, 300, 2056),
    (16, 8192, 2048),
    (5, 3000, 8200),
    (13, 2000, 72),
    (17, 1000, 1000),
    (24, 4104, 520),
    (32, 8192, 2048),
    (29, 136, 4104),
]


def check_forced(a, b, dtype, where):
    ref = ref_mm(a, b)
    for rows in (0, 64):
        for splits in (0, 1, 3, 7):
            out = poisoned(a.size(0), b.size(1), dtype)
            ext()._gemm_narrow(a, b, out, splits=splits, rows=rows)
            err = rel_err(out, ref)
            assert err <= GEMV_BOUND[dtype], f"{where} rows={rows} splits={splits}: {err:.2e}"
    assert torch.equal(ext()._gemm_narrow(a, b), ext()._gemm_narrow(a, b)), where
    # The same products in the same order whatever the tile's rows: the same bits.
    for splits in (1, 3):
        same = ext()._gemm_narrow(a, b, splits=splits, rows=64)
        assert torch.equal(same, ext()._gemm_narrow(a, b, splits=splits, rows=128)), where


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("small_n", [False, True], ids=["small_m", "small_n"])
def test_forced_weight_nk(needs_wgmma, dtype, small_n):
    """x @ W.T (W stored (N, K), as nn.Linear stores it) and the mirror W @ x.T, with K splits of
    its own choice, none, 3 and 7, in tiles of 128 and of 64 rows, into a NaN-poisoned output:
    within float accumulation's bound of float64, every element written, the same bits twice and
    at either tile height; rows padded too."""
    for m, n, k in SHAPES:
        for pad in (0, 8):
            a, b = linear_operands(m, n, k, dtype, pad=pad, small_n=small_n)
            check_forced(a, b, dtype, f"{m}x{n}x{k} pad={pad}")


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("small_n", [False, True], ids=["small_m", "small_n"])
def test_forced_weight_kn(needs_wgmma, dtype, small_n):
    """x @ W with W stored (K, N) (the large operand contiguous along its side: M-major A for the
    tensor cores) and the mirror, N a multiple of 8 (TMA's 16-byte rows), rows padded or not."""
    kn = [(1, 8, 8), (3, 1000, 1000), (16, 4104, 2056), (7, 136, 4104), (16, 8192, 520)]
    for m, n, k in kn + [(17, 1000, 1000), (32, 4104, 2056), (21, 136, 4104)]:
        for pad in (0, 8):
            a, b = weight_kn_operands(m, n, k, dtype, pad=pad, small_n=small_n)
            check_forced(a, b, dtype, f"{m}x{n}x{k} pad={pad}")


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_auto_path_takes_what_it_was_measured_faster_at(needs_wgmma, dtype):
    """lltm_ext.gemm runs on the narrow tiles (the same bits as the forced call with its own
    choices) where the auto rule sends it: x @ W with W stored (K, N) past 8 tokens (past 16 where
    its blocks fill 3/4 to all of one wave; not where the skinny column kernel's 32-column blocks
    fit in one wave) or at a K below 2048, x @ W.T over layers of at least 8192 outputs past 8
    tokens, up to 16, or at a K up to 1024; within the bound of float64."""
    if ext()._gemm_narrow_side() == 0:
        pytest.skip("the auto path's narrow side is 0")
    cases = [
        weight_kn_operands(16, 8192, 2048, dtype),
        weight_kn_operands(24, 8192, 2048, dtype),
        weight_kn_operands(32, 4096, 8192, dtype),
        weight_kn_operands(9, 1024, 4096, dtype),
        weight_kn_operands(4, 2048, 1024, dtype),
        linear_operands(12, 8192, 1024, dtype),
        linear_operands(16, 8192, 2048, dtype),
        linear_operands(3, 8192, 512, dtype),
        linear_operands(16, 8192, 2048, dtype, small_n=True),
    ]
    for a, b in cases:
        where = f"{a.size(0)}x{b.size(1)}x{a.size(1)} {a.stride()} {b.stride()}"
        got = lltm_ext.gemm(a, b)
        assert torch.equal(got, ext()._gemm_narrow(a, b)), where
        assert rel_err(got, ref_mm(a, b)) <= GEMV_BOUND[dtype], where


@pytest.mark.cuda
def test_what_it_cannot_run_is_an_error(needs_wgmma):
    """Clear errors: both sides past 32, float32, the small operand not K-contiguous, rows that
    are not 16-byte aligned; negative splits, tiles of other than 64 or 128 rows."""
    x = torch.randn(16, 512, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(1024, 512, dtype=torch.bfloat16, device="cuda")
    ok = ext()._gemm_narrow(x, w.t())
    assert rel_err(ok, ref_mm(x, w.t())) <= GEMV_BOUND[torch.bfloat16]
    w509 = torch.randn(1024, 509, dtype=torch.bfloat16, device="cuda")
    bad = [
        (torch.randn(33, 512, dtype=torch.bfloat16, device="cuda"), w.t()),  # both sides > 32
        (x.t().contiguous().t(), w.t()),  # the small operand M-contiguous
        (torch.randn(16, 509, dtype=torch.bfloat16, device="cuda"), w509.t()),  # rows of 1018 B
    ]
    for a, b in bad:
        with pytest.raises(RuntimeError, match="narrow tile needs"):
            ext()._gemm_narrow(a, b)
    with pytest.raises(RuntimeError, match="float16 or bfloat16"):
        ext()._gemm_narrow(x.float(), w.float().t())
    with pytest.raises(RuntimeError, match="splits is 0"):
        ext()._gemm_narrow(x, w.t(), splits=-1)
    with pytest.raises(RuntimeError, match="rows is 0 \\(auto\\), 64 or 128, but got 32"):
        ext()._gemm_narrow(x, w.t(), rows=32)


@pytest.mark.cuda
def test_empty_and_k_zero(needs_wgmma):
    """An empty side writes nothing; K = 0 writes zeros."""
    e = torch.empty(0, 64, dtype=torch.float16, device="cuda")
    w = torch.randn(256, 64, dtype=torch.float16, device="cuda")
    assert ext()._gemm_narrow(e, w.t()).shape == (0, 256)
    z = ext()._gemm_narrow(
        torch.empty(4, 0, dtype=torch.float16, device="cuda"),
        torch.empty(0, 256, dtype=torch.float16, device="cuda"),
        poisoned(4, 256, torch.float16),
    )
    assert torch.equal(z, torch.zeros_like(z))


@pytest.mark.cuda
def test_auto_path_sides_are_checked():
    """The auto path's side settings take 0 (never) to their kernel's largest side, else a clear
    error; a setting made is read back."""
    for name, most in (("narrow", 32), ("skinny", 32)):
        get, put = getattr(ext(), f"_gemm_{name}_side"), getattr(ext(), f"_set_gemm_{name}_side")
        saved = get()
        try:
            for bad in (-1, most + 1):
                with pytest.raises(RuntimeError, match=f"side is 0 \\(never\\) to {most}, but got"):
                    put(bad)
            put(most - 1)
            assert get() == most - 1
        finally:
            put(saved)
