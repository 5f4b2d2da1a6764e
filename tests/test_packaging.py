"""Packaging checks that need no build: README and CI agree, every op folder is complete."""

import re
from pathlib import Path

import lltm_ext
from lltm_ext.ops import MODULES

ROOT = Path(__file__).resolve().parent.parent


def readme_test_command() -> str:
    text = (ROOT / "README.md").read_text()
    match = re.search(r"<!-- test-command:.*?-->\s*```bash\n(.+?)\n```", text, re.S)
    assert match, "README.md must mark its test command with <!-- test-command: ... -->"
    return match.group(1).strip()


def test_ci_runs_the_readme_test_command():
    assert readme_test_command() in (ROOT / ".ci" / "run").read_text()


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
