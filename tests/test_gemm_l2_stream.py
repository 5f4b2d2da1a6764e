"""The GEMM's large operand loaded under L2's evict-first policy (``_set_gemm_l2_stream``, on by
default): the skinny row and column kernels, the wgmma kernel's narrow tiles and its tiles at up to
16 tile rows (M <= 2048). A cache hint changes where lines live in L2, never a result: with it and
without it, the same bits, within float accumulation's bound of float64, every output written.
"""

from __future__ import annotations

import pytest
import torch
from test_gemm_skinny import linear_operands, skinny_runs, weight_kn_operands
from test_gemm_tensor_core import GEMV_BOUND, assert_like_torch, poisoned, ref_mm, rel_err, tc_runs

import lltm_ext
from lltm_ext._extension import load_extension

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def ext():
    return load_extension("gemm")


@pytest.fixture
def restore_l2_stream():
    """Leaves the process-wide switch as the test found it."""
    was = ext()._gemm_l2_stream()
    yield
    ext()._set_gemm_l2_stream(was)


def both_ways(run, m: int, n: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """run(out) into a NaN-poisoned (m, n) output with the hint on, then off."""
    outs = []
    for on in (True, False):
        ext()._set_gemm_l2_stream(on)
        out = poisoned(m, n, dtype)
        run(out)
        outs.append(out)
    return outs[0], outs[1]


def operands(m: int, n: int, k: int, dtype: torch.dtype, layout: str):
    """(a, b) of x (m, k) @ W.T with W (n, k) (layout t), or x @ W with W stored (k, n) (n)."""
    if layout == "t":
        return linear_operands(m, n, k, dtype)
    return weight_kn_operands(m, n, k, dtype)


@pytest.mark.cuda
def test_on_by_default_and_switchable(restore_l2_stream):
    assert ext()._gemm_l2_stream() is True
    ext()._set_gemm_l2_stream(False)
    assert ext()._gemm_l2_stream() is False


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("layout", ["t", "n"])
def test_skinny_kernels_same_bits(restore_l2_stream, dtype, layout):
    """The row kernel (x @ W.T) and the column kernel (x @ W), split and unsplit."""
    if not skinny_runs():
        pytest.skip("the skinny kernel needs mma.sync (sm_80 or newer)")
    for m, n, k in [(1, 4104, 2056), (16, 1000, 8200), (32, 4040, 520)]:
        a, b = operands(m, n, k, dtype, layout)
        ref = ref_mm(a, b)
        for splits in (1, 3):
            on, off = both_ways(
                lambda out, a=a, b=b, s=splits: ext()._gemm_skinny(a, b, out, splits=s), m, n, dtype
            )
            where = f"{layout} {m}x{n}x{k} splits={splits}"
            assert torch.equal(on, off), where
            assert rel_err(on, ref) <= GEMV_BOUND[dtype], where


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("layout", ["t", "n"])
def test_wgmma_kernel_same_bits(restore_l2_stream, dtype, layout):
    """The narrow tiles (both widths, 64- and 128-row tiles, split) and the planner's tiles at
    M <= 2048 (the weight streamed), through the auto path too."""
    if not tc_runs("wgmma"):
        pytest.skip("needs the wgmma kernel (a Hopper GPU and sm_90a code)")
    for m, n, k in [(9, 4104, 2056), (24, 8192, 4096), (32, 3000, 1032)]:
        a, b = operands(m, n, k, dtype, layout)
        ref = ref_mm(a, b)
        for rows, splits in ((128, 1), (64, 2)):
            on, off = both_ways(
                lambda out, a=a, b=b, r=rows, s=splits: ext()._gemm_narrow(
                    a, b, out, splits=s, rows=r
                ),
                m, n, dtype,
            )  # fmt: skip
            where = f"narrow {layout} {m}x{n}x{k} rows={rows} splits={splits}"
            assert torch.equal(on, off), where
            assert rel_err(on, ref) <= GEMV_BOUND[dtype], where
    for m, n, k in [(100, 4096, 4096), (128, 1000, 8200), (1, 11008, 4096), (1000, 2056, 1032)]:
        a, b = operands(m, n, k, dtype, layout)
        auto = both_ways(lambda out, a=a, b=b: out.copy_(lltm_ext.gemm(a, b)), m, n, dtype)
        forced = both_ways(
            lambda out, a=a, b=b: ext()._gemm_tensor_core(a, b, kernel="wgmma", out=out),
            m, n, dtype,
        )  # fmt: skip
        for what, (x, y) in {"auto": auto, "wgmma": forced}.items():
            assert torch.equal(x, y), f"{what} {layout} {m}x{n}x{k}"
            assert_like_torch(x, a, b)
