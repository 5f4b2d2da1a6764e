"""Exact float32 on Hopper's tensor cores: three TF32 passes over operands split into tf32 big and
small parts (src/gemm/tiles/kernel_sm90.cuh, split_tf32.cuh), and the choice between them and the
SIMT kernels (LLTM_EXT_GEMM_F32; cuda_exact_plan in src/gemm/gemm_tc_cuda_host.cpp).

The planner's part runs in every build (`_tc_plan(..., x3=True)`). The tests marked `cuda` force
the three passes (LLTM_EXT_GEMM_F32=tensor) over shapes a user brings, in every layout, with
unaligned rows, K splits, NaN-poisoned outputs, Inf and NaN operands, and hold each result to
float64 within twice torch.mm's own error at full precision; they skip where the GPU or the build
has no wgmma kernel (a failure under LLTM_EXT_REQUIRE_WGMMA=1).
"""

from __future__ import annotations

import os

import pytest
import torch

import lltm_ext
from lltm_ext._extension import load_extension

LAYOUTS = ("nn", "nt", "tn", "tt")


def ext():
    return load_extension("gemm")


def x3_plan(m, n, k, *, sms=132, wgmma=True, a_k=True, b_k=True, a_al=True, b_al=True) -> dict:
    kernel, tile, _, splits, k_split, copy_a, copy_b, us, _, cluster, tile_m = ext()._tc_plan(
        m, n, k, False, a_k, b_k, a_al, b_al, sms, wgmma, True, x3=True
    )
    return dict(
        kernel=kernel, tile=tile, splits=splits, k_split=k_split, copy_a=copy_a, copy_b=copy_b,
        us=us, cluster=cluster, tile_m=tile_m,
    )  # fmt: skip


# ----------------------------------------------------------------------------------------------
# The planner (every build).
# ----------------------------------------------------------------------------------------------


def test_x3_plan_is_wgmma_64_or_128_with_both_operands_split():
    """Whatever the shape and layout: the wgmma kernel only (no mma.sync plan), a tile 64 or 128
    wide, both operands copied (split), blocks alone, splits covering K in whole 64-element
    parts; none without the wgmma kernel."""
    import random

    rng = random.Random(5)
    for _ in range(500):
        m, n, k = (int(rng.uniform(1, 12000)) for _ in range(3))
        flags = [rng.random() < 0.5 for _ in range(4)]
        p = x3_plan(m, n, k, a_k=flags[0], b_k=flags[1], a_al=flags[2], b_al=flags[3])
        assert p["kernel"] == "wgmma" and p["tile"] in (64, 128), (m, n, k, p)
        assert p["copy_a"] and p["copy_b"] and p["cluster"] == 1, (m, n, k, p)
        if p["splits"] > 1:
            assert p["k_split"] % 64 == 0 and -(-k // p["k_split"]) == p["splits"], (m, n, k, p)
        assert 0 < p["us"] < float("inf")
    assert x3_plan(4096, 4096, 4096, wgmma=False)["kernel"] == "none"


def test_x3_plan_costs_more_than_one_tf32_pass():
    """Three passes and the split copies: modelled slower than TF32's one pass at large shapes."""
    for m, n, k in [(4096, 4096, 4096), (1024, 8192, 2048), (8192, 512, 8192)]:
        one = ext()._tc_plan(m, n, k, True, True, True, True, True, 132, True, False)[7]
        assert x3_plan(m, n, k)["us"] > 2 * one


# ----------------------------------------------------------------------------------------------
# The kernel on a GPU.
# ----------------------------------------------------------------------------------------------


@pytest.fixture
def exact_on_tensor_cores(monkeypatch):
    """Exact float32 forced onto the three passes, with TF32 off; skips where they do not run."""
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    monkeypatch.setenv("LLTM_EXT_GEMM_F32", "tensor")
    a = torch.ones(64, 64, device="cuda")
    try:
        lltm_ext.gemm(a, a)
    except RuntimeError as e:
        torch.backends.cuda.matmul.allow_tf32 = saved
        if os.environ.get("LLTM_EXT_REQUIRE_WGMMA") == "1":
            pytest.fail(f"LLTM_EXT_REQUIRE_WGMMA=1, but exact float32 on wgmma: {e}")
        pytest.skip(f"no wgmma kernel here: {e}")
    yield
    torch.backends.cuda.matmul.allow_tf32 = saved


def operands(m, n, k, layout, pad=0):
    """a (m, k), b (k, n) float32 on CUDA, each row-major or (layout "t") a transposed view; with
    pad, views into wider buffers (rows pad elements longer: unaligned where pad % 4 != 0)."""

    def make(rows, cols):
        return torch.randn(rows, cols + pad, dtype=torch.float64).to("cuda", torch.float32)[
            :, :cols
        ]

    a = make(k, m).t() if layout[0] == "t" else make(m, k)
    b = make(n, k).t() if layout[1] == "t" else make(k, n)
    return a, b


def errors(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """(c's, torch.mm's) max |error| over max |product| against float64."""
    ref = a.double().cpu() @ b.double().cpu()
    scale = ref.abs().max().item() or 1.0
    mine = (c.double().cpu() - ref).abs().max().item() / scale
    theirs = (torch.mm(a, b).double().cpu() - ref).abs().max().item() / scale
    return mine, theirs


def assert_exact(c, a, b) -> None:
    assert torch.isfinite(c).all(), "non-finite values (an output left unwritten?)"
    mine, theirs = errors(c, a, b)
    assert mine <= max(2 * theirs, 1e-6), f"error {mine:.2e} against torch.mm's {theirs:.2e}"


SHAPES = [
    (5, 5, 17),
    (64, 64, 64),
    (65, 130, 33),
    (127, 129, 131),
    (200, 300, 1000),
    (1000, 520, 776),
    (33, 2049, 513),
    (2049, 47, 1537),
    (8, 8, 20000),  # long K over one tile: K splits
]


@pytest.mark.cuda
@pytest.mark.parametrize("layout", LAYOUTS)
def test_three_passes_like_exact_float32(exact_on_tensor_cores, layout):
    for m, n, k in SHAPES:
        for pad in (0, 1):
            a, b = operands(m, n, k, layout, pad)
            out = torch.full((m, n), float("nan"), device="cuda")
            lltm_ext.gemm(a, b, out=out)
            assert_exact(out, a, b)
            assert torch.equal(out, lltm_ext.gemm(a, b)), (m, n, k, layout, pad)


@pytest.mark.cuda
def test_three_passes_take_k_splits(exact_on_tensor_cores):
    """A small output over a long K: the plan splits K, and the sum is still exact float32's."""
    a, b = operands(96, 80, 16384, "nt")
    tensor, _, plan = ext()._cuda_exact_plan(a, b)
    assert tensor and plan[0] == "wgmma" and plan[3] > 1, plan
    assert_exact(lltm_ext.gemm(a, b), a, b)


@pytest.mark.cuda
@pytest.mark.parametrize("layout", LAYOUTS)
def test_three_passes_propagate_inf_and_nan_as_float32(exact_on_tensor_cores, layout):
    """Inf and NaN operands (and a finite one past tf32's largest value) give the outputs exact
    float32 gives: the outputs they reach are recomputed from the operands as given."""
    m, n, k = 150, 140, 300
    a, b = operands(m, n, k, layout)
    a, b = a.clone(), b.clone()
    a[3, 5] = float("inf")
    a[7, 9] = float("nan")
    a[100, 200] = -float("inf")
    b[5, 11] = 0.0  # Inf x 0: NaN at (3, 11)
    b[17, 30] = float("inf")
    a[20, 17] = 3.4e38  # rounds to Inf in tf32; x B's row 17 overflows float32 where B is large
    c = lltm_ext.gemm(a, b)
    ref = a.double().cpu() @ b.double().cpu()
    ref32 = torch.mm(a, b).cpu()  # float32's own overflow
    got = c.cpu()
    assert torch.equal(torch.isnan(got), torch.isnan(ref32)), "NaN pattern"
    assert torch.equal(torch.isposinf(got), torch.isposinf(ref32)), "+Inf pattern"
    assert torch.equal(torch.isneginf(got), torch.isneginf(ref32)), "-Inf pattern"
    finite = torch.isfinite(got) & torch.isfinite(ref)
    scale = ref[finite].abs().max().item()
    err = (got.double()[finite] - ref[finite]).abs().max().item() / scale
    assert err < 1e-5, err


@pytest.mark.cuda
def test_auto_takes_three_passes_at_a_large_product(monkeypatch):
    """Left to auto, a large product goes to the three passes on Hopper (where the build has
    them), and is exact float32's."""
    monkeypatch.delenv("LLTM_EXT_GEMM_F32", raising=False)
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        a, b = operands(2048, 2048, 2048, "nn")
        tensor, simt_us, plan = ext()._cuda_exact_plan(a, b)
        if plan[0] != "wgmma":
            if os.environ.get("LLTM_EXT_REQUIRE_WGMMA") == "1":
                pytest.fail("LLTM_EXT_REQUIRE_WGMMA=1, but no exact float32 plan on wgmma")
            pytest.skip("no wgmma kernel here")
        assert tensor and plan[7] > 0 and simt_us > 0, (plan, simt_us)
        assert_exact(lltm_ext.gemm(a, b), a, b)
        monkeypatch.setenv("LLTM_EXT_GEMM_F32", "simt")
        assert not ext()._cuda_exact_plan(a, b)[0]
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
