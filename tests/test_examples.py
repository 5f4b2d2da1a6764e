"""The scripts in examples/ run on the CPU, each in its own process, in a few seconds."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(name: str, *args: str, cwd: Path) -> str:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,  # not the source tree: the installed lltm_ext is imported either way
    )
    assert result.returncode == 0, f"{name} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_tour_runs_every_public_op(tmp_path):
    out = run_example("tour.py", "--device", "cpu", cwd=tmp_path)
    for op in ("lltm", "LLTM", "relu", "sigmoid", "round_ste", "gemm"):
        (line,) = [x for x in out.splitlines() if x.startswith(f"{op} ")]
        error = float(re.search(r"max \|ours - reference\| = (\S+)", line).group(1))
        assert error < 1e-4, line
        assert re.search(r"grad \(\d+(, \d+)*\) norm \d", line), line


def test_train_lltm_loss_falls(tmp_path):
    png = tmp_path / "loss.png"
    args = ["--device", "cpu", "--epochs", "3", "--steps-per-epoch", "20", "--cell-loop"]
    out = run_example("train_lltm.py", *args, "--plot", str(png), cwd=tmp_path)
    assert re.search(r"LLTM +epoch +2/3  loss \d", out), out
    match = re.search(r"final loss (\S+) \(LLTM; first step (\S+),", out)
    assert match, out
    final, first = float(match.group(1)), float(match.group(2))
    assert final < 0.5 * first, out
    # The timing table: one row per model, time per step and final loss.
    for label in ("lltm_ext.LLTMSequence", "torch.nn.LSTM", "Python loop of lltm_ext.LLTM"):
        assert re.search(rf"^{re.escape(label)}.* \d+\.\d\d +\d\.\d{{4}}$", out, re.M), out
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        pytest.skip("matplotlib is not installed: no loss curve to check")
    assert png.is_file() and png.stat().st_size > 5_000


def test_readme_example_runs_eager_and_compiled(tmp_path):
    readme = (EXAMPLES.parent / "README.md").read_text()
    match = re.search(r"<!-- readme-example:.*?-->\s*```python\n(.+?)\n```", readme, re.S)
    assert match, "README.md must mark its first example with <!-- readme-example: ... -->"
    code = match.group(1)
    assert "torch.compile(" in code and "fullgraph=True" in code
    script = tmp_path / "readme_example.py"
    script.write_text(code + "\nprint('ok', tuple(h.shape), tuple(c.shape))\n")
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok (16, 128) (16, 128)")


def test_readme_swap_example_runs(tmp_path):
    """The README's nn.LSTM swap (layers, bidirectional, a PackedSequence under autocast) runs as
    written, and its results have nn.LSTM's shapes and a float32 gradient."""
    readme = (EXAMPLES.parent / "README.md").read_text()
    match = re.search(r"<!-- readme-swap:.*?-->\s*```python\n(.+?)\n```", readme, re.S)
    assert match, "README.md must mark its nn.LSTM swap example with <!-- readme-swap: ... -->"
    script = tmp_path / "readme_swap.py"
    script.write_text(
        match.group(1)
        + "\nassert h_n.shape == c_n.shape == (4, 8, 256), h_n.shape"
        + "\nassert packed.data.shape == (int(lengths.sum()), 512) and h_n.dtype == torch.float32"
        + "\nassert all(p.grad is not None and p.grad.dtype == torch.float32"
        + " for p in rnn.parameters())"
        + "\nprint('ok')\n"
    )
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")
