#!/usr/bin/env python3
"""Checks of a built lltm_ext wheel or sdist, beyond what check-wheel-contents and twine check see.

    check_dist.py wheel WHEEL --source-root DIR [--arch-list LIST] [--expect-cuda yes|no|any]
                              [--cuobjdump PATH] [--any-label]
    check_dist.py sdist SDIST --source-root DIR [--same-as DIR]
    check_dist.py provided            # sonames torch's wheels provide (auditwheel --exclude)
    check_dist.py show WHEEL          # `auditwheel show`, and what its verdict rests on

wheel: the build record (lltm_ext/_build_info.py) is there and agrees with the metadata (version
and its label cu<CUDA>torch<A.B> / cputorch<A.B>, torch==A.B.* pin); every Python file of the
package and one compiled module per op (and its CPU twin, where recorded) are in it; each module
built with CUDA holds device code for exactly the requested architectures (SASS for each sm_XY,
PTX for each +PTX entry, listed with `cuobjdump --list-elf/--list-ptx`), and each module built
without CUDA holds none (no .nv_fatbin section, no CUDA library linked).

manylinux (wheel, with --expect-plat): the file name's and the WHEEL file's platform tags agree
and are manylinux tags (no newer than --expect-plat's glibc when it names one, as torch's own
wheels are manylinux_2_28); no module needs a GLIBC symbol version newer than its tag allows (nor,
where auditwheel's policy file can be read, a newer GLIBCXX / CXXABI / GCC one); no library was
vendored into the wheel (torch's, CUDA's and OpenMP's come from torch's wheels, so auditwheel
repair is told to exclude them: `check_dist.py provided` lists them), and every library a module
needs is either one of those, by its plain soname, or one the manylinux policy lets the system
provide; no module has an absolute RPATH/RUNPATH.

sdist: every source and header under src/, the Python package, tests, README, LICENSE, pyproject
and setup.py of the source tree are in it; the build record and build outputs are not; each
experiment (a folder under benchmarks/) is in it whole or not at all. With --same-as DIR, every
file of it but the metadata the sdist build writes is DIR's file, byte for byte.

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
SOURCE_PATTERNS = ("*.cpp", "*.cc", "*.h", "*.hpp", "*.cu", "*.cuh", "uses.txt")
# Never in an sdist or a wheel: build outputs and the per-build record (a wheel has its own).
NEVER = ("*.so", "*.o", "*.pyc", "*/__pycache__/*", "build/*", "dist/*", ".ci-venvs/*")
# One folder per experiment (benchmarks/<name>/): an sdist holds all of its files or none.
EXPERIMENTS = "benchmarks"
# Libraries the compiled modules need that torch's wheels bring (torch/lib, and the nvidia-* /
# cuda-toolkit wheels torch depends on), loaded by `import torch` before any module of ours: a
# wheel of ours must not carry copies (two copies of libc10 or of the CUDA runtime in one process
# break). OpenMP too: torch ships its libgomp.so.1 in torch/lib and loads it first.
TORCH_PROVIDED = (
    "libtorch*.so",
    "libc10*.so",
    "libshm.so",
    "libcudart.so.*",
    "libcuda.so.*",
    "libcublas*.so.*",
    "libcusparse*.so.*",
    "libcufft*.so.*",
    "libcurand*.so.*",
    "libcusolver*.so.*",
    "libnvrtc*.so*",
    "libnvToolsExt*.so*",
    "libnvJitLink*.so*",
    "libcudnn*.so*",
    "libnccl*.so*",
    "libgomp.so.1",
)
# What the manylinux policies let the system provide (PEP 600's libraries, as auditwheel's
# policy lists them for x86_64), plus the dynamic loader.
SYSTEM_LIBS = (
    "libc.so.6",
    "libm.so.6",
    "libmvec.so.1",
    "libdl.so.2",
    "librt.so.1",
    "libpthread.so.0",
    "libstdc++.so.6",
    "libgcc_s.so.1",
    "libatomic.so.1",
    "libutil.so.1",
    "libresolv.so.2",
    "libanl.so.1",
    "libnsl.so.1",
    "libz.so.1",
    "ld-linux-x86-64.so.2",
)
_MANYLINUX = re.compile(r"manylinux_(\d+)_(\d+)_x86_64")
_LEGACY = {
    "manylinux1_x86_64": (2, 5),
    "manylinux2010_x86_64": (2, 12),
    "manylinux2014_x86_64": (2, 17),
}


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

sys.path.append(str(Path(__file__).resolve().parents[2]))  # after the installed packages
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


def elf_dynamic(path: Path) -> tuple[list[str], list[str]]:
    """(NEEDED sonames, RPATH/RUNPATH entries) of a shared object."""
    out = subprocess.run(["readelf", "-d", "-W", str(path)], capture_output=True, text=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
    paths = re.findall(r"\((?:RPATH|RUNPATH)\)\s+Library r(?:un)?path: \[([^\]]*)\]", out)
    return needed, [p for entry in paths for p in entry.split(":") if p]


def symbol_versions(path: Path) -> dict[str, set[str]]:
    """Versions a shared object requires, per library: {'libc.so.6': {'GLIBC_2.2.5', ...}}
    (readelf -V's version-needs section)."""
    out = subprocess.run(["readelf", "-V", "-W", str(path)], capture_output=True, text=True).stdout
    needs: dict[str, set[str]] = {}
    current = None
    for line in out.splitlines():
        lib = re.search(r"File: (\S+)\s+Cnt:", line)
        if lib:
            current = lib[1]
            needs.setdefault(current, set())
            continue
        name = re.search(r"Name: (\S+)\s+Flags", line)
        if name and current:
            needs[current].add(name[1])
    return needs


def _vkey(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text))


def plat_glibc(tag: str) -> tuple[int, int] | None:
    """manylinux_2_28_x86_64 -> (2, 28); legacy aliases too; None for a non-manylinux tag."""
    match = _MANYLINUX.fullmatch(tag)
    if match:
        return int(match[1]), int(match[2])
    return _LEGACY.get(tag)


def policy_symbol_versions(glibc: tuple[int, int]) -> dict[str, set[str]] | None:
    """auditwheel's manylinux policy for a glibc (its allowed GLIBCXX, CXXABI, GCC, ... versions
    on x86_64), where auditwheel is installed; None otherwise."""
    import importlib.util
    import json

    spec = importlib.util.find_spec("auditwheel")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / "policy" / "manylinux-policy.json"
        if path.is_file():
            for policy in json.loads(path.read_text()):
                if policy["name"] == f"manylinux_{glibc[0]}_{glibc[1]}":
                    return {k: set(v) for k, v in policy["symbol_versions"]["x86_64"].items()}
    return None


def provided_by_torch(soname: str) -> bool:
    return any(fnmatch.fnmatch(soname, pat) for pat in TORCH_PROVIDED)


def check_manylinux(args, problems: Problems, names, wheel_meta, tmp: Path, modules) -> None:
    """The platform tag, what the modules need from the system, and that nothing is vendored."""
    tags = set(wheel_meta.get_all("Tag") or [])
    file_plats = set(Path(args.dist).name[: -len(".whl")].split("-")[-1].split("."))
    meta_plats = {tag.split("-")[-1] for tag in tags}
    problems.need(
        file_plats == meta_plats,
        f"the file name's platform tags {sorted(file_plats)} differ from WHEEL's "
        f"{sorted(meta_plats)}",
    )
    glibcs = {plat: plat_glibc(plat) for plat in file_plats}
    not_many = sorted(p for p, g in glibcs.items() if g is None)
    if not problems.need(
        not not_many,
        f"platform tag {'.'.join(sorted(file_plats))} is not a manylinux tag (repair the wheel "
        "with auditwheel: tools/packaging/build_wheel.sh does unless --no-repair)",
    ):
        return
    best = min(g for g in glibcs.values() if g is not None)  # the oldest glibc it claims
    if args.expect_plat != "manylinux":
        want = plat_glibc(args.expect_plat)
        problems.need(
            want is not None and best <= want,
            f"platform tag {'.'.join(sorted(file_plats))}, expected {args.expect_plat} (or older)",
        )
    policy = policy_symbol_versions(best)
    vendored = sorted(n for n in names if n.endswith((".so",)) or ".so." in PurePosixPath(n).name)
    vendored = [n for n in vendored if PurePosixPath(n).name.split(".")[0] not in modules]
    problems.need(
        not vendored,
        f"libraries vendored into the wheel: {vendored} (torch's and CUDA's come from torch's "
        "wheels: auditwheel repair --exclude them, see `check_dist.py provided`)",
    )
    worst: tuple[int, ...] = ()
    for name in sorted(modules.values()):
        path = tmp / name
        needed, rpaths = elf_dynamic(path)
        for soname in needed:
            ok = provided_by_torch(soname) or soname in SYSTEM_LIBS
            problems.need(
                ok,
                f"{name} needs {soname}, which neither torch's wheels nor a manylinux system "
                "provides (a renamed, vendored copy? another dependency?)",
            )
        absolute = [p for p in rpaths if not p.startswith("$ORIGIN")]
        problems.need(not absolute, f"{name} has absolute RPATH/RUNPATH entries {absolute}")
        for lib, versions in symbol_versions(path).items():
            if lib not in SYSTEM_LIBS:
                continue  # torch's libraries: theirs to vouch for
            for version in versions:
                family, _, number = version.partition("_")
                if family == "GLIBC" and number:
                    worst = max(worst, _vkey(number))
                    problems.need(
                        _vkey(number) <= best,
                        f"{name} needs {version} from {lib}, newer than its tag's glibc "
                        f"{best[0]}.{best[1]}",
                    )
                elif policy is not None and family in policy and number:
                    problems.need(
                        number in policy[family],
                        f"{name} needs {version} from {lib}, which manylinux_{best[0]}_{best[1]} "
                        "does not allow",
                    )
    say(
        f"  platform {'.'.join(sorted(file_plats))}: newest GLIBC symbol needed "
        f"{'.'.join(map(str, worst)) or '-'}; "
        + ("GLIBCXX/CXXABI/GCC checked against auditwheel's policy; " if policy else "")
        + "nothing vendored; torch's and CUDA's libraries by their own sonames"
    )


def auditwheel_show(wheel: str) -> int:
    """Prints `auditwheel show WHEEL`, then what it rests on. show has no --exclude: it names
    torch's libraries (which it cannot find, or which no manylinux policy lists) as external, and
    so calls any wheel of torch extensions linux_x86_64; what matters is that those are the only
    external libraries, and the tag the modules' own symbol versions allow (sym_tag)."""
    import json

    cmd = [sys.executable, "-m", "auditwheel"]
    shown = subprocess.run([*cmd, "show", wheel], capture_output=True, text=True)
    print(shown.stdout.rstrip() or shown.stderr.rstrip(), flush=True)
    raw = subprocess.run([*cmd, "show", "--json", wheel], capture_output=True, text=True)
    try:
        report = json.loads(raw.stdout)
    except json.JSONDecodeError:
        print(f"check_dist: FAILED: auditwheel show --json: {raw.stderr.strip()[-500:]}")
        return 1
    external = sorted(report.get("external_libs") or {})
    foreign = [lib for lib in external if not provided_by_torch(lib)]
    sym_tag = report.get("sym_tag", "")
    say(
        f"auditwheel: the modules' own symbol versions allow {sym_tag}; the external libraries it "
        f"names are {', '.join(external) or 'none'}"
        + (", all torch's (left to torch's wheels)" if not foreign else "")
    )
    problems = Problems()
    problems.need(not foreign, f"external libraries that torch's wheels do not provide: {foreign}")
    problems.need(
        plat_glibc(sym_tag) is not None, f"symbol versions allow no manylinux tag: {sym_tag}"
    )
    for p in problems:
        print(f"check_dist: FAILED: {p}", file=sys.stderr)
    return 1 if problems else 0


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
        wheel_meta = email.parser.Parser().parsestr(zf.read(f"{dist_info}/WHEEL").decode())
        tmp = Path(tempfile.mkdtemp(prefix="lltm_ext-check-"))
        try:
            zf.extractall(tmp)
            modules = check_wheel_tree(args, problems, names, info, meta, tmp)
            if args.expect_plat != "any":
                check_manylinux(args, problems, names, wheel_meta, tmp, modules)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return problems


def check_wheel_tree(args, problems: Problems, names, info, meta, tmp: Path) -> dict[str, str]:
    """Everything but the platform checks; returns the compiled modules {'_relu': path}."""
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
    # ... nor a Python file the source tree no longer has (a stale copy in a reused build/lib).
    sources = package_files(Path(args.source_root)) | {f"{PACKAGE}/_build_info.py"}
    stale = sorted(n for n in names if n.startswith(f"{PACKAGE}/") and n.endswith(".py"))
    stale = [n for n in stale if n not in sources]
    problems.need(not stale, f"Python files the source tree does not have: {stale}")

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
    recorded_modules = {f"_{op}" for op in ops} | {
        f"_{op}_cpu" for op, o in ops.items() if o.get("cpu_twin")
    }
    extra = sorted(set(modules) - recorded_modules)
    problems.need(not extra, f"compiled modules the build record does not list: {extra}")
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
    return modules


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
    if args.same_as:
        with tarfile.open(args.dist) as tf:
            differ = sdist_differences(tf, prefix, Path(args.same_as))
        problems.need(
            not differ,
            f"the sdist's files differ from {args.same_as}'s (a wheel built there is not what "
            f"the sdist builds): {differ[:20]}" + (" ..." if len(differ) > 20 else ""),
        )
        if not differ:
            say(f"  every file but the generated metadata is {args.same_as}'s, byte for byte")
    return problems


def sdist_generated(name: str) -> bool:
    """Files an sdist build writes (metadata), which the source tree need not hold as they are."""
    return name in ("PKG-INFO", "setup.cfg") or name.split("/")[0].endswith(".egg-info")


def sdist_differences(tf: tarfile.TarFile, prefix: str, tree: Path) -> list[str]:
    """The sdist's files (under `prefix`) whose bytes are not those of the same path in `tree`,
    generated metadata aside: 'path (missing here)' or 'path (differs)'."""
    found = []
    for member in tf.getmembers():
        name = member.name[len(prefix) :]
        if not member.isfile() or sdist_generated(name):
            continue
        here = tree / name
        if not here.is_file():
            found.append(f"{name} (missing here)")
            continue
        data = tf.extractfile(member)
        if data is None or data.read() != here.read_bytes():
            found.append(f"{name} (differs)")
    return found


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
    w.add_argument(
        "--expect-plat",
        default="manylinux",
        help="manylinux (default): any manylinux tag; a tag such as manylinux_2_28_x86_64: that "
        "tag or an older glibc's; any: skip the platform checks (a wheel not repaired)",
    )
    s = sub.add_parser("sdist", help="check an sdist")
    s.add_argument("dist")
    s.add_argument("--source-root", required=True)
    s.add_argument(
        "--same-as",
        metavar="DIR",
        help="also check that every file of the sdist but its generated metadata is DIR's, byte "
        "for byte (tools/packaging/build_wheel.sh --reuse-objects builds the wheel in DIR)",
    )
    sub.add_parser("provided", help="print the sonames torch's wheels provide, one per line")
    sub.add_parser("show", help="auditwheel show, and what its verdict rests on").add_argument(
        "dist"
    )
    args = parser.parse_args(argv)
    if args.kind == "provided":
        print("\n".join(TORCH_PROVIDED))
        return 0
    if args.kind == "show":
        return auditwheel_show(args.dist)
    if args.kind == "wheel" and args.expect_plat not in ("manylinux", "any"):
        if plat_glibc(args.expect_plat) is None:
            parser.error(f"--expect-plat {args.expect_plat!r} is not a manylinux tag")
    problems = check_wheel(args) if args.kind == "wheel" else check_sdist(args)
    if problems:
        for p in problems:
            print(f"check_dist: FAILED: {p}", file=sys.stderr)
        return 1
    say(f"{args.kind} OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
