"""``lltm-ext bench`` cases of round_ste (:mod:`lltm_ext.ops.round_ste`)."""

from __future__ import annotations

import torch

from lltm_ext.cli.bench import BenchCase
from lltm_ext.cli.cases._elementwise import bench_cases
from lltm_ext.ops.round_ste import round_ste

BENCH_OPS = ("round_ste",)
"""The `op` names of this module's bench cases."""


def benchmarks(device: torch.device, quick: bool) -> list[BenchCase]:
    """round_ste's forward vs torch.round (backward has no kernel)."""
    return bench_cases(
        "round_ste",
        device,
        quick,
        forward=round_ste,
        ref_forward=torch.round,
        ref_forward_name="torch.round",
        notes="backward: no kernel (returns the incoming gradient)",
    )
