"""The CPU loops' run-time ISA choice (src/common/cpu_isa.h): the choice, and every loop copy.

The element-wise CPU loops and the GEMM's micro-kernel are compiled for the baseline x86-64 ISA and
again for AVX2 + FMA and AVX-512; the rest of the suite tests whichever this CPU picks. Here the
narrower copies this CPU can run also run the element-wise and GEMM tests (a subprocess with
LLTM_EXT_CPU_ISA set), and every copy's results are compared with the chosen one's.
"""

from __future__ import annotations

import itertools
import math
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import lltm_ext
from lltm_ext._extension import cpu_isa, load_extension

TESTS = Path(__file__).resolve().parent


def _run(code: str, isa: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, LLTM_EXT_CPU_ISA=isa)
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
    )


def _run_in_copy(outputs: Callable[[], Any], cap: str, tmp_path: Path) -> Any:
    """What `outputs()`, a function of this file, returns in a subprocess whose loops run the
    `cap` copy (LLTM_EXT_CPU_ISA=cap): passed back through torch.save into `tmp_path`."""
    name = outputs.__name__
    path = tmp_path / f"{name}_{cap}.pt"
    code = (
        f"import sys, torch; sys.path.insert(0, {str(TESTS)!r})\n"
        f"from test_cpu_isa import {name}; torch.save({name}(), {str(path)!r})"
    )
    proc = _run(code, cap)
    assert proc.returncode == 0, proc.stderr
    return torch.load(path)


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


NAMES = {"baseline": "baseline", "avx2": "avx2+fma", "avx512": "avx512"}


def _expected(cap: str) -> str:
    """The ISA name cpu_isa() should report on this CPU when LLTM_EXT_CPU_ISA is `cap`."""
    if platform.machine() != "x86_64" or sys.platform != "linux":
        return "baseline"
    flags = _cpu_flags()
    order = ["baseline", "avx2", "avx512"]
    best = "baseline"
    if {"avx2", "fma"} <= flags:
        best = "avx2"
        if {"avx512f", "avx512vl", "avx512bw", "avx512dq"} <= flags:
            best = "avx512"
    if cap in ("", "auto"):
        return NAMES[best]
    return NAMES[order[min(order.index(cap), order.index(best))]]


# The copies this CPU runs, other than the one it picks: each is tested against the chosen one.
OTHER_COPIES = [
    cap for cap in ("baseline", "avx2") if NAMES[cap] != cpu_isa() and _expected(cap) == NAMES[cap]
]


def test_the_subprocesses_load_this_lltm_ext():
    """The subprocesses below test the same build as this process."""
    proc = _run("import lltm_ext; print(lltm_ext.__file__)", "baseline")
    assert proc.stdout.strip() == lltm_ext.__file__, proc.stderr


def test_the_choice_follows_the_cpu_and_the_variable():
    assert cpu_isa() == _expected(os.environ.get("LLTM_EXT_CPU_ISA", ""))
    for cap in ("baseline", "avx2", "avx512", "auto"):
        code = "from lltm_ext._extension import cpu_isa; print(cpu_isa())"
        assert _run(code, cap).stdout == _expected(cap) + "\n", cap


def test_a_bad_value_is_an_error_that_names_the_variable():
    code = (
        "import torch, lltm_ext\n"
        "from lltm_ext._extension import cpu_isa\n"
        "print(cpu_isa())\n"
        "try:\n"
        "    lltm_ext.sigmoid(torch.ones(3))\n"
        "except RuntimeError as e:\n"
        "    print('RuntimeError', str(e).splitlines()[0])\n"
    )
    out = _run(code, "avx9").stdout
    message = "LLTM_EXT_CPU_ISA must be auto, avx512, avx2 or baseline, not 'avx9'"
    assert f"error: {message}" in out
    assert f"RuntimeError {message}" in out


def test_the_gemm_runs_the_chosen_copy():
    """The GEMM's micro-kernel follows cpu::isa() too: the copy that ran is the one cpu_isa()
    names, in this process and under each cap."""
    gemm = load_extension("gemm")
    lltm_ext.gemm(torch.randn(7, 5), torch.randn(5, 3))
    assert gemm._cpu_kernel_isa() == cpu_isa()
    code = (
        "import torch, lltm_ext\n"
        "from lltm_ext._extension import load_extension\n"
        "gemm = load_extension('gemm')\n"
        "print(repr(gemm._cpu_kernel_isa()))\n"
        "for dt in (torch.float32, torch.float64, torch.bfloat16):\n"
        "    lltm_ext.gemm(torch.ones(9, 4, dtype=dt), torch.ones(4, 2, dtype=dt))\n"
        "    print(gemm._cpu_kernel_isa())\n"
    )
    for cap in ("baseline", "avx2", "avx512", "auto"):
        proc = _run(code, cap)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines() == ["''"] + [_expected(cap)] * 3, cap


def test_a_bad_value_fails_the_gemm_too():
    code = (
        "import torch, lltm_ext\n"
        "try:\n"
        "    lltm_ext.gemm(torch.ones(2, 2), torch.ones(2, 2))\n"
        "except RuntimeError as e:\n"
        "    print('RuntimeError', str(e).splitlines()[0])\n"
    )
    message = "LLTM_EXT_CPU_ISA must be auto, avx512, avx2 or baseline, not 'avx9'"
    assert f"RuntimeError {message}" in _run(code, "avx9").stdout


def gemm_outputs() -> dict[str, torch.Tensor]:
    """The CPU GEMM on a few shapes and layouts (tile edges, K split over threads), each dtype."""
    gen = torch.Generator().manual_seed(0)
    out = {}
    for (m, n, k), dt in itertools.product(
        [(97, 61, 300), (256, 256, 256), (5, 3, 4000), (1, 300, 7)],
        (torch.float32, torch.float64, torch.float16, torch.bfloat16),
    ):
        a = torch.randn(m, k, generator=gen, dtype=torch.float64).to(dt)
        b = torch.randn(k, n, generator=gen, dtype=torch.float64).to(dt)
        out[f"{m}x{n}x{k} {dt} nn"] = lltm_ext.gemm(a, b)
        out[f"{m}x{n}x{k} {dt} tt"] = lltm_ext.gemm(a.t().contiguous().t(), b.t().contiguous().t())
    return out


@pytest.mark.parametrize("cap", OTHER_COPIES)
def test_every_gemm_copy_agrees_with_the_chosen_one(cap, tmp_path):
    """Same products through another copy: equal up to the rounding of fused vs separate
    multiply-adds (relative Frobenius error within a few ulps times sqrt(K))."""
    other = _run_in_copy(gemm_outputs, cap, tmp_path)
    for name, got in gemm_outputs().items():
        want = other[name]
        assert got.dtype == want.dtype and got.shape == want.shape, name
        k = int(name.split()[0].split("x")[2])
        eps = torch.finfo(got.dtype).eps
        err = (got.double() - want.double()).norm() / want.double().norm().clamp_min(1e-300)
        assert err <= 4 * eps * math.sqrt(k), (name, err.item())


def outputs() -> dict[str, dict[str, torch.Tensor]]:
    """Every CPU loop on one input (random values over a wide range, and the special values)."""
    torch.manual_seed(0)
    special = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-30, 2.5, -2.5, 100.0, -100.0]
    x = torch.cat([torch.randn(100_003, dtype=torch.float64) * 30, torch.tensor(special)])
    g = torch.randn_like(x)
    out = {}
    for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        xd, gd = x.to(dt), g.to(dt)
        y = lltm_ext.sigmoid(xd)
        out[str(dt)] = {
            "sigmoid": y,
            # (from one y for both copies: 1 - y would magnify their last-bit differences)
            "sigmoid_backward": torch.ops.lltm_ext.sigmoid_backward(gd, torch.sigmoid(xd)),
            "relu": lltm_ext.relu(xd),
            "relu_backward": torch.ops.lltm_ext.relu_backward(gd, lltm_ext.relu(xd)),
            "round": lltm_ext.round_ste(xd),
        }
    return out


@pytest.mark.parametrize("cap", OTHER_COPIES)
def test_every_copy_agrees_with_the_chosen_one(cap, tmp_path):
    """Each op and dtype through both copies: equal up to FMA's rounding (a few ulps), NaN alike."""
    other = _run_in_copy(outputs, cap, tmp_path)
    for dt_name, results in outputs().items():
        for name, got in results.items():
            want = other[dt_name][name]
            assert got.dtype == want.dtype
            info = torch.finfo(got.dtype)
            torch.testing.assert_close(
                got,
                want,
                rtol=4 * info.eps,
                atol=info.tiny,
                equal_nan=True,
                msg=lambda m, where=f"{name} {dt_name}": f"{where}: {m}",
            )


@pytest.mark.parametrize("cap", OTHER_COPIES)
def test_every_copy_passes_the_op_tests(cap):
    ops = ("relu", "sigmoid", "round_ste", "lltm", "gemm")
    files = [str(TESTS / f"test_{op}.py") for op in ops]
    env = dict(os.environ, LLTM_EXT_CPU_ISA=cap)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-m", "not cuda"]
        + files,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout.splitlines()[-1]
