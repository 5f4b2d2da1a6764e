"""3000x5000x2000 (bfloat16, float16; layouts tt, nt, tn) with A's rows as given ("pad" 0: an
M-major A's rows 6000 bytes apart, inside 32-byte sectors; a K-major A's 4000, whole sectors) and
8 elements further apart ("pad" 8: 6016 and 4016 bytes), timed interleaved in one process: the
auto plan, cuBLAS, the wgmma kernel forced to 128 x 256 tiles and to 256 x 152 tiles (B K-major
only), each with its blocks alone and in pairs of tile rows (`_set_gemm_wgmma_knobs(cluster=2)`),
the 256 x 152 tiles after copying both operands (`copy=True`), and torch's copy of an M-major A
into rows 6016 bytes apart; every product checked against float64 (relative error < 1e-2).
Microseconds, medians (`lltm_ext.cli.sweep.time_medians`, 3 s of samples a point).

    python benchmarks/gemm_tc_plan/measure_a_rows.py   # writes $OUT/e1.json (or ./e1.json)
"""

import json
import os
from collections.abc import Callable
from typing import Any

import torch

import lltm_ext
from lltm_ext._extension import load_extension
from lltm_ext.cli.sweep import time_medians

ext = load_extension("gemm")
dev = torch.device("cuda")
M, N, K = 3000, 5000, 2000


def in_pairs(f: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
    """f with the wgmma kernel's blocks in clusters of two (where they can pair)."""

    def g() -> torch.Tensor:
        ext._set_gemm_wgmma_knobs(cluster=2)
        r = f()
        ext._set_gemm_wgmma_knobs()
        return r

    return g


def point(dt: torch.dtype, layout: str, pad: int) -> dict[str, Any]:
    """One row: every call's median microseconds at (dtype, layout, pad)."""
    g = torch.Generator(device="cuda").manual_seed(0)
    if layout[0] == "t":
        a = torch.randn(K, M + pad, device=dev, generator=g).to(dt)[:, :M].t()
    else:
        a = torch.randn(M, K + pad, device=dev, generator=g).to(dt)[:, :K]
    if layout[1] == "t":
        b = torch.randn(N, K, device=dev, generator=g).to(dt).t()
    else:
        b = torch.randn(K, N, device=dev, generator=g).to(dt)
    ref = a.double() @ b.double()
    fns = {
        "auto": lambda: lltm_ext.gemm(a, b),
        "cublas": lambda: a @ b,
        "r128w256": lambda: ext._gemm_tensor_core(a, b, kernel="wgmma", tile=256, tile_m=128),
    }
    fns["r128w256_c2"] = in_pairs(fns["r128w256"])
    if layout[1] == "t":
        fns["tall"] = lambda: ext._gemm_tensor_core(a, b, kernel="wgmma", tile=152, tile_m=256)
        fns["tall_c2"] = in_pairs(fns["tall"])
        fns["tall_copy"] = lambda: ext._gemm_tensor_core(
            a, b, kernel="wgmma", tile=152, tile_m=256, copy=True
        )
    if layout[0] == "t":
        buf = torch.empty(K, M + 8, device=dev, dtype=dt)[:, :M]
        fns["copyA_torch"] = lambda: buf.copy_(a.t())
    for k, f in fns.items():
        c = f()
        if c.shape != ref.shape:
            continue
        e = float((c.double() - ref).norm() / ref.norm())
        assert e < 1e-2, (k, e)
    meds, _ = time_medians(list(fns.values()), dev, 3.0)
    return {
        "dtype": str(dt),
        "layout": layout,
        "pad": pad,
        "plan": list(ext._cuda_tc_plan(a, b)),
        **{k: round(v * 1e6, 2) for k, v in zip(fns, meds, strict=True)},
    }


out = []
for dt in (torch.bfloat16, torch.float16):
    for layout in ("tt", "nt", "tn"):
        for pad in (0, 8):
            row = point(dt, layout, pad)
            print(row, flush=True)
            out.append(row)
with open(os.environ.get("OUT", ".") + "/e1.json", "w") as f:
    json.dump(out, f, indent=1)
