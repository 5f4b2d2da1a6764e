"""Whether torch.autocast applies to an op's tensors, and the dtype it casts them to: one rule for
the ops that act on it (the packed LLTMSequence's rounding) and for lltm_ext.explain's report."""

from __future__ import annotations

import torch
from torch import Tensor

# The dtypes autocast casts (float64, integers and the rest it leaves alone).
_CAST = (torch.float32, torch.float16, torch.bfloat16)


def autocast_dtype(*tensors: Tensor) -> torch.dtype | None:
    """The dtype torch.autocast casts `tensors` to in the current region on the first one's device
    type, or None where autocast is off there, or leaves one of them alone (a dtype it does not
    cast: float64, integers), or one lies on another device type."""
    device = tensors[0].device.type
    if any(t.dtype not in _CAST or t.device.type != device for t in tensors):
        return None
    if not torch.is_autocast_enabled(device):
        return None
    return torch.get_autocast_dtype(device)
