"""The README's and the docs' figures are the committed results files' (benchmarks/results/), as
tools/docs/results_md.py renders them; each results file says how it was made. No GPU, no
matplotlib, no build needed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT))  # appended: the installed lltm_ext, if any, stays first

from tools.docs import results_md  # noqa: E402
from tools.measure import results  # noqa: E402

RESULT_FILES = sorted((ROOT / "benchmarks" / "results").glob("*.json"))


def test_docs_tables_are_the_results_files():
    stale = results_md.stale()
    assert not stale, (
        "tables differ from benchmarks/results/ (run python tools/docs/results_md.py --write):\n"
        + "\n".join(stale)
    )


def test_readme_shows_every_machine():
    """The README names every machine's results and shows its pictures; each machine's table of
    every op is in the README or a design note."""
    readme = (ROOT / "README.md").read_text()
    docs = "".join(doc.read_text() for doc in results_md.DOCS)
    for machine in results.MACHINES:
        for view in ("about", "pictures"):
            assert f"<!-- results:{machine}:{view} -->" in readme, (machine, view)
        assert f"<!-- results:{machine}:ops -->" in docs, (machine, "ops")


def test_every_block_names_a_known_machine_and_view():
    for doc in results_md.DOCS:
        for m in results_md.BLOCK.finditer(doc.read_text()):
            results_md.render(m["name"], doc)  # raises on an unknown machine or view


@pytest.mark.parametrize("path", RESULT_FILES, ids=[p.stem for p in RESULT_FILES])
def test_a_results_file_says_how_it_was_made(path):
    data = json.loads(path.read_text())
    assert data["machine"] == path.stem and path.stem in results.MACHINES
    # The command that measures again what the file holds (each part names its own command).
    assert data["command"] == results.file_command(path.stem, results.part_names(data))
    for part in [data.get("bench"), data.get("linear"), *data.get("sweeps", {}).values()]:
        assert part is None or part["command"].startswith("lltm-ext bench ")
    assert data["date"] and data["versions"]["torch"] and data["hardware"]
    build = data["build"]
    assert len(build["git_commit"]) == 40 and build["lltm_ext"]
    assert "bench" in data or "sweeps" in data
    for row in data.get("bench", {}).get("results", []):
        assert row["speedup"] > 0 and row["ours_us"] > 0 and row["ref_us"] > 0


def test_a_machine_without_results_says_which_command_makes_them(monkeypatch, tmp_path):
    monkeypatch.setattr(results_md, "results_path", lambda m: tmp_path / f"{m}.json")
    text = results_md.render("h200:about")
    assert "No h200 results committed yet" in text
    assert results.run_command("h200") in text
    assert "no h200 results yet" in results_md.render("h200:ops")


def test_rendering_a_results_file(monkeypatch, tmp_path):
    """A small made-up file through every view: the tables' shape, not its numbers."""
    row = {
        "op": "gemm",
        "case": "fp32_nt",
        "dtype": "float32",
        "size": "64x64x64",
        "ref": "torch.mm",
        "ours_us": 2.0,
        "ours_p25_us": 1.9,
        "ours_p75_us": 2.1,
        "ref_us": 3.0,
        "speedup": 1.5,
        "also": {"other": {"speedup": 0.5}},
    }
    point = {
        "op": "gemm",
        "dtype": "float32",
        "shape": {"M": 1, "N": 2, "K": 3, "layout": "nn"},
        "flops": 12.0,
        "ours_us": 1.0,
        "ref_us": 0.5,
        "ratio": 0.5,
        "samples": 3,
    }
    summary = {
        "op": "gemm",
        "dtype": "float32",
        "points": 1,
        "geomean": 0.5,
        "p10": 0.5,
        "minimum": 0.5,
        "median": 0.5,
        "maximum": 0.5,
        "worst": ["1x2x3 nn: 0.500x"],
        "max_err": 1e-7,
        "max_ref_err": 2e-7,
    }
    data = {
        "machine": "h200",
        "what": "a GPU",
        "command": results.run_command("h200"),
        "date": "2026-01-01T00:00:00+00:00",
        "build": {"git_commit": "a" * 40, "lltm_ext": "0.1.0", "cuda_arch_list": "9.0"},
        "hardware": {"gpu": "NVIDIA H200"},
        "versions": {"torch": "2.15"},
        "bench": {"results": [row]},
        "sweeps": {
            "gemm": {"command": "lltm-ext bench --sweep 1", "summary": [summary], "points": [point]}
        },
        "accuracy": {"command": "python x", "rows": [{"shape": [1, 2, 3, 4], "a": 1e-6}]},
    }
    (tmp_path / "h200.json").write_text(json.dumps(data))
    monkeypatch.setattr(results_md, "results_path", lambda m: tmp_path / f"{m}.json")
    assert "| gemm | fp32 | float32 | 64x64x64 | torch.mm | 1.50x | other 0.50x |" in (
        results_md.render("h200:ops")
    )
    assert "| float32 | 1 | 0.50x | 0.50x | 0.50x | 0.50x | 1 | 1.0e-07 / 2.0e-07 |" in (
        results_md.render("h200:sweep:gemm")
    )
    assert "architectures 9.0" in results_md.render("h200:about")
    assert "1x2x3 nn: 0.500x" in results_md.render("h200:worst:gemm")
    assert "| 1, 2, 3, 4 | 1.0e-06 |" in results_md.render("h200:accuracy")
    assert "(docs/sweep_h200.png)" in results_md.render("h200:pictures")
    assert "(sweep_h200.png)" in results_md.render("h200:pictures", ROOT / "docs" / "x.md")
    with pytest.raises(ValueError, match="unknown view"):
        results_md.render("h200:nothing")
    # A part kept from an earlier build (results.py run --keep-older) names that build.
    data["part_builds"] = {"sweep:gemm": {"git_commit": "b" * 40, "date": "2025-12-31T00:00"}}
    (tmp_path / "h200.json").write_text(json.dumps(data))
    older = "(build `bbbbbbbbbb`, 2025-12-31)"
    assert f"`lltm-ext bench --sweep 1` {older}" in results_md.render("h200:sweep:gemm")
    assert "from earlier builds: `bbbbbbbbbb` (2025-12-31): sweep:gemm;" in (
        results_md.render("h200:about")
    )
    assert "earlier build" not in results_md.render("h200:ops")


def test_merging_parts_of_an_earlier_build():
    """results.py run --parts P --keep-older: the new build's parts, the earlier file's others,
    each of those marked with its own build; a part run again loses its mark."""

    def doc(commit, date, **parts):
        return {"build": {"git_commit": commit, "lltm_ext": "0.1"}, "date": date,
                "command": f"run {commit[0]}", "seconds": {}, **parts}  # fmt: skip

    a, b, c = "a" * 40, "b" * 40, "c" * 40
    first = doc(a, "d1", bench=1, linear=2, sweeps={"gemm": 3, "seq": 4})
    second = results.merge_parts(first, doc(b, "d2"), ["linear", "sweep:gemm"])
    assert second["bench"] == 1 and "linear" not in second and second["sweeps"] == {"seq": 4}
    mark_a = {"git_commit": a, "lltm_ext": "0.1", "date": "d1"}
    assert second["part_builds"] == {"bench": mark_a, "sweep:seq": mark_a}
    second.update(linear=5, sweeps={**second["sweeps"], "gemm": 6})
    third = results.merge_parts(second, doc(c, "d3"), ["bench"])
    mark_b = {"git_commit": b, "lltm_ext": "0.1", "date": "d2"}
    assert third["part_builds"] == {"sweep:seq": mark_a, "linear": mark_b, "sweep:gemm": mark_b}
    # More parts of the same build: nothing marked but what was already older.
    same = results.merge_parts(third, doc(c, "d3"), ["linear"])
    assert same["part_builds"] == {"sweep:seq": mark_a, "sweep:gemm": mark_b}


def test_the_file_command_names_the_parts_a_file_holds():
    """A results file's command is the one that measures again what it holds: the whole plan's
    where it holds every part (however many runs and builds wrote them), else its parts in the
    plan's order; not the history of the runs that wrote it."""
    whole = [p["part"] for p in results.PLANS["cuda"]]
    assert results.file_command("h200", whole) == results.run_command("h200")
    assert results.file_command("h200", list(reversed(whole))) == results.run_command("h200")
    some = results.file_command("h200", ["accuracy", "sweep:lltm_sequence", "bench"])
    assert some == results.run_command("h200") + " --parts bench,sweep:lltm_sequence,accuracy"
    assert results.file_command("cpu", ["linear"]) == results.run_command("cpu") + " --parts linear"


def test_a_part_not_in_the_plan_is_an_error(tmp_path, capsys):
    """results.py run --parts with a name the machine's plan lacks stops before timing anything
    (a misspelt part would otherwise be left out without a word)."""
    out = tmp_path / "h200.json"
    assert results.run("h200", out, ["linear", "autocast"]) == 2
    assert "no part ['autocast']" in capsys.readouterr().err and not out.exists()
