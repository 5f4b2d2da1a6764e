"""Prebuilt wheels without building one: the matrix definition (tools/release/wheel_matrix.json),
that the wheels workflow and the README read it, the find-links pages pip reads (served to a real
pip), the page names lltm_ext, the build and the page writer give, and the manylinux checks of
check_dist."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import zipfile
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from lltm_ext import _extension

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # appended: the installed lltm_ext, if any, stays first

from tools.buildsys import config  # noqa: E402
from tools.packaging import check_dist  # noqa: E402
from tools.release import find_links, wheel_matrix  # noqa: E402

WORKFLOW = ROOT / ".github" / "workflows" / "wheels.yml"
needs_workflow = pytest.mark.skipif(not WORKFLOW.is_file(), reason="no .github/ (an sdist)")

# --------------------------------------------------------------------------------------------
# The definition.
# --------------------------------------------------------------------------------------------


@pytest.fixture
def definition():
    return wheel_matrix.load()


def test_the_definition_is_valid(definition):
    assert wheel_matrix.problems(definition) == []


def test_it_covers_2_10_to_the_index_newest_with_3_10_to_3_13(definition):
    releases = [r["torch"] for r in definition["releases"]]
    newest = ".".join(definition["index_newest"].split(".")[:2])
    assert releases[0] == "2.10" and releases[-1] == newest
    for rel in definition["releases"]:
        assert rel["pypi_cuda"] in rel["cuda"] and "cpu" in rel["cuda"]
        built = [c["python"] for c in wheel_matrix.cells(definition) if c["torch"] == rel["torch"]]
        for py in ("3.10", "3.11", "3.12", "3.13", "3.14"):
            if py in rel["torch_pythons"]:
                assert py in built, (rel["torch"], py)
            else:  # torch has no wheel for it: neither do we
                assert py not in built, (rel["torch"], py)


def _break(definition, path, value):
    broken = copy.deepcopy(definition)
    target = broken
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return broken


def _newest(definition):
    return len(definition["releases"]) - 1


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: _break(d, ["pythons"], KeyError), "missing top-level key 'pythons'"),
        (lambda d: _break(d, ["pythons"], ["3.11", "3.12", "3.13"]), "pythons lacks ['3.10']"),
        (lambda d: _break(d, ["releases", 0, "cuda"], KeyError), "lacks 'cuda'"),
        (lambda d: _break(d, ["releases", 0, "cuda"], ["12.8", "13"]), "neither 'cpu' nor"),
        (lambda d: _break(d, ["releases", 0, "cuda"], ["8.0", "12.8"]), "no default architecture"),
        (lambda d: _break(d, ["releases", 0, "cuda"], ["12.6", "cpu"]), "index's default build"),
        (lambda d: _break(d, ["releases", 0, "torch"], "2.1O"), "minor release like"),
        (lambda d: _break(d, ["releases", 1, "torch"], "2.10"), "listed twice"),
        (lambda d: _break(d, ["releases", 0, "torch_pythons"], ["3.9"]), "no Python of"),
        (lambda d: _break(d, ["releases", 0, "source", "cuda"], "blog"), "does not name"),
        (lambda d: _break(d, ["releases", 0, "source"], {}), "no source given for cuda"),
        (lambda d: _break(d, ["index_newest"], "2.16.0"), "add torch 2.16"),
        (lambda d: _break(d, ["releases"], d["releases"][1:]), "oldest release must be 2.10"),
        (
            lambda d: _break(d, ["releases"], d["releases"][:2] + d["releases"][3:]),
            "releases skip from 2.11 to 2.13",
        ),
        (lambda d: _break(d, ["releases"], d["releases"][::-1]), "must be in order"),
    ],
)
def test_a_malformed_definition_is_named(definition, change, message):
    found = wheel_matrix.problems(change(definition))
    assert any(message in p for p in found), found


def test_the_command_line_fails_on_a_malformed_definition(definition, tmp_path):
    broken = tmp_path / "m.json"
    broken.write_text(json.dumps(_break(definition, ["releases", 0, "cuda"], ["13"])))
    run = [
        sys.executable,
        str(ROOT / "tools" / "release" / "wheel_matrix.py"),
        "--definition",
        str(broken),
    ]
    out = subprocess.run(run + ["cells"], capture_output=True, text=True)
    assert out.returncode == 1 and "neither 'cpu' nor a version" in out.stderr
    ok = subprocess.run(run[:2] + ["validate"], capture_output=True, text=True)
    assert ok.returncode == 0 and "cells: OK" in ok.stdout


def test_cells(definition):
    cells = wheel_matrix.cells(definition)
    keys = {(c["torch"], c["cuda"], c["python"]) for c in cells}
    assert len(keys) == len(cells)  # no cell twice
    expected = sum(
        len(r["cuda"]) * len([p for p in definition["pythons"] if p in r["torch_pythons"]])
        for r in definition["releases"]
    )
    assert len(cells) == expected
    for c in cells:
        assert c["torch_spec"] == f"torch=={c['torch']}.*"
        assert c["index_url"] == f"https://download.pytorch.org/whl/{c['variant']}"
        assert c["page"] == f"torch-{c['torch']}+{c['variant']}.html"
    pr = wheel_matrix.cells(definition, "pr")
    newest = definition["releases"][_newest(definition)]
    assert {c["cuda"] for c in pr} == set(newest["cuda"]) and len(pr) == len(newest["cuda"])
    assert {c["torch"] for c in pr} == {newest["torch"]}


def test_check_index_names_the_cells_the_index_lacks(definition, monkeypatch, capsys):
    newest = definition["releases"][_newest(definition)]["torch"]

    def versions(python, *args):  # the index has every release but the newest, for cu126
        url = args[args.index("--index-url") + 1]
        return [
            f"{r['torch']}.0"
            for r in definition["releases"]
            if not (url.endswith("cu126") and r["torch"] == newest)
        ]

    monkeypatch.setattr(wheel_matrix, "_pip_versions", versions)
    assert wheel_matrix.check_index(definition, sys.executable) == 1
    err = capsys.readouterr().err
    assert f"torch {newest}, cu126, Python 3.1" in err and "torch 2.10," not in err


def test_check_latest(definition, monkeypatch):
    monkeypatch.setattr(wheel_matrix, "_pip_versions", lambda *a: ["2.15.0", "2.16.0+cpu"])
    assert wheel_matrix.check_latest(definition, sys.executable) == 1
    newest = definition["releases"][_newest(definition)]["torch"]
    monkeypatch.setattr(wheel_matrix, "_pip_versions", lambda *a: [f"{newest}.1", "2.9.0"])
    assert wheel_matrix.check_latest(definition, sys.executable) == 0


# --------------------------------------------------------------------------------------------
# The workflow and the README read it.
# --------------------------------------------------------------------------------------------


@needs_workflow
def test_the_workflow_reads_its_cells_from_the_definition():
    text = WORKFLOW.read_text()
    assert "python tools/release/wheel_matrix.py cells" in text
    assert "matrix: ${{ fromJSON(needs.matrix.outputs.cells) }}" in text
    assert "python tools/release/wheel_matrix.py check-index" in text
    # ... and spells no list of its own: no torch, CUDA or Python versions (comments aside).
    code = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    assert not re.search(r"\btorch:\s*\"?\d+\.\d+", code), "wheels.yml lists torch releases"
    assert not re.search(r"\bcuda:\s*\"?\d+\.\d+", code), "wheels.yml lists CUDA versions"
    assert not re.search(r"\[\s*\"?3\.\d+\"?\s*,", code), "wheels.yml lists Python versions"
    assert not re.search(r"torch==\d|\bcu1\d\d\b|\bcpu\b.*torch2", code), "a cell in wheels.yml"


@needs_workflow
def test_the_workflow_builds_in_torchs_manylinux_image():
    text = WORKFLOW.read_text()
    assert "quay.io/pypa/manylinux_2_28_x86_64" in text
    script = (ROOT / "tools" / "packaging" / "manylinux_wheel.sh").read_text()
    assert f"--plat {wheel_matrix.PLATFORM}" in script
    assert "tools/release/loopback_install.py" in text and "tools/release/find_links.py" in text


def test_the_readme_table_is_the_definitions(definition):
    text = (ROOT / "README.md").read_text()
    match = re.search(r"<!-- wheel-matrix:.*?-->\n((?:\|.*\n)+)", text)
    assert match, "README.md must mark its wheel table with <!-- wheel-matrix: ... -->"
    assert match[1].strip() == wheel_matrix.readme_table(definition, wheel_matrix.pages_url())
    newest = definition["releases"][_newest(definition)]
    page = wheel_matrix.page_name(newest["torch"], newest["pypi_cuda"])
    assert f"pip install lltm_ext -f {wheel_matrix.pages_url()}{page}" in text


# --------------------------------------------------------------------------------------------
# One page name everywhere: lltm_ext, the build's sdist notice, the page writer, the labels.
# --------------------------------------------------------------------------------------------


def test_page_names_and_labels_agree(definition):
    for c in wheel_matrix.cells(definition):
        cuda = None if c["cuda"] == "cpu" else c["cuda"]
        for torch_version in (f"{c['torch']}.0", f"{c['torch']}.1+{c['variant']}"):
            assert _extension.wheel_page_name(torch_version, cuda) == c["page"]
            assert config.wheel_page_name(torch_version, cuda) == c["page"]
            label = config.version_label(
                None, cuda=cuda, torch_version=torch_version, from_sdist=False
            )
            assert label == c["label"]
        name = f"lltm_ext-0.1.0+{c['label']}-cp312-cp312-{wheel_matrix.PLATFORM}.whl"
        assert find_links.parse(name, name, None).page == c["page"]


def test_the_pages_address_is_one_setting():
    base = wheel_matrix.pages_url()
    assert base.startswith("https://") and base.endswith("/whl/")
    assert config.wheel_pages_url((ROOT / "pyproject.toml").read_text()) == base
    assert _extension.wheel_pages_url() == base


def test_info_prints_the_page_of_the_running_torch(capsys):
    from lltm_ext.cli.main import main

    assert main(["info"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    page = _extension.wheel_page_name(torch.__version__, torch.version.cuda)
    assert last.endswith(f"pip install lltm_ext -f {wheel_matrix.pages_url()}{page}"), last
    assert main(["info", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["running"]["wheel_page"].endswith(page)


def test_a_mismatched_build_names_the_page_to_install(monkeypatch):
    info = {"version": "0.1.0+cu130torch2.0", "torch_version": "2.0.1+cu130", "ops": {}}
    info["cuda_version"] = torch.version.cuda
    monkeypatch.setattr(_extension, "build_info", lambda: info)
    with pytest.raises(ImportError) as exc:
        _extension.check_torch_compatible()
    message = str(exc.value)
    assert "was built for torch 2.0.1+cu130" in message
    page = _extension.wheel_page_name(torch.__version__, torch.version.cuda)
    url = wheel_matrix.pages_url() + page
    assert f"pip install --force-reinstall --no-deps lltm_ext -f {url}" in message


def test_the_sdist_build_notice():
    # docs/build_notes.md's build times: about 2230 s on 2 cores for the default list (8 SASS
    # targets), 303 s CPU-only; 88-115 s on the 16-core H200 machine for sm_90 + sm_90a.
    assert config.build_seconds(2, 8) == pytest.approx(2230, rel=0.05)
    assert config.build_seconds(2, 0) == pytest.approx(303, rel=0.05)
    assert config.build_seconds(16, 2) == pytest.approx(100, rel=0.3)
    assert config.duration_text(2230) == "about 37 min"
    assert config.duration_text(21.5) == "about 20 s"
    line = config.source_build_notice(
        seconds=273,
        jobs=2,
        what="5 ops, 8 GPU architectures",
        page_url="https://x/p.html",
        pages_url="https://x/",
    )
    assert (
        "\n" not in line
        and "about 5 min" in line
        and "pip install lltm_ext -f https://x/p.html" in line
    )


# --------------------------------------------------------------------------------------------
# The find-links pages, and a real pip reading one over HTTP.
# --------------------------------------------------------------------------------------------


def fake_wheel(folder: Path, label: str, py: str = "py3", plat: str = "any") -> Path:
    """A minimal, valid wheel named like ours (a pure-Python stand-in: nothing to build)."""
    version = f"0.1.0+{label}"
    dist = f"lltm_ext-{version}.dist-info"
    path = folder / f"lltm_ext-{version}-{py}-none-{plat}.whl"
    torch_mm = label.split("torch")[1]
    files = {
        "lltm_ext_standin.py": "VALUE = 1\n",
        f"{dist}/METADATA": (
            f"Metadata-Version: 2.1\nName: lltm_ext\nVersion: {version}\n"
            f"Requires-Dist: torch=={torch_mm}.*\n"
        ),
        f"{dist}/WHEEL": (
            f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {py}-none-{plat}\n"
        ),
    }
    record = [f"{name},sha256=,{len(data)}" for name, data in files.items()] + [f"{dist}/RECORD,,"]
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr(f"{dist}/RECORD", "\n".join(record) + "\n")
    return path


def test_pages_hold_their_own_torch_and_cuda_only(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for label in ("cu130torch2.13", "cputorch2.13", "cu130torch2.12"):
        fake_wheel(wheels, label)
    site = tmp_path / "site"
    pages = find_links.write_site(
        site, find_links.local_wheels(wheels, None, site / "whl" / "files")
    )
    assert sorted(pages) == [
        "torch-2.12+cu130.html",
        "torch-2.13+cpu.html",
        "torch-2.13+cu130.html",
    ]
    html = (site / "whl" / "torch-2.13+cu130.html").read_text()
    name = "lltm_ext-0.1.0+cu130torch2.13-py3-none-any.whl"
    digest = hashlib.sha256((wheels / name).read_bytes()).hexdigest()
    assert f'href="files/lltm_ext-0.1.0%2Bcu130torch2.13-py3-none-any.whl#sha256={digest}"' in html
    assert "torch2.12" not in html and "cputorch" not in html
    assert (site / "whl" / "files" / name).is_file()
    index = (site / "whl" / "index.html").read_text()
    assert all(f'href="{p}"' in index for p in pages)


def test_pages_refuse_what_they_cannot_place(tmp_path):
    with pytest.raises(find_links.PageError, match="no torch/CUDA label"):
        find_links.parse("lltm_ext-0.1.0-cp312-cp312-manylinux_2_28_x86_64.whl", "u", None)
    with pytest.raises(find_links.PageError, match="not a wheel of lltm_ext"):
        find_links.parse("other-0.1.0+cu130torch2.13-py3-none-any.whl", "u", None)
    w = find_links.parse("lltm_ext-0.1.0+cu130torch2.13-py3-none-any.whl", "u", None)
    with pytest.raises(find_links.PageError, match="listed twice"):
        find_links.write_site(tmp_path, [w, w])
    assets = tmp_path / "assets.jsonl"
    assets.write_text(
        json.dumps({"name": w.name, "url": "https://h/" + w.name, "sha256": "sha256:" + "ab" * 32})
        + "\n"
        + json.dumps({"name": "lltm_ext-0.1.0.tar.gz", "url": "https://h/s", "sha256": None})
    )
    (parsed,) = find_links.asset_wheels(assets)
    assert parsed.sha256 == "ab" * 32 and parsed.page == "torch-2.13+cu130.html"


@pytest.fixture
def served(tmp_path):
    """A folder served over HTTP on 127.0.0.1 (as tools/release/loopback_install.py serves the
    site)."""
    site = tmp_path / "site"
    site.mkdir()
    handler = partial(SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *a: None  # type: ignore[method-assign]
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield site, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def pip_dry_run(
    page_url: str, tmp_path: Path, *extra: str
) -> tuple[subprocess.CompletedProcess, dict]:
    report = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-index"]
    cmd += ["--find-links", page_url, "--only-binary", "lltm_ext", "--report", str(report)]
    env = {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PIP_")}, **env}
    out = subprocess.run(
        [*cmd, *extra, "lltm_ext"], capture_output=True, text=True, env=env, timeout=300
    )
    return out, (json.loads(report.read_text()) if report.is_file() else {})


def test_pip_takes_the_wheel_from_a_served_page_and_nothing_else(served, tmp_path):
    site, url = served
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for label in ("cu130torch2.13", "cu130torch2.12"):
        fake_wheel(wheels, label)
    find_links.write_site(site, find_links.local_wheels(wheels, None, site / "whl" / "files"))
    out, report = pip_dry_run(f"{url}/whl/torch-2.12+cu130.html", tmp_path, "--no-deps")
    assert out.returncode == 0, out.stderr
    (item,) = report["install"]
    assert item["metadata"]["version"] == "0.1.0+cu130torch2.12"  # not 2.13's, which is newer
    assert item["download_info"]["url"].startswith(f"{url}/whl/files/lltm_ext-0.1.0")
    digest = hashlib.sha256(next(wheels.glob("*torch2.12*")).read_bytes()).hexdigest()
    assert item["download_info"]["archive_info"]["hashes"]["sha256"] == digest
    # With the wheel's torch requirement and no index, pip cannot take the wheel without its
    # torch (none here is 2.12): it refuses, and names the requirement.
    out, _ = pip_dry_run(f"{url}/whl/torch-2.12+cu130.html", tmp_path)
    assert out.returncode != 0 and "torch==2.12.*" in out.stdout + out.stderr


# --------------------------------------------------------------------------------------------
# check_dist's manylinux checks, on a module of this build.
# --------------------------------------------------------------------------------------------


def built_module() -> Path:
    from lltm_ext.ops import MODULES

    for op in MODULES:
        try:
            return Path(_extension.load_extension(op).__file__)
        except ImportError:
            continue
    pytest.skip("no compiled module of lltm_ext is built")


def manylinux_problems(tmp_path: Path, plat: str, tags: str | None = None, extra=()) -> list[str]:
    module = built_module()
    name = f"lltm_ext/{module.name}"
    (tmp_path / "lltm_ext").mkdir(exist_ok=True)
    (tmp_path / name).write_bytes(module.read_bytes())
    args = SimpleNamespace(dist=f"lltm_ext-0.1.0-cp3-cp3-{plat}.whl", expect_plat="manylinux")
    meta = SimpleNamespace(get_all=lambda key: [f"cp3-cp3-{t}" for t in (tags or plat).split(".")])
    problems = check_dist.Problems()
    modules = {module.name.split(".")[0]: name}
    check_dist.check_manylinux(args, problems, {name, *extra}, meta, tmp_path, modules)
    return problems


def test_check_dist_holds_the_tag_to_the_symbols_the_modules_need(tmp_path):
    needs = check_dist.symbol_versions(built_module())
    glibc = max(
        (
            check_dist._vkey(v.partition("_")[2])
            for v in needs.get("libc.so.6", set())
            if v.startswith("GLIBC_2")
        ),
        default=(2, 5),
    )
    fits = f"manylinux_2_{max(glibc[1], 17)}_x86_64"
    assert manylinux_problems(tmp_path, fits) == []
    if glibc > (2, 5):
        found = manylinux_problems(tmp_path, "manylinux_2_5_x86_64")
        assert any("newer than its tag's glibc 2.5" in p for p in found), found
    found = manylinux_problems(tmp_path, "linux_x86_64")
    assert any("not a manylinux tag" in p for p in found), found
    found = manylinux_problems(tmp_path, fits, tags="manylinux_2_99_x86_64")
    assert any("differ from WHEEL's" in p for p in found), found
    vendored = "lltm_ext.libs/libc10-0a1b2c3d.so"
    found = manylinux_problems(tmp_path, fits, extra=[vendored])
    assert any("vendored" in p and vendored in p for p in found), found


def test_what_torch_provides_is_excluded_and_nothing_else():
    for soname in (
        "libc10.so",
        "libc10_cuda.so",
        "libtorch_cuda.so",
        "libtorch_python.so",
        "libcudart.so.13",
        "libgomp.so.1",
    ):
        assert check_dist.provided_by_torch(soname), soname
    for soname in ("libfoo.so.1", "libstdc++.so.6", "libgomp-a34b3233.so.1"):
        assert not check_dist.provided_by_torch(soname), soname
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "packaging" / "check_dist.py"), "provided"],
        capture_output=True,
        text=True,
    )
    assert out.stdout.split() == list(check_dist.TORCH_PROVIDED)
