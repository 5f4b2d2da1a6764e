"""One path per op: the public functions reach their kernels through the registered operators
``torch.ops.lltm_ext.*``, eagerly and under torch.compile alike, and the package API is static."""

from pathlib import Path

import pytest
import torch
from helpers import devices
from torch.overrides import TorchFunctionMode
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
        "lltm_sequence": (
            lambda: lltm_ext.lltm_sequence(lltm_args[0][None], *lltm_args[1:3], tuple(state))[0],
            ["lltm_sequence_forward", "lltm_sequence_backward"],
        ),
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


@pytest.mark.parametrize("device", devices())
def test_gemm_without_grad_goes_through_the_operators(device):
    """With nothing to differentiate, lltm_ext.gemm calls its module's binding of the operator
    (the C++ dispatcher, not torch.ops's Python boxing): dispatch modes, the profiler and the
    tracer still see lltm_ext::gemm / gemm_out, with the operator's results."""
    from lltm_ext.ops.gemm import gemm_op, gemm_out_op

    a, b = torch.randn(3, 4, device=device), torch.randn(4, 2, device=device)
    out = torch.full((3, 2), float("nan"), device=device)
    with _Recorder() as rec:
        c = lltm_ext.gemm(a, b)
        assert lltm_ext.gemm(a.t(), c, out=torch.empty(4, 2, device=device)).shape == (4, 2)
        assert lltm_ext.gemm(a, b, out=out) is out
    assert [n for n in rec.names if n.startswith("lltm_ext::")] == [
        "lltm_ext::gemm",
        "lltm_ext::gemm_out",
        "lltm_ext::gemm_out",
    ]
    assert torch.equal(c, gemm_op(a, b)) and torch.equal(out, c)
    ref = torch.empty(3, 2, device=device)
    gemm_out_op(a, b, ref)
    assert torch.equal(out, ref)
    torch.testing.assert_close(c, (a.double() @ b.double()).float())

    with torch.profiler.profile() as prof:
        lltm_ext.gemm(a, b)
    assert "lltm_ext::gemm" in {e.name for e in prof.events()}
    traced = torch.jit.trace(lambda x, y: lltm_ext.gemm(x, y), (a, b))
    assert "lltm_ext::gemm" in str(traced.graph)
    torch.testing.assert_close(traced(a, b), c)


@pytest.mark.parametrize("device", devices())
def test_compiled_gemm_holds_the_operators(device):
    """torch.compile turns lltm_ext.gemm's binding into the operator: no graph break, and the
    graph calls torch.ops.lltm_ext.gemm / gemm_out."""
    torch._dynamo.reset()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def f(a, b, out):
        return lltm_ext.gemm(a, b).tanh(), lltm_ext.gemm(a.t(), b.t().t(), out=out)

    a, b = torch.randn(5, 5, device=device), torch.randn(5, 3, device=device)
    out = torch.empty(5, 3, device=device)
    c, returned = torch.compile(f, fullgraph=True, backend=backend)(a, b, out)
    assert returned is out
    torch.testing.assert_close(c, (a @ b).tanh())
    torch.testing.assert_close(out, a.t() @ b)
    targets = [str(n.target) for gm in graphs for n in gm.graph.nodes if n.op == "call_function"]
    assert "lltm_ext.gemm.default" in targets and "lltm_ext.gemm_out.default" in targets
    # And through inductor, which calls the operator from its generated code.
    torch._dynamo.reset()
    c2, _ = torch.compile(f, fullgraph=True)(a, b, out)
    torch.testing.assert_close(c2, c)


def test_gemm_takes_part_in_torch_function():
    """Tensor subclasses and torch-function modes see lltm_ext.gemm itself, as they see torch's
    own Python functions, and a subclass's default handling keeps its type."""

    class Seen(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.funcs = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.funcs.append(func)
            return func(*args, **(kwargs or {}))

    class Tagged(torch.Tensor):
        pass

    a, b = torch.randn(3, 4), torch.randn(4, 2)
    with Seen() as mode:
        c = lltm_ext.gemm(a, b)
    assert mode.funcs[0] is lltm_ext.gemm
    tagged = lltm_ext.gemm(a.as_subclass(Tagged), b)
    assert type(tagged) is Tagged
    assert torch.equal(tagged.as_subclass(torch.Tensor), c)


@pytest.mark.parametrize("op", sorted(MODULES))
def test_modules_bind_their_public_operators_only(op):
    """Each compiled module binds its public operator(s), which its public function calls, and no
    function that would bypass the dispatcher (no `forward` / `backward`); `_`-prefixed names are
    build info and gemm's tuning and test hooks."""
    from lltm_ext._extension import load_extension

    public = {n for n in vars(load_extension(op)) if not n.startswith("_")}
    assert public == ({"gemm", "gemm_out"} if op == "gemm" else {op})


def test_no_python_autograd_functions_in_the_package():
    """Every op's autograd is C++, the Autograd kernel of its public operator."""
    offenders = [
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if "autograd.Function)" in p.read_text() or "torch.autograd.Function(" in p.read_text()
    ]
    assert offenders == []


# The one place compiled code takes another course: LLTMSequence's choice of running its calls at
# once on CUDA streams of its own (ops/lltm_sequence.py: _runs_at_once), which schedules the same
# operator calls and which torch.compile cannot trace; compiled, the calls run one after another.
AT_ONCE_GATE = "        and not torch.compiler.is_compiling()\n"


def test_no_compile_forks_in_the_package():
    """No `is_compiling()` branches: eager and compiled calls run one code path (the same
    operators, whatever schedules them: the at-once gate above is the one such test)."""
    offenders = []
    for p in PACKAGE.rglob("*.py"):
        text = p.read_text()
        if p.relative_to(PACKAGE).as_posix() == "ops/lltm_sequence.py":
            assert text.count(AT_ONCE_GATE) == 1 and "def _runs_at_once(" in text
            text = text.replace(AT_ONCE_GATE, "")
        if "is_compiling" in text or "custom_op(" in text:
            offenders.append(str(p.relative_to(PACKAGE)))
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
