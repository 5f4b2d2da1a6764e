"""The command line (`lltm-ext` / `python -m lltm_ext`) and the bench harness behind it."""

import argparse
import datetime
import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import lltm_ext
from lltm_ext.cli import bench
from lltm_ext.cli.main import build_parser, main
from lltm_ext.ops import MODULES

ROOT = Path(__file__).resolve().parent.parent


def run_cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lltm_ext", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


# --------------------------------------------------------------------------------------------
# Arguments, help, version.
# --------------------------------------------------------------------------------------------


def test_version_prints_and_exits_0(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"lltm_ext {lltm_ext.__version__} ")
    assert torch.__version__ in out


def test_version_from_a_fresh_process(tmp_path):
    result = run_cli("--version", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert lltm_ext.__version__ in result.stdout


def test_installed_script_calls_itself_lltm_ext(tmp_path):
    script = shutil.which("lltm-ext", path=os.path.dirname(sys.executable))
    if script is None:
        pytest.skip("the lltm-ext script is not installed next to this Python")
    result = subprocess.run(
        [script, "--help"], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: lltm-ext ")


@pytest.mark.parametrize(
    "argv0, prog",
    [
        ("/venv/bin/lltm-ext", "lltm-ext"),
        ("/src/lltm_ext/__main__.py", "python -m lltm_ext"),
        ("", "python -m lltm_ext"),
    ],
)
def test_help_names_the_command_that_was_run(monkeypatch, capsys, argv0, prog):
    monkeypatch.setattr(sys, "argv", [argv0])
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: {prog} ")
    assert f"{prog} bench --quick" in out  # the examples use it too


def test_no_command_prints_help_and_fails(capsys):
    assert main([], prog="lltm-ext") == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "usage: lltm-ext" in captured.err
    assert "lltm-ext: error: no command given; choose one of: info, bench" in captured.err


def _subparser(name: str) -> argparse.ArgumentParser:
    parser = build_parser("lltm-ext")
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sub.choices[name]


@pytest.mark.parametrize("command", ["info", "bench"])
def test_every_option_is_explained(command):
    sub = _subparser(command)
    for action in sub._actions:
        assert action.help and len(action.help) > 15, f"{command} {action.option_strings}"
    assert sub.description
    assert f"examples:\n  lltm-ext {command}" in sub.epilog


def test_bench_help_names_defaults_and_examples():
    text = _subparser("bench").format_help()
    for needle in ("default: 0.4, or 0.1 with --quick", "default: cuda if", "--plot bench.png"):
        assert needle in " ".join(text.split()), needle
    assert "pip install 'lltm_ext[plot]'" in " ".join(text.split())


@pytest.mark.parametrize("bad", ["0", "-1", "soon"])
def test_budget_must_be_positive(capsys, bad):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--budget", bad], prog="lltm-ext")
    assert exit_.value.code == 2
    assert "must be a number of seconds > 0" in capsys.readouterr().err


def test_bench_rejects_unknown_ops_and_missing_folders(capsys, tmp_path):
    assert main(["bench", "--ops", "relu,nope", "--device", "cpu"]) == 2
    assert "unknown ops ['nope']" in capsys.readouterr().err
    missing = tmp_path / "no" / "such" / "b.json"
    assert main(["bench", "--ops", "relu", "--device", "cpu", "--json", str(missing)]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "environment:" not in err


def test_triton_timer_needs_cuda(capsys):
    assert main(["bench", "--device", "cpu", "--timer", "triton", "--ops", "relu"]) == 2
    assert "CUDA only" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# info
# --------------------------------------------------------------------------------------------


def test_info_explains_the_cxx11_abi_row(capsys):
    assert main(["info"]) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if "C++11 ABI" in line]
    assert "_GLIBCXX_USE_CXX11_ABI" in row and "must match torch's" in row


def test_info_json_is_json(capsys):
    assert main(["info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["version"] == lltm_ext.__version__


# --------------------------------------------------------------------------------------------
# The bench: timing, spread, metadata, picture.
# --------------------------------------------------------------------------------------------


def test_timing_quantiles():
    t = bench.Timing([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (t.p25, t.median, t.p75) == (2.0, 3.0, 4.0)
    assert bench.Timing([7.0]).p25 == bench.Timing([7.0]).p75 == 7.0


def test_ours_and_reference_are_timed_interleaved():
    calls = []
    ours, ref = (lambda: calls.append("ours")), (lambda: calls.append("ref"))
    a, b = bench.time_fns([ours, ref], budget_s=0.01, rounds=4)
    assert len(a.samples) >= 4 and len(b.samples) >= 4
    switches = sum(1 for x, y in itertools.pairwise(calls) if x != y)
    # warm-up (ours, ref), then 4 rounds of (ours, ref): at least 9 changes of side.
    assert switches >= 9, f"not interleaved: {switches} switches"
    assert all(s > 0 for s in a.samples + b.samples)


def test_timer_choice():
    cpu = torch.device("cpu")
    assert bench.choose_timer(cpu, "auto") == "torch"
    assert bench.choose_timer(cpu, "torch") == "torch"
    with pytest.raises(ValueError, match="CUDA only"):
        bench.choose_timer(cpu, "triton")
    with pytest.raises(ValueError, match="timer must be"):
        bench.choose_timer(cpu, "stopwatch")
    # On CUDA, auto takes triton's do_bench only where it imports.
    expected = "triton" if bench.triton_available() else "torch"
    assert bench.choose_timer(torch.device("cuda"), "auto") == expected


def test_a_triton_that_does_not_import_is_not_used(monkeypatch):
    import types

    monkeypatch.setitem(sys.modules, "triton", types.ModuleType("triton"))
    monkeypatch.setitem(sys.modules, "triton.testing", None)  # `import triton.testing` raises
    assert not bench.triton_available()
    assert bench.choose_timer(torch.device("cuda"), "auto") == "torch"


@pytest.mark.parametrize("all_mode", [True, False])
def test_triton_timer_samples(monkeypatch, all_mode):
    """The do_bench path (GPU machines), with a stand-in for triton.testing."""
    import types

    seen = {}

    def do_bench(fn, warmup=25, rep=100, quantiles=None, return_mode="mean"):
        seen.update(warmup=warmup, rep=rep)
        fn()
        if return_mode == "all":
            if not all_mode:
                raise AssertionError("old triton: no return_mode='all'")
            return [2.0, 1.0, 3.0]
        return 2.0 if quantiles is None else [2.0]

    testing = types.ModuleType("triton.testing")
    testing.do_bench = do_bench
    triton = types.ModuleType("triton")
    triton.testing = testing
    monkeypatch.setitem(sys.modules, "triton", triton)
    monkeypatch.setitem(sys.modules, "triton.testing", testing)
    samples = bench._TritonTimer(lambda: None).samples(0.05)
    assert samples == ([0.002, 0.001, 0.003] if all_mode else [0.002])
    assert seen["rep"] == pytest.approx(50.0)


def test_bench_writes_json_with_spread_and_metadata_and_a_picture(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    threads = torch.get_num_threads()
    argv = ["bench", "--device", "cpu", "--ops", "relu,gemm", "--quick", "--budget", "0.01"]
    argv += ["--threads", "1"]
    argv += ["--json", str(out), "--plot", str(png)]
    assert main(argv, prog="lltm-ext") == 0
    assert torch.get_num_threads() == threads  # restored
    text = capsys.readouterr().out
    assert "lltm_ext (IQR)" in text and f"wrote {png}" in text

    data = json.loads(out.read_text())
    env = data["environment"]
    assert env["lltm_ext"] == lltm_ext.__version__ and env["torch"] == torch.__version__
    assert env["cpu"] and env["threads"] == 1
    assert isinstance(env["gpus"], list)
    stamp = datetime.datetime.fromisoformat(env["timestamp"])
    assert stamp.utcoffset() == datetime.timedelta(0)
    assert env["argv"] == ["lltm-ext", *argv]
    assert "blocked_autorange" in env["timer"]

    rows = data["results"]
    assert {r["op"] for r in rows} == {"relu", "gemm"}
    for r in rows:
        for side in ("ours", "ref"):
            assert r[f"{side}_p25_us"] <= r[f"{side}_us"] <= r[f"{side}_p75_us"]
            assert r[f"{side}_samples"] >= 5
        assert r["speedup"] == pytest.approx(r["ref_us"] / r["ours_us"])
        if r["op"] == "relu":
            assert r["roofline"] == "copy" and r["roofline_gbps"] > 0
        else:
            assert r["roofline_tflops"] == r["ref_tflops"]

    head = png.read_bytes()[:8]
    assert head == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 10_000


def test_plot_without_matplotlib_fails_before_timing(monkeypatch, capsys, tmp_path):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises
    png = tmp_path / "b.png"
    assert main(["bench", "--device", "cpu", "--ops", "relu", "--plot", str(png)]) == 2
    captured = capsys.readouterr()
    assert "pip install 'lltm_ext[plot]'" in captured.err
    assert "environment:" not in captured.out  # nothing was timed
    assert not png.exists()


def test_readme_shows_the_cpu_picture_and_documents_the_options():
    readme = (ROOT / "README.md").read_text()
    assert "docs/bench_cpu.png" in readme
    picture = ROOT / "docs" / "bench_cpu.png"
    assert picture.is_file() and 10_000 < picture.stat().st_size < 150_000
    for needle in ("--plot", "--version", "examples/tour.py", "examples/train_lltm.py"):
        assert needle in readme, needle


@pytest.mark.cuda
def test_sweep_sampler_hides_the_host_time_of_a_call():
    """The CUDA sampler's spin covers the host's time to queue a call once `cover` has sized it: a
    call whose host side takes 3 ms and whose GPU side takes microseconds times as microseconds.
    With the fixed ~50 us spin (and the L2 flush before it) the GPU waited for the host, and the
    call timed as the host's 3 ms: what short LLTM sequences' figures had included."""
    import statistics
    import time

    from lltm_ext.cli.sweep import _CudaSampler

    x = torch.zeros(1024, device="cuda")

    def call():
        time.sleep(0.003)
        x.add_(1)

    sampler = _CudaSampler(torch.device("cuda"))
    call()
    torch.cuda.synchronize()
    fixed = statistics.median(sampler.run([call], 5)[0])
    host = sampler.cover([call])
    covered = statistics.median(sampler.run([call], 5)[0])
    assert host >= 0.003
    assert fixed >= 0.002, fixed
    assert covered < 0.001, covered


@pytest.mark.cuda
def test_loop_sampler_counts_the_host_time_of_a_call():
    """--sweep-timer loop times calls back to back: a call whose host side takes 3 ms and whose GPU
    side takes microseconds times as the host's 3 ms (the next call waits on the host), where the
    covered sampler, its spin sized by `cover`, times it as microseconds."""
    import statistics
    import time

    from lltm_ext.cli.sweep import _CudaLoopSampler, _CudaSampler

    x = torch.zeros(1024, device="cuda")

    def call():
        time.sleep(0.003)
        x.add_(1)

    call()
    torch.cuda.synchronize()
    loop = _CudaLoopSampler()
    looped = statistics.median(loop.run([call], 5)[0])
    assert loop.calls[0] >= 2
    covered = _CudaSampler(torch.device("cuda"))
    covered.cover([call])
    hidden = statistics.median(covered.run([call], 5)[0])
    assert looped >= 0.0025, looped
    assert hidden < 0.001, hidden


def test_sweep_timer_is_checked_and_recorded(tmp_path):
    """--sweep-timer: covered or loop, written in the JSON's environment (the CPU's blocks of calls
    are a loop either way); an unknown timer is refused by the CLI and by the sweep's functions."""
    from lltm_ext.cli import sweep as _sweep

    out = tmp_path / "sweep.json"
    argv = ["bench", "--sweep", "1", "--seed", "2", "--ops", "lltm_sequence", "--device", "cpu"]
    argv += ["--dtypes", "float32", "--budget", "0.001", "--sweep-timer", "loop"]
    assert main(argv + ["--json", str(out)], prog="lltm-ext") == 0
    env = json.loads(out.read_text())["environment"]
    assert env["sweep"]["timer"] == "loop" and env["timer"] == "host clock around blocks of calls"
    with pytest.raises(SystemExit):
        main(argv[:-1] + ["spin"], prog="lltm-ext")
    with pytest.raises(ValueError, match="timer must be one of"):
        _sweep.run_sweep(["lltm_sequence"], 1, 0, torch.device("cpu"), timer="spin", echo=None)
    with pytest.raises(ValueError, match="timer must be one of"):
        _sweep.time_medians([lambda: None], torch.device("cpu"), 1e-3, timer="spin")


def test_sequence_sweep_times_tf32_only_on_request(monkeypatch):
    """`--dtypes tf32` is a known dtype; lltm_sequence's sweep times it on CUDA when named (float32
    with TF32 matmuls allowed while timed, the caller's precision after), never by default or on a
    CPU; float32 is timed at full precision."""
    from lltm_ext.cli import sweep as _sweep

    tables = (_sweep.SEQ_DTYPES, _sweep.SEQ_EXTRA_DTYPES)
    assert "tf32" in {d for t in tables for ds in t.values() for d in ds}
    monkeypatch.setattr(
        _sweep, "sequence_shapes", lambda n, seed, kind, config="1": [dict(T=3, B=2, I=4, S=5)]
    )
    timed = []
    real_timer = _sweep.time_interleaved

    def timer(*args):
        timed.append(torch.get_float32_matmul_precision())
        return real_timer(*args)

    monkeypatch.setattr(_sweep, "time_interleaved", timer)
    before = torch.get_float32_matmul_precision()

    def sweep(device, dtypes):
        timed.clear()
        pts = _sweep.run_sweep(
            ["lltm_sequence"], 1, 0, torch.device(device), dtypes=dtypes, budget_s=1e-3, echo=None
        )
        assert torch.get_float32_matmul_precision() == before
        return [p.dtype for p in pts], list(timed), pts

    dtypes, precisions, pts = sweep("cpu", ["float32", "tf32"])
    assert (dtypes, precisions) == (["float32"], ["highest"])
    assert pts[0].ratio > 0 and pts[0].ours_err < 1e-5
    if torch.cuda.is_available():
        assert sweep("cuda", None)[:2] == (["float32", "bfloat16"], ["highest", "highest"])
        assert sweep("cuda", ["tf32"])[:2] == (["tf32"], ["high"])


def test_plan_prints_what_a_call_runs(capsys):
    """`lltm-ext plan`: lltm_ext.explain for a call of the shape given, as a report or JSON; a
    shape of the wrong length fails with the op's shape named."""
    assert main(["plan", "lltm_sequence", "--shape", "3,2,4,5", "--device", "cpu", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["path"] == "cpu" and found["shape"] == {"T": 3, "B": 2, "I": 4, "S": 5}
    assert main(["plan", "gemm", "--shape", "8,16,4", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gemm on cpu, float32, M=8 K=16 N=4: cpu") and "ran:" in out
    assert main(["plan", "lltm", "--shape", "1,2", "--device", "cpu"]) == 2
    assert "--shape for lltm is B,I,S" in capsys.readouterr().err


@pytest.mark.parametrize("op", sorted(MODULES))
def test_every_ops_bench_cases_build_and_run_once(op):
    """`lltm-ext bench` (the README's quick start runs `bench --quick`): every op's cases build on
    the CPU, and ours and the reference of each run once (a case that names an operator the op
    does not have fails here, not in the user's first command)."""
    from lltm_ext.cli.cases import CASES

    cases = CASES[op].benchmarks(torch.device("cpu"), quick=True)
    assert cases and {c.op for c in cases} <= set(CASES[op].BENCH_OPS)
    for case in cases[:4]:
        case.ours()
        case.ref()


def test_sequence_sweep_configurations_against_nn_lstm_alike():
    """--seq-configs: each configuration times LLTMSequence against nn.LSTM in the same one
    (layers, bidirectional, a PackedSequence), both sides' errors against float64 small; an unknown
    configuration is refused with the known ones named."""
    from lltm_ext.cli import sweep as _sweep

    pts = _sweep.run_sweep(
        ["lltm_sequence"],
        1,
        3,
        torch.device("cpu"),
        dtypes=["float32"],
        budget_s=1e-3,
        echo=None,
        seq_configs=["l2", "bi", "packed"],
    )
    assert [p.op for p in pts] == [
        "lltm_sequence[l2]",
        "lltm_sequence[bi]",
        "lltm_sequence[packed]",
    ]
    for p in pts:
        assert p.ratio > 0 and p.ours_err is not None and p.ref_err is not None
        assert p.ref_err < 1e-4  # nn.LSTM in float32 against its float64 copy
    assert pts[0].flops == 2 * _sweep.sequence_flops(pts[0].shape)
    argv = ["bench", "--sweep", "1", "--ops", "lltm_sequence", "--seq-configs", "l9"]
    assert main(argv, prog="lltm-ext") == 2


def test_sweep_sampler_names_its_flushes():
    """The CUDA sampler empties L2 by a write ("write", the zero fill) or a read ("read", L2 left
    clean); anything else is an error, raised before any memory is taken."""
    from lltm_ext.cli.sweep import _CudaSampler

    with pytest.raises(ValueError, match="flush must be 'write' or 'read'"):
        _CudaSampler(torch.device("cpu"), flush="zero")
