"""The picture of `lltm-ext bench --plot PATH`: one panel per op, lltm_ext against PyTorch.

Bars are medians, error bars the interquartile range (25th-75th percentile). Element-wise ops are
drawn in GB/s with the copy bandwidth measured in the same run as their roofline; GEMM in TFLOP/s
with the reference's (cuBLAS / MKL) rate as its ceiling; other ops in time per call.
matplotlib is an optional extra (``pip install 'lltm_ext[plot]'``), drawn with the Agg backend.
"""

from __future__ import annotations

import math
import re
from typing import Any

INSTALL_HINT = "pip install 'lltm_ext[plot]'"
_DTYPES = {"float32": "fp32", "float64": "fp64", "float16": "fp16", "bfloat16": "bf16"}


def require_matplotlib() -> None:
    """Import matplotlib with the Agg backend, or raise ImportError saying how to install it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot
    except ImportError as exc:
        raise ImportError(
            f"--plot needs matplotlib, which is not installed ({exc}); install it with: "
            f"{INSTALL_HINT}"
        ) from exc


def _short_size(size: str) -> str:
    match = re.search(r"\(2\^(\d+)\)", size)
    return f"$2^{{{match.group(1)}}}$" if match else size


def _metric(rows: list[dict]) -> tuple[str, str, bool]:
    """(row key prefix suffix, axis label, higher is better) shared by all of an op's rows."""
    if all("ours_tflops" in r for r in rows):
        return "tflops", "TFLOP/s (higher is better)", True
    if all("ours_gbps" in r for r in rows):
        return "gbps", "GB/s (higher is better)", True
    return "us", "time per call, us (lower is better)", False


def _value(r: dict, side: str, metric: str) -> tuple[float, float, float]:
    """(median, low, high) of `side` ('ours' or 'ref') in `metric`."""
    if metric == "us":
        return r[f"{side}_us"], r[f"{side}_p25_us"], r[f"{side}_p75_us"]
    return r[f"{side}_{metric}"], r[f"{side}_{metric}_p25"], r[f"{side}_{metric}_p75"]


def _panel(ax: Any, op: str, rows: list[dict]) -> None:
    metric, ylabel, _ = _metric(rows)
    refs = sorted({r["ref"] for r in rows})
    one_ref = len(refs) == 1
    width = 0.38
    xs = list(range(len(rows)))
    for offset, side, label, color in (
        (-width / 2, "ours", "lltm_ext", "#1f77b4"),
        (width / 2, "ref", refs[0] if one_ref else "PyTorch reference", "#ff7f0e"),
    ):
        vals = [_value(r, side, metric) for r in rows]
        ax.bar(
            [x + offset for x in xs],
            [v[0] for v in vals],
            width,
            yerr=[[v[0] - v[1] for v in vals], [v[2] - v[0] for v in vals]],
            capsize=3,
            label=label,
            color=color,
            error_kw={"elinewidth": 1, "ecolor": "#333333"},
        )
    roof_key = {"gbps": "roofline_gbps", "tflops": "roofline_tflops"}.get(metric)
    labelled = False
    for x, r in zip(xs, rows, strict=True):
        if roof_key and roof_key in r:
            name = "copy, same bytes" if r.get("roofline") == "copy" else f"ceiling: {r['ref']}"
            ax.hlines(
                r[roof_key],
                x - 0.48,
                x + 0.48,
                colors="black",
                linestyles="--",
                linewidth=1.2,
                label=None if labelled else name,
            )
            labelled = True
    if metric == "us":
        medians = [_value(r, s, metric)[0] for r in rows for s in ("ours", "ref")]
        if max(medians) / max(min(medians), 1e-9) > 30:
            ax.set_yscale("log")
    # The ratio (reference time / ours) above each pair.
    for x, r in zip(xs, rows, strict=True):
        top = max(_value(r, s, metric)[2] for s in ("ours", "ref"))
        if roof_key and roof_key in r:
            top = max(top, r[roof_key])
        ax.annotate(
            f"{r['speedup']:.2f}x",
            (x, top),
            xytext=(0, 3),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=8,
            color="#333333",
        )
    labels = []
    for r in rows:
        dtype = _DTYPES.get(r["dtype"], r["dtype"])
        size = _short_size(r["size"])
        if dtype in r["case"]:
            label = f"{r['case']}\n{size}"
        elif len(size) > 12:  # e.g. "B=256 I=256 S=256": a line of its own
            label = f"{r['case']} {dtype}\n{size}"
        else:
            label = f"{r['case']}\n{dtype} {size}"
        if not one_ref:
            label += f"\nvs {r['ref']}"
        labels.append(label)
    ax.set_xticks(xs)
    ax.set_xticklabels(labels, fontsize=7.5)
    ax.set_ylabel(ylabel, fontsize=9)
    if ax.get_yscale() == "linear":
        ax.set_ylim(0, ax.get_ylim()[1] * 1.12)  # room for the ratios
    else:
        lo, hi = ax.get_ylim()
        ax.set_ylim(lo, hi * 2)
    pad = max(0.1, (2.2 - len(rows)) / 2)  # a panel with one case keeps narrow bars
    ax.set_xlim(-0.5 - pad, len(rows) - 0.5 + pad)
    ax.set_title(op, fontsize=11, fontweight="bold", pad=20)
    ax.tick_params(axis="y", labelsize=8)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    # Between the title and the plot, so that it hides no bar.
    ax.legend(fontsize=7.5, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, frameon=False)


def plot(rows: list[dict], meta: dict[str, Any], path: str) -> None:
    """Draw `rows` (from run_cases) into a PNG at `path`; `meta` from bench.metadata()."""
    require_matplotlib()
    import matplotlib.pyplot as plt

    ops: dict[str, list[dict]] = {}
    for r in rows:
        ops.setdefault(r["op"], []).append(r)
    if not ops:
        raise ValueError("nothing to plot: no results")
    ncols = min(3, len(ops))
    nrows = math.ceil(len(ops) / ncols)
    widest = max(len(v) for v in ops.values())
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(max(4.6, 1.0 + 1.15 * widest) * ncols, 3.9 * nrows + 0.9),
        squeeze=False,
    )
    for ax, (op, op_rows) in zip(axes.flat, ops.items(), strict=False):
        _panel(ax, op, op_rows)
    for ax in list(axes.flat)[len(ops) :]:
        ax.remove()
    if meta.get("device", "").startswith("cuda"):
        where = f"GPU: {meta.get('gpu') or ', '.join(meta.get('gpus', []))}"
    else:
        threads = meta.get("threads", "?")
        where = f"CPU: {meta.get('cpu', '?')}, {threads} thread{'' if threads == 1 else 's'}"
    fig.suptitle(
        f"lltm_ext {meta.get('lltm_ext', '?')} vs PyTorch {meta.get('torch', '?')}, {where}\n"
        f"bars: median, error bars: IQR (25th-75th percentile); ratio above each pair = "
        f"PyTorch time / lltm_ext time; {meta.get('timestamp', '')}",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=90)
    plt.close(fig)
