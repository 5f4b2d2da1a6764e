"""Times the wgmma kernel's switches against cuBLAS and lltm_ext's routed call: its K splits (as
the planner picks them, or none), and where M <= 64 its stages of 64 rows of A against 128 (the
rows past M filled with zeros by TMA: ``_set_gemm_wgmma_knobs(short_a=False)``). The data behind
kWgmmaBusyShare (src/gemm/gemm_tc_plan.cpp), the short A stages (src/gemm/tiles/kernel_sm90.cuh)
and, at M of 8 to 64, whether the wgmma kernel or the skinny one should take a linear layer.

Points: the linear layers of ``lltm-ext bench --linear`` at each M of --ms, in each weight layout
of --layouts (t: x @ W.T, W (N, K) as nn.Linear stores it; n: x @ W, W stored (K, N)); the
issue's 3000 x 5000 x 2000 in both weight layouts; and --random shapes drawn as ``lltm-ext bench
--sweep`` draws them (layouts, unaligned rows). At each point, in one
interleaved timing (``lltm_ext.cli.sweep.time_medians``: L2 flushed before every call): cuBLAS
("cublas"), ``lltm_ext.gemm`` ("auto"), the wgmma kernel forced at the planner's splits ("sP")
and at one ("s1"), and with M <= 64 the same with 128-row A stages ("sPlong"), each checked
against float64 first. One JSON row per point.

    python benchmarks/gemm_tc_plan/measure_wgmma.py wgmma.json --dtype bfloat16 --random 10
"""

from __future__ import annotations

import argparse
import json
import math

import torch

from lltm_ext._extension import load_extension
from lltm_ext.cli.linear import LINEAR_LAYERS
from lltm_ext.cli.sweep import gemm_shapes, time_medians


def rel_err(c: torch.Tensor, c64: torch.Tensor) -> float:
    return float((c.double() - c64).norm() / c64.norm().clamp_min(1e-300))


def point(a: torch.Tensor, b: torch.Tensor, budget_s: float) -> dict[str, object]:
    """The timings of a @ b (us): cuBLAS, the routed call and the wgmma variants; their errors;
    the plan."""
    gemm = load_extension("gemm")
    plan = list(gemm._cuda_tc_plan(a, b))
    splits = plan[3] if plan[0] == "wgmma" else 1

    def wgmma(s: int, short_a: bool) -> torch.Tensor:
        gemm._set_gemm_wgmma_knobs(short_a=short_a)
        try:
            return gemm._gemm_tensor_core(a, b, "wgmma", splits=s)
        finally:
            gemm._set_gemm_wgmma_knobs()

    variants = {"cublas": lambda: a @ b, "auto": lambda: gemm.gemm(a, b)}
    for s in dict.fromkeys((splits, 1)):
        variants[f"s{s}"] = lambda s=s: wgmma(s, True)
    if a.size(0) <= 64:
        variants[f"s{splits}long"] = lambda: wgmma(splits, False)
    c64 = a.double() @ b.double()
    errs = {name: rel_err(fn(), c64) for name, fn in variants.items()}
    times, samples = time_medians(list(variants.values()), a.device, budget_s)
    return {
        "M": a.size(0),
        "N": b.size(1),
        "K": a.size(1),
        "plan": plan,
        "splits": splits,
        "samples": samples,
        "us": {n: t * 1e6 for n, t in zip(variants, times, strict=True)},
        "err": errs,
    }


def make(rows: int, cols: int, transposed: bool, dtype: torch.dtype) -> torch.Tensor:
    """A (rows, cols) operand: row-major, or (transposed) a transposed view of a row-major one."""
    t = (
        torch.randn(cols, rows, device="cuda")
        if transposed
        else torch.randn(rows, cols, device="cuda")
    )
    t = t.to(dtype)
    return t.t() if transposed else t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", help="where to write the rows")
    parser.add_argument("--ms", default="8,16,32,64,128,512")
    parser.add_argument("--layouts", default="t,n", help="the linear layers' weight layouts")
    parser.add_argument("--random", type=int, default=10, help="random shapes (the sweep's draw)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "tf32"])
    parser.add_argument("--budget", type=float, default=0.1, help="seconds of samples per point")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("measure_wgmma.py: times CUDA kernels, but torch sees no GPU")
    dtype = torch.float32 if args.dtype == "tf32" else getattr(torch, args.dtype)
    torch.backends.cuda.matmul.allow_tf32 = args.dtype == "tf32"
    gemm = load_extension("gemm")
    try:
        gemm._gemm_tensor_core(torch.ones(8, 8, device="cuda", dtype=dtype), torch.ones(
            8, 8, device="cuda", dtype=dtype), "wgmma")  # fmt: skip
    except RuntimeError as e:
        raise SystemExit(f"measure_wgmma.py: the wgmma kernel does not run here ({e})") from e
    rows: list[dict[str, object]] = []

    def record(row: dict[str, object], what: str) -> None:
        row["what"] = what
        rows.append(row)
        us = row["us"]
        cells = " ".join(f"{n} {v:.1f}" for n, v in us.items())
        ratios = " ".join(f"{n} {us['cublas'] / v:.2f}x" for n, v in us.items() if n != "cublas")
        print(f"{what} {row['M']}x{row['N']}x{row['K']} {row['plan'][:5]}: {cells} us; {ratios}")
        with open(args.json, "w") as f:
            json.dump(rows, f)

    layouts = args.layouts.split(",")
    if not set(layouts) <= {"t", "n"}:
        raise SystemExit(f"measure_wgmma.py: --layouts takes t and n, not {args.layouts}")
    for k, n in LINEAR_LAYERS["cuda"]:
        for layout in layouts:
            w = make(n, k, False, dtype).t() if layout == "t" else make(k, n, False, dtype)
            for m in (int(v) for v in args.ms.split(",")):
                record(point(make(m, k, False, dtype), w, args.budget), f"linear {layout}")
    for transposed in (True, False):  # x @ W.T (W (N, K)) and x @ W (W (K, N))
        b = make(2000, 5000, False, dtype) if not transposed else make(5000, 2000, False, dtype).t()
        record(point(make(3000, 2000, False, dtype), b, args.budget), "grid")
    for s in gemm_shapes(args.random, args.seed, "cuda"):
        a = make(s["M"], s["K"], s["layout"][0] == "t", dtype)
        b = make(s["K"], s["N"], s["layout"][1] == "t", dtype)
        record(point(a, b, args.budget), f"random {s['layout']}")
    # cuBLAS time / ours: the routed call, the planner's splits, one split; and where M <= 64 the
    # planner's splits with 64- and with 128-row A stages.
    ratios: dict[str, list[float]] = {}
    for row in rows:
        us, planned = row["us"], f"s{row['splits']}"
        pairs = [("auto", us["auto"]), ("planned splits", us[planned]), ("one split", us["s1"])]
        if f"{planned}long" in us:
            pairs += [
                ("M <= 64, 64-row A", us[planned]),
                ("M <= 64, 128-row A", us[f"{planned}long"]),
            ]
        for key, v in pairs:
            ratios.setdefault(key, []).append(us["cublas"] / v)
    for key, vals in ratios.items():
        geo = math.exp(sum(math.log(v) for v in vals) / len(vals))
        print(f"{key}: geomean {geo:.3f}x over {len(vals)} points, worst {min(vals):.3f}x")


if __name__ == "__main__":
    main()
