"""The README's and the design notes' tables and pictures, rendered from the results files.

Each machine's figures live in ``benchmarks/results/<machine>.json`` (written by
``python tools/measure/results.py run --machine NAME``). A document shows them in blocks between
markers, written by this script and never by hand::

    <!-- results:h200:ops -->
    ... (generated) ...
    <!-- /results:h200:ops -->

A block's name is ``MACHINE:VIEW[:OP]``:

* ``about``: one line: the hardware, the build (version, commit, architectures), the date, the
  parts measured at earlier builds (``results.py run --keep-older``; each part's figures name
  that build too), the command that measured it;
* ``ops``: the fixed cases of every op, one row per op, case, dtype and reference, the ratio's
  range over the sizes;
* ``cases:OP``: every fixed case of one op, with its times and each reference's ratio;
* ``sweep`` / ``sweep:OP``: the random-shape sweeps' distributions (geometric mean, 10th
  percentile, worst, median, points below 1.0x, errors against float64);
* ``worst:OP``: a sweep's worst shapes, per dtype;
* ``linear`` / ``linear:LAYOUT``: GEMM as linear layers call it (``lltm-ext bench --linear``), a
  row per number of tokens M; per dtype and layout (``t``: ``x @ W.T``; ``n``: W stored (K, N))
  the geometric mean and the worst of the ratios over the layers, and at M <= 16 the median
  fraction of the copy bandwidth of lltm_ext / of the reference;
* ``accuracy``: the float32 sequence's error against float64 at each precision setting;
* ``pictures`` / ``pictures:bench`` / ``pictures:sweep``: the machine's pictures, as image links.

A machine with no results file yet renders one line saying so and the command that makes it.
Pictures (``docs/bench_<machine>.png``, ``docs/sweep_<machine>.png``) are drawn from the same files
when matplotlib is installed.

Usage: python tools/docs/results_md.py [--write | --check]   (default: list the blocks)
``--check`` fails when a committed block differs from what ``--write`` would write
(tests/test_results.py runs it; pictures are not compared).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT))  # appended: the installed lltm_ext, if any, stays first

from tools.measure.results import MACHINES, results_path, run_command  # noqa: E402

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(
    r"(?P<open><!-- results:(?P<name>[\w.:,-]+) -->\n)(?P<body>.*?)"
    r"(?P<close><!-- /results:(?P=name) -->)",
    re.S,
)
_LAYOUT = re.compile(r"_(nt|tn|tt)$")


def load(machine: str) -> dict[str, Any] | None:
    """A machine's committed results, or None when it has none yet."""
    path = results_path(machine)
    if not path.is_file():
        return None
    with open(path) as f:
        return json.load(f)


def _x(r: float) -> str:
    return f"{r:.2f}x"


def _range(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return _x(lo) if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}x"


def _err(value: float | None) -> str:
    return "" if value is None else f"{value:.1e}"


def _table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Views.
# ----------------------------------------------------------------------------------------------


def older_build(data: dict[str, Any], part: str) -> str:
    """Where the file's part `part` (bench, sweep:NAME, linear, accuracy) was measured at an
    earlier build than the file's (results.py run --keep-older): " (build `COMMIT`, DATE)"."""
    b = data.get("part_builds", {}).get(part)
    return f" (build `{b['git_commit'][:10]}`, {b['date'][:10]})" if b else ""


def view_about(data: dict[str, Any]) -> str:
    b, hw = data["build"], data["hardware"]
    where = hw.get("gpu") or f"{hw.get('cpu', '?')} ({hw.get('cpu_isa', '?')})"
    archs = f", architectures {b['cuda_arch_list']}" if b.get("cuda_arch_list") else ""
    dirty = " with local changes" if b.get("git_dirty") else ""
    older = ""
    if data.get("part_builds"):  # grouped by build: "`COMMIT` (DATE): part, part; ..."
        groups: dict[tuple[str, str], list[str]] = {}
        for k, v in data["part_builds"].items():
            groups.setdefault((v["git_commit"][:10], v["date"][:10]), []).append(k)
        older = "; from earlier builds: " + "; ".join(
            f"`{c}` ({d}): {', '.join(ks)}" for (c, d), ks in groups.items()
        )
    return (
        f"{data['what']}: {where}; lltm_ext {b['lltm_ext']} at commit "
        f"`{(b.get('git_commit') or '?')[:10]}`{dirty}{archs}, torch {data['versions']['torch']}; "
        f"{data['date'][:10]}{older}; `{data['command']}`"
    )


def view_ops(data: dict[str, Any], op: str | None = None) -> str:
    if "bench" not in data:
        return "_This results file has no fixed cases._"
    groups: dict[tuple[str, str, str, str], list[dict]] = {}
    for r in data["bench"]["results"]:
        if op is None or r["op"] == op:
            key = (r["op"], _LAYOUT.sub("", r["case"]), r["dtype"], r["ref"])
            groups.setdefault(key, []).append(r)
    rows = []
    for (name, case, dtype, ref), rs in groups.items():
        sizes = ", ".join(dict.fromkeys(r["size"].split(" (")[0] for r in rs))
        others = dict.fromkeys(n for r in rs for n in r.get("also", {}))
        also = "; ".join(
            f"{n} {_range([r['also'][n]['speedup'] for r in rs if n in r.get('also', {})])}"
            for n in others
        )
        rows.append([name, case, dtype, sizes, ref, _range([r["speedup"] for r in rs]), also])
    head = ["op", "case", "dtype", "sizes", "reference", "ratio", "other references: ratio"]
    return _table(head, rows) + _bench_older(data)


def _bench_older(data: dict[str, Any]) -> str:
    older = older_build(data, "bench")
    return f"\n\nMeasured at an earlier build{older}." if older else ""


def view_cases(data: dict[str, Any], op: str) -> str:
    rows = [r for r in data.get("bench", {}).get("results", []) if r["op"] == op]
    if not rows:
        return f"_This results file has no fixed cases of {op}._"
    others = list(dict.fromkeys(name for r in rows for name in r.get("also", {})))
    head = ["case", "dtype", "size", "ours, us (IQR %)", "reference, us", "ratio"]
    head += [f"ratio vs {name}" for name in others]
    out = []
    for r in rows:
        iqr = (r["ours_p75_us"] - r["ours_p25_us"]) / r["ours_us"] * 100
        line = [
            r["case"],
            r["dtype"],
            r["size"].split(" (")[0],
            f"{r['ours_us']:.1f} ({iqr:.0f}%)",
            f"{r['ref_us']:.1f} ({r['ref']})",
            _x(r["speedup"]),
        ]
        line += [_x(r["also"][n]["speedup"]) if n in r.get("also", {}) else "" for n in others]
        out.append(line)
    return _table(head, out) + _bench_older(data)


def view_sweep(data: dict[str, Any], op: str | None = None) -> str:
    wanted = None if op is None else op.split(",")  # sweep:a,b: those sweeps, in that order
    all_sweeps = data.get("sweeps", {})
    sweeps = (
        dict(all_sweeps)
        if wanted is None
        else {k: all_sweeps[k] for k in wanted if k in all_sweeps}
    )
    if not sweeps:
        return "_This results file has no sweep" + (f" of {op}._" if op else "._")
    head = ["op", "dtype", "shapes", "geometric mean", "10th percentile", "worst", "median"]
    head += ["below 1.0x", "max error vs float64: ours / reference"]
    rows = []
    for name, sweep in sweeps.items():
        for s in sweep["summary"]:
            below = sum(
                1
                for p in sweep["points"]
                if p["op"] == s["op"] and p["dtype"] == s["dtype"] and p["ratio"] < 1.0
            )
            err = ""
            if s.get("max_err") is not None:
                err = f"{_err(s['max_err'])} / {_err(s['max_ref_err'])}"
            # the op as timed (lltm_sequence[l2]: two layers), and the fixed large shapes named
            label = s["op"] + (", large shapes" if name.endswith("_large") else "")
            label += ", calls back to back" if name.endswith("_loop") else ""
            rows.append(
                [
                    label,
                    s["dtype"],
                    str(s["points"]),
                    _x(s["geomean"]),
                    _x(s["p10"]),
                    _x(s["minimum"]),
                    _x(s["median"]),
                    str(below),
                    err,
                ]
            )
    commands = "; ".join(
        f"`{sweep['command']}`{older_build(data, f'sweep:{name}')}"
        for name, sweep in sweeps.items()
    )
    return _table(head, rows) + f"\n\n{commands}"


def view_worst(data: dict[str, Any], op: str) -> str:
    sweep = data.get("sweeps", {}).get(op)
    if sweep is None:
        return f"_This results file has no sweep of {op}._"
    return "\n".join(f"- {s['dtype']}: " + "; ".join(s["worst"]) for s in sweep["summary"])


def view_linear(data: dict[str, Any], layout: str | None = None) -> str:
    """The --linear part's per-M table: a row per M; per (dtype, layout) three columns: the
    geometric mean of the ratios over the layers, the worst (its layer K x N), and at small M the
    median fraction of the copy bandwidth, lltm_ext's / the reference's ("-" at larger M)."""
    linear = data.get("linear") or {}
    summary = [s for s in linear.get("summary", []) if layout in (None, s["layout"])]
    if not summary:
        what = f" of layout {layout}" if layout else ""
        return f"_This results file has no linear-layer GEMM table{what}._"
    groups = list(dict.fromkeys((s["dtype"], s["layout"]) for s in summary))
    by = {(s["dtype"], s["layout"], s["M"]): s for s in summary}
    head = ["M"]
    for dtype, lay in groups:
        head += [f"{dtype} {lay}: geomean", "worst (K x N)", "bandwidth at M <= 16: ours / ref"]
    rows = []
    for m in sorted({s["M"] for s in summary}):
        row = [str(m)]
        for dtype, lay in groups:
            s = by.get((dtype, lay, m))
            if s is None:
                row += ["", "", ""]
                continue
            bw = "-"
            if s.get("ours_bw_fraction") is not None:
                bw = f"{s['ours_bw_fraction']:.2f} / {s['ref_bw_fraction']:.2f}"
            row += [_x(s["geomean"]), f"{_x(s['worst'])} ({s['worst_layer']})", bw]
        rows.append(row)
    # As lltm_ext.cli.linear.LINEAR_LAYOUTS says (not imported: rendering needs no build).
    layouts = {"t": "x @ W.T, W (N, K) as nn.Linear stores it", "n": "x @ W, W stored (K, N)"}
    names = "; ".join(f"{k}: {v}" for k, v in layouts.items() if any(g[1] == k for g in groups))
    copy = linear.get("copy", {})
    note = f"{names}. Ratio: reference time / lltm_ext time over the layers."
    if copy.get("gbps"):
        clean = " (both timed with L2 left clean)" if copy.get("flush") == "read" else ""
        note += (
            f" Bandwidth: W bytes / time as a fraction of a copy's, {copy['gbps']:.0f} GB/s{clean}."
        )
    return _table(head, rows) + f"\n\n{note} `{linear['command']}`{older_build(data, 'linear')}"


def view_accuracy(data: dict[str, Any]) -> str:
    acc = data.get("accuracy")
    if acc is None:
        return "_This results file has no accuracy table._"
    cols = [c for c in acc["rows"][0] if c != "shape"]
    rows = [[", ".join(map(str, r["shape"]))] + [_err(r[c]) for c in cols] for r in acc["rows"]]
    return _table(["T, B, I, S", *cols], rows) + (
        f"\n\n`{acc['command']}`{older_build(data, 'accuracy')}"
    )


def view_pictures(data: dict[str, Any], where: str = "docs/", only: str | None = None) -> str:
    """The machine's pictures (`only`: "bench" or "sweep"), as image links from a document in
    `where`'s folder."""
    machine, lines = data["machine"], []
    if "bench" in data and only in (None, "bench"):
        lines.append(
            f"![lltm_ext against PyTorch, every op, on {data['what']}]({where}bench_{machine}.png)"
        )
    if data.get("sweeps") and only in (None, "sweep"):
        lines.append(
            f"![the ratios over random shapes on {data['what']}]({where}sweep_{machine}.png)"
        )
    return "\n\n".join(lines) or "_This results file has no pictures._"


VIEWS = {
    "about": view_about,
    "ops": view_ops,
    "cases": view_cases,
    "sweep": view_sweep,
    "worst": view_worst,
    "linear": view_linear,
    "accuracy": view_accuracy,
    "pictures": view_pictures,
}


def render(name: str, doc: Path = ROOT / "README.md") -> str:
    """The text of block `name` (``MACHINE:VIEW[:OP]``) in document `doc`, ending in a newline."""
    machine, view, *rest = name.split(":")
    if machine not in MACHINES:
        raise ValueError(f"results block {name!r}: unknown machine; known: {sorted(MACHINES)}")
    if view not in VIEWS:
        raise ValueError(f"results block {name!r}: unknown view; known: {sorted(VIEWS)}")
    data = load(machine)
    if data is None and view != "about":
        return f"_(no {machine} results yet: see its `about` line)_\n"
    if data is None:
        return (
            f"_No {machine} results committed yet: run `{run_command(machine)}` on "
            f"{MACHINES[machine]['what']}, commit `benchmarks/results/{machine}.json`, then "
            "`python tools/docs/results_md.py --write`._\n"
        )
    if view == "pictures":  # image paths relative to the document
        rest = ["" if doc.parent == ROOT / "docs" else "docs/", *rest]
    return VIEWS[view](data, *rest).rstrip("\n") + "\n"


def rewrite(text: str, doc: Path) -> str:
    """`text` (of document `doc`) with every results block rendered anew."""
    return BLOCK.sub(lambda m: m["open"] + render(m["name"], doc) + m["close"], text)


def stale() -> list[str]:
    """The blocks whose committed text differs from what --write writes, as 'FILE: NAME'."""
    out = []
    for doc in DOCS:
        text = doc.read_text()
        for m in BLOCK.finditer(text):
            if m["body"] != render(m["name"], doc):
                out.append(f"{doc.relative_to(ROOT)}: {m['name']}")
    return out


def pictures() -> list[Path]:
    """Draw each machine's pictures from its results file (needs matplotlib); the paths drawn."""
    from lltm_ext.cli.plot import plot
    from lltm_ext.cli.sweep import SweepPoint, plot_sweep

    drawn = []
    for machine in MACHINES:
        data = load(machine)
        if data is None:
            continue
        meta = {
            **data["hardware"],
            "lltm_ext": data["build"]["lltm_ext"],
            "torch": data["versions"]["torch"],
        }
        if "bench" in data:
            path = ROOT / "docs" / f"bench_{machine}.png"
            plot(data["bench"]["results"], {**meta, **data["bench"]["environment"]}, str(path))
            drawn.append(path)
        points = [SweepPoint(**p) for s in data.get("sweeps", {}).values() for p in s["points"]]
        if points:
            path = ROOT / "docs" / f"sweep_{machine}.png"
            plot_sweep(points, meta, str(path))
            drawn.append(path)
    return drawn


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the blocks and the pictures")
    mode.add_argument("--check", action="store_true", help="fail if a block is stale")
    args = parser.parse_args(argv)
    if args.check:
        bad = stale()
        for line in bad:
            print(f"stale: {line}", file=sys.stderr)
        if bad:
            print("run: python tools/docs/results_md.py --write", file=sys.stderr)
        return 1 if bad else 0
    if args.write:
        for doc in DOCS:
            text = doc.read_text()
            new = rewrite(text, doc)
            if new != text:
                doc.write_text(new)
                print(f"wrote {doc.relative_to(ROOT)}")
        try:
            drawn = pictures()
        except ImportError as exc:
            print(f"pictures not drawn: {exc}", file=sys.stderr)
        else:
            for path in drawn:
                print(f"drew {path.relative_to(ROOT)}")
        return 0
    for doc in DOCS:
        for m in BLOCK.finditer(doc.read_text()):
            print(f"{doc.relative_to(ROOT)}: {m['name']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
