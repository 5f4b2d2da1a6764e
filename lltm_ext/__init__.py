"""lltm_ext: hand-written PyTorch C++/CUDA extension ops with autograd and torch.compile support.

Every op runs on CPU and (when built with CUDA) on CUDA tensors::

    import lltm_ext
    new_h, new_cell = lltm_ext.lltm(input, weights, bias, old_h, old_cell)

``python -m lltm_ext info`` shows how the package was built; ``python -m lltm_ext bench`` times it.
"""

from __future__ import annotations

from lltm_ext._extension import build_info, check_torch_compatible
from lltm_ext._version import __version__ as _base_version

check_torch_compatible()

from lltm_ext.ops import MODULES as _OPS  # noqa: E402  (after the torch check, on purpose)

__version__: str = (build_info() or {}).get("version", _base_version)
__all__ = ["__version__", "build_info"]
for _module in _OPS.values():
    for _name in _module.__all__:
        globals()[_name] = getattr(_module, _name)
        __all__.append(_name)
del _module, _name
