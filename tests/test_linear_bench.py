"""`lltm-ext bench --linear` (lltm_ext/cli/linear.py): the GEMM timed as linear layers call it, its
summary's arithmetic, its refusals, and its part of the results files (tools/measure/results.py,
tools/docs/results_md.py)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch

from lltm_ext.cli import linear
from lltm_ext.cli.linear import LinearPoint, summarize_linear
from lltm_ext.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT))  # appended: the installed lltm_ext, if any, stays first

from tools.docs import results_md  # noqa: E402
from tools.measure import results  # noqa: E402


def test_linear_runs_on_the_cpu_and_writes_every_field(tmp_path, capsys):
    out = tmp_path / "linear.json"
    argv = ["bench", "--device", "cpu", "--threads", "1", "--linear", "--budget", "0.002"]
    argv += ["--linear-ms", "1,32", "--linear-layers", "32x48,64x16"]
    argv += ["--dtypes", "float32,bfloat16", "--linear-layouts", "t,n", "--json", str(out)]
    assert main(argv, prog="lltm-ext") == 0
    text = capsys.readouterr().out
    assert "layout t: x @ W.T" in text and "layout n: x @ W" in text and f"wrote {out}" in text

    data = json.loads(out.read_text())
    env = data["environment"]
    assert env["argv"] == ["lltm-ext", *argv] and env["threads"] == 1
    assert env["linear"]["layers"] == [[32, 48], [64, 16]]
    assert env["linear"]["layouts"] == ["t", "n"] and env["linear"]["ms"] == [1, 32]
    copy = data["copy"]
    assert copy["bytes"] == 32 * 48 * 4  # the largest weight: float32, 32 x 48
    assert copy["gbps"] == pytest.approx(2 * copy["bytes"] / copy["us"] / 1e3)

    points = data["points"]
    assert len(points) == 2 * 2 * 2 * 2  # layers x dtypes x Ms x layouts
    seen = {(p["K"], p["N"], p["dtype"], p["M"], p["layout"]) for p in points}
    assert len(seen) == 16
    for p in points:
        size = 4 if p["dtype"] == "float32" else 2
        assert p["w_bytes"] == p["K"] * p["N"] * size
        assert p["ratio"] == pytest.approx(p["ref_us"] / p["ours_us"])
        for side in ("ours", "ref"):
            # On the CPU nothing is flushed, so the bandwidth is of the ratio's own times.
            assert p[f"{side}_bw_us"] == p[f"{side}_us"]
            gbps = p["w_bytes"] / p[f"{side}_us"] / 1e3
            assert p[f"{side}_gbps"] == pytest.approx(gbps)
            assert p[f"{side}_bw_fraction"] == pytest.approx(gbps / copy["gbps"])
            err = p[f"{side}_err"]
            if p["dtype"] == "float32":
                assert err < 1e-5
            else:  # a bfloat16 output is rounded to 8 bits: ~1e-3, not 0 and not garbage
                assert 1e-5 < err < 1e-2
        assert p["samples"] >= 5 and p["flops"] == 2.0 * p["M"] * p["K"] * p["N"]

    summary = data["summary"]
    assert [(s["dtype"], s["layout"], s["M"]) for s in summary] == [
        (d, lay, m) for d in ("float32", "bfloat16") for lay in ("t", "n") for m in (1, 32)
    ]
    for s in summary:
        ps = [
            p
            for p in points
            if (p["dtype"], p["layout"], p["M"]) == (s["dtype"], s["layout"], s["M"])
        ]
        assert s["layers"] == 2
        assert s["geomean"] == pytest.approx(math.sqrt(ps[0]["ratio"] * ps[1]["ratio"]))
        assert s["worst"] == min(p["ratio"] for p in ps)
        if s["M"] == 1:
            assert s["ours_bw_fraction"] == pytest.approx(
                (ps[0]["ours_bw_fraction"] + ps[1]["ours_bw_fraction"]) / 2
            )
        else:
            assert s["ours_bw_fraction"] is None and s["ref_bw_fraction"] is None


def _point(m: int, k: int, ratio: float, bw: float, dtype: str = "bfloat16", layout: str = "t"):
    return LinearPoint(
        M=m,
        K=k,
        N=8,
        layout=layout,
        dtype=dtype,
        ours_us=10.0,
        ref_us=10.0 * ratio,
        ratio=ratio,
        w_bytes=16 * k,
        ours_gbps=1.0,
        ref_gbps=1.0,
        ours_bw_fraction=bw,
        ref_bw_fraction=bw / 2,
        samples=5,
    )


def test_summary_geomean_worst_and_bandwidth_by_hand():
    points = [
        _point(64, 1, 4.0, 0.1),
        _point(1, 1, 2.0, 0.9),
        _point(1, 2, 0.5, 0.6),
        _point(1, 3, 1.0, 0.3),
        _point(64, 2, 1.0, 0.2),
        _point(1, 1, 0.8, 0.5, dtype="float16"),
        _point(1, 1, 3.0, 0.5, layout="n"),
    ]
    got = {(s.dtype, s.layout, s.M): s for s in summarize_linear(points)}
    # in order: dtypes and layouts as first seen, M ascending
    assert list(got) == [
        ("bfloat16", "t", 1),
        ("bfloat16", "t", 64),
        ("bfloat16", "n", 1),
        ("float16", "t", 1),
    ]
    s = got["bfloat16", "t", 1]
    assert s.layers == 3 and s.geomean == pytest.approx(1.0)  # (2 x 0.5 x 1) ** (1/3)
    assert (s.worst, s.worst_layer) == (0.5, "2x8")
    assert s.ours_bw_fraction == pytest.approx(0.6) and s.ref_bw_fraction == pytest.approx(0.3)
    s = got["bfloat16", "t", 64]
    assert s.geomean == pytest.approx(2.0) and (s.worst, s.worst_layer) == (1.0, "2x8")
    assert s.ours_bw_fraction is None and s.ref_bw_fraction is None  # M > 16: not memory-bound
    assert got["float16", "t", 1].geomean == pytest.approx(0.8)
    assert got["bfloat16", "n", 1].worst == 3.0
    table = "\n".join(linear.format_table(summarize_linear(points), "t"))
    assert " 1.000x  0.500x 2x8" in table and "0.60/0.30" in table
    assert "bfloat16" in table and "float16" in table


def test_layout_t_passes_a_transposed_view_and_weights_are_nn_linears(monkeypatch):
    """Layout t hands lltm_ext.gemm W.t() of a (N, K) weight, a view (no copy); layout n a (K, N)
    weight. W is uniform in +-1/sqrt(K) (nn.Linear's init), x random normal."""
    import lltm_ext

    seen = []

    def gemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        seen.append((tuple(b.shape), b.stride(), b.is_contiguous()))
        return a @ b

    monkeypatch.setattr(lltm_ext, "gemm", gemm)
    opts = linear.LinearOptions(ms=[3], layers=[(64, 24)], dtypes=["float32"], layouts=["t", "n"])
    points, _ = linear.run_linear(torch.device("cpu"), opts, budget_s=1e-4, echo=None)
    assert [p.layout for p in points] == ["t", "n"]
    assert seen[0] == ((64, 24), (1, 64), False)  # W (24, 64) read through .t()
    assert seen[-1] == ((64, 24), (24, 1), True)
    x, w = linear._operands(256, 512, 1000, "float32", torch.device("cpu"), seed=0)
    assert x.shape == (1000, 256) and w.shape == (512, 256)
    assert 0.95 < float(x.std()) < 1.05 and float(x.abs().min()) >= 0
    assert float(w.abs().max()) <= 256**-0.5 and float(w.abs().max()) > 0.9 * 256**-0.5


@pytest.mark.parametrize(
    "args, message",
    [
        (["--linear", "--linear-ms", "0,8"], "--linear-ms takes whole numbers >= 1"),
        (["--linear", "--linear-ms", "a"], "--linear-ms takes whole numbers >= 1"),
        (["--linear", "--linear-layers", "4096"], "--linear-layers takes KxN pairs"),
        (["--linear", "--linear-layers", "64x0"], "got '64x0'"),
        (["--linear", "--linear-layouts", "t,q"], "unknown --linear-layouts ['q']; known: t: x"),
        (["--linear", "--dtypes", "tf32"], "times --dtypes bfloat16,float16,float32 on cpu"),
        (["--linear", "--dtypes", "float64"], "got ['float64']"),
        (["--linear-ms", "8"], "--linear-ms needs --linear"),
        (["--linear-layouts", "n", "--linear-layers", "8x8"], "--linear-layers, --linear-layouts"),
        (["--linear", "--sweep", "3"], "it takes no --sweep"),
        (["--linear", "--plot", "x.png"], "it takes no --plot"),
        (["--linear", "--ops", "relu"], "--linear times gemm only"),
    ],
)
def test_bad_arguments_are_refused_before_timing(capsys, args, message):
    assert main(["bench", "--device", "cpu", *args], prog="lltm-ext") == 2
    captured = capsys.readouterr()
    assert message in captured.err, captured.err
    assert "environment:" not in captured.out


def test_linear_options_defaults_per_device():
    cpu = linear.linear_options("cpu")
    assert cpu.ms == [1, 8, 16, 32, 128, 512] and cpu.layouts == ["t"]
    assert cpu.dtypes == ["bfloat16", "float32"] and len(cpu.layers) == 3
    cuda = linear.linear_options("cuda")
    assert cuda.ms[-1] == 8192 and cuda.dtypes == ["bfloat16", "float16"]
    assert (8192, 28672) in cuda.layers and len(cuda.layers) == 8
    assert linear.linear_options("cuda", layers=" 8x16, 32X4,8x16").layers == [(8, 16), (32, 4)]
    assert linear.linear_options("cpu", ms="16,1,16").ms == [16, 1]


def _results_with_linear() -> dict:
    def summary(dtype, layout, m, geo, worst, bw):
        return {
            "dtype": dtype,
            "layout": layout,
            "M": m,
            "layers": 2,
            "geomean": geo,
            "worst": worst,
            "worst_layer": "4096x11008",
            "ours_bw_fraction": bw,
            "ref_bw_fraction": None if bw is None else bw + 0.1,
        }

    return {
        "machine": "h200",
        "what": "a GPU",
        "command": results.run_command("h200"),
        "date": "2026-01-01T00:00:00+00:00",
        "build": {"git_commit": "a" * 40, "lltm_ext": "0.1.0"},
        "hardware": {"gpu": "NVIDIA H200"},
        "versions": {"torch": "2.15"},
        "linear": {
            "command": "lltm-ext bench --linear",
            "copy": {"bytes": 8, "us": 1.0, "gbps": 4123.4},
            "summary": [
                summary("bfloat16", "t", 1, 1.234, 0.9, 0.81),
                summary("bfloat16", "t", 512, 1.5, 1.25, None),
                summary("bfloat16", "n", 1, 0.5, 0.25, 0.4),
            ],
            "points": [],
        },
    }


def test_results_md_renders_the_linear_view(monkeypatch, tmp_path):
    (tmp_path / "h200.json").write_text(json.dumps(_results_with_linear()))
    monkeypatch.setattr(results_md, "results_path", lambda m: tmp_path / f"{m}.json")
    text = results_md.render("h200:linear")
    lines = text.splitlines()
    assert lines[0] == (
        "| M | bfloat16 t: geomean | worst (K x N) | bandwidth at M <= 16: ours / ref "
        "| bfloat16 n: geomean | worst (K x N) | bandwidth at M <= 16: ours / ref |"
    )
    assert lines[2] == (
        "| 1 | 1.23x | 0.90x (4096x11008) | 0.81 / 0.91 "
        "| 0.50x | 0.25x (4096x11008) | 0.40 / 0.50 |"
    )
    assert lines[3] == "| 512 | 1.50x | 1.25x (4096x11008) | - |  |  |  |"
    assert "4123 GB/s" in text and "`lltm-ext bench --linear`" in text
    only_n = results_md.render("h200:linear:n")
    assert "bfloat16 n: geomean" in only_n and "bfloat16 t" not in only_n
    assert "| 512 |" not in only_n


def test_results_md_linear_view_without_a_linear_part(monkeypatch, tmp_path):
    data = _results_with_linear()
    del data["linear"]
    (tmp_path / "h200.json").write_text(json.dumps(data))
    monkeypatch.setattr(results_md, "results_path", lambda m: tmp_path / f"{m}.json")
    assert results_md.render("h200:linear") == (
        "_This results file has no linear-layer GEMM table._\n"
    )
    for machine in results.MACHINES:  # the committed files, with or without one, render
        assert results_md.render(f"{machine}:linear").strip()


def test_every_plan_has_a_linear_part_and_import_records_it(tmp_path):
    parts = {d: {s["part"]: s for s in plan} for d, plan in results.PLANS.items()}
    cuda = parts["cuda"]["linear"]["args"]
    assert cuda[:2] == ["--device", "cuda"] and "--linear" in cuda
    assert cuda[cuda.index("--dtypes") + 1] == "bfloat16,float16"
    assert cuda[cuda.index("--linear-layouts") + 1] == "t,n"
    cpu = parts["cpu"]["linear"]["args"]
    assert "--linear" in cpu and cpu[cpu.index("--threads") + 1] == "1"

    commit = "b" * 40
    out = tmp_path / "h200.json"
    out.write_text(
        json.dumps({"machine": "h200", "command": "run", "build": {"git_commit": commit}})
    )
    ran = tmp_path / "ran.json"
    argv = ["lltm-ext", "bench", *cuda, "--json", str(ran)]
    summary = _results_with_linear()["linear"]["summary"]
    ran.write_text(json.dumps({"environment": {"argv": argv}, "summary": summary, "points": []}))
    assert results.import_part("h200", "linear", ran, out, commit) == 0
    doc = json.loads(out.read_text())
    assert doc["linear"]["command"] == "lltm-ext bench " + " ".join(cuda)
    assert doc["linear"]["summary"][0]["geomean"] == 1.234 and "sweeps" not in doc
    # The file's command measures again what it holds: the part recorded, by its plan's name.
    assert doc["command"] == results.run_command("h200") + " --parts linear"
