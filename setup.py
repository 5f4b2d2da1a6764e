"""Build lltm_ext: one PyTorch extension module, ``lltm_ext._<op>``, per op folder under ``src/``.

An op folder ``src/<op>/`` holds ``<op>.cpp`` (the pybind11 binding: checks and dispatch), any
number of other ``*.cpp`` files (CPU kernels) and ``*.cu`` files (CUDA kernels). Adding a folder is
all it takes for a new module to be built; ``src/common/`` holds the shared headers.

Knobs (environment variables):
  LLTM_EXT_CUDA          auto (default) | 1 (CUDA required, fail early) | 0 (CPU only)
  TORCH_CUDA_ARCH_LIST   GPU architectures, e.g. "8.0;9.0+PTX" (default: see default_arch_list)
  MAX_JOBS               parallel compile jobs (default: what free memory and cores allow)
  NVCC_THREADS           nvcc --threads per CUDA file (default: likewise)
  LLTM_EXT_DEBUG         1: -O0 -g (and -G -lineinfo for CUDA) instead of -O3 without debug info
  LLTM_EXT_CPU_TWIN      auto | 1 | 0: in CUDA builds, also build lltm_ext._<op>_cpu (no CUDA
                         libraries linked) so the package works under a CPU-only torch; auto: yes,
                         except for in-place/editable development builds
  LLTM_EXT_OPS           comma-separated op folders to build (default: all), for quick dev builds
  LLTM_EXT_VERSION_SUFFIX auto | none | <label>: local version label (default: auto, except when
                         building from an unpacked sdist, which keeps the sdist's version)
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import ClassVar

from setuptools import Command, find_packages, setup

ROOT = Path(__file__).parent.resolve()
SRC = ROOT / "src"
PACKAGE = "lltm_ext"
BASE_VERSION = re.search(
    r'^__version__ = "([^"]+)"', (ROOT / PACKAGE / "_version.py").read_text(), re.M
).group(1)
MIN_TORCH = "2.4"
IS_SDIST = "sdist" in sys.argv[1:]


def log(msg: str) -> None:
    print(f"lltm_ext setup: {msg}", file=sys.stderr)


def fail(msg: str) -> None:
    sys.exit(f"\nlltm_ext setup: error: {msg}\n")


# --------------------------------------------------------------------------------------------
# Knobs and the toolchain, found before torch.utils.cpp_extension reads CUDA_HOME at import.
# --------------------------------------------------------------------------------------------


def cuda_mode() -> str:
    raw = os.environ.get("LLTM_EXT_CUDA", "auto").strip().lower()
    aliases = {"auto": "auto", "": "auto", "1": "1", "on": "1", "yes": "1", "true": "1"}
    aliases.update({"0": "0", "off": "0", "no": "0", "false": "0"})
    if raw not in aliases:
        fail(f"LLTM_EXT_CUDA must be auto, 1 or 0; got {raw!r}.")
    return aliases[raw]


def _has_cudart(home: Path) -> bool:
    libdirs = [
        home / "lib64",
        home / "lib",
        home / "targets" / f"{platform.machine()}-linux" / "lib",
    ]
    return any((d / "libcudart.so").exists() for d in libdirs)


def _nvcc_top(nvcc: str) -> Path | None:
    """The toolkit folder nvcc reports for itself (works when nvcc on PATH is a wrapper script)."""
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


def find_cuda_home() -> Path | None:
    """A CUDA toolkit folder with bin/nvcc and libcudart.so, or None."""
    candidates: list[Path] = [
        Path(os.environ[v]) for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)
    ]
    nvcc = shutil.which("nvcc")
    if nvcc:
        top = _nvcc_top(nvcc)
        if top:
            candidates.append(top)
        candidates.append(Path(os.path.realpath(nvcc)).parent.parent)
    candidates.append(Path("/usr/local/cuda"))
    candidates.extend(sorted(Path("/usr/local").glob("cuda-*"), reverse=True))
    for home in candidates:
        if (home / "bin" / "nvcc").exists() and _has_cudart(home):
            return home.resolve()
    return None


def nvcc_version(home: Path) -> str | None:
    try:
        out = subprocess.run(
            [str(home / "bin" / "nvcc"), "--version"], capture_output=True, text=True
        )
    except OSError:
        return None
    match = re.search(r"release (\d+\.\d+)", out.stdout)
    return match.group(1) if match else None


def wheel_cuda_includes(cuda_home: Path) -> list[str]:
    """A folder with the headers that torch's nvidia-* wheels have and the toolkit lacks.

    A minimal toolkit has no cuBLAS/cuSPARSE/cuSOLVER headers, which ATen's CUDA headers include;
    torch's CUDA wheels bring them. Only the missing ones are exposed (through links in
    build/cuda-extra-include), so that the toolkit's own headers are never shadowed by the
    wheels' (which may be of another CUDA minor version than nvcc: CCCL rejects that mix).
    """
    import site

    roots = [Path(p) for p in site.getsitepackages() + [site.getusersitepackages()]]
    roots += [Path(p) for p in sys.path if p.endswith("site-packages")]
    toolkit = cuda_home / "include"
    overlay = ROOT / "build" / "cuda-extra-include"
    missing: dict[str, Path] = {}
    for root in dict.fromkeys(roots):
        for include in sorted(root.glob("nvidia/*/include")):
            for entry in include.iterdir():
                if not (toolkit / entry.name).exists():
                    missing.setdefault(entry.name, entry)
    if not missing:
        return []
    shutil.rmtree(overlay, ignore_errors=True)
    overlay.mkdir(parents=True)
    for name, target in missing.items():
        (overlay / name).symlink_to(target)
    return [str(overlay)]


def default_arch_list(cuda: str) -> str:
    """Current data-center and consumer GPUs the toolkit can target, PTX for the newest."""
    major, minor = (int(x) for x in cuda.split(".")[:2])
    if (major, minor) >= (12, 8):  # Turing .. Blackwell (sm_70 left the toolkit in 13.0)
        archs = ["7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0"]
    else:  # Volta .. Hopper
        archs = ["7.0", "7.5", "8.0", "8.6", "8.9", "9.0"]
    return ";".join(archs) + "+PTX"


def parse_arch_list(value: str) -> list[str]:
    """'8.0;9.0+PTX 9.0a' -> ['sm_80', 'sm_90', 'compute_90', 'sm_90a'] (what nvcc embeds)."""
    named = {"Volta": "7.0", "Turing": "7.5", "Ampere": "8.0;8.6", "Ada": "8.9", "Hopper": "9.0"}
    out: list[str] = []
    for item in re.split(r"[;\s]+", value.strip()):
        if not item:
            continue
        ptx = item.endswith("+PTX")
        base = item[: -len("+PTX")] if ptx else item
        for arch in named.get(base, base).split(";"):
            if not re.fullmatch(r"\d+\.\d+[af]?", arch):
                fail(
                    f"TORCH_CUDA_ARCH_LIST: cannot read {item!r} "
                    "(expected entries like 8.0, 9.0a, 9.0+PTX)."
                )
            num = arch.replace(".", "")
            out.append(f"sm_{num}")
            if ptx:
                out.append(f"compute_{num}")
    if not out:
        fail("TORCH_CUDA_ARCH_LIST is empty.")
    return out


def available_memory_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 8.0


def default_parallelism(n_archs: int) -> tuple[int, int]:
    """(MAX_JOBS, nvcc --threads) that the cores and free memory allow: ~2 GiB per compiler."""
    cores = os.cpu_count() or 1
    mem_slots = max(1, int(available_memory_gib() // 2))
    jobs = max(1, min(cores, mem_slots))
    threads = max(1, min(n_archs, cores // min(jobs, 3), mem_slots // min(jobs, 3)))
    return jobs, threads


def compiler_version() -> str:
    cxx = os.environ.get("CXX", "c++")
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True)
        return out.stdout.splitlines()[0].strip()
    except (OSError, IndexError):
        return cxx


# --------------------------------------------------------------------------------------------
# Decide the build.
# --------------------------------------------------------------------------------------------

MODE = cuda_mode()
DEBUG = os.environ.get("LLTM_EXT_DEBUG", "0").strip().lower() in ("1", "on", "yes", "true")
CUDA_HOME = None if MODE == "0" else find_cuda_home()
if CUDA_HOME is not None:
    os.environ["CUDA_HOME"] = str(CUDA_HOME)  # read by torch.utils.cpp_extension on import

try:
    import torch
    from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension
except ImportError as exc:
    fail(
        f"torch is needed to build lltm_ext ({exc}). Install torch first, then build against it "
        "without build isolation:\n  pip install torch\n  pip install --no-build-isolation ."
    )

TORCH_VERSION = torch.__version__.split("+")[0]
TORCH_MM = ".".join(TORCH_VERSION.split(".")[:2])
TORCH_CUDA = torch.version.cuda
NVCC_VERSION = nvcc_version(CUDA_HOME) if CUDA_HOME else None


def decide_cuda() -> bool:
    problems = []
    if TORCH_CUDA is None:
        problems.append(f"the installed torch {torch.__version__} is a CPU-only build")
    if CUDA_HOME is None:
        problems.append(
            "no CUDA toolkit was found (nvcc with libcudart; set CUDA_HOME to its folder)"
        )
    elif NVCC_VERSION is None:
        problems.append(f"{CUDA_HOME}/bin/nvcc did not report its version")
    if not problems and NVCC_VERSION.split(".")[0] != TORCH_CUDA.split(".")[0]:
        problems.append(f"nvcc is CUDA {NVCC_VERSION} but torch was built with CUDA {TORCH_CUDA}")
    if MODE == "0":
        log("LLTM_EXT_CUDA=0: building CPU kernels only.")
        return False
    if problems:
        if MODE == "1":
            fail(
                "LLTM_EXT_CUDA=1 asks for CUDA kernels, but " + "; and ".join(problems) + ".\n"
                "Install a CUDA build of torch whose CUDA major version matches the toolkit, "
                "or build CPU-only with LLTM_EXT_CUDA=0."
            )
        log("building CPU kernels only, because " + "; and ".join(problems) + ".")
        return False
    return True


WITH_CUDA = False if IS_SDIST else decide_cuda()
ARCH_LIST = os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip()
if WITH_CUDA:
    if not ARCH_LIST:
        ARCH_LIST = default_arch_list(NVCC_VERSION)
        os.environ["TORCH_CUDA_ARCH_LIST"] = ARCH_LIST  # read by torch's -gencode logic
    ARCH_TARGETS = parse_arch_list(ARCH_LIST)
    JOBS, NVCC_THREADS = default_parallelism(len([a for a in ARCH_TARGETS if a.startswith("sm_")]))
    os.environ.setdefault("MAX_JOBS", str(JOBS))
    NVCC_THREADS = int(os.environ.get("NVCC_THREADS", NVCC_THREADS))
    log(
        f"CUDA {NVCC_VERSION} at {CUDA_HOME}; archs {ARCH_LIST}; "
        f"MAX_JOBS={os.environ['MAX_JOBS']}, nvcc --threads {NVCC_THREADS}"
    )
else:
    ARCH_TARGETS = []
    JOBS, NVCC_THREADS = default_parallelism(1)
    os.environ.setdefault("MAX_JOBS", str(JOBS))


def version_suffix() -> str:
    raw = os.environ.get("LLTM_EXT_VERSION_SUFFIX", "").strip()
    if raw.lower() in ("none", "0", "off"):
        return ""
    if raw and raw.lower() != "auto":
        return raw.lstrip("+")
    if IS_SDIST or (not raw and (ROOT / "PKG-INFO").exists()):
        return ""  # an sdist, or a build from one: keep the sdist's version (pip checks it)
    cuda = "cu" + NVCC_VERSION.replace(".", "") if WITH_CUDA else "cpu"
    return f"{cuda}torch{TORCH_MM}"


SUFFIX = version_suffix()
VERSION = BASE_VERSION + (f"+{SUFFIX}" if SUFFIX else "")


# --------------------------------------------------------------------------------------------
# One extension per op folder.
# --------------------------------------------------------------------------------------------


def discover_ops() -> list[str]:
    ops = sorted(p.name for p in SRC.iterdir() if p.is_dir() and (p / f"{p.name}.cpp").is_file())
    wanted = [o.strip() for o in os.environ.get("LLTM_EXT_OPS", "").split(",") if o.strip()]
    unknown = sorted(set(wanted) - set(ops))
    if unknown:
        fail(f"LLTM_EXT_OPS names {unknown}, but the op folders under src/ are {ops}.")
    return [o for o in ops if o in wanted] if wanted else ops


DEV_BUILD = any(a in ("develop", "editable_wheel", "--inplace", "-i") for a in sys.argv[1:])


def want_cpu_twin() -> bool:
    raw = os.environ.get("LLTM_EXT_CPU_TWIN", "auto").strip().lower()
    if raw not in ("auto", "1", "0"):
        fail(f"LLTM_EXT_CPU_TWIN must be auto, 1 or 0; got {raw!r}.")
    return WITH_CUDA and (raw == "1" or (raw == "auto" and not DEV_BUILD))


def make_extension(op: str, force_cpu: bool = False):
    folder = SRC / op
    # *_cuda_host.cpp: host C++ that calls the CUDA kernels (guard, stream, dtype dispatch),
    # compiled by the C++ compiler into CUDA builds only, like the *.cu files.
    sources = [folder / f"{op}.cpp"] + sorted(
        p
        for p in folder.glob("*.cpp")
        if p.name != f"{op}.cpp" and not p.name.endswith("_cuda_host.cpp")
    )
    cu_sources = sorted(folder.glob("*.cu")) + sorted(folder.glob("*_cuda_host.cpp"))
    with_cuda = WITH_CUDA and any(folder.glob("*.cu")) and not force_cpu
    # -fopenmp: at::parallel_for is inline and runs in parallel only in OpenMP code. The module
    # then needs libgomp.so.1, which torch has already loaded (its own copy) when ours loads.
    cxx = (["-O0", "-g"] if DEBUG else ["-O3", "-g0"]) + ["-fopenmp"]
    macros = [("LLTM_EXT_OP", op)]
    link = ["-fopenmp"] + ([] if DEBUG else ["-Wl,--strip-debug"])
    kwargs = dict(
        name=f"{PACKAGE}._{op}" + ("_cpu" if force_cpu else ""),
        include_dirs=[str(SRC)],
        extra_link_args=link,
    )
    if not with_cuda:
        return CppExtension(
            sources=[str(s.relative_to(ROOT)) for s in sources],
            define_macros=macros,
            extra_compile_args={"cxx": cxx},
            **kwargs,
        )
    nvcc = ["-O0", "-g", "-G", "-lineinfo"] if DEBUG else ["-O3"]
    nvcc += ["--expt-relaxed-constexpr", f"--threads={NVCC_THREADS}"]
    macros += [("WITH_CUDA", None)]
    # Read by common/module.h in the C++ binding only; nvcc would split this -D at its commas.
    cxx = cxx + [f"-DLLTM_EXT_CUDA_ARCHS={','.join(ARCH_TARGETS)}"]
    kwargs["include_dirs"] += EXTRA_CUDA_INCLUDES
    return CUDAExtension(
        sources=[str(s.relative_to(ROOT)) for s in sources + cu_sources],
        define_macros=macros,
        extra_compile_args={"cxx": cxx, "nvcc": nvcc},
        **kwargs,
    )


OPS = discover_ops()
EXTRA_CUDA_INCLUDES = wheel_cuda_includes(CUDA_HOME) if WITH_CUDA and not IS_SDIST else []
CUDA_OPS = [op for op in OPS if WITH_CUDA and any((SRC / op).glob("*.cu"))]
CPU_TWINS = CUDA_OPS if want_cpu_twin() else []
EXTENSIONS = [] if IS_SDIST else [make_extension(op) for op in OPS]
EXTENSIONS += [make_extension(op, force_cpu=True) for op in CPU_TWINS if not IS_SDIST]


def write_build_info() -> None:
    """lltm_ext/_build_info.py: what this build was made with (read by `python -m lltm_ext info`
    and by the import-time check that the running torch matches)."""
    info = {
        "version": VERSION,
        "torch_version": torch.__version__,
        "torch_cuda": TORCH_CUDA,
        "cuda_version": NVCC_VERSION if WITH_CUDA else None,
        "cuda_arch_list": ARCH_LIST if WITH_CUDA else None,
        "cuda_targets": ARCH_TARGETS,
        "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
        "compiler": compiler_version(),
        "python": platform.python_version(),
        "debug": DEBUG,
        "ops": {op: {"cuda": op in CUDA_OPS, "cpu_twin": op in CPU_TWINS} for op in OPS},
    }
    text = '"""Written by setup.py at build time: what this build of lltm_ext was made with."""\n\n'
    text += f"BUILD_INFO = {info!r}\n"
    (ROOT / PACKAGE / "_build_info.py").write_text(text)


if not IS_SDIST:
    write_build_info()


def check_links_shared_libstdcxx(path: str) -> None:
    """Refuse a module that carries its own libstdc++ (a compiler set to link it statically).

    torch uses the shared libstdc++; a module with a private static copy has its own, never
    initialised locale, and crashes the first time it formats a number (e.g. in an error message).
    """
    readelf = shutil.which("readelf")
    if readelf is None:
        return
    out = subprocess.run([readelf, "-d", path], capture_output=True, text=True).stdout
    if "(NEEDED)" in out and "libstdc++.so" not in out:
        os.remove(path)
        fail(
            f"{os.path.basename(path)} was linked with a static libstdc++ by the C++ compiler "
            f"(CXX={os.environ.get('CXX', 'c++')}). Such a module crashes next to torch, which "
            "uses the shared libstdc++. Build with a compiler that links libstdc++ dynamically, "
            "e.g. CXX=/usr/bin/g++ pip install --no-build-isolation ."
        )


class BuildExt(BuildExtension.with_options(use_ninja=shutil.which("ninja") is not None)):
    """torch's BuildExtension, plus a check of how each module links libstdc++."""

    def build_extension(self, ext) -> None:
        super().build_extension(ext)
        path = self.get_ext_fullpath(ext.name)
        assert os.path.exists(path), path
        check_links_shared_libstdcxx(path)


class Develop(Command):
    """`python setup.py develop`: an editable install built against the torch already installed.

    (setuptools >= 80 turned `develop` into an isolated `pip install -e`, which would build
    against a freshly downloaded torch instead of the installed one.)
    """

    description = "editable install, built against the installed torch (no build isolation)"
    user_options: ClassVar[list[tuple[str, str, str]]] = [
        ("no-deps", "N", "don't install dependencies")
    ]
    boolean_options: ClassVar[list[str]] = ["no-deps"]

    def initialize_options(self) -> None:
        self.no_deps = False

    def finalize_options(self) -> None:
        pass

    def run(self) -> None:
        cmd = [sys.executable, "-m", "pip", "install", "--no-build-isolation", "-e", str(ROOT)]
        subprocess.check_call(cmd + ["--no-deps"] * bool(self.no_deps))


def install_requires() -> list[str]:
    if IS_SDIST or not EXTENSIONS:
        return [f"torch>={MIN_TORCH}"]
    # The compiled modules work only with the torch (major.minor) they were built against.
    return [f"torch=={TORCH_MM}.*"]


setup(
    version=VERSION,
    packages=find_packages(include=[PACKAGE, f"{PACKAGE}.*"]),
    package_data={PACKAGE: ["py.typed"]},
    ext_modules=EXTENSIONS,
    install_requires=install_requires(),
    cmdclass={"build_ext": BuildExt, "develop": Develop},
    zip_safe=False,
)
