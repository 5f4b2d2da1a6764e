"""The build's knobs and decisions, as pure functions: each reads its inputs from its arguments.

setup.py gathers the facts (environment variables, the installed torch, the toolkit, the cores)
and these functions turn them into the build: which op folders, which sources, CUDA or not, how
many parallel jobs, the version label. tests/test_build_tools.py checks each rule.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tools.buildsys import archs


class BuildConfigError(ValueError):
    """A knob with a value the build cannot use; the message names the knob and its values."""


# --------------------------------------------------------------------------------------------
# The knobs: every environment variable of ours (and torch's) that the build reads, in one table.
# docs/settings.md is written from it (python -m lltm_ext._settings --markdown; a test checks).
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Knob:
    """A build knob: its variable, its values (Markdown, the default first where it has one) and
    what it does."""

    name: str
    values: str
    does: str


def _default_lists() -> str:
    return ", ".join(
        f"`{archs.default_arch_list(cuda)}` with CUDA {cuda}" for cuda in ("13.0", "12.8", "12.6")
    )


BUILD_KNOBS: tuple[Knob, ...] = (
    Knob(
        "LLTM_EXT_CUDA",
        "`auto` (default), `1`, `0`",
        "`auto`: CUDA kernels where nvcc and a CUDA build of torch (same CUDA major) are present; "
        "`1`: CUDA kernels required, fail early naming what is missing; `0`: CPU only",
    ),
    Knob(
        "TORCH_CUDA_ARCH_LIST",
        "e.g. `8.0;9.0+PTX`, `8.0,9.0`, `Hopper`, `9.0a`",
        "GPU architectures; unset: the GPUs visible at build time (the newest with PTX), and with "
        "none visible the default list, what the wheels ship: "
        + _default_lists()
        + " (9.0a: Hopper's architecture-specific code, which the bfloat16 / float16 GEMM's "
        "tensor-core kernel needs) (`python tools/buildsys/archs.py default` prints it for your "
        "nvcc). An entry nvcc cannot compile fails at once, naming the ones it can",
    ),
    Knob(
        "MAX_JOBS",
        "a positive integer",
        "parallel compile jobs; default: what the cores and free memory allow (~2 GiB per job)",
    ),
    Knob(
        "NVCC_THREADS",
        "a positive integer",
        "nvcc `--threads` per CUDA file (architectures compiled in parallel); default likewise",
    ),
    Knob(
        "LLTM_EXT_DEBUG",
        "`0` (default), `1`",
        "`1`: `-O0 -g` (and `-G -lineinfo` for CUDA) instead of `-O3` without debug info",
    ),
    Knob(
        "LLTM_EXT_OPS",
        "e.g. `lltm,gemm`; default: all",
        "build only these op folders (comma-separated; quick development builds)",
    ),
    Knob(
        "LLTM_EXT_CPU_TWIN",
        "`auto` (default), `1`, `0`",
        "CUDA builds also build `lltm_ext._<op>_cpu` (no CUDA libraries linked), used under a "
        "CPU-only torch; `auto`: all but editable/in-place builds",
    ),
    Knob(
        "LLTM_EXT_VERBOSE",
        "`0` (default), `1`",
        "`1`: print every compile command instead of one short line per file",
    ),
    Knob(
        "LLTM_EXT_VERSION_SUFFIX",
        "`auto` (default), `none`, a label",
        "the wheel's local version label (`auto`: `cu130torch2.13`, `cputorch2.13`; builds from "
        "an unpacked sdist keep the sdist's version unless this is set)",
    ),
)


_TRUE = ("1", "on", "yes", "true")
_FALSE = ("0", "off", "no", "false")


def tristate(name: str, raw: str | None) -> str:
    """An auto/1/0 knob (LLTM_EXT_CUDA, LLTM_EXT_CPU_TWIN): 'auto', '1' or '0'."""
    value = (raw or "auto").strip().lower()
    if value in ("", "auto"):
        return "auto"
    if value in _TRUE:
        return "1"
    if value in _FALSE:
        return "0"
    raise BuildConfigError(f"{name} must be auto, 1 or 0; got {raw!r}")


def flag(name: str, raw: str | None) -> bool:
    """A 0/1 knob (LLTM_EXT_DEBUG): unset means 0."""
    value = (raw or "0").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE or value == "":
        return False
    raise BuildConfigError(f"{name} must be 0 or 1; got {raw!r}")


def positive_int(name: str, raw: str | None) -> int | None:
    """A count knob (MAX_JOBS, NVCC_THREADS): None when unset."""
    if raw is None or not raw.strip():
        return None
    if not raw.strip().isdigit() or int(raw) < 1:
        raise BuildConfigError(f"{name} must be a positive integer; got {raw!r}")
    return int(raw)


# --------------------------------------------------------------------------------------------
# Op folders and their sources.
# --------------------------------------------------------------------------------------------


def discover_ops(src: Path, wanted: str | None = None) -> list[str]:
    """Op folders under src/ (a folder <op>/ with the binding <op>.cpp), all or those named in
    LLTM_EXT_OPS (comma-separated)."""
    ops = sorted(p.name for p in src.iterdir() if p.is_dir() and (p / f"{p.name}.cpp").is_file())
    names = [o.strip() for o in (wanted or "").split(",") if o.strip()]
    unknown = sorted(set(names) - set(ops))
    if unknown:
        raise BuildConfigError(f"LLTM_EXT_OPS names {unknown}, but the op folders are {ops}")
    return [o for o in ops if o in names] if names else ops


USES_FILE = "uses.txt"


@dataclass(frozen=True)
class OpSources:
    """An op folder's files, its subfolders included. binding: <op>.cpp; cpu: the other *.cpp
    (CPU kernels, built into every module); cuda: *.cu and *_cuda_host.cpp (host code that
    launches the kernels), built into CUDA modules only; uses: the op folders named in its
    uses.txt, whose kernels (their cpu and cuda sources) this module links too; uses_cpu_only:
    those of them whose line says `cpu`, whose CPU kernels alone it links."""

    binding: Path
    cpu: tuple[Path, ...]
    cuda: tuple[Path, ...]
    uses: tuple[str, ...] = ()
    uses_cpu_only: frozenset[str] = frozenset()


def op_sources(folder: Path) -> OpSources:
    op = folder.name
    binding = folder / f"{op}.cpp"
    others = sorted(p for p in folder.rglob("*.cpp") if p != binding)
    cuda_host = tuple(p for p in others if p.name.endswith("_cuda_host.cpp"))
    cpu = tuple(p for p in others if p not in cuda_host)
    cuda = tuple(sorted(folder.rglob("*.cu"))) + cuda_host
    uses, cpu_only = op_uses(folder)
    return OpSources(binding, cpu, cuda, uses, cpu_only)


def op_uses(folder: Path) -> tuple[tuple[str, ...], frozenset[str]]:
    """The op folders that src/<op>/uses.txt names (one a line, '#' comments; `<op> cpu` for its
    CPU kernels alone), and those of them marked `cpu`; checked: each is an op folder beside this
    one that names none itself (one level: what a module links is read off its own folder)."""
    path = folder / USES_FILE
    if not path.is_file():
        return (), frozenset()
    lines = [ln.split("#", 1)[0].split() for ln in path.read_text().splitlines()]
    names, cpu_only = [], set()
    for words in filter(None, lines):
        if len(words) > 2 or words[1:] not in ([], ["cpu"]):
            raise BuildConfigError(
                f"{path.relative_to(folder.parent.parent)}: a line is an op folder, or an op "
                f"folder and `cpu` (its CPU kernels alone), not {' '.join(words)!r}"
            )
        names.append(words[0])
        if words[1:] == ["cpu"]:
            cpu_only.add(words[0])
    for name in names:
        other = folder.parent / name
        if name == folder.name or not (other / f"{name}.cpp").is_file():
            raise BuildConfigError(
                f"{path.relative_to(folder.parent.parent)} names {name!r}, which is not another "
                "op folder (a folder src/<op>/ with its binding <op>.cpp)"
            )
        if (other / USES_FILE).is_file():
            raise BuildConfigError(
                f"{path.relative_to(folder.parent.parent)} names {name!r}, which has a "
                f"{USES_FILE} of its own: a module links the kernels of the folders it names, "
                "not theirs"
            )
    return tuple(names), frozenset(cpu_only)


@dataclass(frozen=True)
class ModuleSources:
    """What one module's build takes: `compiled`, the sources compiled for it (its binding
    first), and `linked`, (module, source) pairs: objects that another module of the same build
    compiles (a used op's kernels, or a CPU twin's CPU kernels) and this one links."""

    compiled: tuple[Path, ...]
    linked: tuple[tuple[str, Path], ...]


def module_sources(
    op: str, sources: dict[str, OpSources], built: dict[str, bool], cuda: bool, twin: bool = False
) -> ModuleSources:
    """The sources of module _<op> (cuda: with its CUDA kernels) or its CPU twin _<op>_cpu.

    sources: every op folder's OpSources (those this build skips included); built: the op
    folders this build compiles, each with whether its module is a CUDA one. A used op's kernels
    are compiled once, by its own module, when this build has it with the kernels needed
    (its CUDA kernels need its CUDA module), and linked from there; else compiled here. A twin
    compiles only its binding and links the CPU kernels its CUDA module compiled or linked."""
    src = sources[op]
    compiled: list[Path] = [src.binding]
    linked: list[tuple[str, Path]] = []
    if twin:
        linked += [(f"_{op}", p) for p in src.cpu]
    else:
        compiled += list(src.cpu) + (list(src.cuda) if cuda else [])
    for name in src.uses:
        used = sources[name]
        with_cuda = cuda and name not in src.uses_cpu_only
        owner_ok = name in built and (built[name] or not with_cuda)
        wanted = list(used.cpu) + (list(used.cuda) if with_cuda else [])
        if owner_ok:
            linked += [(f"_{name}", p) for p in wanted]
        elif twin:
            linked += [(f"_{op}", p) for p in used.cpu]
        else:
            compiled += wanted
    return ModuleSources(tuple(compiled), tuple(linked))


# --------------------------------------------------------------------------------------------
# Parallelism.
# --------------------------------------------------------------------------------------------

GIB_PER_COMPILER = 2.0  # peak resident memory of one nvcc / g++ over torch's headers, rounded up


def parallelism(
    cores: int, mem_gib: float, n_archs: int, jobs: int | None = None, threads: int | None = None
) -> tuple[int, int]:
    """(compile jobs, nvcc --threads per CUDA file): every core busy, about GIB_PER_COMPILER of
    free memory per compiler process. Jobs come first (files compile in parallel); nvcc threads
    (its architectures in parallel) use cores that jobs would leave idle at the end of a build,
    when only the longest files are still compiling."""
    slots = max(1, int(mem_gib // GIB_PER_COMPILER))
    if jobs is None:
        jobs = max(1, min(cores, slots))
    if threads is None:
        spare = max(1, min(cores, slots) // max(1, min(jobs, 4)))
        threads = max(1, min(n_archs, spare))
    return jobs, threads


# --------------------------------------------------------------------------------------------
# Version.
# --------------------------------------------------------------------------------------------


def version_label(
    raw: str | None, *, cuda: str | None, torch_version: str, from_sdist: bool
) -> str:
    """The wheel's local version label (after '+'), '' for none.

    raw: LLTM_EXT_VERSION_SUFFIX (unset/auto, none, or a label). auto: 'cu130torch2.13' or
    'cputorch2.13', except in an sdist or a build from one (from_sdist), which keeps the sdist's
    plain version unless the variable is set (pip checks that a built sdist keeps its version).
    """
    value = (raw or "").strip()
    if value.lower() in ("none", "0", "off"):
        return ""
    if value and value.lower() != "auto":
        if not re.fullmatch(r"[A-Za-z0-9]+([.][A-Za-z0-9]+)*", value.lstrip("+")):
            raise BuildConfigError(
                f"LLTM_EXT_VERSION_SUFFIX must be letters, digits and dots; got {raw!r}"
            )
        return value.lstrip("+")
    if from_sdist and not value:
        return ""
    torch_mm = ".".join(torch_version.split("+")[0].split(".")[:2])
    return ("cu" + cuda.replace(".", "") if cuda else "cpu") + f"torch{torch_mm}"


# --------------------------------------------------------------------------------------------
# Building from the sdist: how long, and where the prebuilt wheel is.
# --------------------------------------------------------------------------------------------

# Compile work in core-seconds, from docs/build_notes.md's "Build times" (nvcc 13.0, measured
# 2026-12-02 on CI's 2-core machine): all modules' CPU code, 2 cores x 303 s (a CPU-only build);
# and per real GPU architecture, (2230 s - 303 s) x 2 cores / 8 (the default list, 8 SASS
# targets). It predicts 98 s for 16 cores and sm_90 + sm_90a (the H200 machine: 88-115 s).
CPU_CORE_SECONDS = 606.0
ARCH_CORE_SECONDS = 482.0


def build_seconds(jobs: int, sass_targets: int) -> float:
    """About how long compiling all modules takes with `jobs` parallel compilers and
    `sass_targets` real GPU architectures (0: a CPU-only build)."""
    return (CPU_CORE_SECONDS + ARCH_CORE_SECONDS * sass_targets) / max(1, jobs)


def duration_text(seconds: float) -> str:
    """'about 40 s', 'about 5 min'."""
    if seconds < 90:
        return f"about {max(10, round(seconds / 10) * 10)} s"
    return f"about {round(seconds / 60)} min"


def wheel_pages_url(pyproject_text: str) -> str | None:
    """pyproject.toml's [project.urls] Wheels (the release's find-links pages), with a '/'."""
    match = re.search(r'^\s*Wheels\s*=\s*"([^"]+)"', pyproject_text, re.M)
    return match[1].rstrip("/") + "/" if match else None


def wheel_page_name(torch_version: str, cuda: str | None) -> str:
    """'torch-2.15+cu132.html' for torch 2.15.x with CUDA 13.2; 'torch-2.15+cpu.html' without
    (the name lltm_ext._extension.wheel_page_name and tools/release/wheel_matrix.py give it too)."""
    torch_mm = ".".join(torch_version.split("+")[0].split(".")[:2])
    variant = "cpu" if not cuda else "cu" + "".join(cuda.split(".")[:2])
    return f"torch-{torch_mm}+{variant}.html"


def source_build_notice(
    *, seconds: float, jobs: int, what: str, page_url: str | None, pages_url: str | None
) -> str:
    """The one line a build from the sdist prints before compiling: how long it will take here,
    and the command that installs the prebuilt wheel instead."""
    line = (
        f"building lltm_ext from source ({what}): {duration_text(seconds)} with {jobs} parallel "
        "jobs here (docs/build_notes.md, 'Build times')"
    )
    if page_url:
        line += (
            "; the prebuilt wheel, where the release has one for this torch and Python, installs "
            f"in seconds instead: pip install lltm_ext -f {page_url}"
        )
    elif pages_url:
        line += f"; prebuilt wheels: {pages_url}index.html"
    return line


# --------------------------------------------------------------------------------------------
# A failed build, summed up.
# --------------------------------------------------------------------------------------------

_NOISE = [
    (re.compile(r"/tmp/tmpxft_[0-9a-f_]+-?\d*_?"), "/tmp/tmpxft_..._"),
    (re.compile(r"\bline \d+\b"), "line N"),
    (re.compile(r"(\.\w+):\d+(:\d+)?:"), r"\1:N:"),
]

# (pattern in the output, what to do): the causes a newcomer meets first.
HINTS = [
    (
        r"requires \.target sm_(\d+)|not supported on \.target",
        "an architecture in TORCH_CUDA_ARCH_LIST is too old for a feature this code uses; "
        "this is a bug in lltm_ext (report it), and building only for your GPU works around "
        "it: TORCH_CUDA_ARCH_LIST=<your GPU's, e.g. 9.0>",
    ),
    (
        r"Killed|signal 9|out of memory|std::bad_alloc|cannot allocate memory",
        "a compiler ran out of memory: lower MAX_JOBS and NVCC_THREADS (e.g. MAX_JOBS=1 "
        "NVCC_THREADS=1)",
    ),
    (r"No space left on device", "the disk is full: free some space (or set TMPDIR elsewhere)"),
    (r"cannot find -lcudart", "set CUDA_HOME to the toolkit folder whose lib64 has libcudart.so"),
    (
        r"(cusparse|cublas\w*|cusolver\w*)\.h: No such file",
        "the toolkit lacks the math-library headers: install torch's CUDA build with pip (its "
        "nvidia-* wheels bring them) or a full toolkit",
    ),
    (
        r"unsupported GNU version|unsupported .* compiler",
        "nvcc does not support this host compiler: set CC/CXX to one it supports",
    ),
]


def summarize_failure(log: str, max_lines: int = 12) -> str:
    """The part of a failed ninja run's output a person can act on: which files failed, their
    distinct error lines (with how often each came), and a hint for known causes."""
    failed = re.findall(r"^FAILED: (.+)$", log, re.M)
    errors: Counter[str] = Counter()
    order: list[str] = []
    for line in log.splitlines():
        if not re.search(r"\berror\b|fatal|Killed|No space left", line, re.I):
            continue
        if line.startswith(("FAILED:", "ninja:")):
            continue
        key = line.strip()
        for pattern, repl in _NOISE:
            key = pattern.sub(repl, key)
        key = key[:300]
        if key not in errors:
            order.append(key)
        errors[key] += 1
    out = []
    if failed:
        names = [Path(f.split()[0]).name for f in failed]
        out.append(f"failed to compile: {', '.join(names)}")
    for key in order[:max_lines]:
        count = errors[key]
        out.append(f"  {key}" + (f"   [x{count}]" if count > 1 else ""))
    if len(order) > max_lines:
        out.append(f"  ... and {len(order) - max_lines} more distinct error lines")
    for pattern, hint in HINTS:
        if re.search(pattern, log):
            out.append(f"hint: {hint}")
    return "\n".join(out)
