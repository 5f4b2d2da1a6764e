"""GPU architectures: the one definition of what lltm_ext builds for, and how a list is read.

Everything that names architectures reads this module: setup.py (the default list and the
``TORCH_CUDA_ARCH_LIST`` it passes to torch), the wheel checks
(``tools/packaging/check_dist.py``, ``tools/packaging/smoke_test.py``), the wheels workflow
(through ``tools/packaging/build_wheel.sh``, which asks ``python tools/buildsys/archs.py
default``) and the README (whose default list a test compares with :func:`default_arch_list`).
Pure functions of their arguments: no torch, no CUDA, no I/O.

Command line (for shell scripts)::

    python tools/buildsys/archs.py default [--cuda 13.0]   # the default list for that toolkit
    python tools/buildsys/archs.py targets "8.0;9.0+PTX"   # sm_80 sm_90 compute_90
    python tools/buildsys/archs.py normalize "8.0,9.0"     # 8.0;9.0
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

# The architectures lltm_ext targets by default, oldest first, each kept where the toolkit
# compiles for it (Volta left nvcc in CUDA 13.0; Blackwell, 10.0 and 12.0, came in 12.8). The
# newest one the toolkit has also gets PTX, which the driver compiles for GPUs newer than the list.
DEFAULT_ARCHS: tuple[str, ...] = ("7.0", "7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0")

# Real architectures nvcc offers per toolkit release (major, minor) -> first release with it, and
# the release that removed it (None: still there). From NVIDIA's release notes; `nvcc
# --list-gpu-code` is the authority when nvcc is at hand (see supported_by).
_ARCH_SPAN: dict[str, tuple[tuple[int, int], tuple[int, int] | None]] = {
    "7.0": ((9, 0), (13, 0)),
    "7.2": ((10, 0), (13, 0)),
    "7.5": ((10, 0), None),
    "8.0": ((11, 0), None),
    "8.6": ((11, 1), None),
    "8.7": ((11, 4), None),
    "8.9": ((11, 8), None),
    "9.0": ((11, 8), None),
    "10.0": ((12, 8), None),
    "10.3": ((12, 9), None),
    "12.0": ((12, 8), None),
    "12.1": ((12, 9), None),
}

# Hopper's architecture-specific target (wgmma, setmaxnreg: the GEMM's tensor-core kernel) is
# added beside plain 9.0 wherever 9.0 is built and the toolkit has it (CUDA 12.0 on): sm_90 code
# stays for every kernel, and the driver loads the sm_90a image where both are present.
HOPPER_SPECIFIC = "9.0a"

# Names torch.utils.cpp_extension also accepts in TORCH_CUDA_ARCH_LIST (the families this project
# can target), expanded the same way.
NAMED_ARCHS: dict[str, str] = {
    "Volta": "7.0+PTX",
    "Turing": "7.5+PTX",
    "Ampere": "8.0;8.6+PTX",
    "Ada": "8.9+PTX",
    "Hopper": "9.0+PTX",
    "Blackwell": "10.0;10.3;12.0;12.1+PTX",
}

_ENTRY = re.compile(r"(\d+)\.(\d+)([af]?)(\+PTX)?")


class ArchListError(ValueError):
    """A TORCH_CUDA_ARCH_LIST that cannot be read, with a message that says what is expected."""


@dataclass(frozen=True, order=True)
class Arch:
    """One entry: compute capability (major, minor), an ``a``/``f`` suffix, and whether PTX is
    embedded as well as machine code."""

    major: int
    minor: int
    suffix: str = ""
    ptx: bool = False

    @property
    def version(self) -> str:
        """'9.0', '9.0a': the entry without +PTX."""
        return f"{self.major}.{self.minor}{self.suffix}"

    @property
    def num(self) -> str:
        """'90', '90a': nvcc's spelling."""
        return f"{self.major}{self.minor}{self.suffix}"

    def targets(self) -> list[str]:
        """What nvcc embeds for it: ['sm_90'] or ['sm_90', 'compute_90']."""
        return [f"sm_{self.num}"] + ([f"compute_{self.num}"] if self.ptx else [])

    def __str__(self) -> str:
        return self.version + ("+PTX" if self.ptx else "")


def parse(value: str) -> list[Arch]:
    """Read a TORCH_CUDA_ARCH_LIST: entries like ``8.0``, ``9.0a``, ``9.0+PTX`` or a family name
    (``Hopper``), separated by ``;``, ``,`` or spaces. Duplicates merge (PTX kept if either asks
    for it); the result is sorted. Raises ArchListError for anything else, or an empty list."""
    entries: dict[tuple[int, int, str], bool] = {}
    for item in re.split(r"[;,\s]+", value.strip()):
        if not item:
            continue
        for part in NAMED_ARCHS.get(item, item).split(";"):
            match = _ENTRY.fullmatch(part)
            if not match:
                raise ArchListError(
                    f"TORCH_CUDA_ARCH_LIST: cannot read {item!r} in {value!r}; expected entries "
                    "like 8.0, 9.0a or 9.0+PTX (or a family: "
                    f"{', '.join(NAMED_ARCHS)}), separated by ';'"
                )
            key = (int(match[1]), int(match[2]), match[3])
            entries[key] = entries.get(key, False) or bool(match[4])
    if not entries:
        raise ArchListError("TORCH_CUDA_ARCH_LIST is set but names no architecture")
    return sorted(Arch(*key, ptx=ptx) for key, ptx in entries.items())


def normalize(value: str | list[Arch]) -> str:
    """The canonical spelling, as torch reads it: '8.0,9.0+PTX' -> '8.0;9.0+PTX'."""
    archs = parse(value) if isinstance(value, str) else value
    return ";".join(str(a) for a in archs)


def targets(value: str | list[Arch]) -> list[str]:
    """What nvcc embeds for a list: '8.0;9.0+PTX' -> ['sm_80', 'sm_90', 'compute_90']."""
    archs = parse(value) if isinstance(value, str) else value
    return [t for a in archs for t in a.targets()]


def _version(cuda: str) -> tuple[int, int]:
    match = re.match(r"(\d+)\.(\d+)", cuda)
    if not match:
        raise ValueError(f"not a CUDA version: {cuda!r}")
    return int(match[1]), int(match[2])


def supported_by(cuda: str, nvcc_codes: list[str] | None = None) -> list[str]:
    """Versions ('7.5', ...) of the real architectures a toolkit compiles for: read from `nvcc
    --list-gpu-code` output (``sm_75 sm_80 ...``) when given, else from the release table."""
    if nvcc_codes:
        found = []
        for code in nvcc_codes:
            match = re.fullmatch(r"sm_(\d+?)(\d)", code.strip())
            if match:
                found.append(f"{match[1]}.{match[2]}")
        return sorted(set(found), key=lambda v: _version(v))
    release = _version(cuda)
    return [
        arch
        for arch, (first, last) in _ARCH_SPAN.items()
        if first <= release and (last is None or release < last)
    ]


def has_hopper_specific(cuda: str, nvcc_codes: list[str] | None = None) -> bool:
    """Whether the toolkit compiles sm_90a: CUDA 12.0 and newer, with sm_90 among its codes when
    `nvcc --list-gpu-code` output is given (which lists no architecture-specific codes)."""
    if nvcc_codes and "sm_90" not in [c.strip() for c in nvcc_codes]:
        return False
    return _version(cuda) >= (12, 0)


def _with_hopper_specific(
    archs: list[Arch], cuda: str, nvcc_codes: list[str] | None = None
) -> list[Arch]:
    """archs plus 9.0a (no PTX) where they hold 9.0 and the toolkit compiles sm_90a."""
    if any((a.major, a.minor, a.suffix) == (9, 0, "") for a in archs) and has_hopper_specific(
        cuda, nvcc_codes
    ):
        archs = sorted(set(archs) | {Arch(9, 0, "a")})
    return archs


def default_archs(cuda: str, nvcc_codes: list[str] | None = None) -> list[Arch]:
    """DEFAULT_ARCHS that the toolkit compiles for, the newest with PTX, and 9.0a beside 9.0
    (HOPPER_SPECIFIC)."""
    have = set(supported_by(cuda, nvcc_codes))
    versions = [v for v in DEFAULT_ARCHS if v in have]
    if not versions:
        raise ArchListError(f"CUDA {cuda} compiles for none of {', '.join(DEFAULT_ARCHS)}")
    archs = [Arch(*_version(v)) for v in versions]
    archs[-1] = Arch(archs[-1].major, archs[-1].minor, ptx=True)
    return _with_hopper_specific(archs, cuda, nvcc_codes)


def default_arch_list(cuda: str, nvcc_codes: list[str] | None = None) -> str:
    """The default TORCH_CUDA_ARCH_LIST for a toolkit: '7.5;8.0;8.6;8.9;9.0;9.0a;10.0;12.0+PTX'
    for CUDA 13.0. What wheels ship, and what a build without a visible GPU compiles."""
    return normalize(default_archs(cuda, nvcc_codes))


def visible_arch_list(
    capabilities: list[tuple[int, int]], cuda: str, nvcc_codes: list[str] | None = None
) -> str | None:
    """The list for the GPUs visible at build time (their compute capabilities), the newest with
    PTX, as torch.utils.cpp_extension does, and 9.0a beside 9.0 (HOPPER_SPECIFIC); None when there
    are none, or when the toolkit cannot compile for one of them (then the default list is the
    safe choice)."""
    if not capabilities:
        return None
    have = set(supported_by(cuda, nvcc_codes))
    versions = sorted({(major, minor) for major, minor in capabilities})
    if any(f"{major}.{minor}" not in have for major, minor in versions):
        return None
    archs = [Arch(major, minor) for major, minor in versions]
    archs[-1] = Arch(archs[-1].major, archs[-1].minor, ptx=True)
    return normalize(_with_hopper_specific(archs, cuda, nvcc_codes))


def unsupported(archs: list[Arch], cuda: str, nvcc_codes: list[str] | None = None) -> list[Arch]:
    """The entries of a list that the toolkit cannot compile (so the build would fail)."""
    have = set(supported_by(cuda, nvcc_codes))
    return [a for a in archs if f"{a.major}.{a.minor}" not in have]


def _main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="archs.py", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("default", help="the default list for a CUDA toolkit")
    d.add_argument("--cuda", help="toolkit version (default: ask the nvcc on PATH)")
    for name in ("targets", "normalize"):
        sub.add_parser(name, help=f"{name} of a list").add_argument("list")
    args = parser.parse_args(argv)
    try:
        if args.command == "default":
            cuda, codes = args.cuda, None
            if cuda is None:
                import subprocess

                out = subprocess.run(["nvcc", "--version"], capture_output=True, text=True)
                cuda = re.search(r"release (\d+\.\d+)", out.stdout)[1]  # type: ignore[index]
                codes = subprocess.run(
                    ["nvcc", "--list-gpu-code"], capture_output=True, text=True
                ).stdout.split()
            print(default_arch_list(cuda, codes))
        elif args.command == "targets":
            print(" ".join(targets(args.list)))
        else:
            print(normalize(args.list))
    except ArchListError as exc:
        print(f"archs.py: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
