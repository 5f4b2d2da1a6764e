"""Build lltm_ext: one PyTorch extension module, ``lltm_ext._<op>``, per op folder under ``src/``.

An op folder ``src/<op>/`` holds ``<op>.cpp`` (the pybind11 binding: checks and dispatch), CPU
kernels (other ``*.cpp``), and CUDA kernels (``*.cu``, plus ``*_cuda_host.cpp`` host code that
launches them). Adding a folder is all it takes for a new module to be built.

This file is the table of contents; the rules live in tools/buildsys/ (tested by
tests/test_build_tools.py): archs.py (GPU architectures), toolchain.py (CUDA toolkit, compiler),
config.py (knobs, sources, parallelism, version), command.py (the build_ext command).

Knobs (environment variables: LLTM_EXT_CUDA, TORCH_CUDA_ARCH_LIST, MAX_JOBS, ...): the table
BUILD_KNOBS in tools/buildsys/config.py says what each does; docs/settings.md is written from it.
"""

from __future__ import annotations

import os
import re
import site
import sys
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).parent.resolve()
sys.path.insert(0, str(ROOT))

from tools.buildsys import command, config, toolchain  # noqa: E402
from tools.buildsys.command import fail, log  # noqa: E402

PACKAGE, MIN_TORCH = "lltm_ext", "2.4"
BASE_VERSION = re.search(
    r'^__version__ = "([^"]+)"', (ROOT / PACKAGE / "_version.py").read_text(), re.M
)[1]
IS_SDIST = "sdist" in sys.argv[1:]
DEV_BUILD = any(a in ("develop", "editable_wheel", "--inplace", "-i") for a in sys.argv[1:])
env = os.environ
try:
    MODE = config.tristate("LLTM_EXT_CUDA", env.get("LLTM_EXT_CUDA"))
    TWIN_MODE = config.tristate("LLTM_EXT_CPU_TWIN", env.get("LLTM_EXT_CPU_TWIN"))
    DEBUG = config.flag("LLTM_EXT_DEBUG", env.get("LLTM_EXT_DEBUG"))
    OPS = config.discover_ops(ROOT / "src", env.get("LLTM_EXT_OPS"))
except config.BuildConfigError as exc:
    fail(str(exc))

# The toolkit is found before torch.utils.cpp_extension reads CUDA_HOME at import.
CUDA_HOME = None if MODE == "0" or IS_SDIST else toolchain.find_cuda_home()
if CUDA_HOME is not None:
    env["CUDA_HOME"] = str(CUDA_HOME)
try:
    import torch
    from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension
except ImportError as exc:
    fail(
        f"torch is needed to build lltm_ext ({exc}). Install torch first, then build against it "
        "without build isolation:\n  pip install torch\n  pip install --no-build-isolation ."
        "\nOr install the prebuilt wheel for your torch instead: pip install lltm_ext -f <its "
        f"page, listed at {config.wheel_pages_url((ROOT / 'pyproject.toml').read_text())}"
        "index.html> (README, 'Installing a prebuilt wheel')."
    )
NVCC = toolchain.nvcc_version(CUDA_HOME) if CUDA_HOME else None


def decide_cuda() -> bool:
    """CUDA kernels if torch is a CUDA build and a toolkit of its CUDA major is here."""
    problems = []
    if torch.version.cuda is None:
        problems.append(f"the installed torch {torch.__version__} is a CPU-only build")
    if CUDA_HOME is None:
        problems.append("no CUDA toolkit was found (nvcc with libcudart; set CUDA_HOME)")
    elif NVCC is None:
        problems.append(f"{CUDA_HOME}/bin/nvcc did not report its version")
    elif torch.version.cuda and NVCC.split(".")[0] != torch.version.cuda.split(".")[0]:
        problems.append(f"nvcc is CUDA {NVCC} but torch was built with CUDA {torch.version.cuda}")
    if MODE == "0" or IS_SDIST:
        return False
    if problems and MODE == "1":
        fail(
            "LLTM_EXT_CUDA=1 asks for CUDA kernels, but " + "; and ".join(problems) + ".\n"
            "Install a CUDA build of torch whose CUDA major version matches the toolkit, "
            "or build CPU-only with LLTM_EXT_CUDA=0."
        )
    if problems:
        log("building CPU kernels only, because " + "; and ".join(problems) + ".")
    return not problems


WITH_CUDA = decide_cuda()
try:  # every op folder's sources: a folder this build skips may still be one that another uses
    SOURCES = {op: config.op_sources(ROOT / "src" / op) for op in config.discover_ops(ROOT / "src")}
except config.BuildConfigError as exc:
    fail(str(exc))
CUDA_OPS = [
    op
    for op in OPS
    if WITH_CUDA
    and any(
        p.suffix == ".cu"
        for u in (op, *set(SOURCES[op].uses) - SOURCES[op].uses_cpu_only)
        for p in SOURCES[u].cuda
    )
]
TWINS = CUDA_OPS if TWIN_MODE == "1" or (TWIN_MODE == "auto" and not DEV_BUILD) else []
try:
    SUFFIX = config.version_label(
        env.get("LLTM_EXT_VERSION_SUFFIX"),
        cuda=NVCC if WITH_CUDA else None,
        torch_version=torch.__version__,
        from_sdist=IS_SDIST or (ROOT / "PKG-INFO").exists(),
    )
except config.BuildConfigError as exc:
    fail(str(exc))
SITE_DIRS = [Path(p) for p in site.getsitepackages() + [site.getusersitepackages()]]
SITE_DIRS += [Path(p) for p in sys.path if p.endswith("site-packages")]
PLAN = command.Plan(
    root=ROOT,
    package=PACKAGE,
    version=BASE_VERSION + (f"+{SUFFIX}" if SUFFIX else ""),
    ops=OPS,
    cuda_ops=CUDA_OPS,
    twins=TWINS,
    debug=DEBUG,
    cuda_home=CUDA_HOME if WITH_CUDA else None,
    nvcc_version=NVCC if WITH_CUDA else None,
    nvcc_codes=toolchain.nvcc_gpu_codes(CUDA_HOME) if WITH_CUDA and CUDA_HOME else None,
    header_overlay=toolchain.missing_math_headers(CUDA_HOME, SITE_DIRS) if WITH_CUDA else {},
    overlay_dir=ROOT / "build" / "cuda-extra-include",
    from_sdist=(ROOT / "PKG-INFO").exists(),
)


def rel(paths) -> list[str]:
    return [str(p.relative_to(ROOT)) for p in paths]


def extension(op: str, twin: bool = False):
    """lltm_ext._<op> (CUDA kernels where this build has them), or its CPU twin _<op>_cpu. Objects
    that another module of this build compiles (the CUDA module's CPU kernels, for a twin; the
    kernels of an op named in uses.txt) are linked from there, not compiled again."""
    cuda = op in CUDA_OPS and not twin
    built = {o: o in CUDA_OPS for o in OPS}
    parts = config.module_sources(op, SOURCES, built, cuda, twin=twin and op in TWINS)
    cxx = (["-O0", "-g"] if DEBUG else ["-O3", "-g0"]) + ["-fopenmp"]  # at::parallel_for
    kwargs = dict(
        name=f"{PACKAGE}._{op}" + ("_cpu" if twin else ""),
        sources=rel(parts.compiled),
        include_dirs=[str(ROOT / "src")],
        define_macros=[("LLTM_EXT_OP", op)] + ([("WITH_CUDA", None)] if cuda else []),
        extra_link_args=["-fopenmp"] + ([] if DEBUG else ["-Wl,--strip-debug"]),
    )
    if not cuda:
        ext = CppExtension(extra_compile_args={"cxx": cxx}, **kwargs)
    else:
        nvcc = (["-O0", "-g", "-G", "-lineinfo"] if DEBUG else ["-O3"]) + [
            "--expt-relaxed-constexpr"
        ]
        if PLAN.header_overlay:
            kwargs["include_dirs"].append(str(PLAN.overlay_dir))
        ext = CUDAExtension(extra_compile_args={"cxx": cxx, "nvcc": nvcc}, **kwargs)
    ext.lltm_cuda = cuda
    ext.lltm_linked = [(module, p.relative_to(ROOT)) for module, p in parts.linked]
    return ext


EXTENSIONS = (
    [] if IS_SDIST else [extension(op) for op in OPS] + [extension(op, True) for op in TWINS]
)
command.Develop.root = ROOT
BuildExt = command.make_build_ext(PLAN, BuildExtension.with_options(use_ninja=True))

setup(
    version=PLAN.version,
    packages=find_packages(include=[PACKAGE, f"{PACKAGE}.*"]),
    package_data={PACKAGE: ["py.typed"]},
    ext_modules=EXTENSIONS,
    # The compiled modules work only with the torch (major.minor) they were built against.
    install_requires=[f"torch=={'.'.join(torch.__version__.split('.')[:2])}.*"]
    if EXTENSIONS
    else [f"torch>={MIN_TORCH}"],
    cmdclass={"build_ext": BuildExt, "develop": command.Develop},
    zip_safe=False,
)
