"""lltm_ext: hand-written PyTorch C++/CUDA extension ops with autograd and torch.compile support.

Every op runs on CPU and (when built with CUDA) on CUDA tensors::

    import lltm_ext
    new_h, new_cell = lltm_ext.lltm(input, weights, bias, old_h, old_cell)

``lltm-ext info`` (or ``python -m lltm_ext info``) shows how the package was built;
``lltm-ext bench`` times it; ``lltm_ext.settings()`` lists the environment variables the ops read.
"""

from __future__ import annotations

from lltm_ext._extension import build_info, check_torch_compatible
from lltm_ext._settings import settings
from lltm_ext._version import __version__ as _base_version
from lltm_ext.explain import Explanation, explain

check_torch_compatible()

# After the torch check, on purpose: loading the compiled modules with another torch would fail
# with an `undefined symbol` instead of the check's message.
from lltm_ext.ops.gemm import GemmFunction, gemm  # noqa: E402
from lltm_ext.ops.lltm import LLTM, LLTMFunction, lltm  # noqa: E402
from lltm_ext.ops.lltm_sequence import LLTMSequence, lltm_sequence  # noqa: E402
from lltm_ext.ops.relu import ReLU, ReLUFunction, relu  # noqa: E402
from lltm_ext.ops.round_ste import RoundSTE, RoundSTEFunction, round_ste  # noqa: E402
from lltm_ext.ops.sigmoid import Sigmoid, SigmoidFunction, sigmoid  # noqa: E402

__version__: str = (build_info() or {}).get("version", _base_version)

__all__ = [
    "LLTM",
    "Explanation",
    "GemmFunction",
    "LLTMFunction",
    "LLTMSequence",
    "ReLU",
    "ReLUFunction",
    "RoundSTE",
    "RoundSTEFunction",
    "Sigmoid",
    "SigmoidFunction",
    "__version__",
    "build_info",
    "explain",
    "gemm",
    "lltm",
    "lltm_sequence",
    "relu",
    "round_ste",
    "settings",
    "sigmoid",
]
