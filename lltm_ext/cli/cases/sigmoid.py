"""``lltm-ext bench`` cases of sigmoid (:mod:`lltm_ext.ops.sigmoid`)."""

from __future__ import annotations

import torch

from lltm_ext.cli.bench import BenchCase
from lltm_ext.cli.cases._elementwise import bench_cases
from lltm_ext.ops.sigmoid import sigmoid

BENCH_OPS = ("sigmoid",)
"""The `op` names of this module's bench cases."""


def benchmarks(device: torch.device, quick: bool) -> list[BenchCase]:
    """sigmoid vs torch.sigmoid; the backward kernel vs aten.sigmoid_backward(grad, y)."""
    return bench_cases(
        "sigmoid",
        device,
        quick,
        forward=sigmoid,
        ref_forward=torch.sigmoid,
        ref_forward_name="torch.sigmoid",
        ref_backward=lambda grad, x, y: torch.ops.aten.sigmoid_backward(grad, y),
        ref_backward_name="aten.sigmoid_backward",
    )
