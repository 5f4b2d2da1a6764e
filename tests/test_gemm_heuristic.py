"""The float32 CUDA GEMM's tile heuristic (src/gemm/gemm_heuristic.cpp).

It is plain C++ in every build, so `_choose_tiles` runs here without a GPU, with the GPU's facts
(SM count, path, occupancy of each config) as arguments. The tests marked `cuda` check that
`_cuda_choose` is that same function fed with the current device's facts, on every device.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
import sys

import pytest
import torch

from lltm_ext._extension import load_extension

# The float32 configs (src/gemm/gemm_configs.h): block tiles (BM, BN, BK) by index, the
# candidates of each path (gemm_heuristic.cpp). test_the_config_table_matches_the_build checks
# this table against the names the CUDA build reports.
TILES = {
    0: (64, 128, 16),
    1: (128, 256, 16),
    2: (128, 128, 16),
    3: (64, 64, 16),
    4: (128, 128, 8),
    5: (64, 128, 16),
    6: (64, 128, 16),
    7: (64, 128, 16),
    8: (64, 128, 16),
    9: (128, 128, 16),
    10: (128, 256, 16),
    11: (256, 128, 16),
    12: (128, 128, 16),
    13: (128, 64, 16),
    14: (128, 32, 16),
    15: (32, 128, 16),
}
CANDIDATES = {"async": {0, 1, 2, 3, 11, 12, 13, 14, 15}, "staged": {4}}
ASYNC_CONFIGS = {0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
# Resident blocks per SM: each config's __launch_bounds__ minimum (about what an H100 gives).
OCCUPANCY = [3, 1, 2, 4, 2, 3, 3, 3, 3, 2, 1, 1, 2, 3, 4, 4]
SMS = 132  # an H100 / H200


@pytest.fixture(scope="module")
def ext():
    return load_extension("gemm")


def choose(ext, m, n, k, *, sms=SMS, b_k_contig=False, path="async", occupancy=OCCUPANCY):
    return ext._choose_tiles(m, n, k, sms, b_k_contig, path, list(occupancy))


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def tiles_of(config: int, m: int, n: int) -> int:
    bm, bn, _ = TILES[config]
    return ceil_div(m, bm) * ceil_div(n, bn)


def assert_valid(choice, m, n, k, path):
    """A schedule the launch accepts, from the path's candidates."""
    config, splits, tail_tiles, tail_splits = choice
    assert config in CANDIDATES[path], choice
    assert 1 <= splits <= 64, choice
    if tail_splits:
        assert splits == 1 and 2 <= tail_splits <= 8, choice
        assert 1 <= tail_tiles <= tiles_of(config, m, n), choice
    else:
        assert tail_tiles == 0, choice
    bk = TILES[config][2]
    for parts, least in ((splits, 5 if path == "async" else 8), (tail_splits, 8)):
        if parts > 1:  # each part has at least `least` K steps of the config's BK (the heuristic's
            # rule: 5 for the cp.async path's K splits, 8 for the staged path's and tail splits)
            k_split = ceil_div(ceil_div(k, parts), bk) * bk
            assert k_split >= least * bk, (choice, k)
    if tail_splits:  # and a tail split keeps all its parts after rounding
        assert ceil_div(k, ceil_div(ceil_div(k, tail_splits), bk) * bk) == tail_splits, choice


SHAPES = [
    (4096, 4096, 4096),
    (8192, 8192, 8192),
    (1024, 1024, 1024),
    (4096, 1024, 4096),
    (8192, 8192, 1024),
    (4096, 512, 4096),
    (64, 64, 100000),
    (128, 128, 65536),
    (3, 5, 7),
    (1, 4096, 4096),
    (4096, 1, 4096),
    (1, 1, 1),
    (1, 1, 300000),
    (131, 259, 77),
    (0, 5, 3),
    (5, 0, 3),
    (4, 6, 0),
    (2**31 - 1, 1, 1),
]


@pytest.mark.parametrize("path", ["async", "staged"])
@pytest.mark.parametrize("sms", [1, 8, 46, 108, 132, 148])
def test_every_schedule_is_valid_for_its_path(ext, path, sms):
    for (m, n, k), b_k_contig in itertools.product(SHAPES, (False, True)):
        choice = choose(ext, m, n, k, sms=sms, b_k_contig=b_k_contig, path=path)
        assert_valid(choice, m, n, k, path)


def test_the_staged_path_never_picks_a_cp_async_config(ext):
    for (m, n, k), sms in itertools.product(SHAPES, (1, 46, 132)):
        config, *_ = choose(ext, m, n, k, sms=sms, path="staged")
        assert config not in ASYNC_CONFIGS


@pytest.mark.parametrize("path", ["async", "staged"])
@pytest.mark.parametrize("b_k_contig", [False, True])
def test_large_squares_take_no_split_k(ext, path, b_k_contig):
    """Enough tiles to fill the GPU several times: K is not split (a tail split may be)."""
    for n in (2048, 4096, 8192):
        config, splits, *_ = choose(ext, n, n, n, b_k_contig=b_k_contig, path=path)
        assert splits == 1, (n, config, splits)


@pytest.mark.parametrize("path", ["async", "staged"])
@pytest.mark.parametrize("shape", [(64, 64, 100000), (128, 128, 65536), (32, 32, 20000)])
def test_long_k_few_tiles_takes_split_k(ext, path, shape):
    """One or a few tiles of C and a long K: split K to fill the SMs."""
    _, splits, *_ = choose(ext, *shape, path=path)
    assert splits >= 8, (shape, splits)


def test_one_tile_over_a_long_k_fills_the_sms(ext):
    """One tile of C and K = 11052 on 132 SMs: more than 16 splits (each of >= 8 K steps)."""
    _, splits, *_ = choose(ext, 45, 35, 11052, sms=132)
    assert 16 < splits <= 64, splits


@pytest.mark.parametrize("shape", [(64, 64, 64), (1, 1, 1), (3, 5, 7), (32, 32, 1000)])
def test_tiny_shapes_take_the_small_tile(ext, shape):
    config, *_ = choose(ext, *shape)
    assert config in (3, 14, 15)  # 64 x 64, 128 x 32, 32 x 128: the smallest candidate tiles
    config, *_ = choose(ext, *shape, path="staged")
    assert config == 4  # the only staged one


@pytest.mark.parametrize("b_k_contig", [False, True])
def test_narrow_outputs_take_the_narrow_tiles(ext, b_k_contig):
    """A few columns (rows) of C over a long K take the 128 x 32 (32 x 128) tile, not a 64-wide
    one that computes 57-89% padding (H100: 9256x7x5746 on 64 x 64 tiles 203 us, on 128 x 32
    ones 129 us; 20x6137x7887 200 against 131 us; docs/gemm_notes.md)."""
    assert choose(ext, 9256, 7, 5746, b_k_contig=b_k_contig)[0] == 14
    assert choose(ext, 5201, 7, 1249, b_k_contig=b_k_contig)[0] == 14
    assert choose(ext, 20, 6137, 7887, b_k_contig=b_k_contig)[0] == 15
    assert choose(ext, 5, 11189, 3220, b_k_contig=b_k_contig)[0] == 15


def test_the_256x128_tile_is_a_candidate_for_a_k_contiguous_b_only(ext):
    """Config 11 (docs/gemm_notes.md, "Both operands K-contiguous") was measured across shapes
    with B K-contiguous only: it takes a @ b.T and a.T @ b.T at 4096^3, and no schedule with a
    row-major B."""
    assert choose(ext, 4096, 4096, 4096, b_k_contig=True)[0] == 11
    for (m, n, k), sms in itertools.product(SHAPES, (46, 132)):
        assert choose(ext, m, n, k, sms=sms)[0] != 11, (m, n, k, sms)


def test_the_sm_count_changes_the_schedule(ext):
    """At 1024^3 a 132-SM GPU splits K (its tiles are under a wave); an 8-SM one does not."""
    assert choose(ext, 1024, 1024, 1024, sms=132)[1] > 1
    assert choose(ext, 1024, 1024, 1024, sms=8)[1] == 1


def test_the_occupancy_changes_the_schedule(ext):
    """A config's resident blocks per SM make its waves: 4096^3 in 64 x 128 tiles (config 0) is
    2048 tiles, 5 full waves of 3 x 132 blocks and 68 more, which the heuristic splits along K
    (tail split-K); with 4 blocks per SM the waves fall elsewhere and so does the schedule."""
    assert choose(ext, 4096, 4096, 4096)[:3] == (0, 1, 2048 - 5 * 3 * SMS)
    assert choose(ext, 4096, 4096, 4096, occupancy=[4, *OCCUPANCY[1:]])[2] != 68


def test_deterministic(ext):
    for (m, n, k), b_k_contig in itertools.product(SHAPES, (False, True)):
        first = choose(ext, m, n, k, b_k_contig=b_k_contig)
        assert all(choose(ext, m, n, k, b_k_contig=b_k_contig) == first for _ in range(3))


def test_edge_shapes(ext):
    """K = 0 (the launch only zero-fills C) and empty C: one split, no tail; M = 1: valid."""
    for path in ("async", "staged"):
        for m, n, k in [(4, 6, 0), (4096, 4096, 0), (0, 5, 3), (5, 0, 3), (0, 0, 0)]:
            _, splits, tail_tiles, tail_splits = choose(ext, m, n, k, path=path)
            assert (splits, tail_tiles, tail_splits) == (1, 0, 0), (m, n, k)
        for m, n, k in [(1, 1, 1), (1, 4096, 4096), (1, 1, 10**6)]:
            assert_valid(choose(ext, m, n, k, path=path), m, n, k, path)


def test_only_the_paths_candidates_need_an_occupancy(ext):
    """Entries of configs the path does not use are not read (the CUDA host code passes 0)."""
    async_only = [b if c in CANDIDATES["async"] else 0 for c, b in enumerate(OCCUPANCY)]
    staged_only = [b if c in CANDIDATES["staged"] else 0 for c, b in enumerate(OCCUPANCY)]
    assert choose(ext, 1024, 1024, 1024, occupancy=async_only) == choose(ext, 1024, 1024, 1024)
    assert choose(ext, 1024, 1024, 1024, path="staged", occupancy=staged_only) == choose(
        ext, 1024, 1024, 1024, path="staged"
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(path="fast"), "path must be 'async' or 'staged', but got 'fast'"),
        (dict(occupancy=[3, 1, 2]), rf"one entry per float32 config \({len(TILES)}\), but got 3"),
        (
            dict(occupancy=[0 if c == 1 else b for c, b in enumerate(OCCUPANCY)]),
            r"blocks_per_sm\[1\] .* must be >= 1",
        ),
        (
            dict(path="staged", occupancy=[0 if c == 4 else b for c, b in enumerate(OCCUPANCY)]),
            r"blocks_per_sm\[4\]",
        ),
        (dict(sms=0), "sms must be >= 1, but got 0"),
    ],
)
def test_bad_arguments(ext, kwargs, message):
    with pytest.raises(RuntimeError, match=message):
        choose(ext, 64, 64, 64, **kwargs)


def test_bad_sizes(ext):
    for m, n, k in [(-1, 4, 4), (4, -1, 4), (4, 4, -1), (2**31, 1, 1)]:
        with pytest.raises(RuntimeError, match=r"M, N and K must be in \[0, 2\^31\)"):
            choose(ext, m, n, k)


# ----------------------------------------------------------------------------------------------
# On GPUs: _cuda_choose is the same heuristic fed with the current device's facts.
# ----------------------------------------------------------------------------------------------

GPU_SHAPES = [
    (1024, 1024, 1024),
    (4096, 4096, 4096),
    (4096, 512, 4096),
    (64, 64, 100000),
    (1, 1, 1),
    (131, 259, 77),
]


@contextlib.contextmanager
def gemm_path(ext, path: str):
    ext._set_gemm_path(path)
    try:
        yield
    finally:
        ext._set_gemm_path(os.environ.get("LLTM_EXT_GEMM_PATH", "auto"))


def assert_device_facts_used(ext, device: int):
    """On `device` (made current): _cuda_choose == _choose_tiles with that device's SM count, path
    and occupancy; the occupancy is >= 1 for the path's candidates and 0 for the others."""
    with torch.cuda.device(device):
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        path = ext._gemm_path()
        occupancy = ext._cuda_blocks_per_sm()
        assert len(occupancy) == len(TILES)
        for config, blocks in enumerate(occupancy):
            assert (blocks >= 1) if config in CANDIDATES[path] else (blocks == 0), occupancy
        for shape, b_k_contig in itertools.product(GPU_SHAPES, (False, True)):
            got = ext._cuda_choose(*shape, b_k_contig)
            want = ext._choose_tiles(*shape, sms, b_k_contig, path, occupancy)
            assert got == want, (device, shape, b_k_contig, sms, path, occupancy)


@pytest.mark.cuda
def test_the_config_table_matches_the_build(ext):
    names = ext._cuda_configs()
    assert len(names) == len(TILES)
    for config, name in enumerate(names):
        bm, bn, bk = TILES[config]
        assert name.startswith(f"{bm}x{bn}x{bk} "), (config, name)
        assert ("staged" not in name) == (config in ASYNC_CONFIGS), (config, name)


@pytest.mark.cuda
@pytest.mark.parametrize("path", ["auto", "staged"])
def test_cuda_choose_uses_the_devices_facts(ext, path):
    with gemm_path(ext, path):
        assert_device_facts_used(ext, torch.cuda.current_device())


@pytest.mark.cuda
@pytest.mark.multigpu
@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs"
)
@pytest.mark.parametrize("path", ["auto", "staged"])
def test_cuda_choose_on_every_device_uses_that_devices_facts(ext, path):
    """Per-device caches: each device's answer comes from its own SM count, path and occupancy,
    whichever device asked first (cuda:1 before cuda:0 here). On GPUs of one model the values
    agree anyway; on a host with mixed GPUs a per-process cache fails this."""
    with gemm_path(ext, path):
        for device in reversed(range(torch.cuda.device_count())):
            assert_device_facts_used(ext, device)


_THREADS_SCRIPT = """
import sys, threading, torch
from lltm_ext._extension import load_extension
ext = load_extension("gemm")
devices = list(range(torch.cuda.device_count()))
shape = (1024, 1024, 1024)
results, errors = {}, []
start = threading.Barrier(8)

def worker(i):
    try:
        device = devices[i % len(devices)]
        start.wait()
        with torch.cuda.device(device):
            results[i] = (device, ext._cuda_choose(*shape, False))
    except Exception as e:  # reported below
        errors.append(repr(e))

threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert not errors, errors
for device, got in results.values():
    with torch.cuda.device(device):
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        want = ext._choose_tiles(*shape, sms, False, ext._gemm_path(), ext._cuda_blocks_per_sm())
    assert got == want, (device, got, want)
print("ok", len(results))
"""


@pytest.mark.cuda
def test_first_queries_from_many_threads(tmp_path):
    """Cold caches (a fresh process), 8 threads asking at once, spread over the devices: every
    answer is the one for its own device."""
    proc = subprocess.run(
        [sys.executable, "-c", _THREADS_SCRIPT], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "ok 8"
