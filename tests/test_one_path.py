"""One path per op: the public functions reach their kernels through the registered operators
``torch.ops.lltm_ext.*``, eagerly and under torch.compile alike, and the package API is static."""

from pathlib import Path

import pytest
import torch
from helpers import devices
from torch.utils._python_dispatch import TorchDispatchMode

import lltm_ext
from lltm_ext.ops import MODULES

PACKAGE = Path(lltm_ext.__file__).resolve().parent
SRC = PACKAGE.parent / "src"


class _Recorder(TorchDispatchMode):
    """Records the name of every operator dispatched below autograd."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func.name()))
        return func(*args, **(kwargs or {}))


def _calls(device):
    x = torch.randn(4, 6, device=device, requires_grad=True)
    state = [torch.randn(2, 5, device=device, requires_grad=True) for _ in range(2)]
    lltm_args = (
        torch.randn(2, 3, device=device, requires_grad=True),
        torch.randn(15, 8, device=device, requires_grad=True),
        torch.randn(15, device=device, requires_grad=True),
        *state,
    )
    a, b = (
        torch.randn(3, 4, device=device, requires_grad=True),
        torch.randn(4, 2, device=device, requires_grad=True),
    )
    return {
        "relu": (lambda: lltm_ext.relu(x), ["relu_forward", "relu_backward"]),
        "sigmoid": (lambda: lltm_ext.sigmoid(x), ["sigmoid_forward", "sigmoid_backward"]),
        "round_ste": (lambda: lltm_ext.round_ste(x), ["round_ste_forward"]),
        "lltm": (lambda: lltm_ext.lltm(*lltm_args)[0], ["lltm_forward", "lltm_backward"]),
        "gemm": (lambda: lltm_ext.gemm(a, b), ["gemm"] * 3),  # forward, grad_a, grad_b
    }


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("op", sorted(MODULES))
def test_eager_calls_go_through_the_operators(device, op):
    fn, expected = _calls(device)[op]
    with _Recorder() as rec:
        out = fn()
        out.sum().backward()
    called = [n.removeprefix("lltm_ext::") for n in rec.names if n.startswith("lltm_ext::")]
    assert called == expected


def test_no_compile_forks_in_the_package():
    """No `is_compiling()` branches: eager and compiled calls run one code path."""
    offenders = [
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if "is_compiling" in p.read_text() or "custom_op(" in p.read_text()
    ]
    assert offenders == []


def test_static_public_api():
    """`lltm_ext.__all__` is a literal list of explicit imports; every op module's API is in it;
    every `src/<op>/` folder has its Python module in lltm_ext.ops.MODULES."""
    text = (PACKAGE / "__init__.py").read_text()
    assert "globals()" not in text and "pkgutil" not in text
    for module in MODULES.values():
        for name in module.__all__:
            assert name in lltm_ext.__all__, name
            assert getattr(lltm_ext, name) is getattr(module, name)
    if SRC.is_dir():  # a source checkout
        folders = {p.name for p in SRC.iterdir() if (p / f"{p.name}.cpp").is_file()}
        assert folders == set(MODULES)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_gemm_of_a_tensor_with_itself(device, compiled):
    torch._dynamo.reset()
    a = torch.randn(5, 5, device=device, dtype=torch.float64, requires_grad=True)

    def f(a):
        return (lltm_ext.gemm(a, a) * torch.arange(5.0, device=device)).sum()

    fn = torch.compile(f, fullgraph=True, backend="aot_eager") if compiled else f
    (grad,) = torch.autograd.grad(fn(a), a)
    (ref,) = torch.autograd.grad((a @ a * torch.arange(5.0, device=device)).sum(), a)
    torch.testing.assert_close(grad, ref)


def test_an_op_whose_module_is_missing(tmp_path):
    """A build of some ops (LLTM_EXT_OPS) or an unbuilt tree: `import lltm_ext` works, and calling
    a missing op raises the ImportError that says how to build it."""
    import subprocess
    import sys

    from lltm_ext._extension import module_name

    code = f"""
import sys, torch
sys.modules[{module_name("gemm")!r}] = None  # as if lltm_ext._gemm had not been built
import lltm_ext
print(lltm_ext.relu(torch.tensor([-1.0, 2.0])).tolist())
try:
    lltm_ext.gemm(torch.ones(2, 2), torch.ones(2, 2))
except ImportError as exc:
    print("ImportError:", exc)
"""
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**__import__("os").environ, "PYTHONPATH": str(PACKAGE.parent)},
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "[0.0, 2.0]"
    assert lines[1].startswith("ImportError:") and module_name("gemm") in lines[1]
