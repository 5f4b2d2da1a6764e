"""Two builds of the GEMM compared where users run it: the linear layers of `lltm-ext bench
--linear` (bfloat16, or `--dtype float16`; `x @ W.T` "nt" and `x @ W` "nn", M = 64-2048) and
3000x5000x2000 in every layout, each point `lltm_ext.gemm` (the auto plan) against cuBLAS,
interleaved, checked against float64. `run` times the build it imports; `compare` puts runs of two
builds side by side (each run's ratios to cuBLAS, so runs from separate processes on one machine
compare), per M and point by point. `run --knobs cluster=2` times one build with the wgmma
kernel's switches set (`_set_gemm_wgmma_knobs`), so that one build's variants compare the same way.

    PYTHONPATH=<build A> python benchmarks/gemm_tc_plan/measure_linear_ab.py run a1.json
    PYTHONPATH=<build B> python benchmarks/gemm_tc_plan/measure_linear_ab.py run b1.json
    python benchmarks/gemm_tc_plan/measure_linear_ab.py compare out.json base=a1.json lean=b1.json
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any


def points(
    ms: tuple[int, ...] = (64, 128, 256, 512, 1024, 2048),
) -> list[tuple[int, int, int, str]]:
    """(M, N, K, layout) of every point: the linear layers at each M of ms, and 3000x5000x2000."""
    from lltm_ext.cli.linear import LINEAR_LAYERS

    out = [
        (m, n, k, layout) for m in ms for k, n in LINEAR_LAYERS["cuda"] for layout in ("nt", "nn")
    ]
    return out + [(3000, 5000, 2000, layout) for layout in ("nn", "nt", "tn", "tt")]


def run(
    path: str, budget: float, ms: tuple[int, ...], knobs: dict[str, int], dtype: str = "bfloat16"
) -> None:
    """Times every point (ours and cuBLAS interleaved, `budget` seconds of samples a point) at the
    linear layers' M of ms in `dtype`, with the wgmma switches `knobs` set, and writes the rows to
    path."""
    import torch
    from measure_tile_widths import operands  # this folder's (run as a script from here)

    import lltm_ext
    from lltm_ext._extension import load_extension
    from lltm_ext.cli.sweep import time_medians

    if not torch.cuda.is_available():
        raise SystemExit("measure_linear_ab.py: times CUDA kernels, but torch sees no GPU")
    ext, rows = load_extension("gemm"), []
    ext._set_gemm_wgmma_knobs(**knobs)
    for m, n, k, layout in points(ms):
        a, b = operands(m, n, k, layout, getattr(torch, dtype))
        ref = a.double() @ b.double()
        err = float((lltm_ext.gemm(a, b).double() - ref).norm() / ref.norm())
        assert err < 1e-2, (m, n, k, layout, err)
        fns = [lambda a=a, b=b: lltm_ext.gemm(a, b), lambda a=a, b=b: a @ b]
        t, samples = time_medians(fns, torch.device("cuda"), budget)
        plan = ext._cuda_tc_plan(a, b)
        rows.append({"M": m, "N": n, "K": k, "layout": layout,
                     "plan": [*plan[:4], plan[9]], "auto": t[0] * 1e6, "ref": t[1] * 1e6,
                     "err": err, "samples": samples})  # fmt: skip
        r = rows[-1]
        print(f"{m}x{n}x{k} {layout} {r['plan']} ours {r['auto']:.1f} cuBLAS {r['ref']:.1f} us "
              f"{r['ref'] / r['auto']:.3f}x", flush=True)  # fmt: skip
    with open(path, "w") as f:
        json.dump(
            {"device": torch.cuda.get_device_name(), "dtype": dtype, "knobs": knobs, "rows": rows},
            f,
            indent=1,
        )


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def compare(out: str, runs: dict[str, str], what: str = "") -> None:
    """The runs (name -> file) side by side: per M, each run's geometric mean and worst of cuBLAS
    time over ours; each later run's time over the first's, point by point (geometric mean, min,
    max); the runs' rows kept whole, with `what` (the builds, the machine)."""
    data = {name: json.load(open(path)) for name, path in runs.items()}
    first = next(iter(data.values()))["rows"]
    per_m: dict[str, Any] = {}
    for m in sorted({r["M"] for r in first}):
        per_m[str(m)] = {}
        for name, d in data.items():
            q = [r["ref"] / r["auto"] for r in d["rows"] if r["M"] == m]
            per_m[str(m)][name] = {"geomean": round(_geomean(q), 4), "worst": round(min(q), 4)}
    key = lambda r: (r["M"], r["N"], r["K"], r["layout"])  # noqa: E731
    base = {key(r): r["auto"] for r in first}
    speedup = {}
    for name, d in list(data.items())[1:]:
        q = [base[key(r)] / r["auto"] for r in d["rows"] if key(r) in base]
        speedup[name] = {"geomean": round(_geomean(q), 4), "min": round(min(q), 4),
                         "max": round(max(q), 4)}  # fmt: skip
    summary = {"per_m_ref_over_ours": per_m, "first_run_time_over_each": speedup}
    with open(out, "w") as f:
        json.dump({"what": what, "summary": summary, "runs": data}, f, indent=1)
    for m, by_run in per_m.items():
        print(f"M={m:>5}", "  ".join(f"{n} {v['geomean']:.3f} ({v['worst']:.3f})"
                                     for n, v in by_run.items()))  # fmt: skip
    print("first run's time over each later run's:", speedup)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    r = sub.add_parser("run", help="time the build on PYTHONPATH")
    r.add_argument("json")
    r.add_argument("--budget", type=float, default=0.12, help="seconds of samples a point")
    r.add_argument("--ms", default="64,128,256,512,1024,2048", help="the linear layers' M")
    r.add_argument("--knobs", nargs="*", default=[], help="name=value: _set_gemm_wgmma_knobs")
    r.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    c = sub.add_parser("compare", help="runs side by side")
    c.add_argument("json")
    c.add_argument("runs", nargs="+", help="name=file, the first the baseline")
    c.add_argument(
        "--what", default="", help="what the runs are (builds, machine), kept in the JSON"
    )
    args = parser.parse_args()
    if args.what == "run":
        ms = tuple(int(m) for m in args.ms.split(","))
        knobs = {k: int(v) for k, v in (item.split("=", 1) for item in args.knobs)}
        run(args.json, args.budget, ms, knobs, args.dtype)
    else:
        compare(args.json, dict(item.split("=", 1) for item in args.runs), args.what)


if __name__ == "__main__":
    main()
