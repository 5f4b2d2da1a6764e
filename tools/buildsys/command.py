"""setup.py's build_ext and develop commands: every object of every module in one ninja run.

torch's BuildExtension writes a ninja file per extension and runs it, one extension after
another, in a folder that editable installs make anew each time. This command keeps torch's
compile commands (flags, -gencode, depfiles) but:
  - gives each module its own object folder under a stable one (build/obj/<python>-<torch>/), so
    a CPU twin and its CUDA module never overwrite each other's objects, and a second build
    (editable or not) recompiles only what changed;
  - collects the per-module ninja files first, then compiles all of them in one ninja run (all
    cores busy across modules), then links each module;
  - says at the start what it builds (modules, architectures, jobs), shows one short line per
    compiled file, and ends a failed build with a summary (config.summarize_failure);
  - decides the GPU architectures and the C++ compiler when the build runs (not when setup.py is
    imported for metadata), and writes the build record (lltm_ext/_build_info.py) last.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from setuptools import Command

from tools.buildsys import archs, config, toolchain


def log(msg: str) -> None:
    print(f"lltm_ext build: {msg}", flush=True)


def fail(msg: str) -> None:
    sys.exit(f"\nlltm_ext build: error: {msg}\n")


@dataclass
class Plan:
    """What setup.py decided at import; the rest (architectures, compiler) is decided in build_ext.

    ops: op folders; cuda_ops: those with CUDA kernels in this build; twins: ops that also get a
    CPU-only module (lltm_ext._<op>_cpu) linked from the same CPU objects.
    """

    root: Path
    package: str
    version: str
    ops: list[str]
    cuda_ops: list[str]
    twins: list[str]
    debug: bool
    cuda_home: Path | None = None
    nvcc_version: str | None = None
    nvcc_codes: list[str] | None = None
    header_overlay: dict[str, Path] = field(default_factory=dict)
    overlay_dir: Path | None = None
    from_sdist: bool = False  # building from an unpacked sdist (pip's fallback when no wheel fits)


def notice(msg: str) -> None:
    """log(msg), and the same line on the terminal when pip hides the build's output (pip shows
    a build's output only with -v, or when it fails): the user waiting on `pip install lltm_ext`
    should see it before minutes of compiling. Nothing extra without a terminal (CI logs)."""
    log(msg)
    if sys.stdout.isatty():
        return
    try:
        with open("/dev/tty", "w") as tty:
            tty.write(f"\nlltm_ext build: {msg}\n")
    except OSError:
        pass


def write_top_ninja(path: Path, module_files: list[Path]) -> None:
    """A ninja file that builds every module's objects: one subninja per module (each keeps its
    own variables and rules; all paths in torch's files are absolute)."""
    lines = ["ninja_required_version = 1.3"] + [f"subninja {f}" for f in module_files]
    path.write_text("\n".join(lines) + "\n")


_STATUS = re.compile(r"^\[(\d+)/(\d+)\] (.*)$")


def short_status(line: str) -> str | None:
    """'[3/20] /usr/.../nvcc ... -c /src/gemm/x.cu -o /build/obj/t/_gemm/...' ->
    '[3/20] nvcc src/gemm/x.cu (_gemm)'; None for lines that are not ninja's status lines."""
    match = _STATUS.match(line)
    if not match:
        return None
    cmd = match[3]
    tool = "nvcc" if re.search(r"\bnvcc\b", cmd.split(" -", 1)[0]) else "c++"
    io = re.search(r"\s-c (\S+) -o (\S+)", cmd)
    src, obj = (io[1], io[2]) if io else (cmd[:60], "")
    where = re.sub(r".*/(src/)", r"\1", src)
    module = re.search(r"/(_\w+)/src/", obj)
    return f"[{match[1]}/{match[2]}] {tool} {where}" + (f" ({module[1]})" if module else "")


def run_ninja(folder: Path, jobs: int, verbose: bool, log_file: Path) -> None:
    """Runs ninja in `folder`, one short line per compiled file (every line with verbose); on
    failure, prints a summary and exits with it."""
    cmd = ["ninja", "-j", str(jobs)] + (["-v"] if verbose else [])
    start, lines = time.monotonic(), []
    with subprocess.Popen(
        cmd, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            lines.append(line)
            short = None if verbose else short_status(line)
            print(short if short is not None else line, flush=True)
    log_file.write_text("\n".join(lines) + "\n")
    if proc.returncode != 0:
        summary = config.summarize_failure("\n".join(lines))
        fail(
            f"compiling failed after {time.monotonic() - start:.0f} s.\n{summary}\n"
            f"full output: {log_file}\nmore help: docs/troubleshooting.md"
        )
    done = sum(1 for ln in lines if _STATUS.match(ln))
    log(f"compiled {done} files in {time.monotonic() - start:.0f} s ({jobs} jobs)")


def make_build_ext(plan: Plan, base: type) -> type:
    """The build_ext command, a subclass of torch's BuildExtension (`base`)."""
    import torch.utils.cpp_extension as cpp_extension

    class _Collected(Exception):
        """Raised after a module's ninja file is written, instead of running it."""

    class BuildExt(base):  # type: ignore[misc, valid-type]
        _collecting: bool | None = None
        _ninja_files: ClassVar[list[Path]] = []

        def finalize_options(self) -> None:
            super().finalize_options()
            self.force = True  # ninja decides what is out of date (headers included)
            tag = f"{sys.implementation.cache_tag}-torch{_torch_version()}"
            self._obj_root = plan.root / "build" / "obj" / tag

        # -- deciding what only a build needs --------------------------------------------------

        def _prepare(self) -> None:
            choice = toolchain.choose_compiler(dict(os.environ))
            if choice.note:
                log(choice.note)
            if choice.cxx:
                os.environ["CXX"] = choice.cxx
                if choice.cc:
                    os.environ["CC"] = choice.cc
            self._cuda_archs = ""
            threads = 1
            if plan.cuda_ops:
                self._cuda_archs, why = resolve_archs(plan)
                os.environ["TORCH_CUDA_ARCH_LIST"] = self._cuda_archs  # read by torch's -gencode
                targets = archs.targets(self._cuda_archs)
                n_real = sum(t.startswith("sm_") for t in targets)
                _, threads = config.parallelism(os.cpu_count() or 1, _free_gib(), n_real, *_knobs())
                archs_line = f"archs {self._cuda_archs} ({why})"
                log(f"CUDA {plan.nvcc_version} at {plan.cuda_home}; {archs_line}")
                if plan.overlay_dir is not None and plan.header_overlay:
                    toolchain.make_header_overlay(plan.overlay_dir, plan.header_overlay)
            jobs, _ = config.parallelism(os.cpu_count() or 1, _free_gib(), 1, *_knobs())
            self._jobs = jobs
            for ext in self.extensions:
                if getattr(ext, "lltm_cuda", False):
                    ext.extra_compile_args["nvcc"].append(f"--threads={threads}")
                    # Read by common/module.h in the binding only; nvcc would split it at commas.
                    targets = ",".join(archs.targets(self._cuda_archs))
                    ext.extra_compile_args["cxx"].append(f"-DLLTM_EXT_CUDA_ARCHS={targets}")
            names = [e.name.rsplit(".", 1)[-1] for e in self.extensions]
            if plan.from_sdist:
                notice(source_build_notice(plan, jobs, self._cuda_archs))
            log(
                f"{len(names)} modules ({', '.join(names)}); "
                + (f"CUDA for {', '.join(plan.cuda_ops)}; " if plan.cuda_ops else "CPU only; ")
                + f"{jobs} jobs"
                + (f" x nvcc --threads {threads}" if plan.cuda_ops else "")
                + f"; C++ compiler {toolchain.compiler_version(os.environ.get('CXX', 'c++'))}"
                + f"; objects in {self._obj_root.relative_to(plan.root)}"
            )

        # -- the build ---------------------------------------------------------------------------

        def run(self) -> None:
            inplace = self.inplace
            self._prepare()
            super().run()
            write_build_record(plan, self, self._cuda_archs, inplace)

        def build_extensions(self) -> None:
            if not self.use_ninja:
                log("ninja not found: compiling one file at a time (pip install ninja)")
                super().build_extensions()
                return
            original = cpp_extension._write_ninja_file_and_compile_objects
            cpp_extension._write_ninja_file_and_compile_objects = self._ninja_file
            try:
                self._collecting, self._ninja_files = True, []
                super().build_extensions()  # torch's flags; each module's ninja file written
                self._obj_root.mkdir(parents=True, exist_ok=True)
                write_top_ninja(self._obj_root / "build.ninja", self._ninja_files)
                verbose = os.environ.get("LLTM_EXT_VERBOSE", "0") not in ("", "0")
                run_ninja(self._obj_root, self._jobs, verbose, self._obj_root / "last_build.log")
                self._collecting = False
                for ext in self.extensions:  # link (compile() finds the objects built)
                    self.build_extension(ext)
            finally:
                cpp_extension._write_ninja_file_and_compile_objects = original

        def _ninja_file(self, **kwargs: Any) -> None:
            if not self._collecting:
                return  # objects are built: nothing to compile
            path = Path(kwargs["build_directory"]) / "build.ninja"
            path.parent.mkdir(parents=True, exist_ok=True)
            kwargs = {k: v for k, v in kwargs.items() if k not in ("build_directory", "verbose")}
            cpp_extension._write_ninja_file(path=path, ldflags=None, library_target=None, **kwargs)
            self._ninja_files.append(path)
            raise _Collected

        def build_extension(self, ext) -> None:
            short = ext.name.rsplit(".", 1)[-1]
            self.build_temp = str(self._obj_root / short)
            # Objects another module compiles (config.module_sources): each compiled once.
            ext.extra_objects = [
                str(self._obj_root / module / src.with_suffix(".o"))
                for module, src in getattr(ext, "lltm_linked", [])
            ]
            if self._collecting:
                try:
                    super().build_extension(ext)
                except _Collected:
                    pass
                return
            super().build_extension(ext)
            path = self.get_ext_fullpath(ext.name)
            if toolchain.links_shared_libstdcxx(path) is False:
                os.remove(path)
                fail(
                    f"{os.path.basename(path)} was linked with a static libstdc++ by the C++ "
                    f"compiler (CXX={os.environ.get('CXX', 'c++')}). Such a module crashes next "
                    "to torch, which uses the shared libstdc++. Build with a compiler that links "
                    "libstdc++ dynamically, e.g. CXX=/usr/bin/g++ pip install "
                    "--no-build-isolation ."
                )

    return BuildExt


def source_build_notice(plan: Plan, jobs: int, cuda_archs: str) -> str:
    """config.source_build_notice for this build: the installed torch's page, the estimate for
    these jobs and architectures."""
    import torch

    sass = sum(t.startswith("sm_") for t in archs.targets(cuda_archs)) if cuda_archs else 0
    pyproject = plan.root / "pyproject.toml"
    base = config.wheel_pages_url(pyproject.read_text()) if pyproject.is_file() else None
    page = config.wheel_page_name(torch.__version__, torch.version.cuda)
    n = len(plan.ops)
    what = f"{n} op{'s' if n != 1 else ''}, " + (
        f"{sass} GPU architectures" if sass else "CPU kernels only"
    )
    return config.source_build_notice(
        seconds=config.build_seconds(jobs, sass),
        jobs=jobs,
        what=what,
        page_url=base + page if base else None,
        pages_url=base,
    )


def resolve_archs(plan: Plan) -> tuple[str, str]:
    """(TORCH_CUDA_ARCH_LIST to build, why): the user's, checked and normalized; else the visible
    GPUs'; else the default list."""
    assert plan.nvcc_version is not None
    raw = os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip()
    try:
        if raw:
            chosen = archs.parse(raw)
            bad = archs.unsupported(chosen, plan.nvcc_version, plan.nvcc_codes)
            if bad:
                have = archs.supported_by(plan.nvcc_version, plan.nvcc_codes)
                fail(
                    f"TORCH_CUDA_ARCH_LIST={raw!r}: CUDA {plan.nvcc_version}'s nvcc cannot "
                    f"compile for {', '.join(a.version for a in bad)}; it compiles for "
                    f"{', '.join(have)}."
                )
            return archs.normalize(chosen), "TORCH_CUDA_ARCH_LIST"
        visible = archs.visible_arch_list(_visible_gpus(), plan.nvcc_version, plan.nvcc_codes)
        if visible:
            return visible, "the GPUs visible here; set TORCH_CUDA_ARCH_LIST for others"
        default = archs.default_arch_list(plan.nvcc_version, plan.nvcc_codes)
        return default, "the default list: no GPU visible; TORCH_CUDA_ARCH_LIST picks others"
    except archs.ArchListError as exc:
        fail(str(exc))
        raise  # unreachable


def _visible_gpus() -> list[tuple[int, int]]:
    import torch

    try:
        if not torch.cuda.is_available():
            return []
        return [torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())]
    except (RuntimeError, AssertionError):
        return []


def _torch_version() -> str:
    import torch

    return torch.__version__


def _free_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 8.0


def _knobs() -> tuple[int | None, int | None]:
    try:
        return (
            config.positive_int("MAX_JOBS", os.environ.get("MAX_JOBS")),
            config.positive_int("NVCC_THREADS", os.environ.get("NVCC_THREADS")),
        )
    except config.BuildConfigError as exc:
        fail(str(exc))
        raise


def build_info_text(info: dict) -> str:
    """The text of lltm_ext/_build_info.py for the build record `info`
    (tools/packaging/check_dist.py reads it back with read_build_info)."""
    purpose = (
        "Written by the build (setup.py build_ext): what this build of lltm_ext was made with."
    )
    text = f'"""{purpose}"""\n\n'
    text += "from typing import Any\n\n"
    return text + f"BUILD_INFO: dict[str, Any] = {info!r}\n"


def write_build_record(plan: Plan, cmd: Any, cuda_archs: str, inplace: bool) -> None:
    """lltm_ext/_build_info.py, read by `lltm-ext info` and by the import-time check that the
    running torch is the one built against: into the source tree for in-place and editable
    builds, else into the build folder that the wheel is made from."""
    import platform

    import torch

    info = {
        "version": plan.version,
        "torch_version": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_version": plan.nvcc_version if plan.cuda_ops else None,
        "cuda_arch_list": cuda_archs or None,
        "cuda_targets": archs.targets(cuda_archs) if cuda_archs else [],
        "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
        "compiler": toolchain.compiler_version(os.environ.get("CXX", "c++")),
        "python": platform.python_version(),
        "debug": plan.debug,
        "ops": {op: {"cuda": op in plan.cuda_ops, "cpu_twin": op in plan.twins} for op in plan.ops},
    }
    folder = plan.root if inplace else Path(cmd.build_lib)
    path = folder / plan.package / "_build_info.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(build_info_text(info))
    log(f"build record: {json.dumps({k: info[k] for k in ('version', 'cuda_arch_list')})}")


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
    root: ClassVar[Path]  # the source tree (set by setup.py)

    def initialize_options(self) -> None:
        self.no_deps = False

    def finalize_options(self) -> None:
        pass

    def run(self) -> None:
        cmd = [sys.executable, "-m", "pip", "install", "--no-build-isolation", "-e", str(self.root)]
        subprocess.check_call(cmd + ["--no-deps"] * bool(self.no_deps))
