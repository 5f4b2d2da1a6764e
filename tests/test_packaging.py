"""Packaging checks that need no build: README and CI agree, every op folder is complete."""

import ast
import re
import sys
from collections import deque
from pathlib import Path

import pytest

import lltm_ext
from lltm_ext.cli.cases import CASES
from lltm_ext.ops import MODULES

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # appended: the installed lltm_ext, if any, stays first

from tools import check_dist  # noqa: E402


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
    """.ci/run and tools/ci_wheel.sh give each stage a share of CI's budget (tools/ci_stages.sh
    says when one takes longer): the shares add up to that budget at most, and the budget is
    half of CI's 90 minutes at most."""
    ci = (ROOT / ".ci" / "run").read_text()
    budget = re.search(r"^BUDGET=(\d+)", ci, re.M)
    assert budget, ".ci/run sets no BUDGET"
    shares = []
    for path in (".ci/run", "tools/ci_wheel.sh"):
        found = re.findall(r'^\s*ci_stage "[^"]+" (\d+)$', (ROOT / path).read_text(), re.M)
        assert found, f"{path} names no stage"
        shares += [int(s) for s in found]
    assert int(budget[1]) <= 45 * 60
    assert sum(shares) <= int(budget[1]), f"the stages' shares add up to {sum(shares)} s"
    assert "ci_summary" in ci and ". tools/ci_stages.sh" in ci


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
    assert list(CASES) == list(MODULES), "lltm_ext.cli.cases.CASES must list lltm_ext.ops.MODULES"
    for op in folders:
        assert op in MODULES, f"src/{op}/ has no lltm_ext/ops/{op}.py"
        assert op in CASES, f"src/{op}/ has no bench cases, lltm_ext/cli/cases/{op}.py"
        assert (ROOT / "tests" / f"test_{op}.py").is_file(), f"src/{op}/ has no tests/test_{op}.py"
        for name in MODULES[op].__all__:
            assert getattr(lltm_ext, name) is getattr(MODULES[op], name)


# ----------------------------------------------------------------------------------------------
# The import graph of lltm_ext: no cycles; the op API never reaches the command line.
# ----------------------------------------------------------------------------------------------


def package_modules(package: Path) -> dict[str, Path]:
    """Every Python module of the package folder `package`: dotted name -> file."""
    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of `modules` it imports, anywhere in it (functions included).

    ``import a.b`` and ``from a import b`` (b a module) point at ``a.b``; ``from a import name``
    at ``a``. A package's import of its own submodule is an edge to that submodule only (Python
    imports the parents first, but a parent importing its children is no cycle). Imports of
    modules that are not files here (the compiled ``lltm_ext._<op>``) are left out."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        edges = graph.setdefault(name, set())
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                edges.update(a.name for a in node.names if a.name in modules)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the module's package, up level - 1 more
                    package = name if is_package else name.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        package = package.rpartition(".")[0]
                    base = f"{package}.{base}" if base else package
                for alias in node.names:
                    target = f"{base}.{alias.name}"
                    if target in modules:
                        edges.add(target)
                    elif base in modules:
                        edges.add(base)
        edges.discard(name)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of `graph`, one per edge back to a module being visited (depth first),
    each as the list of its modules, the first repeated at the end."""
    cycles, state, stack = [], dict.fromkeys(graph, "new"), []

    def visit(module: str) -> None:
        state[module] = "open"
        stack.append(module)
        for target in sorted(graph[module]):
            if state[target] == "open":
                cycles.append(stack[stack.index(target) :] + [target])
            elif state[target] == "new":
                visit(target)
        stack.pop()
        state[module] = "done"

    for module in sorted(graph):
        if state[module] == "new":
            visit(module)
    return cycles


def import_path(graph: dict[str, set[str]], start: str, goal) -> list[str] | None:
    """The shortest chain of imports from `start` to a module for which `goal` is true, or None."""
    came_from: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        module = queue.popleft()
        if goal(module) and module != start:
            chain = [module]
            while (previous := came_from[chain[-1]]) is not None:
                chain.append(previous)
            return chain[::-1]
        for target in sorted(graph[module]):
            if target not in came_from:
                came_from[target] = module
                queue.append(target)
    return None


def in_cli(module: str) -> bool:
    return module == "lltm_ext.cli" or module.startswith("lltm_ext.cli.")


def test_the_import_graph_finds_a_cycle(tmp_path):
    """The checks below see a cycle, also one through a function's import, and a relative one."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from pkg.a import x\n")
    (package / "a.py").write_text("import os\nfrom pkg import sub\nx = 1\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "b.py").write_text("def f():\n    from ..a import x\n")
    graph = import_graph(package_modules(package))
    assert graph["pkg.sub.b"] == {"pkg.a"} and find_cycles(graph) == []
    (package / "sub" / "__init__.py").write_text("def g():\n    from pkg.sub import b\n")
    cycles = find_cycles(import_graph(package_modules(package)))
    assert cycles == [["pkg.a", "pkg.sub", "pkg.sub.b", "pkg.a"]]


def test_lltm_ext_has_no_import_cycle():
    graph = import_graph(package_modules(Path(lltm_ext.__file__).parent))
    assert "lltm_ext.ops.gemm" in graph["lltm_ext.ops"]  # the graph sees the package
    cycles = find_cycles(graph)
    assert not cycles, "import cycles in lltm_ext:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_op_api_never_imports_the_command_line():
    """Nothing outside lltm_ext.cli reaches it (directly or through other modules), but the
    ``python -m lltm_ext`` shim; in particular no op module of lltm_ext/ops/ does."""
    graph = import_graph(package_modules(Path(lltm_ext.__file__).parent))
    assert any(m.startswith("lltm_ext.ops.") for m in graph)
    for module in sorted(graph):
        if in_cli(module) or module == "lltm_ext.__main__":
            continue
        chain = import_path(graph, module, in_cli)
        assert chain is None, f"{module} imports the command line: {' -> '.join(chain)}"


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
