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

from tools.packaging import check_dist  # noqa: E402


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


# A measured figure: a time (28 us), a rate (3.3 TB/s, 180 TFLOP/s) or a speed ratio (1.3x,
# 2x slower, 5% faster). Not one: hex (0x1F), vector widths (x4), shapes (16x32x128, 1x1), a
# multiple of a variable ([32x, 32x + 32)).
MEASURED = re.compile(
    r"(?<![\w.])\d+(?:\.\d+)?\s?(?:us|µs|ms|ns|[TGM]B/s|[TG]FLOP/s|TFLOPS)(?!\w)"
    r"|(?<![\w.])\d+\.\d+x\b"
    r"|(?<![\w.])\d+x (?:faster|slower|the)\b"
    r"|\d+% (?:faster|slower)\b"
)
COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)  # src/ has no "//" or "/*" in a string


def measured_figures_in_comments(path: Path) -> list[str]:
    """'line: comment' for each comment line of a C++ / CUDA source that holds a figure."""
    text = path.read_text()
    found = []
    for comment in COMMENT.finditer(text):
        first = text.count("\n", 0, comment.start()) + 1
        for i, line in enumerate(comment.group().split("\n")):
            if MEASURED.search(line):
                found.append(f"{first + i}: {line.strip()}")
    return found


def src_files() -> list[Path]:
    return sorted(p for p in (ROOT / "src").rglob("*") if p.suffix in (".h", ".cuh", ".cu", ".cpp"))


def test_src_comments_hold_no_measured_figures(tmp_path):
    """Comments say what the code does and why; the figures that decided a rule live in
    docs/decisions.md, which the comment names (// Figures: docs/decisions.md#<anchor>)."""
    assert MEASURED.search("H100: 28 vs 74 us") and MEASURED.search("1.3x, 3.3 TB/s, 2x slower")
    assert not MEASURED.search("0x1F, x4 loads, 1x1 and 16x32x128 tiles, [32x, 32x + 32)")
    sample = tmp_path / "sample.cu"
    sample.write_text("int a;  // 2 rows\n/* at 16x32x128:\n   28 vs 74 us */\nint b;  // 1.3x\n")
    assert [f.split(":")[0] for f in measured_figures_in_comments(sample)] == ["3", "4"]
    found = [
        f"{p.relative_to(ROOT)}:{f}" for p in src_files() for f in measured_figures_in_comments(p)
    ]
    assert not found, (
        "figures in comments (move them to docs/decisions.md, decisions_cpu.md or "
        "decisions_sequence.md):\n" + "\n".join(found)
    )


def test_figures_anchors_named_in_the_code_exist():
    """Each docs/decisions.md#anchor (decisions_sequence.md#anchor: the LLTM sequence's;
    decisions_cpu.md#anchor: the CPU GEMM's) that
    src/ or lltm_ext/ names is a heading of that page (its anchor as GitHub makes it: lowercase,
    spaces to '-', other punctuation dropped)."""
    anchors = {}
    for page in ("decisions.md", "decisions_cpu.md", "decisions_sequence.md"):
        headings = re.findall(r"^#+ (.+)$", (ROOT / "docs" / page).read_text(), re.M)
        anchors[page] = {
            re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings
        }
    named = {}
    for path in src_files() + sorted((ROOT / "lltm_ext").rglob("*.py")):
        for page, anchor in re.findall(
            r"docs/(decisions(?:_sequence|_cpu)?\.md)#([\w-]+)", path.read_text()
        ):
            named.setdefault((page, anchor), path.relative_to(ROOT).as_posix())
    assert {page for page, _ in named} == set(anchors), "a decisions page that no comment names"
    missing = {f"{p}#{a}": f for (p, a), f in named.items() if a not in anchors[p]}
    assert not missing, f"anchors not in their docs/decisions page: {missing}"


# tools/ holds folders by purpose (tools/README.md lists them and every script in them): nothing
# else sits at its top, and every `tools/...` path or `tools.<module>` name that CI, the
# workflows, the docs and the tools themselves use exists, so that a move cannot leave one stale.
TOOLS_TOP_FILES = {"README.md", "__init__.py"}
TOOL_REFERENCES = (
    ".ci/run",
    ".github/workflows/*.yml",
    "README.md",
    "CONTRIBUTING.md",
    "docs/*.md",
    "MANIFEST.in",
    "setup.py",
    "pyproject.toml",
    "tools/README.md",
    "tools/*/*.py",
    "tools/*/*.sh",
)
TOOL_PATH = re.compile(r"(?<![\w.-])tools/[\w./-]*")
TOOL_MODULE = re.compile(r"(?<![\w./-])tools(?:\.[A-Za-z_]\w*)+")
# docs/architecture.md names the sanitizer workload where it was before tools/ had folders; its
# owner updates it (to tools/sanitize/sanitize_workload.py), and then this entry goes.
STALE_UNTIL_FIXED: set[tuple[str, str]] = set()


def module_exists(root: Path, dotted: str) -> bool:
    """tools.a.b(.attr...) names a package or module under root (what follows a module is taken
    for attributes)."""
    path = root
    for part in dotted.split("."):
        if (path / f"{part}.py").is_file():
            return True
        if not (path / part).is_dir():
            return False
        path = path / part
    return True


def stale_tool_references(root: Path) -> set[tuple[str, str]]:
    """(file, reference) for each `tools/...` path and `tools.<module>` name in the files of
    TOOL_REFERENCES under root that does not exist there."""
    stale = set()
    for pattern in TOOL_REFERENCES:
        for f in sorted(root.glob(pattern)):
            where, text = f.relative_to(root).as_posix(), f.read_text()
            for m in TOOL_PATH.finditer(text):
                if not (root / m.group().rstrip(".")).exists():
                    stale.add((where, m.group().rstrip(".")))
            for m in TOOL_MODULE.finditer(text):
                if not module_exists(root, m.group()):
                    stale.add((where, m.group()))
    return stale


def test_tools_holds_folders_by_purpose():
    tools = ROOT / "tools"
    strays = sorted(p.name for p in tools.iterdir() if p.is_file())
    strays = [name for name in strays if name not in TOOLS_TOP_FILES]
    assert not strays, f"tools/{strays}: put each in the folder of its purpose (tools/README.md)"
    readme = (tools / "README.md").read_text()
    for folder in sorted(p for p in tools.iterdir() if p.is_dir() and p.name != "__pycache__"):
        assert f"`{folder.name}/`" in readme, f"tools/README.md does not list tools/{folder.name}/"
        for script in sorted(p.name for p in folder.iterdir() if p.is_file()):
            if script != "__init__.py":
                assert f"`{script}`" in readme, f"tools/README.md does not list {script}"


def test_every_tool_path_named_exists():
    stale = stale_tool_references(ROOT)
    assert stale <= STALE_UNTIL_FIXED, f"named but not there: {sorted(stale - STALE_UNTIL_FIXED)}"
    fixed = {ref for ref in STALE_UNTIL_FIXED if (ROOT / ref[0]).exists()} - stale
    assert not fixed, f"{sorted(fixed)} fixed: remove it from STALE_UNTIL_FIXED"


def test_architecture_map_matches_the_tree():
    """docs/architecture.md's map lists every folder and file of src/, lltm_ext/ and tools/ as
    they are (tools/docs/architecture_map.py writes it): a file added, moved or removed without
    the map following fails here."""
    sys.path.insert(0, str(ROOT / "tools" / "docs"))
    try:
        import architecture_map
    finally:
        sys.path.pop(0)
    fresh = architecture_map.block(ROOT)
    assert architecture_map.current(ROOT / "docs" / "architecture.md") == fresh, (
        "docs/architecture.md's map is stale: python tools/docs/architecture_map.py --write"
    )
    for path in ("src/lltm_sequence/", "src/lltm_sequence/small/", "src/common/", "tools/ci/"):
        assert f"\n{path}\n" in fresh


# A newcomer reads the README in five minutes and a design note in one sitting: history lives in
# git and in CHANGELOG.md's one line per change, not in these.
README_MAX_LINES = 250
DOC_MAX_LINES = 500


def test_readme_and_docs_stay_short():
    readme = len((ROOT / "README.md").read_text().splitlines())
    assert readme <= README_MAX_LINES, f"README.md has {readme} lines (at most {README_MAX_LINES})"
    long = {
        p.name: n
        for p in sorted((ROOT / "docs").glob("*.md"))
        if (n := len(p.read_text().splitlines())) > DOC_MAX_LINES
    }
    assert not long, f"docs with more than {DOC_MAX_LINES} lines (split or cut them): {long}"
