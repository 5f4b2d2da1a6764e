"""Times the GEMM with its large operand loaded under L2's evict-first policy against the same
build without it (``_set_gemm_l2_stream``: the skinny kernels, the narrow tile and the wgmma kernel
with one tile row or column), beside cuBLAS, at the linear layers of ``lltm-ext bench --linear``.

At each point (layer, M of --ms, layout t: x @ W.T with W (N, K), or n: x @ W with W (K, N),
dtype, flush), one interleaved timing (``lltm_ext.cli.sweep.time_medians``) of cuBLAS, ours with
the hint ("on") and ours without it ("off"), each checked against float64 first. Flush "write"
(the linear bench's ratios) leaves L2 full of dirty lines before each sample, "read" leaves it
clean. One JSON row per point, and a summary: per flush, dtype, layout and M, the geometric mean
of cuBLAS time / ours, on and off, and of off / on.

    python benchmarks/gemm_skinny/measure_l2_stream.py l2.json --ms 1,8,16,32,128

benchmarks/results/gemm_skinny: h100_l2_stream.json (that command, the hint at one tile row and no
size limit), h100_l2_stream_limit.json (--ms 1,32,128 --dtypes bfloat16, with the limit of three
L2s). The tile-row bound came from measure_linear_ab.py runs of one build at 1, 4, 8 and 16 rows
(a knob since removed): h100_l2_stream_rows.json; against the build before:
h100_l2_stream_ab.json; the sweep with it off and on: h100_l2_stream_sweep.json.
"""

from __future__ import annotations

import argparse
import json
import math

import torch
from rows import linear_setup, timed_row  # this folder's (run as a script from here)

import lltm_ext
from lltm_ext._extension import load_extension


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", help="where to write the rows")
    parser.add_argument("--ms", default="1,8,16,32,128")
    parser.add_argument("--dtypes", default="bfloat16,float16")
    parser.add_argument("--layouts", default="t,n")
    parser.add_argument("--flushes", default="write,read", help="time_medians' flush modes")
    parser.add_argument("--budget", type=float, default=0.05, help="seconds of samples per point")
    args = parser.parse_args()
    dev, layers, copy_gbps = linear_setup()
    gemm = load_extension("gemm")
    gen = torch.Generator(device=dev).manual_seed(0)

    def ours(a: torch.Tensor, b: torch.Tensor, on: bool) -> torch.Tensor:
        gemm._set_gemm_l2_stream(on)
        return lltm_ext.gemm(a, b)

    rows = []
    try:
        for flush in args.flushes.split(","):
            for dtype in [getattr(torch, d) for d in args.dtypes.split(",")]:
                for k, n in layers:
                    w = (torch.rand(n, k, device=dev, generator=gen) * 2 - 1).mul_(k**-0.5)
                    w = w.to(dtype)
                    for layout in args.layouts.split(","):
                        b = w.t() if layout == "t" else w.t().contiguous()  # (K, N) either way
                        for m in [int(v) for v in args.ms.split(",")]:
                            a = torch.randn(m, k, device=dev, generator=gen).to(dtype)
                            fns = {
                                "cublas": lambda a=a, b=b: a @ b,
                                "on": lambda a=a, b=b: ours(a, b, True),
                                "off": lambda a=a, b=b: ours(a, b, False),
                            }
                            row = timed_row(
                                a, b, fns, args.budget, flush=flush, layout=layout,
                                dtype=str(dtype).removeprefix("torch."), flush_mode=flush,
                            )  # fmt: skip
                            us = row["us"]
                            assert isinstance(us, dict)
                            rows.append(row)
                            print(f"{flush} {row['dtype']} {layout} M={m} {k}x{n}: cuBLAS "
                                  f"{us['cublas']:.1f} on {us['on']:.1f} off {us['off']:.1f} us",
                                  flush=True)  # fmt: skip
    finally:
        gemm._set_gemm_l2_stream(True)
    summary: dict[str, dict[str, float]] = {}
    for r in rows:
        key = f"{r['flush_mode']} {r['dtype']} {r['layout']} M={r['M']}"
        summary.setdefault(key, {"on": 0.0, "off": 0.0, "off_over_on": 0.0, "n": 0})
    for key, s in summary.items():
        sel = [r for r in rows if f"{r['flush_mode']} {r['dtype']} {r['layout']} M={r['M']}" == key]
        s["on"] = round(_geomean([r["us"]["cublas"] / r["us"]["on"] for r in sel]), 4)
        s["off"] = round(_geomean([r["us"]["cublas"] / r["us"]["off"] for r in sel]), 4)
        s["off_over_on"] = round(_geomean([r["us"]["off"] / r["us"]["on"] for r in sel]), 4)
        s["n"] = len(sel)
        print(key, s)
    environment = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    with open(args.json, "w") as f:
        json.dump(
            {"environment": environment, "copy_gbps": copy_gbps, "summary": summary, "rows": rows},
            f,
            indent=1,
        )


if __name__ == "__main__":
    main()
