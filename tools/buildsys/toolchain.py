"""The build's toolchain: the CUDA toolkit, its headers, and a C++ compiler that works with torch.

Functions that look at the machine (run nvcc, the compiler, readelf) take what they need as
arguments and return plain values, so that setup.py decides and the tests can check each rule.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path


def has_cudart(home: Path) -> bool:
    """Whether a toolkit folder has the CUDA runtime library that extensions link against."""
    libdirs = [
        home / "lib64",
        home / "lib",
        home / "targets" / f"{platform.machine()}-linux" / "lib",
    ]
    return any((d / "libcudart.so").exists() for d in libdirs)


def nvcc_top(nvcc: str) -> Path | None:
    """The toolkit folder nvcc reports for itself (right also when nvcc on PATH is a wrapper)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe.cu"
        src.write_text("")
        try:
            out = subprocess.run(
                [nvcc, "--dryrun", "-c", str(src), "-o", str(Path(tmp) / "probe.o")],
                capture_output=True,
                text=True,
                timeout=60,
            )
        except (OSError, subprocess.SubprocessError):
            return None
    match = re.search(r"^#\$ TOP=(.+)$", out.stdout + out.stderr, re.M)
    return Path(match.group(1).strip()).resolve() if match else None


def find_cuda_home(env: dict[str, str] | None = None) -> Path | None:
    """A toolkit folder with bin/nvcc and libcudart.so: CUDA_HOME / CUDA_PATH, the nvcc on PATH
    (what it reports, then its parent folder), /usr/local/cuda, /usr/local/cuda-*; or None."""
    env = os.environ if env is None else env
    candidates = [Path(env[v]) for v in ("CUDA_HOME", "CUDA_PATH") if env.get(v)]
    nvcc = shutil.which("nvcc", path=env.get("PATH"))
    if nvcc:
        top = nvcc_top(nvcc)
        if top:
            candidates.append(top)
        candidates.append(Path(os.path.realpath(nvcc)).parent.parent)
    candidates.append(Path("/usr/local/cuda"))
    candidates.extend(sorted(Path("/usr/local").glob("cuda-*"), reverse=True))
    for home in candidates:
        if (home / "bin" / "nvcc").exists() and has_cudart(home):
            return home.resolve()
    return None


def nvcc_version(home: Path) -> str | None:
    """'13.0' for the toolkit at home, or None if its nvcc does not say."""
    try:
        out = subprocess.run(
            [str(home / "bin" / "nvcc"), "--version"], capture_output=True, text=True
        )
    except OSError:
        return None
    match = re.search(r"release (\d+\.\d+)", out.stdout)
    return match.group(1) if match else None


def nvcc_gpu_codes(home: Path) -> list[str] | None:
    """The real architectures the toolkit compiles for (``sm_75 ...``), or None if unknown."""
    try:
        out = subprocess.run(
            [str(home / "bin" / "nvcc"), "--list-gpu-code"], capture_output=True, text=True
        )
    except OSError:
        return None
    codes = [c for c in out.stdout.split() if c.startswith("sm_")]
    return codes or None


def missing_math_headers(cuda_home: Path, site_dirs: list[Path]) -> dict[str, Path]:
    """Headers that torch's nvidia-* wheels have and the toolkit lacks: name -> path.

    A minimal toolkit has no cuBLAS/cuSPARSE/cuSOLVER headers, which ATen's CUDA headers include;
    torch's CUDA wheels bring them. Only the missing ones are returned, so that the toolkit's own
    headers are never shadowed by the wheels' (which may be of another CUDA minor version than
    nvcc: CCCL rejects that mix).
    """
    toolkit = cuda_home / "include"
    missing: dict[str, Path] = {}
    for root in dict.fromkeys(site_dirs):
        for include in sorted(root.glob("nvidia/*/include")):
            for entry in include.iterdir():
                if not (toolkit / entry.name).exists():
                    missing.setdefault(entry.name, entry)
    return missing


def make_header_overlay(overlay: Path, headers: dict[str, Path]) -> None:
    """A folder of links to `headers` (from missing_math_headers), made anew."""
    shutil.rmtree(overlay, ignore_errors=True)
    overlay.mkdir(parents=True)
    for name, target in headers.items():
        (overlay / name).symlink_to(target)


# --------------------------------------------------------------------------------------------
# The C++ compiler.
# --------------------------------------------------------------------------------------------

_PROBE = "#include <string>\nstd::string lltm_ext_probe(int x) { return std::to_string(x); }\n"


def links_shared_libstdcxx(module: str) -> bool | None:
    """Whether a shared object needs libstdc++.so (None: readelf is missing or says nothing).

    torch uses the shared libstdc++; a module with a private static copy has its own, never
    initialised locale, and crashes the first time it formats a number (e.g. in an error message).
    """
    readelf = shutil.which("readelf")
    if readelf is None:
        return None
    out = subprocess.run([readelf, "-d", module], capture_output=True, text=True).stdout
    if "(NEEDED)" not in out:
        return None
    return "libstdc++.so" in out


def probe_compiler(cxx: str) -> str | None:
    """Why `cxx` cannot build modules that load next to torch, or None if it can.

    Compiles and links a tiny shared library that uses std::string, the way an extension does.
    """
    exe = shutil.which(cxx)
    if exe is None:
        return f"{cxx} is not on PATH"
    with tempfile.TemporaryDirectory() as tmp:
        src, lib = Path(tmp) / "probe.cpp", Path(tmp) / "probe.so"
        src.write_text(_PROBE)
        try:
            out = subprocess.run(
                [exe, "-shared", "-fPIC", "-O0", str(src), "-o", str(lib)],
                capture_output=True,
                text=True,
                timeout=120,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return f"{cxx} did not run ({exc})"
        if out.returncode != 0:
            return f"{cxx} cannot compile a shared library: {out.stderr.strip()[:300]}"
        if links_shared_libstdcxx(str(lib)) is False:
            return f"{exe} links libstdc++ statically"
    return None


@dataclass(frozen=True)
class CompilerChoice:
    """The C/C++ compilers to build with (None: keep what the environment says) and why."""

    cxx: str | None
    cc: str | None
    note: str | None


# System compilers tried, in order, when the one on PATH cannot be used: (C++, C).
SYSTEM_COMPILERS = (("/usr/bin/g++", "/usr/bin/gcc"), ("/usr/bin/c++", "/usr/bin/cc"))


def default_compilers() -> list[str]:
    """The C++ compilers a build uses when CXX is not set: torch compiles with `c++`, and
    setuptools links with the compiler Python was configured with (sysconfig's CXX)."""
    import sysconfig

    names = ["c++"]
    configured = (sysconfig.get_config_var("CXX") or "").split()
    if configured and configured[0] not in names:
        names.append(configured[0])
    return names


def choose_compiler(
    env: dict[str, str], names: list[str] | None = None, probe=probe_compiler
) -> CompilerChoice:
    """Keep the compilers the build would use (CXX if set, else the defaults) when they work;
    else the first system compiler that does, with a note that says which and why.

    A CXX that is set is probed too: some images set it machine-wide to a compiler that links
    libstdc++ statically, and modules built so crash next to torch. One that works is never
    replaced; if none works, the build goes on with it and the link-time check fails clearly.
    """
    cxx = env.get("CXX", "").strip()
    candidates = [cxx.split()[0]] if cxx else (names or default_compilers())
    problems = [p for p in map(probe, candidates) if p]
    if not problems:
        return CompilerChoice(None, None, None)
    problem = "; ".join(problems) + (" (CXX, as set in the environment)" if cxx else "")
    for sys_cxx, sys_cc in SYSTEM_COMPILERS:
        if sys_cxx != (cxx.split()[0] if cxx else None) and Path(sys_cxx).exists():
            if probe(sys_cxx) is None:
                note = (
                    f"{problem}, and modules built so crash next to torch: building with "
                    f"CXX={sys_cxx} CC={sys_cc} instead"
                )
                return CompilerChoice(sys_cxx, sys_cc if Path(sys_cc).exists() else None, note)
    return CompilerChoice(None, None, f"{problem}, and no system compiler works instead")


def compiler_version(cxx: str) -> str:
    """The first line of `cxx --version` (or the name if it does not run)."""
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True)
        return out.stdout.splitlines()[0].strip()
    except (OSError, IndexError):
        return cxx
