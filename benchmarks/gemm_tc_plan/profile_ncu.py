"""Our wgmma kernel beside cuBLAS's under Nsight Compute, at a few linear layers (`x @ W.T` and
`x @ W`, bfloat16): the workload ncu profiles (each point's products once, inside a profiler
range), and the reduction of ncu's raw page to the figures that tell the two apart (time, SM and
tensor-pipe activity, L2 and DRAM traffic and rates, stall reasons per issued instruction).

    ncu --clock-control none --profile-from-start off --set full -o prof \
        python benchmarks/gemm_tc_plan/profile_ncu.py run
    ncu -i prof.ncu-rep --page raw --csv > raw.csv
    ncu -i prof.ncu-rep --page source --csv --print-source sass > sass.csv
    python benchmarks/gemm_tc_plan/profile_ncu.py summarize raw.csv profile.json --sass sass.csv
"""

from __future__ import annotations

import argparse
import csv
import json
from typing import Any

# (M, K, N, layout): layout "t" multiplies by W.t() of a W stored (N, K), "n" by W stored (K, N).
POINTS = (
    (512, 4096, 4096, "t"),
    (128, 4096, 4096, "t"),
    (2048, 4096, 11008, "n"),
    (32, 2048, 8192, "t"),
)

# Metric names kept from ncu's raw page (the stalls per issued instruction are kept apart).
KEEP = (
    "gpu__time_duration.sum",
    "launch__grid_size",
    "launch__cluster_dim_x",
    "launch__registers_per_thread",
    "launch__shared_mem_per_block_dynamic",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "lts__t_sector_hit_rate.pct",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__cycles_elapsed.avg",
    "sm__cycles_active.avg",
    "smsp__inst_executed.sum",
)
STALLS = "smsp__average_warps_issue_stalled_"


def run(show: bool) -> None:
    """Each point's products after warm-up, once each inside cudaProfilerStart / Stop: ours
    (`lltm_ext.gemm`) then cuBLAS (`torch.matmul`); prints each point's plan and, with `show`,
    the kernels each call runs (torch's profiler: not under ncu, whose counters it would take)."""
    import torch

    import lltm_ext
    from lltm_ext._extension import load_extension
    from lltm_ext.explain import _ran

    ext = load_extension("gemm")
    dev, dt = torch.device("cuda"), torch.bfloat16
    calls = []
    for m, k, n, layout in POINTS:
        w = torch.randn(*((n, k) if layout == "t" else (k, n)), device=dev, dtype=dt)
        wt = w.t() if layout == "t" else w
        x = torch.randn(m, k, device=dev, dtype=dt)
        for name, fn in (("ours", lambda x=x, wt=wt: lltm_ext.gemm(x, wt)),
                         ("cublas", lambda x=x, wt=wt: torch.matmul(x, wt))):  # fmt: skip
            for _ in range(3):
                fn()
            calls.append(fn)
            if show:
                print(f"{m}x{k}x{n} {layout} {name}: {_ran(fn)}", flush=True)
        print(f"  plan {ext._cuda_tc_plan(x, wt)}", flush=True)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for fn in calls:
        fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def _number(text: str) -> float | str:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return text


def sass_hotspots(sass_csv: str, top: int = 15) -> list[dict[str, Any]]:
    """Per kernel of ncu's source page (SASS, one table a kernel; a table repeated whole is read
    once), in order: its samples in all and the `top` instructions with the most, each with its
    index in the kernel's SASS, how many times it ran and its three most sampled stall reasons."""
    with open(sass_csv, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    tables: list[list[list[str]]] = []
    for r in rows:
        if r[0] == "Kernel Name":
            tables.append([r])
        elif tables:
            tables[-1].append(r)
    out: list[dict[str, Any]] = []
    for i, t in enumerate(tables):
        if i > 0 and t == tables[i - 1]:
            continue
        header = t[1]
        col = {name: j for j, name in enumerate(header)}
        stall_cols = [j for j, name in enumerate(header)
                      if name.startswith("stall_") and "Not Issued" not in name]  # fmt: skip
        body = [r for r in t[2:] if len(r) == len(header)]
        samples = col["Warp Stall Sampling (All Samples)"]
        ranked = sorted(range(len(body)), key=lambda j: -int(body[j][samples] or 0))[:top]
        hot = []
        for j in ranked:
            r = body[j]
            stalls = sorted(((header[c][6:], int(r[c] or 0)) for c in stall_cols),
                            key=lambda kv: -kv[1])  # fmt: skip
            hot.append({"index": j, "sass": r[col["Source"]].strip(), "samples": int(r[samples]),
                        "executed": int(r[col["Instructions Executed"]] or 0),
                        "stalls": {k: v for k, v in stalls[:3] if v > 0}})  # fmt: skip
        out.append({"name": t[0][1][:160], "samples": sum(int(r[samples] or 0) for r in body),
                    "instructions": len(body), "hot": hot})  # fmt: skip
    return out


def summarize(raw_csv: str, out_json: str, sass_csv: str | None = None, what: str = "") -> None:
    """ncu's raw page (one row a kernel, a units row after the header) to out_json: per kernel in
    launch order, its name, the metrics KEEP keeps with their units, its 12 largest stalls per
    issued instruction and, given the source page (sass_csv), its SASS hot spots; `what`: what
    was profiled (device, build), kept beside them."""
    with open(raw_csv, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    # ncu may print lines of its own before the table: the header is the row naming the metrics.
    start = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
    header, units, body = rows[start], rows[start + 1], rows[start + 2 :]
    col = {name: i for i, name in enumerate(header)}
    keep = [name for name in header if name in KEEP]
    stall_names = [
        n for n in header if n.startswith(STALLS) and n.endswith("per_issue_active.ratio")
    ]
    hotspots = sass_hotspots(sass_csv) if sass_csv else []
    kernels: list[dict[str, Any]] = []
    for i, r in enumerate(body):
        stalls = sorted(((n[len(STALLS) : -len("_per_issue_active.ratio")], _number(r[col[n]]))
                         for n in stall_names), key=lambda kv: -float(kv[1]))  # fmt: skip
        kernel = {
            "name": r[col["Kernel Name"]][:160],
            "metrics": {name: _number(r[col[name]]) for name in keep},
            "units": {name: units[col[name]] for name in keep if units[col[name]]},
            "stalls_per_issue": dict(stalls[:12]),
        }  # fmt: skip
        if i < len(hotspots):
            kernel["sass"] = hotspots[i]
        kernels.append(kernel)
    with open(out_json, "w") as f:
        doc = {"what": what, "points": [list(p) for p in POINTS], "kernels": kernels}
        json.dump(doc, f, indent=1)
    for k in kernels:
        m = k["metrics"]
        print(
            f"{k['name'][:60]:60s} {m.get('gpu__time_duration.sum')} us, tensor pipe "
            f"{m.get('sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active')} % of "
            f"active cycles, {m.get('smsp__inst_executed.sum')} instructions"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    r = sub.add_parser("run", help="the workload ncu profiles")
    r.add_argument("--show", action="store_true", help="list each call's kernels (not under ncu)")
    s = sub.add_parser("summarize", help="ncu's raw page (CSV) to JSON")
    s.add_argument("raw_csv")
    s.add_argument("json")
    s.add_argument("--sass", help="ncu's source page (SASS) as CSV: each kernel's hot spots")
    s.add_argument("--what", default="", help="what was profiled (device, build), kept in the JSON")
    args = parser.parse_args()
    if args.what == "run":
        run(args.show)
    else:
        summarize(args.raw_csv, args.json, args.sass, args.what)


if __name__ == "__main__":
    main()
