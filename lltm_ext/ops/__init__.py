"""The ops' Python modules, one per ``src/<op>/`` folder, imported by name.

Each module defines ``__all__`` (its public API, re-exported by ``lltm_ext``); its bench cases
live apart, in ``lltm_ext/cli/cases/<op>.py``. A new op adds its module here and to
``lltm_ext/__init__.py``; ``tests/test_packaging.py`` checks that this list matches ``src/``.
"""

from __future__ import annotations

from types import ModuleType

from lltm_ext.ops import gemm, lltm, lltm_sequence, relu, round_ste, sigmoid

MODULES: dict[str, ModuleType] = {
    "gemm": gemm,
    "lltm": lltm,
    "lltm_sequence": lltm_sequence,
    "relu": relu,
    "round_ste": round_ste,
    "sigmoid": sigmoid,
}
"""Op name (its ``src/<op>/`` folder and ``lltm_ext._<op>`` module) -> its Python module."""
