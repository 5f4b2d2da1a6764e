"""The bench cases of ``lltm-ext bench``: one module per op module of :mod:`lltm_ext.ops`.

Each module ``lltm_ext/cli/cases/<op>.py`` defines ``benchmarks(device, quick) ->
list[BenchCase]`` (lltm_ext's call against PyTorch's own way of doing the same job; see
:class:`lltm_ext.cli.bench.BenchCase`) and ``BENCH_OPS``, the `op` names its cases carry (what
``--ops`` takes). A new op adds its module here; ``tests/test_packaging.py`` checks that this list
matches :data:`lltm_ext.ops.MODULES`.
"""

from __future__ import annotations

from types import ModuleType

from lltm_ext.cli.cases import gemm, lltm, lltm_sequence, relu, round_ste, sigmoid

CASES: dict[str, ModuleType] = {
    "gemm": gemm,
    "lltm": lltm,
    "lltm_sequence": lltm_sequence,
    "relu": relu,
    "round_ste": round_ste,
    "sigmoid": sigmoid,
}
"""Op name (the key of :data:`lltm_ext.ops.MODULES`) -> the module of its bench cases."""
