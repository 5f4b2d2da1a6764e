#!/usr/bin/env python3
"""The prebuilt-wheel matrix (tools/release/wheel_matrix.json): its checks, its cells, its table.

    python tools/release/wheel_matrix.py validate       # what is wrong with the definition
    python tools/release/wheel_matrix.py cells [--scope all|pr] [--github-output FILE]
    python tools/release/wheel_matrix.py table          # the README's table of what is built
    python tools/release/wheel_matrix.py page TORCH CUDA  # the find-links page of a cell
    python tools/release/wheel_matrix.py check-latest   # the index's newest torch is covered
    python tools/release/wheel_matrix.py check-index    # every cell's torch is on PyTorch's index

The JSON file is the one definition of what is built: a release is a torch minor (``2.15``) with
the CUDA variants PyTorch's index ships for it (``13.2``, ..., and ``cpu``) and the CPython
versions torch has Linux x86_64 wheels for; a cell is one (torch, variant, Python) of those, for
the Pythons this project supports (``pythons``). The wheels workflow reads its cells from here,
tests/test_wheel_matrix.py checks the definition, that the workflow spells no list of its own, and
that the README's table is :func:`readme_table`'s. Only the standard library is used.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DEFINITION = ROOT / "tools" / "release" / "wheel_matrix.json"
OLDEST = "2.10"  # the oldest torch release the wheels cover
REQUIRED_PYTHONS = ("3.10", "3.11", "3.12", "3.13")  # built wherever torch has wheels for them
PLATFORM = "manylinux_2_28_x86_64"  # torch's own Linux x86_64 wheels' tag, and so ours

_MINOR = re.compile(r"\d+\.\d+")
_CUDA = re.compile(r"(\d+)\.(\d+)")


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def load(path: Path = DEFINITION) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


# --------------------------------------------------------------------------------------------
# Names: the variant tag, the find-links page, the wheel's version label.
# --------------------------------------------------------------------------------------------


def variant_tag(cuda: str | None) -> str:
    """'13.2' -> 'cu132'; 'cpu' or None (a CPU-only torch) -> 'cpu'."""
    if cuda is None or cuda == "cpu":
        return "cpu"
    match = _CUDA.fullmatch(cuda)
    if not match:
        raise ValueError(f"not a CUDA version: {cuda!r}")
    return f"cu{match[1]}{match[2]}"


def page_name(torch: str, cuda: str | None) -> str:
    """The find-links page of a (torch minor, CUDA) pair: 'torch-2.15+cu132.html'.

    lltm_ext._extension.wheel_page_name names it the same way (tests/test_wheel_matrix.py)."""
    return f"torch-{torch}+{variant_tag(cuda)}.html"


def version_label(torch: str, cuda: str | None) -> str:
    """The local version label of a cell's wheel, as the build writes it: 'cu132torch2.15'."""
    return f"{variant_tag(cuda)}torch{torch}"


def pages_url(root: Path = ROOT) -> str:
    """Where the release's find-links pages are served: pyproject.toml's [project.urls] Wheels
    (with a trailing '/')."""
    text = (root / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(r'^\s*Wheels\s*=\s*"([^"]+)"', text, re.M)
    if not match:
        raise SystemExit('wheel_matrix: pyproject.toml has no [project.urls] Wheels = "..."')
    return match[1].rstrip("/") + "/"


# --------------------------------------------------------------------------------------------
# Checks of the definition.
# --------------------------------------------------------------------------------------------


def problems(definition: dict[str, Any]) -> list[str]:
    """What is wrong with a definition (an empty list: nothing)."""
    out: list[str] = []
    for key in ("pythons", "torch_index", "index_newest", "sources", "releases"):
        if key not in definition:
            out.append(f"missing top-level key {key!r}")
    if out:
        return out
    pythons = definition["pythons"]
    if not (isinstance(pythons, list) and pythons and all(_is_py(p) for p in pythons)):
        return [f"pythons must be a list of '3.X' versions, got {pythons!r}"]
    if pythons != sorted(set(pythons), key=_key):
        out.append(f"pythons must be sorted and unique: {pythons}")
    missing = [p for p in REQUIRED_PYTHONS if p not in pythons]
    if missing:
        out.append(f"pythons lacks {missing} (the project supports 3.10 and newer)")
    if not re.fullmatch(r"\d+\.\d+\.\d+", str(definition["index_newest"])):
        out.append(
            f"index_newest must be a version like 2.15.0, got {definition['index_newest']!r}"
        )
    sources = definition["sources"]
    releases = definition["releases"]
    if not isinstance(releases, list) or not releases:
        return out + ["releases must be a non-empty list"]
    seen: list[str] = []
    for i, rel in enumerate(releases):
        where = f"releases[{i}]"
        if not isinstance(rel, dict):
            out.append(f"{where} must be an object")
            continue
        for key in ("torch", "cuda", "pypi_cuda", "torch_pythons", "source"):
            if key not in rel:
                out.append(f"{where} lacks {key!r}")
        if any(key not in rel for key in ("torch", "cuda", "pypi_cuda", "torch_pythons")):
            continue
        torch = rel["torch"]
        if not (isinstance(torch, str) and _MINOR.fullmatch(torch)):
            out.append(f"{where}: torch must be a minor release like '2.15', got {torch!r}")
            continue
        where = f"torch {torch}"
        if torch in seen:
            out.append(f"{where} is listed twice")
        seen.append(torch)
        cuda = rel["cuda"]
        if not (isinstance(cuda, list) and cuda):
            out.append(f"{where}: cuda must be a non-empty list")
        else:
            for c in cuda:
                if c != "cpu" and not (isinstance(c, str) and _CUDA.fullmatch(c)):
                    out.append(
                        f"{where}: cuda entry {c!r} is neither 'cpu' nor a version like 13.0"
                    )
                elif c != "cpu" and _default_archs_problem(c):
                    out.append(f"{where}: CUDA {c}: {_default_archs_problem(c)}")
            if len(set(cuda)) != len(cuda):
                out.append(f"{where}: cuda lists a variant twice: {cuda}")
            if rel["pypi_cuda"] not in cuda:
                out.append(
                    f"{where}: the index's default build (CUDA {rel['pypi_cuda']}) is not among "
                    f"its variants {cuda}: users of `pip install torch` would have no wheel"
                )
        tp = rel["torch_pythons"]
        if not (isinstance(tp, list) and tp and all(_is_py(p) for p in tp)):
            out.append(f"{where}: torch_pythons must be a list of '3.X' versions, got {tp!r}")
        else:
            built = [p for p in pythons if p in tp]
            if not built:
                out.append(f"{where}: no Python of {pythons} has torch wheels ({tp})")
        for fact, name in (rel.get("source") or {}).items():
            if name not in sources:
                out.append(f"{where}: source of {fact} is {name!r}, which 'sources' does not name")
        for fact in ("cuda", "pypi_cuda", "torch_pythons"):
            if fact not in (rel.get("source") or {}):
                out.append(f"{where}: no source given for {fact}")
    if out:
        return out
    if seen != sorted(seen, key=_key):
        out.append(f"releases must be in order: {seen}")
    ordered = sorted(seen, key=_key)
    if ordered[0] != OLDEST:
        out.append(f"the oldest release must be {OLDEST}, got {ordered[0]}")
    for a, b in itertools.pairwise(ordered):
        if _key(a)[0] == _key(b)[0] and _key(b)[1] != _key(a)[1] + 1:
            out.append(f"releases skip from {a} to {b}: every minor release is covered")
    newest = ".".join(str(definition["index_newest"]).split(".")[:2])
    if _key(newest) > _key(ordered[-1]):
        out.append(
            f"the index's newest torch is {definition['index_newest']} but the newest release "
            f"here is {ordered[-1]}: add torch {newest}"
        )
    return out


def _is_py(value: Any) -> bool:
    return isinstance(value, str) and re.fullmatch(r"3\.\d+", value) is not None


def _default_archs_problem(cuda: str) -> str | None:
    """Why tools/buildsys/archs.py has no default architecture list for a toolkit, or None."""
    sys.path.insert(0, str(ROOT))
    try:
        from tools.buildsys import archs

        archs.default_arch_list(cuda)
    except Exception as exc:  # an ArchListError or a bad version
        return f"no default architecture list ({exc})"
    finally:
        sys.path.remove(str(ROOT))
    return None


# --------------------------------------------------------------------------------------------
# Cells, and the table.
# --------------------------------------------------------------------------------------------


def cells(definition: dict[str, Any], scope: str = "all") -> list[dict[str, str]]:
    """Every (torch, variant, Python) to build, newest torch first. scope 'pr': the newest
    release's variants, one Python each (the newest that torch and the project share), as pull
    requests build them."""
    releases = sorted(definition["releases"], key=lambda r: _key(r["torch"]), reverse=True)
    if scope == "pr":
        releases = releases[:1]
    elif scope != "all":
        raise ValueError(f"scope must be 'all' or 'pr', got {scope!r}")
    out = []
    for rel in releases:
        pys = [p for p in definition["pythons"] if p in rel["torch_pythons"]]
        if scope == "pr":
            pys = pys[-1:]
        for cuda in rel["cuda"]:
            tag = variant_tag(cuda)
            for py in pys:
                out.append(
                    {
                        "torch": rel["torch"],
                        "cuda": cuda,
                        "variant": tag,
                        "python": py,
                        "torch_spec": f"torch=={rel['torch']}.*",
                        "index_url": f"{definition['torch_index'].rstrip('/')}/{tag}",
                        "page": page_name(rel["torch"], cuda),
                        "label": version_label(rel["torch"], cuda),
                    }
                )
    return out


def _py_span(pys: list[str]) -> str:
    return pys[0] if len(pys) == 1 else f"{pys[0]}-{pys[-1]}"


def readme_table(definition: dict[str, Any], base_url: str) -> str:
    """The README's table: per torch release, its variants (each linked to its find-links page;
    the one `pip install torch` gives marked) and the Pythons built."""
    lines = [
        "| torch | CUDA builds (each links its page for `pip install lltm_ext -f`) | Python |",
        "|---|---|---|",
    ]
    for rel in sorted(definition["releases"], key=lambda r: _key(r["torch"]), reverse=True):
        links = []
        cudas = sorted((c for c in rel["cuda"] if c != "cpu"), key=_key, reverse=True)
        for cuda in cudas + (["cpu"] if "cpu" in rel["cuda"] else []):
            text = "CPU" if cuda == "cpu" else cuda
            link = f"[{text}]({base_url}{page_name(rel['torch'], cuda)})"
            if cuda == rel["pypi_cuda"]:
                link += " (`pip install torch`'s)"
            links.append(link)
        pys = [p for p in definition["pythons"] if p in rel["torch_pythons"]]
        lines.append(f"| {rel['torch']} | {', '.join(links)} | {_py_span(pys)} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Against the package indexes (network; the wheels workflow and .ci/run).
# --------------------------------------------------------------------------------------------


def _pip_versions(python: str, *args: str) -> list[str] | None:
    """`pip index versions torch ...`: the versions offered, or None when pip finds none."""
    cmd = [python, "-m", "pip", "index", "versions", "torch", "--disable-pip-version-check"]
    out = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=300)
    match = re.search(r"Available versions: (.+)", out.stdout)
    if out.returncode != 0 or not match:
        return None
    return [v.strip() for v in match[1].split(",")]


def check_latest(definition: dict[str, Any], python: str) -> int:
    """The index's newest torch (as pip's configuration sees it) has a release here."""
    versions = _pip_versions(python)
    if not versions:
        print("check-latest: pip lists no torch versions (no index reachable?)", file=sys.stderr)
        return 1
    plain = sorted(
        {v.split("+")[0] for v in versions if re.fullmatch(r"\d+\.\d+\.\d+", v.split("+")[0])},
        key=_key,
    )
    newest = plain[-1]
    minor = ".".join(newest.split(".")[:2])
    covered = [r["torch"] for r in definition["releases"]]
    print(f"check-latest: the index's newest torch is {newest}; here: {', '.join(covered)}")
    if minor not in covered:
        print(
            f"check-latest: FAILED: torch {minor} is out, but tools/release/wheel_matrix.json has "
            f"no release {minor}: add it (its CUDA variants and Pythons), and set index_newest",
            file=sys.stderr,
        )
        return 1
    return 0


def check_index(definition: dict[str, Any], python: str) -> int:
    """Every cell's torch is on PyTorch's per-variant index, for its Python, as a
    manylinux_2_28 x86_64 wheel (one `pip index versions` per variant and Python)."""
    missing = []
    wanted: dict[tuple[str, str], list[str]] = {}
    for cell in cells(definition):
        wanted.setdefault((cell["index_url"], cell["python"]), []).append(cell["torch"])
    for (url, py), torches in sorted(wanted.items()):
        versions = (
            _pip_versions(
                python,
                "--index-url",
                url,
                "--python-version",
                py,
                "--platform",
                PLATFORM,
                "--only-binary=:all:",
            )
            or []
        )
        have = {".".join(v.split("+")[0].split(".")[:2]) for v in versions}
        for torch in torches:
            ok = torch in have
            print(f"  {'ok  ' if ok else 'MISS'} torch {torch} on {url} for Python {py}")
            if not ok:
                missing.append(f"torch {torch}, {url.rsplit('/', 1)[1]}, Python {py}")
    if missing:
        print(
            "check-index: FAILED: PyTorch's index has no torch wheel for these cells of "
            "tools/release/wheel_matrix.json (remove the variant, or fix its Pythons):\n  "
            + "\n  ".join(missing),
            file=sys.stderr,
        )
        return 1
    print(f"check-index: all {len(cells(definition))} cells have torch on the index")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--definition", type=Path, default=DEFINITION)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("validate", help="check the definition")
    c = sub.add_parser("cells", help="the cells as JSON")
    c.add_argument("--scope", choices=["all", "pr"], default="all")
    c.add_argument("--github-output", help="append 'cells=<JSON>' to this file ($GITHUB_OUTPUT)")
    sub.add_parser("table", help="the README's table")
    p = sub.add_parser("page", help="the find-links page of a (torch, CUDA)")
    p.add_argument("torch")
    p.add_argument("cuda", help="a CUDA version, or cpu")
    for name in ("check-latest", "check-index"):
        s = sub.add_parser(name)
        s.add_argument("--python", default=sys.executable, help="the Python whose pip asks")
    args = parser.parse_args(argv)
    definition = load(args.definition)
    found = problems(definition)
    if found:
        for p_ in found:
            print(f"wheel_matrix: {args.definition.name}: {p_}", file=sys.stderr)
        return 1
    if args.command == "validate":
        n = len(cells(definition))
        print(f"wheel_matrix: {len(definition['releases'])} torch releases, {n} cells: OK")
    elif args.command == "cells":
        found_cells = cells(definition, args.scope)
        text = json.dumps({"include": found_cells}, separators=(",", ":"))
        if args.github_output:
            with open(args.github_output, "a", encoding="utf-8") as f:
                f.write(f"cells={text}\n")
            for cell in found_cells:
                print(f"  torch {cell['torch']} {cell['variant']} Python {cell['python']}")
            print(f"{len(found_cells)} cells ({args.scope})")
        else:
            print(text)
    elif args.command == "table":
        print(readme_table(definition, pages_url()))
    elif args.command == "page":
        print(pages_url() + page_name(args.torch, args.cuda))
    elif args.command == "check-latest":
        return check_latest(definition, args.python)
    else:
        return check_index(definition, args.python)
    return 0


if __name__ == "__main__":
    sys.exit(main())
