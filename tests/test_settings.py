"""The environment variables lltm_ext reads, held to their two tables (run time:
src/common/settings.h, which lltm_ext.settings() reads from the compiled modules; build:
tools/buildsys/config.py's BUILD_KNOBS): docs/settings.md is what the tables write, every read goes
through a table, and every LLTM_EXT_* name the docs mention is a setting, a knob, or one of the
short lists below."""

import re
import subprocess
import sys
from pathlib import Path

import lltm_ext
from lltm_ext import _settings

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # appended: the installed lltm_ext, if any, stays first

from tools.buildsys import config  # noqa: E402

SETTINGS_H = ROOT / "src" / "common" / "settings.h"
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
GENERATE = [sys.executable, "tools/docs/settings_md.py"]

# LLTM_EXT_* names the docs may mention that are neither a setting nor a build knob: macros of the
# code (defined in src/), and the test suite's own variables (CONTRIBUTING.md).
MACROS = {"LLTM_EXT_HD", "LLTM_EXT_SM90A", "LLTM_EXT_NO_CP_ASYNC"}
TEST_VARIABLES = {
    "LLTM_EXT_REQUIRE_CUDA",
    "LLTM_EXT_REQUIRE_WGMMA",
    "LLTM_EXT_REQUIRE_MMA",
    "LLTM_EXT_RUN_SLOW",
    "LLTM_EXT_FUZZ_PROFILE",
    "LLTM_EXT_FUZZ_REPORT",
}
# What the build reads that is the toolchain's, not a knob of ours (README: "Building from source").
TOOLCHAIN_VARIABLES = {"CC", "CXX", "CUDA_HOME", "CUDA_PATH", "PATH"}


def runtime_names() -> set[str]:
    """The names in settings.h's table, read from its text (no build needed)."""
    names = re.findall(r'Setting\{\s*"(LLTM_EXT_[A-Z0-9_]+)"', SETTINGS_H.read_text())
    assert len(names) == len(set(names)) and names, "settings.h: no table, or a name twice"
    return set(names)


def build_names() -> set[str]:
    return {k.name for k in config.BUILD_KNOBS}


def test_docs_settings_md_is_what_the_tables_write():
    written = subprocess.run(GENERATE, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert (ROOT / "docs" / "settings.md").read_text() == written, (
        "docs/settings.md differs from the tables: run "
        "`python tools/docs/settings_md.py > docs/settings.md`"
    )


def test_settings_come_from_the_compiled_table(monkeypatch):
    table = lltm_ext.settings()
    assert {s.name for s in table} == runtime_names()
    by_name = {s.name: s for s in table}
    cell = by_name["LLTM_EXT_CELL_PATH"]
    assert (cell.op, cell.kind, cell.values, cell.default) == (
        "lltm_ext.lltm",
        "choice",
        "auto|fused|cublas",
        "auto",
    )
    assert by_name["LLTM_EXT_SEQUENCE_STEP_SPLITS"].values == "1..64"
    assert by_name["LLTM_EXT_SEQUENCE_CLUSTER_ROWS"].default is None
    assert all(s.forces and s.read and s.op.startswith("lltm_ext") for s in table)
    # The value now, read at each call of settings().
    monkeypatch.setenv("LLTM_EXT_CELL_PATH", "fused")
    assert {s.name: s.current for s in lltm_ext.settings()}["LLTM_EXT_CELL_PATH"] == "fused"
    monkeypatch.delenv("LLTM_EXT_CELL_PATH")
    assert {s.name: s.current for s in lltm_ext.settings()}["LLTM_EXT_CELL_PATH"] is None
    # Every module binds the same table.
    from lltm_ext._extension import load_extension

    rows = [load_extension(op)._settings() for op in _settings._OPS]
    assert all(r == rows[0] for r in rows)


def test_every_name_the_docs_mention_is_in_a_table_or_listed():
    known = runtime_names() | build_names() | MACROS | TEST_VARIABLES
    for doc in DOCS:
        names = re.findall(r"LLTM_EXT_[A-Z0-9_]+\*?", doc.read_text())
        # A family, LLTM_EXT_SEQUENCE_*, names the settings it is the start of.
        unknown = {n for n in names if not n.endswith("*")} - known
        unknown |= {
            n for n in names if n.endswith("*") and not any(k.startswith(n[:-1]) for k in known)
        }
        assert not unknown, (
            f"{doc.relative_to(ROOT)} names {sorted(unknown)}: neither a run-time setting "
            "(src/common/settings.h) nor a build knob (tools/buildsys/config.py), nor a macro or "
            "test variable listed in tests/test_settings.py"
        )


def test_the_short_lists_name_what_the_code_has():
    src = "\n".join(
        p.read_text()
        for p in (ROOT / "src").rglob("*")
        if p.suffix in (".h", ".cuh", ".cpp", ".cu")
    )
    for macro in MACROS:
        assert re.search(rf"#\s*define\s+{macro}\b", src), f"src/ defines no macro {macro}"
        assert macro not in runtime_names() | build_names()
    tests = "\n".join(
        p.read_text() for p in (ROOT / "tests").glob("*.py") if p != Path(__file__).resolve()
    )
    for name in TEST_VARIABLES:
        assert f'"{name}"' in tests, f"no test reads {name}"


def test_runtime_reads_go_through_the_table():
    # The only read of the environment in src/ is env_setting.h's, which takes a settings.h name
    # (a name outside the table does not compile).
    readers = sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "src").rglob("*")
        if p.is_file() and re.search(r"\bgetenv\s*\(", p.read_text())
    )
    assert readers == ["src/common/env_setting.h"]
    # The Python package names no LLTM_EXT_* variable outside the table.
    for path in (ROOT / "lltm_ext").rglob("*.py"):
        quoted = set(re.findall(r"[\"'](LLTM_EXT_[A-Z0-9_]+)[\"']", path.read_text()))
        assert quoted <= runtime_names(), f"{path.relative_to(ROOT)}: {quoted - runtime_names()}"


def test_build_knobs_are_what_the_build_reads():
    text = "\n".join(
        p.read_text() for p in [ROOT / "setup.py", *(ROOT / "tools" / "buildsys").glob("*.py")]
    )
    read = set(re.findall(r"(?:env|environ)\.get\(\s*\"([A-Z0-9_]+)\"", text))
    assert read - TOOLCHAIN_VARIABLES == build_names()
    assert all(k.values and k.does for k in config.BUILD_KNOBS)


def test_setup_py_points_to_the_table_instead_of_repeating_it():
    doc = (ROOT / "setup.py").read_text().split('"""')[1]
    assert "BUILD_KNOBS" in doc and "docs/settings.md" in doc
    assert "LLTM_EXT_CPU_TWIN" not in doc  # listed once, in config.py
