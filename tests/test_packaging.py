"""Packaging checks that need no build: README and CI agree, every op folder is complete."""

import re
import sys
from pathlib import Path

import pytest

import lltm_ext
from lltm_ext.ops import MODULES

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # appended: the installed lltm_ext, if any, stays first

from tools.build import check_dist  # noqa: E402


def readme_command(marker: str) -> str:
    text = (ROOT / "README.md").read_text()
    match = re.search(rf"<!-- {marker}:.*?-->\s*```bash\n(.+?)\n```", text, re.S)
    assert match, f"README.md must mark its {marker} with <!-- {marker}: ... -->"
    return match.group(1).strip()


def test_ci_runs_the_readme_commands_as_written():
    ci = (ROOT / ".ci" / "run").read_text()
    for marker in ("install-command", "test-command"):
        assert readme_command(marker) in ci, marker
    # ... and exports nothing the README only suggests.
    assert not re.search(r"^\s*export [^#]*TORCH_CUDA_ARCH_LIST", ci, re.M)


def test_ci_stage_shares_fit_its_budget():
    """.ci/run and tools/ci/ci_wheel.sh give each stage a share of CI's budget
    (tools/ci/ci_stages.sh says when one takes longer): the shares add up to that budget at most,
    and the budget is half of CI's 90 minutes at most."""
    ci = (ROOT / ".ci" / "run").read_text()
    budget = re.search(r"^BUDGET=(\d+)", ci, re.M)
    assert budget, ".ci/run sets no BUDGET"
    shares = []
    for path in (".ci/run", "tools/ci/ci_wheel.sh"):
        found = re.findall(r'^\s*ci_stage "[^"]+" (\d+)$', (ROOT / path).read_text(), re.M)
        assert found, f"{path} names no stage"
        shares += [int(s) for s in found]
    assert int(budget[1]) <= 45 * 60
    assert sum(shares) <= int(budget[1]), f"the stages' shares add up to {sum(shares)} s"
    assert "ci_summary" in ci and ". tools/ci/ci_stages.sh" in ci


def test_linters_have_one_version_in_ci_the_workflow_and_pre_commit():
    """ruff and clang-format (formatters change between releases): .ci/run, the tests workflow
    and .pre-commit-config.yaml (rev vX.Y.Z of the hook repository) pin the same versions."""
    config = (ROOT / ".pre-commit-config.yaml").read_text()
    revs = dict(
        re.findall(r"repo:\s*https://github\.com/[\w.-]+/([\w.-]+)\s+rev:\s*v?(\S+)", config)
    )
    for tool, hook_repo in (("ruff", "ruff-pre-commit"), ("clang-format", "mirrors-clang-format")):
        assert hook_repo in revs, f".pre-commit-config.yaml has no {hook_repo} hook"
        for path in (".ci/run", ".github/workflows/tests.yml"):
            pins = set(re.findall(rf"(?<![\w-]){tool}==(\S+)", (ROOT / path).read_text()))
            assert pins == {revs[hook_repo]}, f"{path} pins {tool} {pins}, pre-commit {revs}"


def test_every_op_folder_has_binding_python_module_and_tests():
    folders = sorted(p.name for p in (ROOT / "src").iterdir() if (p / f"{p.name}.cpp").is_file())
    assert folders, "no op folders found under src/"
    for op in folders:
        assert op in MODULES, f"src/{op}/ has no lltm_ext/ops/{op}.py"
        assert (ROOT / "tests" / f"test_{op}.py").is_file(), f"src/{op}/ has no tests/test_{op}.py"
        for name in MODULES[op].__all__:
            assert getattr(lltm_ext, name) is getattr(MODULES[op], name)


def test_build_info_is_recorded():
    info = lltm_ext.build_info()
    assert info is not None, "lltm_ext/_build_info.py is missing: build with setup.py"
    assert info["version"] == lltm_ext.__version__
    for key in ("torch_version", "cuda_version", "cxx11_abi", "compiler", "ops"):
        assert key in info


def manifest_selection(root: Path) -> set[str]:
    """The files of `root` that MANIFEST.in selects, by setuptools' own reading of it (what
    `python -m build --sdist` adds beyond the package's defaults)."""
    from setuptools.command.egg_info import FileList

    files = FileList()
    for line in (root / "MANIFEST.in").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            files.process_template_line(line)
    return {Path(f).as_posix() for f in files.files}


@pytest.mark.skipif(not (ROOT / "benchmarks").is_dir(), reason="no benchmarks/ (an sdist)")
def test_the_sdist_ships_each_experiment_whole_or_not_at_all(monkeypatch):
    monkeypatch.chdir(ROOT)  # setuptools' FileList globs the working directory
    selected = manifest_selection(ROOT)
    assert check_dist.partial_experiments(ROOT, selected) == []
    # ... and the check notices an experiment shipped in part (as bench.py without its kernels was).
    experiment = next(p for p in sorted((ROOT / "benchmarks").iterdir()) if p.is_dir())
    files = sorted(p.relative_to(ROOT).as_posix() for p in experiment.rglob("*") if p.is_file())
    partial = check_dist.partial_experiments(ROOT, (selected - set(files)) | {files[0]})
    assert len(partial) == 1 and "only in part" in partial[0]
