"""Times products whose operands' rows start inside 32-byte sectors (16-byte aligned only: a side of
8 mod 16 elements in 16-bit types, 4 mod 8 in float32), which TMA reads slowly: the planner's pick
(``lltm_ext.gemm``, which may copy such an operand first into rows 128 bytes apart) against the
plan it picks with every operand taken as whole-sector (no such copy, forced through
``_gemm_tensor_core``), the wgmma kernel with both operands copied, and cuBLAS, interleaved, each
checked against float64. Also the row copy's bandwidth on the largest operand of the run.

    python benchmarks/gemm_tc_plan/measure_sectors.py sectors.json
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import torch

import lltm_ext
from lltm_ext._extension import load_extension
from lltm_ext.cli.sweep import time_medians

# M x N x K: compute-bound grids with a mid-sector side, a memory-bound one (a weight of 8 mod 16
# columns read by few rows) and, for contrast, one whose rows are whole sectors.
SHAPES = (
    "3000x5000x2000",
    "4096x4104x2048",
    "2056x8200x1032",
    "512x11000x4104",
    "1000x3000x5000",
    "16x5000x4104",
    "128x11000x4104",
    "3000x5008x2000",
)


def facts(t: torch.Tensor, is_a: bool) -> tuple[bool, bool, bool, bool]:
    """(K-contiguous, rows 16-byte aligned, 4-byte aligned, 32-byte aligned) of an operand, as
    ``problem_of`` in src/gemm/gemm_tc_cuda_host.cpp sees them."""
    k_dim = 1 if is_a else 0
    k_contig = t.stride(k_dim) == 1
    ld = t.stride(1 - k_dim) if k_contig else t.stride(k_dim)
    rows = t.shape[1 - k_dim] if k_contig else t.shape[k_dim]

    def aligned(n: int) -> bool:
        return t.data_ptr() % n == 0 and (rows <= 1 or ld * t.element_size() % n == 0)

    return k_contig, aligned(16), aligned(4), aligned(32)


def operands(shape: str, layout: str, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """a (M, K) and b (K, N) for layout "nn" / "nt" / "tn" / "tt" (t: a transposed view)."""
    m, n, k = (int(v) for v in shape.split("x"))
    dev = torch.device("cuda")
    a = torch.randn(k, m, device=dev).to(dtype).t() if layout[0] == "t" else None
    a = torch.randn(m, k, device=dev).to(dtype) if a is None else a
    b = torch.randn(n, k, device=dev).to(dtype).t() if layout[1] == "t" else None
    b = torch.randn(k, n, device=dev).to(dtype) if b is None else b
    return a, b


def measure(ext: Any, shape: str, layout: str, dtype: str, budget: float) -> dict[str, Any]:
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    a, b = operands(shape, layout, torch.float32 if dtype == "tf32" else getattr(torch, dtype))
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    fa, fb = facts(a, True), facts(b, False)
    sms = torch.cuda.get_device_properties(a.device).multi_processor_count
    # The plan with both operands taken as whole-sector: what the planner picked before.
    old = ext._tc_plan(m, n, k, dtype == "tf32", fa[0], fb[0], fa[1], fb[1], sms, True, True,
                       fa[2], fb[2])  # fmt: skip
    fns = {
        "ref": lambda: a @ b,
        "auto": lambda: lltm_ext.gemm(a, b),
        "sectors": lambda: ext._gemm_tensor_core(a, b, old[0], old[1], old[3]),
        "copied": lambda: ext._gemm_tensor_core(a, b, "wgmma", copy=True),
    }
    c64 = a.double() @ b.double()
    err = {name: float((f().double() - c64).norm() / c64.norm()) for name, f in fns.items()}
    times, samples = time_medians(list(fns.values()), a.device, budget)
    us = {name: t * 1e6 for name, t in zip(fns, times, strict=True)}
    now = ext._cuda_tc_plan(a, b)
    row = {"shape": shape, "layout": layout, "dtype": dtype, "sectors": [fa[3], fb[3]],
           "old_plan": list(old[:7]), "plan": list(now[:7]), "us": us, "err": err,
           "samples": samples}  # fmt: skip
    print(
        f"{dtype:8s} {shape:15s} {layout} sectors a/b {int(fa[3])}{int(fb[3])}: "
        f"{old[0]}{old[1]}/{old[3]} copy {int(old[5])}{int(old[6])} -> "
        f"{now[0]}{now[1]}/{now[3]} copy {int(now[5])}{int(now[6])}: "
        f"before {us['sectors']:7.1f} auto {us['auto']:7.1f} copied {us['copied']:7.1f} "
        f"cuBLAS {us['ref']:7.1f} us; ratio {us['ref'] / us['sectors']:.3f} -> "
        f"{us['ref'] / us['auto']:.3f}",
        flush=True,
    )
    return row


def copy_bandwidth(ext: Any, budget: float) -> dict[str, float]:
    """The row copy's rate: the wgmma kernel with both operands copied, minus without, over
    a K-contiguous pair whose copies are the bulk of its time (a short K over wide operands)."""
    a, b = operands("16x16384x8192", "nn", torch.bfloat16)
    (t_copy, t_plain), _ = time_medians(
        [lambda: ext._gemm_tensor_core(a, b, "wgmma", 64, 1, copy=True),
         lambda: ext._gemm_tensor_core(a, b, "wgmma", 64, 1)],
        a.device, budget,
    )  # fmt: skip
    moved = 2 * (a.numel() + b.numel()) * a.element_size()
    return {"copy_us": (t_copy - t_plain) * 1e6, "bytes": moved,
            "gbps": moved / max(t_copy - t_plain, 1e-9) / 1e9}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", help="where to write the rows")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="MxNxK,...")
    parser.add_argument("--layouts", default="nn,nt,tn,tt")
    parser.add_argument("--dtypes", default="bfloat16,float16,tf32")
    parser.add_argument("--budget", type=float, default=0.1, help="seconds of samples per row")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("measure_sectors.py: times CUDA kernels, but torch sees no GPU")
    ext = load_extension("gemm")
    result: dict[str, Any] = {"device": torch.cuda.get_device_name(), "rows": []}
    result["copy"] = copy_bandwidth(ext, args.budget)
    print(f"row copy: {result['copy']}", flush=True)
    for dtype in args.dtypes.split(","):
        for shape in args.shapes.split(","):
            for layout in args.layouts.split(","):
                result["rows"].append(measure(ext, shape, layout, dtype, args.budget))
                with open(args.json, "w") as f:
                    json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
