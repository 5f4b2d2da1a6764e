"""Loading the compiled op modules (``lltm_ext._<op>``) and their operators with clear errors, and
the build record."""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import torch

F = TypeVar("F", bound=Callable[..., Any])

REBUILD_HINT = (
    "Fix it by installing the lltm_ext wheel built for the installed torch and CUDA, or by "
    "rebuilding lltm_ext against it: pip install --no-build-isolation --force-reinstall --no-deps "
    "lltm_ext (from a source checkout: pip install --no-build-isolation -e .)."
)


def wheel_page_name(torch_version: str, cuda: str | None) -> str:
    """The find-links page of the prebuilt wheels for a torch: ``torch-2.15+cu132.html`` for
    torch 2.15.x with CUDA 13.2, ``torch-2.15+cpu.html`` for a CPU-only torch (`cuda` None).

    The release names its pages so (tools/release/find_links.py, through
    tools/release/wheel_matrix.py ``page_name``; tests/test_wheel_matrix.py checks that both
    agree)."""
    variant = "cpu" if not cuda else "cu" + "".join(cuda.split(".")[:2])
    return f"torch-{_major_minor(torch_version)}+{variant}.html"


def wheel_pages_url() -> str | None:
    """Where the release's find-links pages are (pyproject.toml's ``[project.urls] Wheels``, from
    the installed metadata or, in a source tree, from pyproject.toml); None if neither says."""
    try:
        for entry in importlib.metadata.metadata("lltm_ext").get_all("Project-URL") or []:
            label, _, url = entry.partition(",")
            if label.strip().lower() == "wheels" and url.strip():
                return url.strip().rstrip("/") + "/"
    except importlib.metadata.PackageNotFoundError:
        pass
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    if pyproject.is_file():
        match = re.search(r'^\s*Wheels\s*=\s*"([^"]+)"', pyproject.read_text(), re.M)
        if match:
            return match[1].rstrip("/") + "/"
    return None


def wheel_page_url(torch_version: str | None = None, cuda: str | None = None) -> str | None:
    """The page to give ``pip install lltm_ext -f`` for a torch (default: the running one, with
    its CUDA, or none for a CPU-only build); None if the pages' address is unknown. A release
    builds wheels for the torch releases and CUDA variants of the README's table only: for others
    the page does not exist, and pip falls back to building from source."""
    if torch_version is None:
        torch_version, cuda = torch.__version__, torch.version.cuda
    base = wheel_pages_url()
    return base + wheel_page_name(torch_version, cuda) if base else None


def fix_hint() -> str:
    """How to get an lltm_ext that loads with the running torch: REBUILD_HINT, with the
    command that installs the prebuilt wheel for this torch when the pages' address is known."""
    url = wheel_page_url()
    if url is None:
        return REBUILD_HINT
    cuda = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only"
    return (
        "Fix it by installing the lltm_ext wheel built for the installed torch and CUDA: "
        f"pip install --force-reinstall --no-deps lltm_ext -f {url} (the release's page for "
        f"torch {_major_minor(torch.__version__)}, {cuda}: README, 'Installing a prebuilt "
        "wheel'), or by rebuilding lltm_ext against it: pip install --no-build-isolation "
        "--force-reinstall --no-deps lltm_ext (from a source checkout: pip install "
        "--no-build-isolation -e .)."
    )


def build_info() -> dict[str, Any] | None:
    """What this build was made with (written by setup.py), or None for an unbuilt source tree."""
    try:
        from lltm_ext._build_info import BUILD_INFO
    except ImportError:
        return None
    return dict(BUILD_INFO)


def _major_minor(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


def compatibility_problems(info: dict[str, Any]) -> list[str]:
    """How the running torch differs from the one the compiled modules were built against."""
    problems = []
    built, running = info["torch_version"], torch.__version__
    if _major_minor(built) != _major_minor(running):
        problems.append(
            f"torch {_major_minor(built)} (built) vs {_major_minor(running)} (installed)"
        )
    built_cuda, running_cuda = info.get("cuda_version"), torch.version.cuda
    if built_cuda and running_cuda and built_cuda.split(".")[0] != running_cuda.split(".")[0]:
        problems.append(f"CUDA {built_cuda} (built) vs CUDA {running_cuda} (installed torch)")
    built_abi, running_abi = info.get("cxx11_abi"), bool(torch._C._GLIBCXX_USE_CXX11_ABI)
    if built_abi is not None and built_abi != running_abi:
        problems.append(
            f"C++11 ABI {int(built_abi)} (built) vs {int(running_abi)} (installed torch)"
        )
    return problems


def check_torch_compatible() -> None:
    """Raise ImportError, instead of a later `undefined symbol`, if torch is not the build's."""
    info = build_info()
    if info is None:
        return
    problems = compatibility_problems(info)
    if problems:
        cuda = f"CUDA {info['cuda_version']}" if info.get("cuda_version") else "CPU only"
        raise ImportError(
            f"lltm_ext {info['version']} was built for torch {info['torch_version']} ({cuda}), "
            f"but torch {torch.__version__} is installed: "
            + "; ".join(problems)
            + ". "
            + fix_hint()
        )


def module_name(op: str) -> str:
    """``lltm_ext._<op>``, or its CPU twin ``lltm_ext._<op>_cpu`` under a CPU-only torch.

    A CUDA-built module links torch's CUDA libraries, which a CPU-only torch does not have; CUDA
    wheels therefore also carry a CPU twin of each op, built without CUDA, for that case.
    """
    info = build_info() or {}
    if torch.version.cuda is None and info.get("ops", {}).get(op, {}).get("cpu_twin"):
        return f"lltm_ext._{op}_cpu"
    return f"lltm_ext._{op}"


@functools.cache
def load_extension(op: str) -> ModuleType:
    """The compiled module of `op`; an ImportError that says how to build it if it is missing."""
    name = module_name(op)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            raise
        package = Path(__file__).resolve().parent
        if (package.parent / "setup.py").is_file():
            raise ImportError(
                f"{name} is not built: this lltm_ext is the source tree at {package.parent}, "
                "whose compiled modules are missing (Python started in the repository root puts "
                "it ahead of an installed lltm_ext). Build it in place with "
                "`pip install --no-build-isolation -e .`, or run from another directory."
            ) from exc
        raise ImportError(
            f"{name} is missing from the installed lltm_ext at {package}. {REBUILD_HINT}"
        ) from exc
    except ImportError as exc:
        raise ImportError(f"{name} could not be loaded ({exc}). {REBUILD_HINT}") from exc


class MissingOps:
    """Stands in for ``torch.ops.lltm_ext`` when an op's compiled module cannot be loaded.

    Any operator looked up on it (``.name.default``) is this object again; calling it raises the
    ImportError that says why the module is missing and how to build it. So ``import lltm_ext``
    works in an unbuilt source tree or a build of some ops (``LLTM_EXT_OPS``), and only calling a
    missing op fails.
    """

    def __init__(self, error: ImportError) -> None:
        self.error = error

    def __getattr__(self, name: str) -> MissingOps:
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise ImportError(str(self.error)) from self.error


def load_ops(op: str) -> Any:
    """``torch.ops.lltm_ext`` once `op`'s compiled module is loaded: its ``TORCH_LIBRARY_FRAGMENT``
    registers the operators ``lltm_ext::<op>_*`` with their CPU and CUDA kernels. A
    :class:`MissingOps` if the module cannot be loaded."""
    try:
        load_extension(op)
    except ImportError as exc:
        return MissingOps(exc)
    return torch.ops.lltm_ext


def operator_call(op: str, name: str, operator: Any) -> Callable[..., Any]:
    """The call a public function makes of the operator `operator` (``torch.ops.lltm_ext.<name>
    .default``, or a :class:`MissingOps`): the module's binding of the same name, which runs the
    operator through torch's C++ dispatcher (every dispatch key, as ``torch.ops`` runs it) without
    ``torch.ops``'s boxing of the Python arguments against the schema, which costs as much a call
    as a small product itself (src/common/module.h, ``bind_operator``; figures:
    docs/decisions.md#bind-operator).

    torch.compile is told (``torch.compiler.substitute_in_graph``) that calling the binding is
    calling `operator`, so a compiled graph holds the operator itself: eager and compiled calls
    run the same operator, its kernels and its registrations. Where the module is missing, or
    torch is too old to be told (before 2.5), the operator is returned as it is.
    """
    substitute = getattr(torch.compiler, "substitute_in_graph", None)
    if isinstance(operator, MissingOps) or substitute is None:
        return operator
    binding = getattr(load_extension(op), name)

    def traced(*args: Any) -> Any:
        return operator(*args)

    try:
        substitute(binding, skip_signature_check=True)(traced)
    except ValueError:  # told already (the op's Python module imported again, e.g. reloaded)
        pass
    return binding


def register_fake(ops: Any, qualname: str) -> Callable[[F], F]:
    """``torch.library.register_fake(qualname)`` when the op's module is loaded (`ops` is what
    :func:`load_ops` returned); with a :class:`MissingOps` there is no operator to register for,
    and the decorator returns the function unchanged."""
    if isinstance(ops, MissingOps):
        return lambda fn: fn
    return torch.library.register_fake(qualname)


def cuda_built(op: str) -> bool:
    """Whether the op's compiled module has CUDA kernels."""
    return bool(load_extension(op)._build_info()["cuda"])


def cpu_isa() -> str | None:
    """The ISA the CPU element-wise loops run with here: ``avx512``, ``avx2+fma`` or ``baseline``.

    The widest the CPU runs, capped by ``LLTM_EXT_CPU_ISA`` (``baseline``, ``avx2``, ``avx512``);
    ``error: ...`` for a bad value of that variable; None when no compiled module loads.
    """
    for op in (build_info() or {}).get("ops", {}):
        try:
            return load_extension(op)._build_info().get("cpu_isa")
        except ImportError:
            continue
    return None
