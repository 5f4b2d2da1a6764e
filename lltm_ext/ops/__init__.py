"""The ops' Python modules, found by name: ``lltm_ext/ops/<op>.py`` for each ``src/<op>/``.

Each module defines ``__all__`` (its public API, re-exported by ``lltm_ext``) and may define
``benchmarks(device, quick)`` for ``python -m lltm_ext bench``.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

MODULES: dict[str, ModuleType] = {
    info.name: importlib.import_module(f"{__name__}.{info.name}")
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name)
    if not info.name.startswith("_")
}
