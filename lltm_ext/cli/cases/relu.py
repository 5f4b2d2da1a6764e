"""``lltm-ext bench`` cases of ReLU (:mod:`lltm_ext.ops.relu`)."""

from __future__ import annotations

import torch

from lltm_ext.cli.bench import BenchCase
from lltm_ext.cli.cases._elementwise import bench_cases
from lltm_ext.ops.relu import relu

BENCH_OPS = ("relu",)
"""The `op` names of this module's bench cases."""


def benchmarks(device: torch.device, quick: bool) -> list[BenchCase]:
    """relu vs torch.relu; the backward kernel vs aten.threshold_backward(grad, x, 0)."""
    return bench_cases(
        "relu",
        device,
        quick,
        forward=relu,
        ref_forward=torch.relu,
        ref_forward_name="torch.relu",
        ref_backward=lambda grad, x, y: torch.ops.aten.threshold_backward(grad, x, 0),
        ref_backward_name="aten.threshold_backward",
    )
