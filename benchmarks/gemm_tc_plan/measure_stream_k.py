"""Times the 256-wide wgmma tile's last, partial round as Stream-K against whole tiles and cuBLAS:
the data the auto rule (sm90_stream_k, src/gemm/gemm_kernels_sm90.cu) is set from.

Points: the linear layers of ``lltm-ext bench --linear`` at each M of --ms in both weight layouts
(nt: x @ W.T, W (N, K) as nn.Linear stores it; nn: x @ W, W stored (K, N)); 3000 x 5000 x 2000 and
1000 x 3000 x 5000 (M x N x K) in every layout; and --random shapes as ``lltm-ext bench --sweep``
draws them (its seed). Only points whose plan is the 256-wide tile with blocks alone and K unsplit
are timed (Stream-K runs nowhere else). At each, in one interleaved timing
(``lltm_ext.cli.sweep.time_medians``: L2 flushed before every call): cuBLAS ("ref"),
``lltm_ext.gemm`` with Stream-K as the rule says ("auto"), never ("off") and on its last round
wherever it can ("on"), each checked against float64 first. One JSON row a point, with the plan and
the split of its tiles (whole-tile tiles, Stream-K tiles, Stream-K blocks) under "on".

    python benchmarks/gemm_tc_plan/measure_stream_k.py stream_k.json --dtypes bfloat16,tf32
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable

import torch

import lltm_ext
from lltm_ext._extension import load_extension
from lltm_ext.cli.linear import LINEAR_LAYERS
from lltm_ext.cli.sweep import gemm_shapes, time_medians

LAYOUTS = ("nn", "nt", "tn", "tt")


def make(rows: int, cols: int, transposed: bool, dtype: torch.dtype) -> torch.Tensor:
    """A (rows, cols) operand: row-major, or (transposed) a transposed view of a row-major one."""
    shape = (cols, rows) if transposed else (rows, cols)
    t = torch.randn(shape, device="cuda").to(dtype)
    return t.t() if transposed else t


def point(a: torch.Tensor, b: torch.Tensor, budget_s: float) -> dict[str, object] | None:
    """The timings (us) of a @ b: cuBLAS and Stream-K auto / off / on; their errors against
    float64. None where the plan is not the 256-wide tile, blocks alone, K unsplit."""
    gemm = load_extension("gemm")
    plan = list(gemm._cuda_tc_plan(a, b))
    if plan[0] != "wgmma" or plan[1] != 256 or plan[3] != 1 or plan[-1] == 2:
        return None

    def with_stream_k(how: str) -> Callable[[], torch.Tensor]:
        def run() -> torch.Tensor:
            gemm._set_gemm_wgmma_knobs(stream_k=how)
            try:
                return lltm_ext.gemm(a, b)
            finally:
                gemm._set_gemm_wgmma_knobs()

        return run

    variants = {
        "ref": lambda: a @ b,
        "auto": with_stream_k("auto"),
        "off": with_stream_k("off"),
        "on": with_stream_k("on"),
    }
    c64 = a.double() @ b.double()
    errs = {
        name: float((fn().double() - c64).norm() / c64.norm().clamp_min(1e-300))
        for name, fn in variants.items()
    }
    times, samples = time_medians(list(variants.values()), a.device, budget_s)
    m, k, n = a.size(0), a.size(1), b.size(1)
    sms = torch.cuda.get_device_properties(a.device).multi_processor_count
    tf32 = a.dtype == torch.float32
    gemm._set_gemm_wgmma_knobs(stream_k="on")
    try:
        split_on = list(gemm._cuda_stream_k(m, n, k, tf32, sms))
    finally:
        gemm._set_gemm_wgmma_knobs()
    return {
        "M": m,
        "N": n,
        "K": k,
        "dtype": str(a.dtype)[6:] if not tf32 else "tf32",
        "plan": plan,
        "split_auto": list(gemm._cuda_stream_k(m, n, k, tf32, sms)),
        "split_on": split_on,
        "sms": sms,
        "samples": samples,
        "us": {name: t * 1e6 for name, t in zip(variants, times, strict=True)},
        "err": errs,
    }


def gmean(v: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", help="where to write the rows")
    parser.add_argument("--ms", default="1024,2048,4096,8192")
    parser.add_argument("--random", type=int, default=100, help="random shapes (the sweep's draw)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dtypes", default="bfloat16,float16,tf32")
    parser.add_argument("--budget", type=float, default=0.08, help="seconds of samples per point")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("measure_stream_k.py: times CUDA kernels, but torch sees no GPU")
    rows: list[dict[str, object]] = []

    def record(row: dict[str, object] | None, what: str) -> None:
        if row is None:
            return
        row["what"] = what
        rows.append(row)
        us = row["us"]
        ratios = " ".join(f"{n} {us['ref'] / v:.3f}x" for n, v in us.items() if n != "ref")
        print(
            f"{what} {row['dtype']} {row['M']}x{row['N']}x{row['K']} split {row['split_auto']} "
            f"on {row['split_on']}: ref {us['ref']:.1f} us; {ratios}",
            flush=True,
        )
        with open(args.json, "w") as f:
            json.dump(rows, f)

    for name in args.dtypes.split(","):
        dtype = torch.float32 if name == "tf32" else getattr(torch, name)
        torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
        for m in (int(v) for v in args.ms.split(",")):
            for k, n in LINEAR_LAYERS["cuda"]:
                for layout in ("nt", "nn"):
                    a = make(m, k, False, dtype)
                    b = make(k, n, layout == "nt", dtype)
                    record(point(a, b, args.budget), f"linear {layout}")
        for m, n, k in ((3000, 5000, 2000), (1000, 3000, 5000)):
            for layout in LAYOUTS:
                a, b = make(m, k, layout[0] == "t", dtype), make(k, n, layout[1] == "t", dtype)
                record(point(a, b, args.budget), f"uneven {layout}")
        for s in gemm_shapes(args.random, args.seed, "cuda"):
            a = make(s["M"], s["K"], s["layout"][0] == "t", dtype)
            b = make(s["K"], s["N"], s["layout"][1] == "t", dtype)
            record(point(a, b, args.budget), f"random {s['layout']}")
    # off time / on (auto) time where each runs Stream-K, by kind of point and dtype.
    groups: dict[str, list[dict[str, object]]] = {}
    for r in rows:
        groups.setdefault(f"{str(r['what']).split()[0]} {r['dtype']}", []).append(r)
    for key, rs in groups.items():
        on = [r["us"]["off"] / r["us"]["on"] for r in rs]
        auto = [r["us"]["off"] / r["us"]["auto"] for r in rs if r["split_auto"][1] > 0]
        ref = [r["us"]["ref"] / r["us"]["auto"] for r in rs]
        print(
            f"{key}: {len(rs)} points; off / on {gmean(on):.3f} ({min(on):.3f}-{max(on):.3f}); "
            f"off / auto where it takes Stream-K {gmean(auto):.3f} over {len(auto)}; "
            f"cuBLAS / auto {gmean(ref):.3f}"
        )
    print(f"wrote {len(rows)} rows to {args.json}")


if __name__ == "__main__":
    main()
