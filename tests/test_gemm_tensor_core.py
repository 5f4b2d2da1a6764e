"""The tensor-core GEMM at every shape: the planner (src/gemm/gemm_tc_plan.cpp) and each plan it can
pick, against float64 products.

The planner is plain C++ in every build, so `_tc_plan` runs here without a GPU. The tests marked
`cuda` run each plan forced through `_gemm_tensor_core` (the mma.sync kernel with 16-byte copies,
4-byte copies and register-staged loads, with and without K splits; the wgmma kernel after
operand copies, with K splits, and with and without its overlap of K steps) and the auto plan over
shapes a user brings (odd sizes, unaligned rows, skinny, tiny, long K), in bfloat16, float16 and
float32 as TF32, every layout, each result within twice torch.mm's own error.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import random
import shutil
from pathlib import Path

import pytest
import torch

import lltm_ext
from lltm_ext._extension import load_extension

LAYOUTS = ("nn", "nt", "tn", "tt")
TC_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32}


def ext():
    return load_extension("gemm")


def plan(
    m, n, k, *, tf32=False, a_k=True, b_k=True, a_al=True, b_al=True, sms=132, wgmma=True,
    mma=True, a_w=True, b_w=True, a_s=True, b_s=True,
) -> dict:  # fmt: skip
    """The planner's pick; a_al / b_al: rows 16-byte aligned, a_w / b_w: 4-byte aligned, a_s /
    b_s: 32-byte aligned (whole sectors; only where 16-byte aligned)."""
    sectors = (a_w or a_al, b_w or b_al, a_s and a_al, b_s and b_al)
    got = ext()._tc_plan(m, n, k, tf32, a_k, b_k, a_al, b_al, sms, wgmma, mma, *sectors)
    kernel, tile, aligned, splits, k_split, copy_a, copy_b, us, words, cluster, tile_m = got
    return dict(
        kernel=kernel, tile=tile, aligned=aligned, splits=splits, k_split=k_split,
        copy_a=copy_a, copy_b=copy_b, us=us, words=words, cluster=cluster, tile_m=tile_m,
    )  # fmt: skip


# ----------------------------------------------------------------------------------------------
# The planner (every build).
# ----------------------------------------------------------------------------------------------


def test_plan_needs_a_tensor_core_kernel():
    assert plan(512, 512, 512, wgmma=False, mma=False)["kernel"] == "none"
    assert plan(512, 512, 512, wgmma=False)["kernel"] == "mma"
    assert plan(8192, 8192, 8192, mma=False)["kernel"] == "wgmma"


def test_plan_invariants_over_random_shapes():
    """Whatever it picks is a plan the kernels can run: mma's register path only with the 64 x 64
    tile, 16-byte cp.async only for aligned operands, 4-byte cp.async only for 4-byte aligned ones
    (and tiles of 64 and 128), the register path only where neither applies, splits that cover K
    exactly in whole 32-element stages, a workspace under 256 MB; wgmma copies every operand TMA
    cannot read (tf32: every operand that is not K-major); and a finite modelled time."""
    rng = random.Random(7)
    for _ in range(3000):
        m, n, k = (int(math.exp(rng.uniform(0, math.log(12001)))) for _ in range(3))
        flags = [rng.random() < 0.5 for _ in range(7)]
        tf32, a_k, b_k, a_al, b_al, a_w, b_w = flags
        wgmma, mma = rng.random() < 0.7, rng.random() < 0.9
        b_s = rng.random() < 0.8  # B's rows whole sectors apart (where 16-byte aligned)
        p = plan(
            m, n, k, tf32=tf32, a_k=a_k, b_k=b_k, a_al=a_al, b_al=b_al, wgmma=wgmma, mma=mma,
            a_w=a_w, b_w=b_w, b_s=b_s,
        )  # fmt: skip
        where = f"{m}x{n}x{k} {flags} b_s={b_s} wgmma={wgmma} mma={mma}: {p}"
        if not (wgmma or mma):
            assert p["kernel"] == "none", where
            continue
        assert p["kernel"] in ("wgmma", "mma") and math.isfinite(p["us"]) and p["us"] > 0, where
        if p["kernel"] == "mma":
            assert mma, where
            assert p["tile"] in (64, 128, 256), where
            if a_al and b_al:
                assert p["aligned"] and not p["words"], where
            elif (a_w or a_al) and (b_w or b_al):
                assert not p["aligned"] and p["words"] and p["tile"] in (64, 128), where
            else:
                assert not p["aligned"] and not p["words"] and p["tile"] == 64, where
            if p["splits"] > 1:
                assert p["k_split"] % 32 == 0, where
                assert (p["splits"] - 1) * p["k_split"] < k <= p["splits"] * p["k_split"], where
                assert 4 * p["splits"] * m * n <= 256 << 20, where
        else:
            assert wgmma and p["tile_m"] in (128, 256), where
            tiles = (64, 128, 144, 168, 192, 256) if p["tile_m"] == 128 else TALL_TILES
            assert p["tile"] in tiles, where
            need_b = not b_al or (tf32 and not b_k)
            # 144, 168 and the 256-row tiles (not whole 64-column atoms): B K-major at the kernel
            # (tf32's always is), its rows whole sectors apart or copied because they must be.
            off_grid = (b_k or tf32) and (b_s or need_b)
            assert p["tile"] % 64 == 0 or p["tile"] == 16 or off_grid, where
            # The 256-row tile: 16-bit, B K-major as given, unsplit.
            assert p["tile_m"] == 128 or (not tf32 and b_k and p["splits"] == 1), where
            # Clusters of two: 256-row tiles over two tile rows or more where pairs take no more
            # rounds; 128-row tiles only in whole 64-column atoms.
            tiles_m, tiles_n = -(-m // 256), -(-n // p["tile"])
            pairs_fit = -(-(-(-tiles_m // 2) * tiles_n) // 66) <= -(-tiles_m * tiles_n // 132)
            if p["tile_m"] == 256:
                assert p["cluster"] == (2 if tiles_m >= 2 and pairs_fit else 1), where
            assert p["tile"] % 64 == 0 or p["tile_m"] == 256 or p["cluster"] == 1, where
            assert p["copy_a"] == (not a_al or (tf32 and not a_k)), where
            # B's rows inside sectors may be copied too.
            assert p["copy_b"] == need_b or (p["copy_b"] and b_al and not b_s), where
            if p["splits"] > 1:  # only for grids short of the SMs, in whole 64-element steps,
                # into one round of items
                assert math.ceil(m / 128) * math.ceil(n / p["tile"]) * p["splits"] <= 132, where
                assert p["k_split"] % 64 == 0, where
                assert (p["splits"] - 1) * p["k_split"] < k <= p["splits"] * p["k_split"], where
                assert 4 * p["splits"] * m * n <= 256 << 20, where


def test_plan_splits_k_for_skinny_products():
    """A product with one output tile and a long K runs on many blocks (K splits), not one."""
    for m, n, k in [(2, 10, 10250), (1, 273, 4225), (45, 35, 11052)]:
        for aligned in (True, False):
            p = plan(m, n, k, a_al=aligned, b_al=aligned, wgmma=False)
            assert p["kernel"] == "mma" and p["splits"] >= 8, (m, n, k, aligned, p)


@pytest.mark.parametrize("n, k", [(4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096)])
@pytest.mark.parametrize("m", [128, 512])
def test_plan_reads_weights_with_wgmma(m, n, k):
    """Linear layers past the skinny kernel's sides (x @ W.T, both operands aligned and
    K-major), bound by reading W: the wgmma kernel, whose copies read it fastest (the model's
    kMmaMemoryShare), where the Hopper kernel runs."""
    assert plan(m, n, k)["kernel"] == "wgmma", plan(m, n, k)


@pytest.mark.parametrize("n, k", [(4096, 11008), (4096, 14336), (2048, 8192)])
def test_plan_splits_wgmma_where_its_tiles_leave_sms_idle(n, k):
    """x @ W.T at M = 128 with a long K and a narrow layer: fewer tiles than SMs, each reading
    its panel of W alone; K splits spread the read over the GPU. A grid that fills the SMs is not
    split."""
    p = plan(128, n, k)
    assert p["kernel"] == "wgmma" and p["splits"] > 1, p
    assert plan(4096, 4096, 4096)["splits"] == 1


def test_plan_wgmma_width_by_the_model_where_rounds_mislead():
    """The wgmma tile width goes by the round count (1024^3: one round of 64-wide tiles; 1000 x
    3000 x 5000: one round of 128 x 192 tiles, 128 of them, where 128 x 256 tiles left 36 SMs
    idle), unless the cost model puts another width well ahead: at a long K over few rounds, three
    rounds of 64-wide tiles cost more than one of wider ones, and the mma kernel the old pick lost
    to is not taken either."""
    assert plan(1024, 1024, 1024, mma=False)["tile"] == 64
    for tf32 in (False, True):
        p = plan(1000, 3000, 5000, tf32=tf32)
        assert (p["kernel"], p["tile"], p["splits"]) == ("wgmma", 192, 1), (tf32, p)
    p = plan(1555, 2832, 1351, b_k=False)
    assert (p["kernel"], p["tile"]) == ("wgmma", 192), p
    # Where 192-wide tiles take as many rounds as 256-wide ones, 256 (3000 x 5000: four rounds),
    # for x @ W and TF32; for 16-bit x @ W.T the 256-row tiles' three rounds of 256 x 152, unless K
    # is short (their rounds cost more there), in pairs of tile rows (6 x 33 pairs: 3 rounds of 66).
    assert plan(3000, 5000, 2000, b_k=False)["tile"] == 256
    assert plan(3000, 5000, 2000, tf32=True)["tile"] == 256
    p = plan(3000, 5000, 2000)
    assert (p["tile"], p["tile_m"], p["splits"], p["cluster"]) == (152, 256, 1, 2), p
    assert plan(3000, 5000, 1000)["tile_m"] == 128


def test_plan_wgmma_144_and_168_where_their_rounds_cost_less_and_b_reads_at_full_speed():
    """144- and 168-wide tiles (not whole 64-column atoms, run without clusters) where their rounds
    cost less than the other widths' and B reaches the kernel K-major (x @ W.T; tf32's B always
    is, copied first) with rows whole sectors apart, as it is or copied because TMA cannot read
    it: the linear layer 4096 x 11008 at M = 512 (264 tiles of 168: two full rounds, where 232 of
    192 leave 32 SMs idle in the second) and M = 2048; never for an N-major 16-bit B (x @ W),
    whose atoms are 64 columns wide, nor for a B whose rows start inside sectors, which 64-multiple
    widths read in clusters of two blocks."""
    for m in (512, 2048):
        assert plan(m, 11008, 4096)["tile"] == 168, plan(m, 11008, 4096)
        assert plan(m, 11008, 4096, b_k=False)["tile"] != 168
        assert plan(m, 11008, 4096, tf32=True, b_k=False)["tile"] == 168
        assert plan(m, 11008, 4096, b_al=False)["tile"] == 168  # copied to aligned rows anyway
    # Two rounds either way at 1555 x 2832: the narrower 144 (260 tiles) costs less.
    assert plan(1555, 2832, 1351)["tile"] == 144
    # 144 where its rounds cost less still: 5120 x 13824 at M = 512 (384 tiles, three rounds of
    # 0.61 against two of 256), as x @ W.T only.
    assert plan(512, 13824, 5120)["tile"] == 144, plan(512, 13824, 5120)
    assert plan(512, 13824, 5120, b_k=False)["tile"] == 256
    # B's rows inside sectors: a 64-multiple width in clusters, B read in place.
    for m, n, k in ((512, 11008, 4096), (512, 13824, 5120), (1032, 4104, 1032), (2056, 2056, 1032)):
        for tf32 in (False, True):
            p = plan(m, n, k, tf32=tf32, b_s=False)
            assert p["tile"] % 64 == 0 and p["cluster"] == 2 and not p["copy_b"], (m, n, k, p)
    # Fewer rounds at another width: that width (M = 512, 4096 wide: one round of 128).
    assert plan(512, 4096, 4096)["tile"] == 128
    assert plan(8192, 28672, 8192)["tile"] != 168


def test_fit_mirror_is_the_planners_cost_model():
    """benchmarks/gemm_tc_plan/fit_plan_model.py's cost() (the mirror that fits the model's
    constants) gives the planner's own modelled time for the plans it picks without operand copies
    (the mirror leaves the copies' and mid-sector terms out), every kernel and tile width among
    them, 192 included, over random aligned problems."""
    path = Path(__file__).resolve().parents[1] / "benchmarks/gemm_tc_plan/fit_plan_model.py"
    if not path.exists():
        pytest.skip("no benchmarks/ here (the sdist leaves the experiments out)")
    spec = importlib.util.spec_from_file_location("fit_plan_model", path)
    assert spec is not None and spec.loader is not None
    mirror = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mirror)
    rng = random.Random(3)
    seen = set()
    for _ in range(1500):
        m, n, k = (int(math.exp(rng.uniform(0, math.log(12001)))) for _ in range(3))
        tf32, a_k, b_k = (rng.random() < 0.5 for _ in range(3))
        p = plan(m, n, k, tf32=tf32, a_k=a_k, b_k=b_k)
        if p["copy_a"] or p["copy_b"]:
            continue
        seen.add((p["kernel"], p["tile"]))
        us = mirror.cost(mirror.P, dict(M=m, N=n, K=k, tf32=tf32), p)
        assert us == pytest.approx(p["us"], rel=1e-9), (m, n, k, tf32, p, us)
    assert {("wgmma", 64), ("wgmma", 128), ("wgmma", 168), ("wgmma", 192), ("wgmma", 256)} <= seen
    assert ("mma", 64) in seen


def test_plan_changes_harness_is_the_planner(tmp_path):
    """benchmarks/gemm_tc_plan/plan_changes.py's harness (the planner compiled alone, which lists
    the picks a planner change makes differently) gives the extension's own plan for each problem
    it asks, every field, over random problems in every layout and the swapped transposes."""
    path = Path(__file__).resolve().parents[1] / "benchmarks/gemm_tc_plan/plan_changes.py"
    if not path.exists():
        pytest.skip("no benchmarks/ here (the sdist leaves the experiments out)")
    cxx = os.environ.get("CXX", "g++")
    if shutil.which(cxx) is None:
        pytest.skip(f"no C++ compiler ({cxx})")
    spec = importlib.util.spec_from_file_location("plan_changes", path)
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    exe = tool.build_harness(None, tmp_path, cxx)
    rng = random.Random(5)
    lines = []
    for _ in range(400):
        m, n, k = (int(math.exp(rng.uniform(0, math.log(9001)))) for _ in range(3))
        lines += tool.harness_lines((m, n, k, rng.random() < 0.3, rng.choice(LAYOUTS)), 132)
    for line, got in zip(lines, tool.run_harness(exe, lines), strict=True):
        m, n, k, *flags, sms = (int(v) for v in line.split())
        f = [bool(v) for v in flags]  # tf32, a_k, b_k, a_al, b_al, a_w, b_w, a_s, b_s, c_trans
        # The planner here has no view of c_trans (the swap's transpose is planned as any product).
        want = ext()._tc_plan(m, n, k, *f[:5], sms, True, True, *f[5:9])
        assert got[7] == pytest.approx(want[7], rel=1e-6), (line, got, want)
        assert got[:7] + got[8:] == list(want[:7]) + list(want[8:]), (line, got, want)
    assert len(lines) > 400  # some swapped transposes among them


def test_plan_copies_for_wgmma_only_where_it_pays():
    """A large product with unaligned rows copies its operands for the wgmma kernel (the copies
    are a small share of the work); a small one stays on the mma kernel, which reads them in
    place."""
    big = plan(4096, 4096, 4095, a_al=False, b_al=True)
    assert big["kernel"] == "wgmma" and big["copy_a"] and not big["copy_b"], big
    small = plan(37, 1111, 999, a_al=False, b_al=False, a_w=False, b_w=False)
    assert small["kernel"] == "mma" and not small["aligned"] and not small["words"], small


def test_plan_copies_rows_inside_sectors_where_tma_is_busy():
    """16-byte aligned rows that start inside 32-byte sectors: B's read in place by blocks in
    clusters of two that share its stages, where the tiles are 128 or more wide over two tile
    rows or more (x @ W at 3000 x 5000 x 2000, W's rows 10000 bytes apart); A's copied first
    (rows 128 bytes apart) for a large product whose kernel they slow, and B's where the blocks
    cannot pair (one tile row: M <= 128); not for a product bound by reading the weight once
    (M = 16), nor for an M-major A alone on 128-row tiles (TMA's reads of it slow little), but on
    256 x 152 ones (33 tile columns read it, not 20), nor where every row is whole sectors (no
    clusters there either, but for 256-row tiles)."""
    big = plan(3000, 5000, 2000, b_s=False)
    assert big["kernel"] == "wgmma" and big["cluster"] == 2, big
    assert not (big["copy_a"] or big["copy_b"]), big
    big_a = plan(3000, 5008, 2000, a_s=False)
    assert big_a["copy_a"] and (big_a["tile_m"], big_a["cluster"]) == (256, 2), big_a
    one_row = plan(128, 5000, 8192, b_s=False)
    assert one_row["kernel"] == "wgmma" and one_row["cluster"] == 1, one_row
    aligned = plan(3000, 5008, 2000)
    assert not (aligned["copy_a"] or aligned["copy_b"]), aligned
    assert (aligned["tile_m"], aligned["cluster"]) == (256, 2), aligned
    aligned_128 = plan(3000, 5008, 2000, b_k=False)
    assert (aligned_128["tile_m"], aligned_128["cluster"]) == (128, 1), aligned_128
    skinny = plan(16, 5000, 4104, a_s=False, b_s=False)
    assert not (skinny["copy_a"] or skinny["copy_b"]), skinny
    m_major = plan(3000, 5008, 2000, a_k=False, a_s=False, b_k=False)
    assert m_major["tile_m"] == 128 and not m_major["copy_a"], m_major
    tall = plan(3000, 5008, 2000, a_k=False, a_s=False)
    assert tall["tile_m"] == 256 and tall["copy_a"], tall


# ----------------------------------------------------------------------------------------------
# The plans on a GPU.
# ----------------------------------------------------------------------------------------------


def ref_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a.detach().double().cpu() @ b.detach().double().cpu()


def rel_err(c: torch.Tensor, ref: torch.Tensor) -> float:
    c = c.detach().double().cpu()
    assert torch.isfinite(c).all(), "non-finite values in the result (an element left unwritten?)"
    denom = ref.norm().item()
    return (c - ref).norm().item() / denom if denom > 0 else (c - ref).norm().item()


def assert_like_torch(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> float:
    """c within twice torch.mm's own relative error (same inputs and dtype, same float32-matmul
    setting) of the float64 product, or within the dtype's rounding floor; returns c's error."""
    ref = ref_mm(a, b)
    torch_err = rel_err(torch.mm(a, b), ref)
    floor = 2e-3 if a.dtype == torch.float32 else 1e-4
    err = rel_err(c, ref)
    assert err <= max(2 * torch_err, floor), f"relative error {err:.3e} vs torch's {torch_err:.3e}"
    return err


@contextlib.contextmanager
def tf32_if(dtype: torch.dtype):
    """float32 matmuls as TF32 inside (torch.mm and lltm_ext.gemm both read it) for float32."""
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = dtype == torch.float32
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def operands(m, n, k, layout, dtype, offset=0):
    """a (m, k), b (k, n), each row-major or (layout "t") a transposed view, contiguous storage
    (unaligned rows wherever the row length is not a multiple of 16 bytes), `offset` elements
    into their buffers (a base off 16 bytes for offset % 8 != 0)."""

    def make(rows, cols):
        buf = torch.randn(offset + rows * cols, dtype=torch.float64).to("cuda", dtype)
        return buf[offset:].view(rows, cols)

    a = make(k, m).t() if layout[0] == "t" else make(m, k)
    b = make(n, k).t() if layout[1] == "t" else make(k, n)
    return a, b


def poisoned(m, n, dtype, offset=0) -> torch.Tensor:
    """A NaN-filled contiguous (m, n) output, `offset` elements into its buffer (a base off 16
    bytes for offset % 8 != 0)."""
    flat = torch.full((m * n + offset,), float("nan"), dtype=dtype, device="cuda")
    return flat[offset:].view(m, n)


def assert_splits_run(kernel, dtype, tile, shapes, counts) -> None:
    """The forced kernel at the tile width with each K split count of `counts`, every layout and
    shape (m, n, k): like torch into a NaN-poisoned output, the same bits twice."""
    for layout in LAYOUTS:
        for m, n, k in shapes:
            a, b = operands(m, n, k, layout, dtype)
            for splits in counts:
                out = poisoned(m, n, dtype)
                ext()._gemm_tensor_core(a, b, kernel, tile=tile, splits=splits, out=out)
                assert_like_torch(out, a, b)
                twice = ext()._gemm_tensor_core(a, b, kernel, tile=tile, splits=splits)
                assert torch.equal(out, twice), (kernel, m, n, k, layout, splits)


def tc_runs(kernel: str) -> bool:
    """Whether the forced kernel runs here (the device and the build); under
    LLTM_EXT_REQUIRE_WGMMA=1 / LLTM_EXT_REQUIRE_MMA=1 a kernel that does not is a failure."""
    a = torch.ones(8, 8, dtype=torch.bfloat16, device="cuda")
    try:
        ext()._gemm_tensor_core(a, a, kernel)
    except RuntimeError as e:
        if os.environ.get(f"LLTM_EXT_REQUIRE_{kernel.upper()}") == "1":
            pytest.fail(f"LLTM_EXT_REQUIRE_{kernel.upper()}=1, but the {kernel} kernel: {e}")
        return False
    return True


# Shapes a user brings: odd sizes (rows not a multiple of 16 bytes), sizes 1, a K of one partial
# stage, K ending mid-chunk, long K with a small output (K splits), more tiles than the GPU runs
# at once, skinny both ways.
SHAPES = [
    (1, 1, 1),
    (3, 5, 7),
    (1, 37, 1001),
    (37, 1, 1001),
    (2, 10, 10250),
    (65, 33, 31),
    (127, 129, 131),
    (200, 300, 517),
    (333, 7, 3001),
    (1001, 999, 65),
    (2049, 1537, 200),
]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", TC_DTYPES.values(), ids=TC_DTYPES.keys())
@pytest.mark.parametrize("layout", LAYOUTS)
def test_mma_register_staged(dtype, layout):
    """The mma kernel's register-staged loads (any alignment): unaligned rows and a base off 16
    bytes, and aligned operands forced through them; with and without K splits; every element of
    a NaN-poisoned output written, its base off 16 bytes too; the same bits twice."""
    if not tc_runs("mma"):
        pytest.skip("the mma.sync kernel does not run here")
    regs = dict(tile=64, unaligned=True, registers=True)
    with tf32_if(dtype):
        for m, n, k in SHAPES:
            for offset in (0, 1):
                a, b = operands(m, n, k, layout, dtype, offset)
                for splits in (1, 3, 0):
                    out = poisoned(m, n, dtype, offset)
                    ext()._gemm_tensor_core(a, b, "mma", splits=splits, out=out, **regs)
                    assert_like_torch(out, a, b)
            again = ext()._gemm_tensor_core(a, b, "mma", **regs)
            assert torch.equal(again, ext()._gemm_tensor_core(a, b, "mma", **regs))


def word_operands(m, n, k, layout, dtype):
    """a (m, k), b (k, n) as `operands` makes them, but each storage row padded to an even length
    and the base 4 bytes into the buffer, which ends at the last element: rows 4-byte aligned,
    not 16-byte aligned; odd sizes leave a row's last 4-byte word half outside the matrix."""
    elem = torch.empty(0, dtype=dtype).element_size()

    def make(rows, cols):
        stride, offset = (cols + 1) // 2 * 2, 4 // elem
        buf = torch.randn(offset + (rows - 1) * stride + cols, dtype=torch.float64)
        return buf.to("cuda", dtype)[offset:].as_strided((rows, cols), (stride, 1))

    a = make(k, m).t() if layout[0] == "t" else make(m, k)
    b = make(n, k).t() if layout[1] == "t" else make(k, n)
    return a, b


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", TC_DTYPES.values(), ids=TC_DTYPES.keys())
@pytest.mark.parametrize("layout", LAYOUTS)
def test_mma_word_copies(dtype, layout):
    """The mma kernel's 4-byte copies (rows 4-byte aligned, not 16-byte aligned: float32 rows of
    any length, 16-bit rows of an even one), block tiles 64 and 128 (128 runs only on these copies
    among the unaligned paths, so its success shows they ran), odd sizes whose last word of a row
    is half outside the matrix, with and without K splits; NaN-poisoned outputs, deterministic;
    and the planner takes them for such operands."""
    if not tc_runs("mma"):
        pytest.skip("the mma.sync kernel does not run here")
    with tf32_if(dtype):
        for m, n, k in SHAPES:
            a, b = word_operands(m, n, k, layout, dtype)
            # A 16-bit operand of one column (row) is a vector of rows one element apart, which
            # the 4-byte copies cannot read (tile 64 then runs on registers; other tests cover it).
            if dtype != torch.float32 and 1 in (m, n):
                continue
            for tile, splits in [(64, 1), (64, 3), (128, 1), (128, 0)]:
                out = poisoned(m, n, dtype, 1)
                ext()._gemm_tensor_core(
                    a, b, "mma", tile=tile, splits=splits, unaligned=True, out=out
                )
                assert_like_torch(out, a, b)
            again = ext()._gemm_tensor_core(a, b, "mma", tile=128, unaligned=True)
            assert torch.equal(
                again, ext()._gemm_tensor_core(a, b, "mma", tile=128, unaligned=True)
            )
            if min(m, n) > 4:  # not the matrix-vector kernels' sizes
                kernel, tile, aligned, *_, words, _cluster = ext()._cuda_tc_plan(a, b)
                assert kernel != "mma" or (words and not aligned), (m, n, k, layout)
        # Operands the 4-byte copies cannot read (16-bit rows of an odd length): no tile 128.
        if dtype != torch.float32:
            a, b = operands(65, 33, 31, layout, dtype, 1)
            with pytest.raises(RuntimeError, match="no tensor-core plan"):
                ext()._gemm_tensor_core(a, b, "mma", tile=128, unaligned=True)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", TC_DTYPES.values(), ids=TC_DTYPES.keys())
@pytest.mark.parametrize("tile", [64, 128, 256])
def test_mma_split_k(dtype, tile):
    """The aligned mma kernel with K splits (partials in float32, summed in split order): K a
    multiple of the split or not, splits of one stage, every layout; deterministic."""
    if not tc_runs("mma"):
        pytest.skip("the mma.sync kernel does not run here")
    # Sizes of whole 16-byte chunks (aligned rows in every layout); K not a multiple of a stage,
    # of the split, or shorter than the splits asked for (fewer splits then).
    shapes = [(64, 128, 4096), (136, 72, 1000), (8, 256, 104), (128, 8, 2088)]
    with tf32_if(dtype):
        assert_splits_run("mma", dtype, tile, shapes, (2, 7, 32, 128))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", TC_DTYPES.values(), ids=TC_DTYPES.keys())
@pytest.mark.parametrize("tile", [64, 128, 256])
def test_wgmma_split_k(dtype, tile):
    """The wgmma kernel with K splits (float32 partial tiles, summed in split order): every
    layout (tf32's non-K-major operands copied first), K a multiple of the split or not, a last
    split of one partial step, more splits asked for than K has steps (fewer then), tiles cut by
    M and N, odd N (single stores of the partials); a NaN-poisoned output fully written, the
    same bits twice."""
    if not tc_runs("wgmma"):
        pytest.skip("the wgmma kernel does not run here (a Hopper GPU and sm_90a code)")
    # Rows of whole 16-byte chunks in every layout (TMA) but the last shape's N: odd (its B
    # copied where N-major, its partials stored one element at a time).
    shapes = [(128, 512, 4096), (136, 72, 1000), (8, 264, 104), (200, 87, 2120)]
    with tf32_if(dtype):
        assert_splits_run("wgmma", dtype, tile, shapes, (2, 7, 32))
        for layout in LAYOUTS:
            a, b = operands(40, 33, 3000, layout, dtype, 3)  # unaligned: copies, then splits
            out = poisoned(40, 33, dtype)
            ext()._gemm_tensor_core(a, b, "wgmma", tile=tile, splits=3, out=out)
            assert_like_torch(out, a, b)


# gemm_tc_plan.h's kWgmmaWideTiles and kWgmmaTallTiles (test_build_tools checks they agree).
WIDE_TILES = (144, 168, 192)
TALL_TILES = (152,)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", TC_DTYPES.values(), ids=TC_DTYPES.keys())
@pytest.mark.parametrize("tile", WIDE_TILES)
def test_wgmma_wide_tiles(dtype, tile):
    """The wgmma kernel at the widths besides the powers of two, every layout: tiles cut by M and
    N, K of one partial step and of many, more tiles than one round of SMs, with and without K
    splits; C stored through TMA, or directly where its base is off 16 bytes; a NaN-poisoned
    output fully written, the same bits twice. (Other kernels take no such width.)"""
    if not tc_runs("wgmma"):
        pytest.skip("the wgmma kernel does not run here (a Hopper GPU and sm_90a code)")
    shapes = [(128, tile, 64), (136, 3 * tile - 5, 1000), (8, 264, 40), (1000, 3000, 200)]
    shapes += [(200, 2 * tile + 8, 2120)]
    with tf32_if(dtype):
        for layout in LAYOUTS:
            if tile % 64 != 0 and layout[1] == "n" and dtype != torch.float32:
                # An N-major B takes whole 64-column atoms: no such kernel at this width.
                a, b = operands(128, tile, 64, layout, dtype)
                with pytest.raises(RuntimeError):
                    ext()._gemm_tensor_core(a, b, "wgmma", tile=tile)
                continue
            for m, n, k in shapes:
                a, b = operands(m, n, k, layout, dtype)
                for splits, offset in [(1, 0), (3, 0), (1, 3)]:
                    out = poisoned(m, n, dtype, offset)
                    ext()._gemm_tensor_core(a, b, "wgmma", tile=tile, splits=splits, out=out)
                    assert_like_torch(out, a, b)
                    twice = ext()._gemm_tensor_core(a, b, "wgmma", tile=tile, splits=splits)
                    assert torch.equal(out, twice), (m, n, k, layout, splits, offset)
    a = torch.ones(8, 8, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(RuntimeError, match="tile must be"):
        ext()._gemm_tensor_core(a, a, "mma", tile=tile)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_wgmma_tall_tiles(dtype):
    """The wgmma kernel's 256-row tiles (each consumer warpgroup two 64-row slabs), forced, with B
    K-major (A either way): tiles cut by M (fewer rows than one slab, than one tile, odd) and N,
    K of one partial step and of many, more tiles than one round of SMs, with and without K
    splits; C stored through TMA, or directly where its base is off 16 bytes; a NaN-poisoned
    output fully written, the same bits twice; the planner's pick in pairs of tile rows, the same
    bits as alone. An N-major B, TF32 and other widths are refused."""
    if not tc_runs("wgmma"):
        pytest.skip("the wgmma kernel does not run here (a Hopper GPU and sm_90a code)")
    for tile in TALL_TILES:
        shapes = [(256, tile, 64), (300, 3 * tile - 5, 1000), (8, 264, 40), (1000, 3000, 200)]
        shapes += [(520, 2 * tile + 8, 2120), (100, 40, 130), (3000, 5000, 256)]
        for layout in LAYOUTS:
            if layout[1] == "n":
                a, b = operands(256, tile, 64, layout, dtype)
                with pytest.raises(RuntimeError, match="no tensor-core plan"):
                    ext()._gemm_tensor_core(a, b, "wgmma", tile_m=256)
                continue
            for m, n, k in shapes:
                a, b = operands(m, n, k, layout, dtype)
                for splits, offset in [(1, 0), (3, 0), (1, 3)]:
                    run = dict(tile=tile, tile_m=256, splits=splits)
                    out = poisoned(m, n, dtype, offset)
                    ext()._gemm_tensor_core(a, b, "wgmma", out=out, **run)
                    assert_like_torch(out, a, b)
                    twice = ext()._gemm_tensor_core(a, b, "wgmma", **run)
                    assert torch.equal(out, twice), (m, n, k, layout, splits, offset)
    # The auto plan at 3000 x 5000 x 2000 x @ W.T on a GPU of 132 SMs: 256 x 152 tiles in pairs of
    # tile rows (6 x 33 pairs, three rounds); the same bits as those tiles forced alone.
    a, b = operands(3000, 5000, 2000, "nt", dtype)
    kernel, tile, *_, cluster, tile_m = ext()._cuda_tc_plan(a, b)
    if torch.cuda.get_device_properties(0).multi_processor_count == 132:
        assert (kernel, tile, cluster, tile_m) == ("wgmma", 152, 2, 256)
    auto = lltm_ext.gemm(a, b)
    assert_like_torch(auto, a, b)
    ext()._set_gemm_wgmma_knobs(cluster=1)
    try:
        alone = ext()._gemm_tensor_core(a, b, "wgmma", tile=152, tile_m=256)
    finally:
        ext()._set_gemm_wgmma_knobs()
    assert torch.equal(auto, alone)
    a = torch.ones(8, 8, dtype=dtype, device="cuda")
    with pytest.raises(RuntimeError, match="256-row tiles are"):
        ext()._gemm_tensor_core(a, a.t(), "wgmma", tile=128, tile_m=256)
    with pytest.raises(RuntimeError, match="tile_m must be"):
        ext()._gemm_tensor_core(a, a.t(), "mma", tile_m=256)
    with pytest.raises(RuntimeError, match="no tensor-core plan"):
        f = torch.ones(8, 8, device="cuda")
        ext()._gemm_tensor_core(f, f.t(), "wgmma", tile_m=256)


def test_wgmma_switches_reject_unknown_values():
    """The wgmma kernel's cluster, Stream-K, swap and group switches name their values when given
    another (on any build)."""
    with pytest.raises(RuntimeError, match="cluster is 0, 1 or 2, not 3"):
        ext()._set_gemm_wgmma_knobs(cluster=3)
    with pytest.raises(RuntimeError, match="group is 1 to 1024 tile rows, not 0"):
        ext()._set_gemm_wgmma_knobs(group=0)
    with pytest.raises(RuntimeError, match="stream_k is 'auto', 'off' or 'on', not 'sometimes'"):
        ext()._set_gemm_wgmma_knobs(stream_k="sometimes")
    with pytest.raises(RuntimeError, match="swap is 'auto', 'off' or 'on', not 'yes'"):
        ext()._set_gemm_wgmma_knobs(swap="yes")


@pytest.mark.cuda
def test_wgmma_tile_walk_groups():
    """The order the wgmma kernel's blocks walk the tiles in (groups of 1-64 tile rows,
    ``_set_gemm_wgmma_knobs(group=...)``) changes no bit of C: blocks alone and in clusters of two
    (an odd count of tile rows), K splits, Stream-K, the 256-row tiles, the transposed store."""
    if not tc_runs("wgmma"):
        pytest.skip("the wgmma kernel does not run here (a Hopper GPU and sm_90a code)")
    dtype = torch.bfloat16
    # (shape, the plan forced (else auto), the other switches)
    runs = [
        ((1000, 1100, 520, "nn"), {}, {}),
        ((1160, 4104, 1032, "nn"), {"tile": 128}, {"cluster": 2}),
    ]
    runs += [((2100, 1000, 300, "nt"), {"tile": 64, "splits": 3}, {})]
    runs += [((3000, 5000, 2000, "nt"), {}, {}), ((1000, 1104, 1024, "tt"), {}, {})]
    runs += [((900, 700, 4000, "nt"), {"tile": 256}, {"stream_k": "on"})]
    for (m, n, k, layout), forced, knobs in runs:
        a, b = operands(m, n, k, layout, dtype)
        outs = []
        for group in (16, 1, 3, 8, 64):
            ext()._set_gemm_wgmma_knobs(group=group, **knobs)
            try:
                out = poisoned(m, n, dtype)
                if forced:
                    ext()._gemm_tensor_core(a, b, "wgmma", out=out, **forced)
                else:
                    lltm_ext.gemm(a, b, out=out)
            finally:
                ext()._set_gemm_wgmma_knobs()
            outs.append(out)
        assert_like_torch(outs[0], a, b)
        for out in outs[1:]:
            assert torch.equal(out, outs[0]), (m, n, k, layout, forced)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
def test_wgmma_swap(dtype):
    """16-bit a.T @ b.T (A M-major, B K-major) run as its transpose, b^T a^T stored transposed
    (``_set_gemm_wgmma_knobs(swap="on")``): like torch into a NaN-poisoned output at an offset,
    the same bits twice; tails in M and N, M and N of 1-9, odd sides (the operands copied to
    aligned rows first), K splits, rows inside sectors (clusters of two), the tiles of
    3000 x 5000 x 2000; forced tiles and splits too. Auto swaps the planner's choices only. Other
    layouts and float32 are unchanged by the switch (the same bits as with it off)."""
    if not tc_runs("wgmma"):
        pytest.skip("the wgmma kernel does not run here (a Hopper GPU and sm_90a code)")
    shapes = [(256, 512, 64), (136, 72, 1000), (1000, 1100, 1024), (1, 264, 520), (264, 1, 520)]
    shapes += [(9, 7, 300), (65, 136, 200), (300, 520, 7000), (2100, 4100, 72), (3000, 5000, 2000)]
    shapes += [(1032, 4104, 1032), (4104, 1032, 1032), (333, 517, 91)]
    ext()._set_gemm_wgmma_knobs(swap="on")
    try:
        for m, n, k in shapes:
            a, b = operands(m, n, k, "tt", dtype)
            for offset in (0, 3):
                out = poisoned(m, n, dtype, offset)
                lltm_ext.gemm(a, b, out=out)
                assert_like_torch(out, a, b)
            assert torch.equal(out, lltm_ext.gemm(a, b)), (m, n, k)
            # Each width of the transposed TMA store's kernels unsplit, and split (direct stores).
            for tile, splits in [(64, 1), (128, 1), (192, 1), (256, 1), (256, 3), (64, 2)]:
                out = poisoned(m, n, dtype)
                ext()._gemm_tensor_core(a, b, "wgmma", tile=tile, splits=splits, out=out)
                assert_like_torch(out, a, b)
    finally:
        ext()._set_gemm_wgmma_knobs()
    # The default, auto, swaps the planner's choices (the same bits as on) but not where C^T's
    # rows would be stored element by element while both operands' rows are aligned, and runs a
    # forced tile as given (the same bits as off).
    a, b = operands(1000, 1104, 1024, "tt", dtype)
    assert ext()._cuda_wgmma_swaps(a, b)
    assert not ext()._cuda_wgmma_swaps(a, b, out=poisoned(1000, 1104, dtype, 3))
    assert not ext()._cuda_wgmma_swaps(*operands(1000, 1100, 1024, "tt", dtype))
    assert ext()._cuda_wgmma_swaps(*operands(1001, 1100, 1024, "tt", dtype))
    assert not ext()._cuda_wgmma_swaps(a.contiguous(), b)
    assert not ext()._cuda_wgmma_swaps(a.float(), b.float())
    for swap in ("on", "off"):
        ext()._set_gemm_wgmma_knobs(swap=swap)
        try:
            planned = lltm_ext.gemm(a, b)
            forced = ext()._gemm_tensor_core(a, b, "wgmma", tile=128)
            swaps = ext()._cuda_wgmma_swaps(a, b)
        finally:
            ext()._set_gemm_wgmma_knobs()
        assert swaps == (swap == "on")
        if swap == "on":
            assert torch.equal(lltm_ext.gemm(a, b), planned)
        else:
            assert torch.equal(ext()._gemm_tensor_core(a, b, "wgmma", tile=128), forced)
    for layout in ("nn", "nt", "tn"):
        a, b = operands(300, 520, 700, layout, dtype)
        off = lltm_ext.gemm(a, b)
        ext()._set_gemm_wgmma_knobs(swap="on")
        try:
            assert torch.equal(lltm_ext.gemm(a, b), off), layout
        finally:
            ext()._set_gemm_wgmma_knobs()


def stream_k_split(m, n, k, sms, tf32=False, how="auto"):
    """(whole-tile tiles, Stream-K tiles, Stream-K blocks) of the 256-wide tiles on `sms` SMs."""
    ext()._set_gemm_wgmma_knobs(stream_k=how)
    try:
        return ext()._cuda_stream_k(m, n, k, tf32, sms)
    finally:
        ext()._set_gemm_wgmma_knobs()


def test_stream_k_rule():
    """Stream-K takes a last round that fills at most 80% of the SMs, where K times the share it
    leaves idle is 2000 or more (TF32's K counting twice); whole rounds stay whole tiles; forced
    on, it takes the last round (or every tile where they are fewer than the SMs), never a range
    past 2^31 steps; off, nothing."""
    try:
        # 4096 x 13824: 32 x 54 = 1728 tiles on 132 SMs, the last round 12 tiles (9%).
        assert stream_k_split(4096, 13824, 5120, 132) == (1716, 12, 132)
        assert stream_k_split(4096, 13824, 5120, 132, how="off") == (1728, 0, 0)
        assert stream_k_split(4096, 13824, 2000, 132) == (1728, 0, 0)  # 0.91 x 2000 < 2000
        # 8192 x 4096: 1024 tiles, the last round 100 of 132 (76%): K 14336 takes it, 4096 not
        # (0.24 x 4096 = 983), unless in TF32 (1966: still short of 2000), 8192 in TF32 does.
        assert stream_k_split(8192, 4096, 14336, 132) == (924, 100, 132)
        assert stream_k_split(8192, 4096, 4096, 132) == (1024, 0, 0)
        assert stream_k_split(8192, 4096, 4096, 132, tf32=True) == (1024, 0, 0)
        assert stream_k_split(8192, 4096, 8192, 132, tf32=True) == (924, 100, 132)
        # 3000 x 5000: 480 tiles, the last round 84 (64%): 0.36 x 2000 too little.
        assert stream_k_split(3000, 5000, 2000, 132) == (480, 0, 0)
        # The last round 116 of 132 (88%) and 124 (94%): whole tiles at any K.
        assert stream_k_split(4096, 4096, 14336, 132) == (512, 0, 0)
        assert stream_k_split(2048, 4096, 65536, 132) == (256, 0, 0)
        # Whole rounds only, or fewer tiles than SMs (the planner splits K there): none.
        assert stream_k_split(128 * 12, 256 * 11, 4096, 132) == (132, 0, 0)
        assert stream_k_split(1000, 1000, 4096, 132) == (32, 0, 0)
        # Forced on: the last round, all of a full one, every tile of a few; blocks <= steps.
        assert stream_k_split(2048, 4096, 4096, 132, how="on") == (132, 124, 132)
        assert stream_k_split(128 * 12, 256 * 11, 4096, 132, how="on") == (0, 132, 132)
        assert stream_k_split(128, 256, 192, 132, how="on") == (0, 1, 3)
        assert stream_k_split(128, 256, 2**37, 132, how="on") == (1, 0, 0)
    except RuntimeError as e:
        if "no CUDA kernels" in str(e):
            pytest.skip("a build without CUDA kernels")
        raise


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", TC_DTYPES.values(), ids=TC_DTYPES.keys())
def test_wgmma_stream_k(dtype):
    """The 256-wide wgmma tile with Stream-K forced on (``_set_gemm_wgmma_knobs(stream_k="on")``):
    the last round's K steps cut into one range a block, a tile's parts summed by the block that
    holds its last step. One tile over as many blocks as it has steps (K = 8192), a few tiles over
    many blocks, whole rounds then a partial one (a tile over several blocks, one step each), a
    full round alone, tiles cut by M and N, odd N, M <= 64 (whole tiles: stages of 64 rows), a K
    of one step; every layout; like torch into a NaN-poisoned output, the same bits twice; and
    through lltm_ext.gemm where the rule takes it (3000 x 5000 x 2000)."""
    if not tc_runs("wgmma"):
        pytest.skip("the wgmma kernel does not run here (a Hopper GPU and sm_90a code)")
    shapes = [(128, 256, 8192), (300, 520, 3000), (1500, 3000, 520), (1536, 2816, 200)]
    shapes += [(200, 87, 1000), (40, 200, 1000), (136, 72, 8)]
    with tf32_if(dtype):
        # Blocks alone (rows inside sectors would take clusters of two, which Stream-K leaves).
        ext()._set_gemm_wgmma_knobs(cluster=1, stream_k="on")
        try:
            for layout in LAYOUTS:
                for m, n, k in shapes:
                    a, b = operands(m, n, k, layout, dtype)
                    out = poisoned(m, n, dtype)
                    ext()._gemm_tensor_core(a, b, "wgmma", tile=256, splits=1, out=out)
                    assert_like_torch(out, a, b)
                    twice = ext()._gemm_tensor_core(a, b, "wgmma", tile=256, splits=1)
                    assert torch.equal(out, twice), (m, n, k, layout)
        finally:
            ext()._set_gemm_wgmma_knobs()
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        a, b = operands(3000, 5000, 2000, "nn", dtype)
        if stream_k_split(3000, 5000, 2000, sms, dtype == torch.float32)[1] > 0:
            out = poisoned(3000, 5000, dtype)
            lltm_ext.gemm(a, b, out=out)
            assert_like_torch(out, a, b)
            assert torch.equal(out, lltm_ext.gemm(a, b))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", TC_DTYPES.values(), ids=TC_DTYPES.keys())
@pytest.mark.parametrize("switch", ["overlap", "short_a", "cluster"])
def test_wgmma_switches_change_no_bit(dtype, switch):
    """The wgmma kernel's switches at their defaults and changed: the consumers with one group in
    flight across K steps or waiting for each step's; stages of 64 rows of A where M <= 64 (the
    second consumer idle) or 128; blocks alone or in clusters of two sharing B (tile rows even
    and odd in number, more pairs than one round; widths off the 64-column grid, whose halves of
    a K-major B overlap, and 256-row tiles too). The same products in the same order, so the
    same bits; every tile width and layout, K of one step and of many, with and without K
    splits, M of 1 to 64 and past it."""
    if not tc_runs("wgmma"):
        pytest.skip("the wgmma kernel does not run here (a Hopper GPU and sm_90a code)")
    shapes = [(256, 512, 64), (136, 72, 1000), (1000, 1100, 1024), (1, 264, 520), (40, 200, 1000)]
    shapes += [(64, 512, 4096), (65, 136, 200), (300, 520, 700), (2100, 4100, 72)]
    # cluster: never (1) against wherever the kernel can (2); the others: default against off.
    base = {"cluster": 1} if switch == "cluster" else {}
    changed = {"cluster": 2} if switch == "cluster" else {switch: False}
    runs = [(64, 1, 128), (128, 1, 128), (256, 1, 128), (128, 3, 128)]
    if switch == "cluster":
        runs += [(192, 1, 128), (192, 2, 128), (144, 1, 128), (168, 2, 128)]
        runs += [(t, s, 256) for t in TALL_TILES for s in (1, 3) if dtype != torch.float32]
    with tf32_if(dtype):
        for layout in LAYOUTS:
            for m, n, k in shapes:
                a, b = operands(m, n, k, layout, dtype)
                for tile, splits, tile_m in runs:
                    if (tile_m == 256 or tile % 64 != 0) and layout[1] == "n":
                        continue  # widths off the 64-column grid read B K-major only
                    run = dict(tile=tile, splits=splits, tile_m=tile_m)
                    outs = []
                    for knobs in (base, changed):
                        ext()._set_gemm_wgmma_knobs(**knobs)
                        try:
                            out = poisoned(m, n, dtype)
                            ext()._gemm_tensor_core(a, b, "wgmma", out=out, **run)
                        finally:
                            ext()._set_gemm_wgmma_knobs()
                        outs.append(out)
                    on, off = outs
                    assert torch.equal(on, off), (m, n, k, layout, tile, splits, tile_m)
                    assert_like_torch(on, a, b)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", TC_DTYPES.values(), ids=TC_DTYPES.keys())
@pytest.mark.parametrize("layout", LAYOUTS)
def test_wgmma_after_copies(dtype, layout):
    """The wgmma kernel on operands TMA cannot read as they are: copied first (aligned rows;
    tf32: K-major), every layout, tails; a NaN-poisoned output fully written."""
    if not tc_runs("wgmma"):
        pytest.skip("the wgmma kernel does not run here (a Hopper GPU and sm_90a code)")
    with tf32_if(dtype):
        # Offsets 0, 2 and 3: the row copy's 16- (where rows allow), 4- and 2-byte loads (tf32:
        # 16 and 4); rows of 4104: more 16-byte chunks than a block has threads.
        for m, n, k in SHAPES + [(1000, 1100, 521), (24, 4104, 40)]:
            for offset in (0, 2, 3):
                a, b = operands(m, n, k, layout, dtype, offset)
                out = poisoned(m, n, dtype)
                ext()._gemm_tensor_core(a, b, "wgmma", copy=True, out=out)
                assert_like_torch(out, a, b)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_auto_plan_copies_rows_inside_sectors(dtype, layout):
    """lltm_ext.gemm on 16-byte aligned rows that start inside sectors (sides of 8 mod 16
    elements), where the planner copies them for the wgmma kernel or reads B in place in
    clusters of two blocks: the plan taken, the product like torch's, out= too."""
    if not tc_runs("wgmma"):
        pytest.skip("the wgmma kernel does not run here (a Hopper GPU and sm_90a code)")
    for m, n, k in ((1032, 4104, 1032), (2056, 2056, 1032)):
        a, b = operands(m, n, k, layout, dtype)
        kernel, *_, _copy_a, copy_b, _us, _words, cluster = ext()._cuda_tc_plan(a, b)
        if torch.cuda.get_device_properties(0).multi_processor_count >= 100:
            assert kernel == "wgmma" and (copy_b or cluster == 2), (m, n, k, layout)
        assert_like_torch(lltm_ext.gemm(a, b), a, b)
        out = poisoned(m, n, dtype)
        lltm_ext.gemm(a, b, out=out)
        assert_like_torch(out, a, b)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", TC_DTYPES.values(), ids=TC_DTYPES.keys())
def test_auto_plan_at_random_shapes(dtype):
    """lltm_ext.gemm (the planner's choice) at random shapes drawn as the sweep bench draws them
    (log-uniform sizes to 12000, any layout, unaligned rows), out= too: within twice torch.mm's
    error; float32 really TF32 where TF32 is allowed."""
    rng = random.Random(11)
    with tf32_if(dtype):
        for _ in range(40):
            m, n, k = (int(math.exp(rng.uniform(0, math.log(3001)))) for _ in range(3))
            layout = rng.choice(LAYOUTS)
            a, b = operands(m, n, k, layout, dtype)
            assert_like_torch(lltm_ext.gemm(a, b), a, b)
            out = poisoned(m, n, dtype)
            lltm_ext.gemm(a, b, out=out)
            assert_like_torch(out, a, b)
        if dtype == torch.float32:
            a, b = operands(301, 203, 4001, "nt", dtype)
            assert rel_err(lltm_ext.gemm(a, b), ref_mm(a, b)) > 1e-5, "exact float32, not TF32"


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", TC_DTYPES.values(), ids=TC_DTYPES.keys())
def test_auto_plan_gradients_unaligned(dtype):
    """Autograd through the planner's paths on odd sizes: the backward's transposed views
    (unaligned rows) against float64."""
    with tf32_if(dtype):
        a = torch.randn(97, 203, device="cuda", dtype=dtype, requires_grad=True)
        b = torch.randn(203, 51, device="cuda", dtype=dtype, requires_grad=True)
        g = torch.randn(97, 51, device="cuda", dtype=dtype)
        lltm_ext.gemm(a, b).backward(g)
        assert_like_torch(a.grad, g, b.detach().t())
        assert_like_torch(b.grad, a.detach().t(), g)


# ----------------------------------------------------------------------------------------------
# Products with a small side (M or N at most 4): the matrix-vector kernels, every dtype.
# ----------------------------------------------------------------------------------------------

# dtype, and whether float32 matmuls may use TF32 (then a small side of 2 to 4 with the large
# operand M- / N-contiguous runs on the tensor cores, as torch.mm's cuBLAS does at such shapes;
# the rest stays exact, on the matrix-vector kernels).
GEMV_CASES = {
    "fp64": (torch.float64, False),
    "fp32": (torch.float32, False),
    "tf32": (torch.float32, True),
    "bf16": (torch.bfloat16, False),
    "fp16": (torch.float16, False),
}
# Relative error bounds against float64 (tests/test_gemm.py's REL_BOUND): float accumulation;
# TF32's operand rounding.
GEMV_BOUND = {torch.float64: 1e-13, torch.float32: 4e-6, torch.float16: 1e-3, torch.bfloat16: 6e-3}
GEMV_TF32_BOUND = 2e-3


@pytest.mark.cuda
@pytest.mark.parametrize("case", GEMV_CASES.values(), ids=GEMV_CASES.keys())
@pytest.mark.parametrize("layout", LAYOUTS)
def test_small_side(case, layout):
    """M or N of 1 to 4 (the other sides 1 to 20000, K up to 20000: K splits where the large side
    is short; a short K over many rows, a few lanes per row), every layout, operands 16-byte
    aligned or not (rows of every misalignment), a NaN-poisoned out=: within the dtype's
    float-accumulation bound of float64 (TF32's where allowed), the same bits twice."""
    dtype, tf32 = case
    shapes = [(1, 1, 1), (1, 7, 3), (3, 1, 1001), (4, 2000, 777), (2000, 3, 777), (1, 20000, 9)]
    shapes += [(2, 33, 20000), (129, 4, 5000), (1, 1, 9999), (4, 4, 4), (1, 300, 8195)]
    # Short rows shared by a few lanes each (1, 2, 4, ... threads per row of the row kernel).
    shapes += [(3, 10250, 13), (2, 3000, 150), (4100, 4, 40)]
    bound = GEMV_TF32_BOUND if tf32 else GEMV_BOUND[dtype]
    with tf32_if(torch.float32 if tf32 else torch.float16):
        for m, n, k in shapes:
            for offset in (0, 1, 3):
                a, b = operands(m, n, k, layout, dtype, offset)
                out = poisoned(m, n, dtype)
                lltm_ext.gemm(a, b, out=out)
                err = rel_err(out, ref_mm(a, b))
                assert err <= bound, f"{m}x{n}x{k} {layout} {offset}: {err:.2e}"
                assert torch.equal(out, lltm_ext.gemm(a, b))


@pytest.mark.cuda
def test_small_side_gradients():
    """Autograd with a batch of one: the backward's products (a 1 x N by N x K, a K x 1 by 1 x N)
    against float64."""
    a = torch.randn(1, 300, device="cuda", dtype=torch.float64, requires_grad=True)
    b = torch.randn(300, 77, device="cuda", dtype=torch.float64, requires_grad=True)
    g = torch.randn(1, 77, device="cuda", dtype=torch.float64)
    lltm_ext.gemm(a, b).backward(g)
    torch.testing.assert_close(a.grad.cpu(), ref_mm(g, b.detach().t()))
    torch.testing.assert_close(b.grad.cpu(), ref_mm(a.detach().t(), g))


# ----------------------------------------------------------------------------------------------
# The short-K kernel (a K of a few dozen beside a large output).
# ----------------------------------------------------------------------------------------------

SHORT_K_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# K of 1, one partial group of 4, one staged chunk (32) and one past it, two chunks and past; M and
# N at and past the 64 x 128 tile's edges, 5 to 1001 (rows of every length modulo 16 bytes).
SHORT_K_SHAPES = [
    (5, 5, 1),
    (333, 70, 8),
    (70, 333, 16),
    (64, 128, 32),
    (65, 129, 33),
    (127, 300, 3),
    (1000, 7, 64),
    (6, 1001, 100),
    (300, 261, 31),
    (2100, 1100, 37),  # more tiles than the persistent grid (2 per SM): blocks take several
    (4100, 700, 70),  # several tiles of five K chunks (16 each) each
]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", SHORT_K_DTYPES.values(), ids=SHORT_K_DTYPES.keys())
@pytest.mark.parametrize("layout", LAYOUTS)
def test_short_k(dtype, layout):
    """The short-K kernel forced (`_gemm_short_k`), every layout, operands and a NaN-poisoned out=
    at every misalignment: within float accumulation's bound of float64 (float32 exact whatever
    the TF32 setting), every element written, the same bits twice; and lltm_ext.gemm at the same
    shapes (the short-K kernel up to K = 8 for the half types, 16 for exact float32, 64 on
    many tiles)."""
    with tf32_if(torch.float16):  # TF32 off: lltm_ext.gemm's float32 is exact here
        for m, n, k in SHORT_K_SHAPES:
            for offset in (0, 1, 3):
                a, b = operands(m, n, k, layout, dtype, offset)
                out = poisoned(m, n, dtype, offset)
                ext()._gemm_short_k(a, b, out=out)
                err = rel_err(out, ref_mm(a, b))
                assert err <= GEMV_BOUND[dtype], f"{m}x{n}x{k} {layout} {offset}: {err:.2e}"
                assert torch.equal(out, ext()._gemm_short_k(a, b))
                out = poisoned(m, n, dtype, offset)  # the public API (the short-K kernel or not)
                lltm_ext.gemm(a, b, out=out)
                assert rel_err(out, ref_mm(a, b)) <= GEMV_BOUND[dtype], (m, n, k, layout, offset)


@pytest.mark.cuda
@pytest.mark.parametrize("layout", LAYOUTS)
def test_short_k_wide_float32_through_gemm(layout):
    """Exact float32 past K = 16 on an output of many tiles (4100 x 2000: 1040 of 64 x 128, over
    1.5 per SM on any GPU of up to 693 SMs) takes the short-K kernel (the profiler sees it, and
    lltm_ext.gemm's bits are the forced kernel's), within float accumulation's bound of float64;
    past K = 64, or on one tile, other kernels run."""
    from lltm_ext.explain import _ran

    with tf32_if(torch.float16):  # TF32 off: exact float32
        for m, n, k, offset in ((4100, 2000, 17, 0), (4100, 2000, 40, 1), (4100, 2000, 64, 0)):
            a, b = operands(m, n, k, layout, torch.float32, offset)
            out = poisoned(m, n, torch.float32, offset)
            assert _ran(lambda a=a, b=b, out=out: lltm_ext.gemm(a, b, out=out)) == [
                "short_k_kernel"
            ], (m, n, k, layout)
            assert torch.equal(out, ext()._gemm_short_k(a, b)), (m, n, k, layout)
            assert rel_err(out, ref_mm(a, b)) <= GEMV_BOUND[torch.float32], (m, n, k, layout)
        for m, n, k in ((4100, 2000, 65), (70, 100, 40)):
            a, b = operands(m, n, k, layout, torch.float32)
            assert "short_k_kernel" not in _ran(lambda a=a, b=b: lltm_ext.gemm(a, b)), (m, n, k)


# The mma form: K of 1, within one k16 step, at and past 16 / 32, 41, 64; M and N at and past the
# 128 x 128 tile's edges, rows of C of every length modulo 16 bytes.
SHORT_K_MMA_SHAPES = [
    (5, 5, 1),
    (128, 128, 9),
    (129, 127, 16),
    (300, 261, 17),
    (70, 333, 32),
    (257, 130, 33),
    (1000, 77, 41),
    (31, 1001, 64),
    (200, 389, 49),
]


# The small-product kernel: K of 1, within and past one k16 step, past 8 warps' steps (128), at its
# limit (512); M and N at and past the 32 x 32 tile's edges.
SMALL_MMA_SHAPES = [
    (5, 5, 1),
    (32, 32, 9),
    (33, 31, 17),
    (130, 194, 54),
    (61, 345, 97),
    (500, 11, 161),
    (7, 300, 129),
    (91, 30, 512),
    (256, 256, 24),
]


TC_FORCED_SHAPES = {"mma": SHORT_K_MMA_SHAPES, "small": SMALL_MMA_SHAPES}


@pytest.mark.cuda
@pytest.mark.parametrize("kernel", TC_FORCED_SHAPES.keys())
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_short_k_mma_and_small(kernel, dtype, layout):
    """The mma short-K kernel and the small-product kernel forced (`_gemm_short_k(kernel=...)`),
    every layout, operands and a NaN-poisoned out= at every misalignment (C's rows shifted 0-7
    elements from their 16-byte boundaries): within float accumulation's bound of float64, every
    element written, the same bits twice; and lltm_ext.gemm at the same shapes (the small-product
    kernel takes outputs up to 2^17 elements from a K of 9 to 256, 2^14 to 512)."""
    for m, n, k in TC_FORCED_SHAPES[kernel]:
        for offset in (0, 1, 3):
            a, b = operands(m, n, k, layout, dtype, offset)
            out = poisoned(m, n, dtype, offset)
            ext()._gemm_short_k(a, b, out=out, kernel=kernel)
            err = rel_err(out, ref_mm(a, b))
            assert err <= GEMV_BOUND[dtype], f"{m}x{n}x{k} {layout} {offset}: {err:.2e}"
            assert torch.equal(out, ext()._gemm_short_k(a, b, kernel=kernel))
            out = poisoned(m, n, dtype, offset)
            lltm_ext.gemm(a, b, out=out)
            assert rel_err(out, ref_mm(a, b)) <= GEMV_BOUND[dtype], (m, n, k, layout, offset)


# (M, N, K, offset): shapes lltm_ext.gemm gives the mma short-K kernel, and (last) one it does not
# (K > 16 with every row 16-byte aligned: the planner's kernels).
SHORT_K_MMA_ROUTED = [
    (1100, 1001, 24, 1),
    (1031, 1100, 9, 3),
    (4200, 4100, 3, 1),
    (1024, 1024, 40, 0),
]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("case", SHORT_K_MMA_ROUTED, ids=lambda c: "x".join(map(str, c[:3])))
def test_short_k_mma_through_gemm(dtype, case):
    """Outputs of 2^20 elements and more (2^24 at K <= 3) from a K up to 64 through lltm_ext.gemm,
    every layout, out= NaN-poisoned: within float accumulation's bound of float64."""
    m, n, k, offset = case
    for layout in LAYOUTS:
        a, b = operands(m, n, k, layout, dtype, offset)
        out = poisoned(m, n, dtype, offset)
        lltm_ext.gemm(a, b, out=out)
        assert rel_err(out, ref_mm(a, b)) <= GEMV_BOUND[dtype], (case, layout)


@pytest.mark.cuda
@pytest.mark.parametrize("kernel", ["mma", "small"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_short_k_mma_leading_dimensions(layout, kernel):
    """Operands that are column slices of wider matrices (leading dimensions past their rows, bases
    off 16 bytes), on the mma short-K and small-product kernels: each steps by the strides given."""
    m, n, k = 300, 200, 40

    def wide(rows, cols, pad, start):
        full = torch.randn(rows, cols + pad, device="cuda", dtype=torch.bfloat16)
        return full[:, start : start + cols]

    a = wide(k, m, 37, 3).t() if layout[0] == "t" else wide(m, k, 41, 5)
    b = wide(n, k, 19, 1).t() if layout[1] == "t" else wide(k, n, 403, 7)
    out = ext()._gemm_short_k(a, b, kernel=kernel)
    assert rel_err(out, ref_mm(a, b)) <= GEMV_BOUND[torch.bfloat16]
    assert rel_err(lltm_ext.gemm(a, b), ref_mm(a, b)) <= GEMV_BOUND[torch.bfloat16]


@pytest.mark.cuda
def test_short_k_rejects_what_it_cannot_run():
    a = torch.randn(8, 2, device="cuda", dtype=torch.float64)
    with pytest.raises(RuntimeError, match="float32, float16 or bfloat16"):
        ext()._gemm_short_k(a, a.t())
    a = torch.randn(8, 2, device="cuda")
    with pytest.raises(RuntimeError, match="contiguous"):
        ext()._gemm_short_k(a, a.t(), out=torch.empty(8, 16, device="cuda")[:, :8])
    assert ext()._gemm_short_k(a[:, :0], a[:, :0].t()).abs().sum().item() == 0  # K = 0: zeros
    with pytest.raises(RuntimeError, match="float16 or bfloat16, but got float32"):
        ext()._gemm_short_k(a, a.t(), kernel="mma")
    h = torch.randn(8, 65, device="cuda", dtype=torch.float16)
    with pytest.raises(RuntimeError, match="K up to 64, but got K = 65"):
        ext()._gemm_short_k(h, h.t(), kernel="mma")
    h = h[:, :0]
    assert ext()._gemm_short_k(h, h.t(), kernel="mma").abs().sum().item() == 0
    with pytest.raises(RuntimeError, match="'simt', 'mma' or 'small', but got 'wide'"):
        ext()._gemm_short_k(h, h.t(), kernel="wide")
    h = torch.randn(8, 513, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="takes K up to 512, but got K = 513"):
        ext()._gemm_short_k(h, h.t(), kernel="small")
    with pytest.raises(RuntimeError, match="small-product kernel takes float16 or bfloat16"):
        ext()._gemm_short_k(a, a.t(), kernel="small")


@pytest.mark.cuda
@pytest.mark.large
@pytest.mark.parametrize("kernel", ["simt", "mma", "small"])
def test_short_k_over_2_31_elements_large(kernel):
    """C of 2^31 + 2^15 elements (bfloat16, 4 GiB) from a K of 1 (the SIMT short-K kernel) and 24
    (its mma form, the small-product kernel forced): offsets into C past 2^31."""
    m, n = 2**16 + 1, 2**15
    free, _ = torch.cuda.mem_get_info()
    if free < 3 * m * n * 2:
        pytest.skip("needs ~13 GiB of free GPU memory")
    k = 1 if kernel == "simt" else 24
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = ext()._gemm_short_k(a, b, kernel=kernel)
    rows = torch.tensor([0, 1, m // 2, m - 2, m - 1], device="cuda")
    err = rel_err(c[rows], ref_mm(a[rows], b))
    assert err <= GEMV_BOUND[torch.bfloat16], err


@pytest.mark.cuda
def test_short_k_with_tf32_allowed_is_exact():
    """Where TF32 is allowed, a K of at most 3 runs on the short-K kernel: exact float32 (a K of 1
    to 3 rounds nothing on the way), within float accumulation's bound of float64."""
    with tf32_if(torch.float32):
        for layout in LAYOUTS:
            a, b = operands(300, 257, 3, layout, torch.float32, 1)
            err = rel_err(lltm_ext.gemm(a, b), ref_mm(a, b))
            assert err <= GEMV_BOUND[torch.float32], (layout, err)
