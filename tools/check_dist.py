#!/usr/bin/env python3
"""Checks of a built lltm_ext wheel or sdist, beyond what check-wheel-contents and twine check see.

    check_dist.py wheel WHEEL --source-root DIR [--arch-list LIST] [--expect-cuda yes|no|any]
                              [--cuobjdump PATH] [--any-label]
    check_dist.py sdist SDIST --source-root DIR

wheel: the build record (lltm_ext/_build_info.py) is there and agrees with the metadata (version
and its label cu<CUDA>torch<A.B> / cputorch<A.B>, torch==A.B.* pin); every Python file of the
package and one compiled module per op (and its CPU twin, where recorded) are in it; each module
built with CUDA holds device code for exactly the requested architectures (SASS for each sm_XY,
PTX for each +PTX entry, listed with `cuobjdump --list-elf/--list-ptx`), and each module built
without CUDA holds none (no .nv_fatbin section, no CUDA library linked).

sdist: every source and header under src/, the Python package, tests, README, LICENSE, pyproject
and setup.py of the source tree are in it; the build record and build outputs are not; each
experiment (a folder under benchmarks/) is in it whole or not at all.

Only the standard library is used (plus readelf and cuobjdump as programs), so it runs with the
Python that builds the wheel. Exit status 1 and a list of problems when a check fails.
"""

from __future__ import annotations

import argparse
import ast
import email.parser
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

PACKAGE = "lltm_ext"
SOURCE_PATTERNS = ("*.cpp", "*.cc", "*.h", "*.hpp", "*.cu", "*.cuh")
# Never in an sdist or a wheel: build outputs and the per-build record (a wheel has its own).
NEVER = ("*.so", "*.o", "*.pyc", "*/__pycache__/*", "build/*", "dist/*", ".ci-venvs/*")
# One folder per experiment (benchmarks/<name>/): an sdist holds all of its files or none.
EXPERIMENTS = "benchmarks"


class Problems(list):
    def need(self, ok: bool, msg: str) -> bool:
        if not ok:
            self.append(msg)
        return ok


def say(msg: str) -> None:
    print(f"check_dist: {msg}", flush=True)


# ------------------------------------------------------------------------------------------------
# The architectures requested, in nvcc's names: the project's one reading (tools/buildsys/archs.py).
# ------------------------------------------------------------------------------------------------

sys.path.append(str(Path(__file__).resolve().parent.parent))  # after the installed packages
from tools.buildsys import archs  # noqa: E402


def parse_arch_list(value: str) -> tuple[set[str], set[str]]:
    """'8.0;9.0+PTX' -> ({'sm_80', 'sm_90'}, {'compute_90'}): SASS targets and PTX targets."""
    try:
        found = archs.targets(value)
    except archs.ArchListError as exc:
        raise SystemExit(f"check_dist: {exc}") from exc
    return {t for t in found if t.startswith("sm_")}, {t for t in found if t.startswith("compute_")}


# ------------------------------------------------------------------------------------------------
# What a compiled module holds.
# ------------------------------------------------------------------------------------------------


def elf_sections(path: Path) -> set[str]:
    out = subprocess.run(["readelf", "-S", "-W", str(path)], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"check_dist: readelf -S failed on {path}: {out.stderr.strip()}")
    return set(re.findall(r"^\s*\[\s*\d+\]\s+(\S+)", out.stdout, re.M))


def elf_needed(path: Path) -> list[str]:
    out = subprocess.run(["readelf", "-d", "-W", str(path)], capture_output=True, text=True)
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out.stdout)


def device_code(cuobjdump: str, path: Path) -> tuple[set[str], set[str]]:
    """({'sm_80', ...} SASS, {'compute_90', ...} PTX) embedded in a shared object."""
    found: tuple[set[str], set[str]] = (set(), set())
    for flag, pattern, kind in (
        ("--list-elf", r"\.(sm_\d+[af]?)\.cubin\s*$", 0),
        ("--list-ptx", r"\.sm_(\d+[af]?)\.ptx\s*$", 1),
    ):
        out = subprocess.run([cuobjdump, flag, str(path)], capture_output=True, text=True)
        text = out.stdout + out.stderr
        if out.returncode != 0 and "does not contain device code" not in text:
            raise SystemExit(f"check_dist: {cuobjdump} {flag} {path.name} failed:\n{text}")
        for line in text.splitlines():
            match = re.search(pattern, line)
            if match:
                found[kind].add(match.group(1) if kind == 0 else f"compute_{match.group(1)}")
    return found


# ------------------------------------------------------------------------------------------------
# Wheel.
# ------------------------------------------------------------------------------------------------


def package_files(root: Path) -> set[str]:
    """The package's files in the source tree that every wheel must hold."""
    files = {
        p.relative_to(root).as_posix()
        for p in (root / PACKAGE).rglob("*")
        if p.is_file()
        and (p.suffix == ".py" or p.name == "py.typed")
        and "__pycache__" not in p.parts
    }
    files.discard(f"{PACKAGE}/_build_info.py")  # the tree's copy may be absent or stale
    return files


def read_build_info(text: str) -> dict | None:
    """The BUILD_INFO literal of a _build_info.py (``BUILD_INFO = {...}`` or, as the build writes
    it, ``BUILD_INFO: dict[str, Any] = {...}``), without importing it; None if there is none."""
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign):
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id == "BUILD_INFO":
            return ast.literal_eval(value)
    return None


def check_wheel(args: argparse.Namespace) -> Problems:
    problems = Problems()
    wheel = Path(args.dist)
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        info_path = f"{PACKAGE}/_build_info.py"
        if not problems.need(info_path in names, f"{info_path} is missing from the wheel"):
            return problems
        info = read_build_info(zf.read(info_path).decode())
        if not problems.need(info is not None, f"{info_path} assigns no BUILD_INFO literal"):
            return problems
        dist_info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(zf.read(f"{dist_info}/METADATA").decode())
        tmp = Path(tempfile.mkdtemp(prefix="lltm_ext-check-"))
        try:
            zf.extractall(tmp)
            check_wheel_tree(args, problems, names, info, meta, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return problems


def check_wheel_tree(args, problems: Problems, names, info, meta, tmp: Path) -> None:
    version = meta["Version"]
    torch_mm = ".".join(info["torch_version"].split("+")[0].split(".")[:2])
    say(
        f"wheel {Path(args.dist).name}: version {version}, built with torch {info['torch_version']}"
        f", CUDA {info.get('cuda_version') or 'none'}, archs {info.get('cuda_arch_list') or '-'}"
    )
    problems.need(
        version == info["version"],
        f"METADATA version {version} differs from the build record's {info['version']}",
    )
    if not args.any_label:  # the label names what is inside: cu<CUDA>torch<A.B> or cputorch<A.B>
        cuda = info.get("cuda_version")
        want = (f"cu{cuda.replace('.', '')}" if cuda else "cpu") + f"torch{torch_mm}"
        local = version.partition("+")[2]
        problems.need(local == want, f"version label is {local!r}, expected {want!r}")
    requires = meta.get_all("Requires-Dist") or []
    torch_reqs = [r for r in requires if re.match(r"torch\b", r)]
    problems.need(
        torch_reqs == [f"torch=={torch_mm}.*"],
        f"Requires-Dist for torch is {torch_reqs}, expected ['torch=={torch_mm}.*']",
    )

    # Every Python file of the package, and nothing from the source tree's build outputs.
    missing = sorted(package_files(Path(args.source_root)) - names)
    problems.need(not missing, f"files missing from the wheel: {missing}")
    strays = sorted(
        n for n in names if n.startswith(("src/", "tests/", "build/", "tools/", "benchmarks/"))
    )
    problems.need(not strays, f"files that do not belong in the wheel: {strays}")

    # One compiled module per op; CUDA ones hold the requested device code, CPU ones none.
    modules = {PurePosixPath(n).name.split(".")[0]: n for n in names if n.endswith(".so")}
    ops = info["ops"]
    problems.need(bool(ops), "the build record lists no ops")
    cuda_ops = {op for op, o in ops.items() if o.get("cuda")}
    if args.expect_cuda == "yes":
        problems.need(
            bool(cuda_ops) and info.get("cuda_version") is not None,
            "a CUDA build was asked for, but no op was built with CUDA kernels",
        )
    elif args.expect_cuda == "no":
        problems.need(
            not cuda_ops and info.get("cuda_version") is None,
            f"a CPU-only build was asked for, but {sorted(cuda_ops)} have CUDA kernels",
        )
    if cuda_ops:
        requested = args.arch_list or info.get("cuda_arch_list") or ""
        want_sass, want_ptx = parse_arch_list(requested)
        recorded = set(info.get("cuda_targets") or [])
        problems.need(
            recorded == want_sass | want_ptx,
            f"the build record's cuda_targets {sorted(recorded)} differ from what "
            f"TORCH_CUDA_ARCH_LIST={requested!r} asks for {sorted(want_sass | want_ptx)}",
        )
        if args.arch_list and info.get("cuda_arch_list") != archs.normalize(args.arch_list):
            problems.append(
                f"built for arch list {info.get('cuda_arch_list')!r}, "
                f"but {args.arch_list!r} was requested"
            )
    for op, o in ops.items():
        problems.need(f"_{op}" in modules, f"compiled module lltm_ext/_{op}.*.so is missing")
        if o.get("cpu_twin"):  # the CPU-only twin of a CUDA module, for a CPU-only torch
            problems.need(f"_{op}_cpu" in modules, f"CPU twin lltm_ext/_{op}_cpu.*.so is missing")
    cuobjdump = args.cuobjdump
    for stem, name in sorted(modules.items()):
        path = tmp / name
        sections = elf_sections(path)
        has_fatbin = ".nv_fatbin" in sections or "__nv_relfatbin" in sections
        needed = elf_needed(path)
        cuda_libs = sorted(n for n in needed if re.match(r"lib(cudart|c10_cuda|torch_cuda)", n))
        op = stem[1:]
        if op in cuda_ops:
            if not cuobjdump:
                problems.append(f"{name}: cannot list its device code: no cuobjdump found")
                continue
            sass, ptx = device_code(cuobjdump, path)
            ok = problems.need(
                sass == want_sass, f"{name}: SASS for {sorted(sass)}, expected {sorted(want_sass)}"
            )
            ok &= problems.need(
                ptx == want_ptx, f"{name}: PTX for {sorted(ptx)}, expected {sorted(want_ptx)}"
            )
            if ok:
                say(
                    f"  {name}: SASS {', '.join(sorted(sass))}; PTX {', '.join(sorted(ptx)) or '-'}"
                    f"; links {', '.join(cuda_libs)}"
                )
        else:
            ok = problems.need(not has_fatbin, f"{name}: built without CUDA, but holds device code")
            ok &= problems.need(not cuda_libs, f"{name}: built without CUDA, but links {cuda_libs}")
            if cuobjdump and ok:
                sass, ptx = device_code(cuobjdump, path)
                ok = problems.need(
                    not sass and not ptx,
                    f"{name}: built without CUDA, but holds {sorted(sass | ptx)}",
                )
            if ok:
                say(f"  {name}: no device code, no CUDA libraries (CPU kernels only)")


# ------------------------------------------------------------------------------------------------
# Sdist.
# ------------------------------------------------------------------------------------------------


def expected_sdist_files(root: Path) -> set[str]:
    files = set()
    for p in (root / "src").rglob("*"):
        if p.is_file() and any(fnmatch.fnmatch(p.name, pat) for pat in SOURCE_PATTERNS):
            files.add(p.relative_to(root).as_posix())
    files |= package_files(root)
    for p in (root / "tests").rglob("*"):
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc":
            files.add(p.relative_to(root).as_posix())
    for name in ("README.md", "LICENSE", "pyproject.toml", "setup.py", "MANIFEST.in"):
        if (root / name).exists():
            files.add(name)
        else:
            say(f"note: {name} is not in the source tree")
    return files


def partial_experiments(root: Path, names: set[str]) -> list[str]:
    """Experiments (benchmarks/<name>/ of the source tree at `root`) of which `names`, the files
    of an sdist relative to its top folder, hold some files but not all: one message each."""
    found = []
    base = root / EXPERIMENTS
    for folder in sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []:
        files = {
            p.relative_to(root).as_posix()
            for p in folder.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        }
        files = {f for f in files if not any(fnmatch.fnmatch(f, pat) for pat in NEVER)}
        shipped = files & names
        if shipped and shipped != files:
            found.append(
                f"{folder.relative_to(root).as_posix()}/ is in the sdist only in part (an "
                f"experiment ships whole or not at all): missing {sorted(files - shipped)}"
            )
    return found


def check_sdist(args: argparse.Namespace) -> Problems:
    problems = Problems()
    with tarfile.open(args.dist) as tf:
        members = [m.name for m in tf.getmembers() if m.isfile()]
    top = {m.split("/")[0] for m in members}
    if not problems.need(len(top) == 1, f"sdist should have one top folder, has {sorted(top)}"):
        return problems
    prefix = top.pop() + "/"
    names = {m[len(prefix) :] for m in members}
    say(f"sdist {Path(args.dist).name}: {len(names)} files")
    missing = sorted(expected_sdist_files(Path(args.source_root)) - names)
    problems.need(not missing, f"files missing from the sdist: {missing}")
    banned = sorted(
        n
        for n in names
        if n == f"{PACKAGE}/_build_info.py" or any(fnmatch.fnmatch(n, pat) for pat in NEVER)
    )
    problems.need(not banned, f"files that do not belong in the sdist: {banned}")
    problems.extend(partial_experiments(Path(args.source_root), names))
    problems.need("PKG-INFO" in names, "PKG-INFO is missing from the sdist")
    sources = sorted(n for n in names if n.startswith("src/"))
    say(f"  sources and headers: {len(sources)} under src/; package, tests and metadata present")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="kind", required=True)
    w = sub.add_parser("wheel", help="check a wheel")
    w.add_argument("dist")
    w.add_argument("--source-root", required=True)
    w.add_argument(
        "--arch-list",
        default=os.environ.get("TORCH_CUDA_ARCH_LIST") or None,
        help="the TORCH_CUDA_ARCH_LIST asked for (default: the one the build recorded)",
    )
    w.add_argument("--expect-cuda", choices=["yes", "no", "any"], default="any")
    w.add_argument(
        "--any-label",
        action="store_true",
        help="accept any local version label (LLTM_EXT_VERSION_SUFFIX was set)",
    )
    w.add_argument("--cuobjdump", help="cuobjdump program (needed when there are CUDA modules)")
    s = sub.add_parser("sdist", help="check an sdist")
    s.add_argument("dist")
    s.add_argument("--source-root", required=True)
    args = parser.parse_args(argv)
    problems = check_wheel(args) if args.kind == "wheel" else check_sdist(args)
    if problems:
        for p in problems:
            print(f"check_dist: FAILED: {p}", file=sys.stderr)
        return 1
    say(f"{args.kind} OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
