"""lltm_ext.explain: the plan it reports is the one the call runs.

On CUDA each kernel family of the sequence is forced (LLTM_EXT_SEQUENCE_PATH and its kin) and
left to auto at shapes where each is chosen; explain must name that family, and the kernels its
plan lists must be among those the profiler sees when the call runs (forward and backward), so a
plan that drifts from the dispatch fails here. On the CPU, each op's one path."""

from __future__ import annotations

import re

import pytest
import torch

import lltm_ext
from lltm_ext.ops._lltm_reference import lltm_loop, lltm_reference

CUDA_MARK = pytest.mark.cuda


def sequence_args(steps, batch, features, state, device, dtype=torch.float32):
    x = torch.randn(steps, batch, features, device=device, dtype=dtype)
    w = torch.randn(3 * state, state + features, device=device, dtype=dtype) / state**0.5
    b = torch.randn(3 * state, device=device, dtype=dtype, requires_grad=True)
    return x.requires_grad_(), w.requires_grad_(), b


def test_cpu_paths():
    x, w, b = sequence_args(5, 3, 4, 6, "cpu")
    seq = lltm_ext.explain(lltm_ext.lltm_sequence, x, w, b)
    assert seq.path == "cpu" and seq.shape == {"T": 5, "B": 3, "I": 4, "S": 6}
    assert "float32" in seq.precision and seq.kernels == [] and seq.ran is None
    assert str(seq).startswith("lltm_sequence on cpu, float32, T=5 B=3 I=4 S=6: cpu")
    by_name = lltm_ext.explain("lltm_sequence", x.transpose(0, 1), w, b, batch_first=True)
    assert by_name.shape == seq.shape
    cell = lltm_ext.explain("lltm", x[0], w, b, torch.randn(3, 6), torch.randn(3, 6))
    assert cell.path == "cpu" and cell.shape == {"B": 3, "I": 4, "S": 6}
    mm = lltm_ext.explain("gemm", torch.randn(64, 32), torch.randn(32, 48))
    assert mm.path == "cpu" and mm.ran and "path" in mm.ran[0]
    assert lltm_ext.explain("relu", torch.randn(7)).shape == {"numel": 7}
    assert lltm_ext.explain("gemm", torch.randn(2, 2), torch.randn(2, 2)).as_dict()["op"] == "gemm"


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA_MARK)])
def test_sequence_tf32_and_autocast_precision(device):
    """The call's tf32=True and autocast's float32 state say TF32 on CUDA (the plan under TF32);
    on the CPU (no TF32 there) autocast's float32 state at this size takes the mixed loop,
    products in bfloat16; a state in the autocast dtype runs in it."""
    x, w, b = sequence_args(20, 96, 64, 384, device)
    asked = lltm_ext.explain(lltm_ext.lltm_sequence, x, w, b, tf32=True, run=True)
    assert ("products in TF32" in asked.precision) == (device == "cuda"), asked.precision
    with torch.autocast(device, dtype=torch.bfloat16):
        auto = lltm_ext.explain(lltm_ext.lltm_sequence, x, w, b)
        lower = lltm_ext.explain(lltm_ext.lltm_sequence, x.to(torch.bfloat16), w, b)
    assert auto.precision.startswith(
        "float32 state; products in "
        + ("TF32" if device == "cuda" else "bfloat16 (each rounded to it")
    ), auto.precision
    assert auto.dtype == "float32" and lower.dtype == "bfloat16"
    if device == "cuda":  # the TF32 plan: one pass past 64 rows, as with torch's "high" precision
        torch.set_float32_matmul_precision("high")
        try:
            high = lltm_ext.explain(lltm_ext.lltm_sequence, x, w, b)
        finally:
            torch.set_float32_matmul_precision("highest")
        assert (auto.path, auto.product) == (high.path, high.product) == (asked.path, asked.product)


def test_cpu_autocast_mixed_loop_from_its_size(monkeypatch):
    """Under CPU autocast a float32 state takes the mixed loop (bfloat16 products) from a step's
    product of 2^17 multiply-adds (B S 3S), below it float32 products on the rounded operands;
    LLTM_EXT_SEQUENCE_MIXED=off keeps float32 at every size, products takes the mixed loop."""
    cases = {(2, 16): "float32 on the", (4, 104): "float32 on the", (4, 105): "bfloat16 (each"}
    for (batch, state), words in cases.items():
        x, w, b = sequence_args(5, batch, 8, state, "cpu")
        with torch.autocast("cpu", dtype=torch.bfloat16):
            found = lltm_ext.explain(lltm_ext.lltm_sequence, x, w, b, run=True)
        assert found.precision.startswith("float32 state; products in " + words), found.precision
    for setting, size, words in (
        ("off", 105, "float32 on the"),
        ("products", 16, "bfloat16 (each"),
    ):
        x, w, b = sequence_args(5, 4, 8, size, "cpu")
        monkeypatch.setenv("LLTM_EXT_SEQUENCE_MIXED", setting)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            found = lltm_ext.explain(lltm_ext.lltm_sequence, x, w, b, run=True)
        assert found.precision.startswith("float32 state; products in " + words), found.precision


@CUDA_MARK
@pytest.mark.parametrize(
    "size", [(20, 11, 16, 400), (20, 44, 16, 358), (20, 2, 16, 736), (20, 64, 16, 384)], ids=str
)
def test_cuda_float32_with_tf32_takes_the_tiled_kernels_in_one_pass(size):
    """float32 with TF32 allowed at S > 320 (past B = 44 below S = 640): the tiled kernels before
    the wide ones, in one TF32 pass (they run four chains of mma either way); at torch's default the
    wide kernels in three passes (docs/decisions_sequence.md#half-tiled-before-wide), or the
    cuBLAS path at small batches from S = 512 on
    (docs/decisions_sequence.md#float32-small-batch-cublas)."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("the tiled kernels need an sm_90 GPU")
    args = sequence_args(*size, "cuda")
    asked = lltm_ext.explain(lltm_ext.lltm_sequence, *args, tf32=True, run=True)
    assert (asked.path, asked.product) == ("tiled", "tf32"), str(asked)
    _ran_contains(asked)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        under_autocast = lltm_ext.explain(lltm_ext.lltm_sequence, *args)
    if size[-1] > 512:  # autocast's float32 state there: the half types' cuBLAS path (below)
        assert under_autocast.path == "cublas", str(under_autocast)
    else:
        assert (under_autocast.path, under_autocast.product) == ("tiled", "tf32"), str(
            under_autocast
        )
    default = lltm_ext.explain(lltm_ext.lltm_sequence, *args, run=True)
    if size[1] <= 16 and size[-1] >= 512:  # float32-small-batch-cublas (below)
        assert default.path == "cublas", str(default)
    else:
        assert (default.path, default.product) == ("wide", "3xtf32"), str(default)


@CUDA_MARK
@pytest.mark.parametrize(
    "size",
    [(20, 45, 16, 300), (20, 48, 16, 600), (20, 56, 16, 520), (20, 64, 16, 512), (20, 72, 16, 384)],
    ids=str,
)
def test_cuda_half_types_take_the_tiled_kernels_before_the_wide_ones(size):
    """bfloat16 at 8 <= B <= 44, 256 < S <= 512 and from B = 45 at 256 < S < 640: the tiled
    kernels before the wide ones, and they run (docs/decisions_sequence.md#half-tiled-before-wide);
    at S = 256 and at B = 4 not."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("the tiled kernels need an sm_90 GPU")
    args = sequence_args(*size, "cuda", torch.bfloat16)
    found = lltm_ext.explain(lltm_ext.lltm_sequence, *args, run=True)
    assert found.path == "tiled" and "half-tiled-before-wide" in str(found), str(found)
    _ran_contains(found)
    steps, batch, features, state = size
    for b, s in ((batch, 256), (4, state)):
        outside = lltm_ext.explain(
            lltm_ext.lltm_sequence, *sequence_args(steps, b, features, s, "cuda", torch.bfloat16)
        )
        assert "half-tiled-before-wide" not in str(outside), str(outside)


@CUDA_MARK
@pytest.mark.parametrize("size", [(30, 1, 16, 520), (30, 16, 8, 640), (30, 39, 8, 1100)], ids=str)
def test_cuda_half_types_at_small_batches_past_512_take_the_cublas_path(monkeypatch, size):
    """bfloat16 and float16 at B < 40 past S = 512 run every step on cuBLAS's half products
    (docs/decisions_sequence.md#half-small-batch-cublas), and so does autocast's float32 state (the
    mixed call, products in bfloat16, d W too); B = 40 (the mid-batch rule's), S = 512, a call too
    short for the other kernels, a forced path and LLTM_EXT_SEQUENCE_MID_BATCH=off do not."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("the tiled kernels need an sm_90 GPU")
    steps, batch, features, state = size
    rule = "half-small-batch-cublas"
    for dtype in (torch.bfloat16, torch.float16):
        found = lltm_ext.explain(lltm_ext.lltm_sequence, *sequence_args(*size, "cuda", dtype))
        assert found.path == "cublas" and rule in str(found), str(found)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        mixed = lltm_ext.explain(lltm_ext.lltm_sequence, *sequence_args(*size, "cuda"), run=True)
    assert mixed.path == "cublas", str(mixed)
    # The rule is named where float32's plan (TF32 allowed) is another path; where that plan is the
    # cuBLAS path already (S = 1100, past the wide kernels' states), its notes are float32's.
    plain = lltm_ext.explain(lltm_ext.lltm_sequence, *sequence_args(*size, "cuda"), tf32=True)
    if plain.path != "cublas":
        assert rule in str(mixed), str(mixed)
    assert "products in bfloat16" in mixed.precision, mixed.precision
    assert "bfloat16" in mixed.weight_gradient, mixed.weight_gradient
    _ran_contains(mixed)
    others = ((steps, 40, features, state), (steps, batch, features, 512), (4, batch, 8, state))
    for other in others:
        args = sequence_args(*other, "cuda", torch.bfloat16)
        assert rule not in str(lltm_ext.explain(lltm_ext.lltm_sequence, *args))
    _rule_turned_off(monkeypatch, rule, sequence_args(*size, "cuda", torch.bfloat16), "tiled")


@CUDA_MARK
@pytest.mark.parametrize("size", [(30, 2, 16, 512), (30, 16, 8, 640), (30, 7, 8, 1100)], ids=str)
def test_cuda_float32_at_small_batches_from_512_takes_the_cublas_path(monkeypatch, size):
    """float32 at full precision at 2 <= B <= 16 from S = 512 on runs every step on the cuBLAS path
    (docs/decisions_sequence.md#float32-small-batch-cublas), and the call runs the kernels that
    plan lists; B = 1, B = 17, S = 511, a call too short for the other kernels, TF32, bfloat16, a
    forced path and LLTM_EXT_SEQUENCE_MID_BATCH=off do not name the rule."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("the rule was measured on sm_90")
    steps, batch, features, state = size
    rule = "float32-small-batch-cublas"
    found = lltm_ext.explain(lltm_ext.lltm_sequence, *sequence_args(*size, "cuda"), run=True)
    assert found.path == "cublas" and rule in str(found), str(found)
    _ran_contains(found)
    others = (
        (steps, 1, features, state),
        (steps, 17, features, state),
        (steps, batch, features, 511),
        (4, batch, 8, state),
    )
    for other in others:
        other_args = sequence_args(*other, "cuda")
        assert rule not in str(lltm_ext.explain(lltm_ext.lltm_sequence, *other_args))
    args = sequence_args(*size, "cuda")
    assert rule not in str(lltm_ext.explain(lltm_ext.lltm_sequence, *args, tf32=True))
    half_args = sequence_args(*size, "cuda", torch.bfloat16)
    assert rule not in str(lltm_ext.explain(lltm_ext.lltm_sequence, *half_args))
    _rule_turned_off(monkeypatch, rule, args, "cublas")


def _rule_turned_off(monkeypatch, rule, args, path):
    """LLTM_EXT_SEQUENCE_MID_BATCH=off, and a forced path, leave a small-batch rule unnamed."""
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_MID_BATCH", "off")
    assert rule not in str(lltm_ext.explain(lltm_ext.lltm_sequence, *args))
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_MID_BATCH", "auto")
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_PATH", path)
    forced = lltm_ext.explain(lltm_ext.lltm_sequence, *args)
    assert forced.path == path and rule not in str(forced), str(forced)


@CUDA_MARK
def test_cuda_mid_batches_at_large_states_leave_the_wide_and_tiled_kernels():
    """40 <= B <= 128 at large states (docs/decisions_sequence.md#mid-batch-steps): a call alone in
    bfloat16 or under autocast at S = 640 runs every step on cuBLAS's products (or the step
    kernels), float32 there keeps the tiled kernels; on LLTMSequence's streams float32 leaves them
    too at S = 640, and keeps the tiles for half the SMs at S = 518. (Hopper's float32 alone at S =
    640 from B = 64 takes the cuBLAS path with Hopper's step products instead: #step-wgmma-auto.)"""
    import lltm_ext.ops.lltm_sequence as seq_module

    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("the tiled kernels need an sm_90 GPU")
    kernels = ("tiled", "wide")
    bf16_args = sequence_args(40, 72, 8, 640, "cuda", torch.bfloat16)
    half = lltm_ext.explain(lltm_ext.lltm_sequence, *bf16_args)
    assert half.path not in kernels and "mid-batch-steps" in str(half), str(half)
    alone = lltm_ext.explain(lltm_ext.lltm_sequence, *sequence_args(40, 60, 8, 640, "cuda"))
    assert alone.path == "tiled", str(alone)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        mixed = lltm_ext.explain(lltm_ext.lltm_sequence, *sequence_args(40, 72, 8, 640, "cuda"))
    assert mixed.path not in kernels, str(mixed)
    with torch.cuda.stream(seq_module._side_stream(torch.device("cuda"), 0, 2)):
        shared = lltm_ext.explain(lltm_ext.lltm_sequence, *sequence_args(40, 72, 8, 640, "cuda"))
        assert shared.path not in kernels, str(shared)
        smaller = lltm_ext.explain(lltm_ext.lltm_sequence, *sequence_args(40, 72, 8, 518, "cuda"))
        assert smaller.path == "tiled", str(smaller)


@CUDA_MARK
def test_cuda_mid_batch_rule_turned_off(monkeypatch):
    """LLTM_EXT_SEQUENCE_MID_BATCH=off: a bfloat16 call at B = 72, S = 640, which the mid-batch
    rule sends to cuBLAS's products every step, keeps the wide or tiled kernels (the path another
    batch would take); auto is the rule; any other value is refused, naming the setting."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("the tiled kernels need an sm_90 GPU")
    args = sequence_args(40, 72, 8, 640, "cuda", torch.bfloat16)
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_MID_BATCH", "auto")
    ruled = lltm_ext.explain(lltm_ext.lltm_sequence, *args)
    assert ruled.path not in ("tiled", "wide") and "mid-batch-steps" in str(ruled), str(ruled)
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_MID_BATCH", "off")
    kept = lltm_ext.explain(lltm_ext.lltm_sequence, *args)
    assert kept.path in ("tiled", "wide") and "mid-batch-steps" not in str(kept), str(kept)
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_MID_BATCH", "never")
    with pytest.raises(RuntimeError, match="LLTM_EXT_SEQUENCE_MID_BATCH"):
        lltm_ext.lltm_sequence(*args)


@CUDA_MARK
def test_cuda_mid_batches_at_unaligned_states_keep_the_tiled_kernels_longer():
    """At a state that is not a multiple of 8 (docs/decisions_sequence.md#mid-batch-steps),
    cuBLAS's half products run slower kernels: a bfloat16 call alone keeps the tiled or wide
    kernels up to S = 896; on LLTMSequence's streams a call of 64 steps or more keeps the tiles
    for half the SMs below S = 640, a shorter one (a wavefront's chunk) leaves them, and from
    S = 640 every call does."""
    import lltm_ext.ops.lltm_sequence as seq_module

    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("the tiled kernels need an sm_90 GPU")
    kernels = ("tiled", "wide")

    def plan(steps, state):
        args = sequence_args(steps, 96, 8, state, "cuda", torch.bfloat16)
        return lltm_ext.explain(lltm_ext.lltm_sequence, *args)

    assert plan(80, 518).path in kernels, str(plan(80, 518))
    assert plan(80, 520).path not in kernels, str(plan(80, 520))
    assert plan(40, 902).path not in kernels, str(plan(40, 902))
    with torch.cuda.stream(seq_module._side_stream(torch.device("cuda"), 0, 2)):
        assert plan(80, 518).path == "tiled", str(plan(80, 518))
        shorter = plan(40, 518)
        assert shorter.path not in kernels and "mid-batch-steps" in str(shorter), str(shorter)
        assert plan(80, 646).path not in kernels, str(plan(80, 646))


def test_unknown_op():
    with pytest.raises(ValueError, match="`op` must be one of"):
        lltm_ext.explain("lstm", torch.randn(2, 2))


def _ran_contains(found):
    missing = [k for k in found.kernels if not any(k in name for name in found.ran)]
    assert not missing, f"planned {found.kernels}, but the call ran {found.ran}"


# (settings, (T, B, I, S), dtype, the family explain must name)
FORCED = {
    "small": ({"LLTM_EXT_SEQUENCE_PATH": "small"}, (5, 3, 4, 40), torch.float32, "small"),
    "cluster": ({"LLTM_EXT_SEQUENCE_PATH": "cluster"}, (5, 19, 4, 120), torch.float32, "cluster"),
    "grid": ({"LLTM_EXT_SEQUENCE_PATH": "grid"}, (5, 19, 4, 45), torch.float32, "steps"),
    "wide": ({"LLTM_EXT_SEQUENCE_PATH": "wide"}, (4, 5, 3, 300), torch.float32, "wide"),
    "tiled": ({"LLTM_EXT_SEQUENCE_PATH": "tiled"}, (3, 17, 3, 261), torch.bfloat16, "tiled"),
    "cublas": ({"LLTM_EXT_SEQUENCE_PATH": "cublas"}, (4, 5, 3, 40), torch.float32, "cublas"),
    "cublas-own": (
        {"LLTM_EXT_SEQUENCE_PATH": "cublas", "LLTM_EXT_SEQUENCE_STEP_GEMM": "own"},
        (4, 5, 3, 40),
        torch.float32,
        "cublas",
    ),
    "wgrad-fused": ({"LLTM_EXT_SEQUENCE_WGRAD": "fused"}, (5, 3, 4, 40), torch.float32, None),
    "wgrad-cublas": ({"LLTM_EXT_SEQUENCE_WGRAD": "cublas"}, (5, 3, 4, 40), torch.float32, None),
}


@CUDA_MARK
@pytest.mark.parametrize("case", list(FORCED))
def test_cuda_plan_is_what_runs_when_forced(monkeypatch, case):
    settings, size, dtype, family = FORCED[case]
    if torch.cuda.get_device_capability()[0] < 9 and family in ("cluster", "tiled"):
        pytest.skip("these kernels need an sm_90 GPU")
    for key, value in settings.items():
        monkeypatch.setenv(key, value)
    found = lltm_ext.explain("lltm_sequence", *sequence_args(*size, "cuda", dtype), run=True)
    if family is not None:
        assert found.path == family, str(found)
    if case == "cublas-own":
        assert "ours (SIMT" in found.detail and "step_gemm_kernel" in found.kernels
    if case == "wgrad-fused":
        assert "weight_grad_kernel" in found.kernels and found.weight_gradient.startswith("one")
    if case == "wgrad-cublas":
        assert not any("weight_grad" in k for k in found.kernels)
        assert "LLTM_EXT_SEQUENCE_WGRAD=cublas" in " ".join(found.notes)
    _ran_contains(found)


# Auto's choice at five shapes (T, B, I, S), float32 at torch's defaults: each a different family
# on a Hopper GPU; explain must list kernels that run, and say why the families before it lost.
AUTO_SHAPES = [
    (50, 8, 64, 64),
    (50, 64, 64, 128),
    (20, 16, 64, 512),
    (20, 256, 64, 1024),
    (10, 4, 32, 2048),
]


@CUDA_MARK
@pytest.mark.parametrize("size", AUTO_SHAPES, ids=[str(s) for s in AUTO_SHAPES])
def test_cuda_auto_plan_is_what_runs(size):
    found = lltm_ext.explain("lltm_sequence", *sequence_args(*size, "cuda"), run=True)
    _ran_contains(found)
    assert found.notes or found.path == "small"  # every family after the first says why
    print(found)


# (T, B, I, S, LLTM_EXT_SEQUENCE_SHORT_STEPS or None, whether the cuBLAS path runs): auto sends
# calls of fewer than 4 steps (8 at B >= 256 or S >= 512) past the cluster, wide and tiled kernels
# to the cuBLAS path; the setting moves the bound (1: never); the small-state kernels keep theirs.
SHORT_CASES = [
    (3, 64, 16, 200, None, True),
    (4, 64, 16, 200, None, False),
    (3, 64, 16, 200, "1", False),
    (7, 261, 16, 139, None, True),
    (8, 261, 16, 139, None, False),
    (7, 16, 16, 600, None, True),
    (5, 16, 16, 200, "6", True),
    (1, 3, 4, 40, None, False),
]


@CUDA_MARK
@pytest.mark.parametrize("case", SHORT_CASES, ids=str)
def test_cuda_short_calls_take_the_cublas_path(monkeypatch, case):
    steps, batch, features, state, setting, cublas = case
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("the bounds were set against the sm_90 kernels that auto takes there")
    if setting is not None:
        monkeypatch.setenv("LLTM_EXT_SEQUENCE_SHORT_STEPS", setting)
    args = sequence_args(steps, batch, features, state, "cuda")
    found = lltm_ext.explain("lltm_sequence", *args, run=True)
    assert (found.path == "cublas") == cublas, str(found)
    assert any("short-steps" in n for n in found.notes) == cublas, found.notes
    _ran_contains(found)
    # What it computes is the cell's: against the float64 loop.
    x, w, b = (t.detach().double() for t in args)
    zeros = x.new_zeros(batch, state)
    ref = lltm_loop(lltm_reference, x, w, b, zeros, zeros)
    out, _ = lltm_ext.lltm_sequence(*args)
    assert (out.double() - ref).abs().max().item() <= 1e-4


@CUDA_MARK
def test_cuda_step_wgmma_splits_past_one_wave():
    """Hopper's step product with fewer tiles than SMs (B = 192, S = 2048 forward: 96 tiles of
    128 x 128) splits k into more blocks than one wave holds, where the model says that finishes
    first, and the sequence stays the float64 loop's."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("Hopper's step product runs on sm_90 only")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    if not 100 <= sms < 192:
        pytest.skip(f"the case is 96 tiles on 100-191 SMs; this GPU has {sms}")
    steps, batch, features, state = 3, 192, 8, 2048
    args = sequence_args(steps, batch, features, state, "cuda")
    found = lltm_ext.explain("lltm_sequence", *args, run=True)
    _ran_contains(found)
    note = next(n for n in found.notes if "step product (forward, 192 x 6144 x 2048)" in n)
    splits = int(re.search(r"(\d+) splits of k", note).group(1))
    assert 96 * splits > sms, note
    x, w, b = (t.detach().double() for t in args)
    zeros = x.new_zeros(batch, state)
    ref = lltm_loop(lltm_reference, x, w, b, zeros, zeros)
    out, _ = lltm_ext.lltm_sequence(*args)
    assert (out.double() - ref).abs().max().item() <= 1e-4


@CUDA_MARK
@pytest.mark.parametrize("setting", ["tensor", "cublas"])
def test_cuda_input_products_plan_is_what_runs(monkeypatch, setting):
    """float32 at full precision: explain says where the products outside the time loop run (x
    W_i^T forward, d input = dG W_i backward), each way forced, and the kernels it lists ran."""
    if setting == "tensor" and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("Hopper's kernel runs on sm_90 only")
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_PATH", "cublas")
    monkeypatch.setenv("LLTM_EXT_SEQUENCE_INPUT_GEMM", setting)
    found = lltm_ext.explain("lltm_sequence", *sequence_args(6, 40, 12, 64, "cuda"), run=True)
    _ran_contains(found)
    if setting == "tensor":
        ours = "ours on Hopper's tensor cores (3xTF32)"
        assert found.input_products == f"x W_i^T: {ours}; d input = dG W_i: {ours}", str(found)
        assert "step_gemm_sm90_kernel" in found.kernels
    else:
        assert found.input_products.count("cuBLAS (exact float32)") == 2, str(found)
        assert "step_gemm_sm90_kernel" not in found.kernels
        assert "LLTM_EXT_SEQUENCE_INPUT_GEMM=cublas" in " ".join(found.notes)
    # With TF32 allowed the products run in one TF32 pass (cuBLAS): nothing to say.
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", True)
    tf32 = lltm_ext.explain("lltm_sequence", *sequence_args(6, 40, 12, 64, "cuda"))
    assert tf32.input_products == "", str(tf32)


# (B, S, on LLTMSequence's streams of calls at once, whether Hopper's step product runs)
MID_STATE_CASES = [
    (128, 768, False, True),
    (40, 1000, False, True),
    (48, 768, False, False),
    (128, 500, False, False),
    (128, 770, False, False),
    (128, 768, True, False),
]


@CUDA_MARK
@pytest.mark.parametrize("case", MID_STATE_CASES, ids=str)
def test_cuda_step_wgmma_at_mid_states(case):
    """float32 at full precision on Hopper, S <= 1024 (docs/decisions_sequence.md#step-wgmma-auto):
    from the rule's least batch (40 past S = 896, 64 from 640, 128 from 512), at S a multiple of 4
    and outside LLTMSequence's calls at once, auto runs the cuBLAS path with Hopper's step product
    both ways, and the sequence stays the float64 loop's; elsewhere no step product of Hopper's."""
    import lltm_ext.ops.lltm_sequence as seq_module

    batch, state, at_once, hopper = case
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("Hopper's step product runs on sm_90 only")
    steps, features = 12, 8
    args = sequence_args(steps, batch, features, state, "cuda")
    side = seq_module._side_stream(torch.device("cuda"), 0, 2) if at_once else None
    with torch.cuda.stream(side):
        found = lltm_ext.explain("lltm_sequence", *args, run=True)
        out, _ = lltm_ext.lltm_sequence(*args)
    _ran_contains(found)
    text = str(found)
    assert ("step-wgmma-auto" in text) == hopper, text
    assert any("Hopper's tensor cores" in n for n in found.notes) == hopper, text
    if hopper:
        assert found.path == "cublas", text
        for which, cols, depth in (("forward", 3 * state, state), ("backward", state, 3 * state)):
            product = f"step product ({which}, {batch} x {cols} x {depth})"
            assert any(product in n and "Hopper's tensor cores" in n for n in found.notes), text
    x, w, b = (t.detach().double() for t in args)
    zeros = x.new_zeros(batch, state)
    ref = lltm_loop(lltm_reference, x, w, b, zeros, zeros)
    assert (out.double() - ref).abs().max().item() <= 1e-4


@CUDA_MARK
@pytest.mark.parametrize("batch,path", [(16, "fused"), (1024, "cublas")])
def test_cuda_cell_plan_is_what_runs(batch, path):
    x, w, b = sequence_args(1, batch, 32, 128, "cuda")
    h, c = torch.randn(batch, 128, device="cuda"), torch.randn(batch, 128, device="cuda")
    found = lltm_ext.explain("lltm", x[0], w, b, h.requires_grad_(), c, run=True)
    assert found.path == path and "fused-cell-rule" in found.notes[0]
    _ran_contains(found)


@CUDA_MARK
def test_cuda_gemm_lists_the_kernels_that_ran():
    a = torch.randn(256, 128, device="cuda", dtype=torch.bfloat16)
    found = lltm_ext.explain("gemm", a, torch.randn(128, 64, device="cuda", dtype=torch.bfloat16))
    assert found.ran, str(found)  # lltm_ext's own kernels: no cuBLAS, CUTLASS or nvjet among them
    assert not any(k in n.lower() for n in found.ran for k in ("cublas", "cutlass", "nvjet")), found
