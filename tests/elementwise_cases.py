"""Shared tests of the element-wise ops (relu, sigmoid, round_ste), against PyTorch in float64.

Each op's test file describes its op with an `OpSpec` and subclasses `ElementwiseTests` (pytest
collects the inherited tests there): values and gradients for every device and dtype, shapes of 0,
1 and odd sizes, misaligned (x[1:]) and strided layouts, NaN and +-inf, opcheck, torch.compile
with fullgraph=True, the module, errors, and on CUDA > 2^31 elements.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import torch
from helpers import TOLERANCES, assert_close, assert_compiled_matches_eager, device_dtypes, devices
from torch import Tensor

import lltm_ext
from lltm_ext._extension import cuda_built, load_extension
from lltm_ext.ops._elementwise import is_dense

ALL_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
DEVICE_DTYPES = device_dtypes(cpu=ALL_DTYPES, cuda=ALL_DTYPES)

# 0 elements, 1, odd sizes (a tail after every 16-byte pack width), several dims, and more than
# one CPU parallel grain (32768).
SHAPES = [(), (0,), (1,), (7,), (3, 5, 7), (2, 0, 3), (1001,), (100_003,)]
# contiguous; a storage offset of one element (never 16-byte aligned); every other element.
LAYOUTS = ["contiguous", "offset", "strided"]

SPECIAL = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1000.0, -1000.0, 0.5, -0.5, 1.5, -2.5, 1e-30]


@dataclass
class OpSpec:
    """One element-wise op, as the shared tests see it."""

    name: str  # the op folder, lltm_ext._<name>
    fn: Callable[[Tensor], Tensor]  # the public function
    function: type  # the shim of its former autograd.Function name (apply = fn)
    module: type  # its nn.Module
    ref: Callable[[Tensor], Tensor]  # exact reference on float64
    ref_grad: Callable[[Tensor, Tensor, torch.dtype], Tensor]  # (x, grad, dtype) -> float64 dx
    same_dtype: Callable[[Tensor], Tensor]  # PyTorch's own op in x's dtype (for huge tensors)
    public_op: Callable[..., Tensor]  # the public operator, with its C++ autograd
    forward_op: Callable[..., Tensor]  # the operators below it
    backward_op: Callable[..., Tensor] | None = None
    # Backward kernel (grad, y) and PyTorch's own, in y's dtype (for huge tensors).
    backward_same_dtype: Callable[[Tensor, Tensor], Tensor] | None = None
    exports: list[str] = field(default_factory=list)


def make_input(
    shape: tuple[int, ...], dtype: torch.dtype, device: str, layout: str = "contiguous", scale=3.0
) -> Tensor:
    """torch.randn(shape) * scale in `dtype` on `device`, laid out in memory as `layout` says."""
    numel = math.prod(shape)
    if layout == "contiguous":
        base = torch.randn(shape, device=device) * scale
    elif layout == "offset":
        base = (torch.randn(numel + 1, device=device) * scale)[1:].view(shape)
    elif layout == "strided":
        base = (torch.randn(*shape, 2, device=device) * scale)[..., 0]
    else:
        raise ValueError(layout)
    out = base.to(dtype)
    if layout == "offset":  # keep the offset through the dtype conversion
        out = torch.empty(numel + 1, device=device, dtype=dtype)[1:].view(shape).copy_(out)
    elif layout == "strided":
        out = torch.empty(*shape, 2, device=device, dtype=dtype)[..., 0].copy_(out)
    return out


def autograd_ref_grad(torch_fn: Callable[[Tensor], Tensor]):
    """ref_grad from PyTorch's own autograd on float64."""

    def ref_grad(x: Tensor, grad: Tensor, dtype: torch.dtype) -> Tensor:
        x64 = x.detach().double().cpu().requires_grad_()
        (dx,) = torch.autograd.grad(torch_fn(x64), x64, grad.double().cpu())
        return dx

    return ref_grad


class ElementwiseTests:
    """The tests every element-wise op shares; a subclass sets `spec`."""

    spec: OpSpec

    @pytest.mark.parametrize("layout", LAYOUTS)
    @pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)) or "scalar")
    @pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
    def test_values_and_gradients(self, device, dtype, shape, layout):
        x = make_input(shape, dtype, device, layout).requires_grad_()
        if layout == "offset":  # contiguous, but the kernels see a misaligned pointer
            assert x.is_contiguous() and x.storage_offset() == 1
        elif layout == "strided" and x.numel() > 1:
            assert not x.is_contiguous()
        y = self.spec.fn(x)
        assert y.shape == x.shape and y.dtype == dtype and y.device == x.device
        assert y.is_contiguous()
        assert_close(y, self.spec.ref(x.detach().double().cpu()), dtype)
        grad = make_input(shape, dtype, device, layout, scale=1.0)
        (dx,) = torch.autograd.grad(y, x, grad)
        assert dx.shape == x.shape and dx.dtype == dtype and dx.device == x.device
        assert_close(dx, self.spec.ref_grad(x, grad, dtype), dtype)

    @pytest.mark.parametrize("device", devices())
    @pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=lambda d: str(d)[6:])
    def test_dense_views_keep_their_layout(self, device, dtype):
        """A transposed or permuted x runs in place, in memory order (no copy), and y has x's
        strides, as PyTorch's element-wise ops give; a slice with steps is copied first (y
        contiguous). Gradients in any layout. Against float64."""
        views = [  # (view of 54 elements, whether it is dense)
            (lambda t: t.reshape(6, 9).t(), True),
            (lambda t: t.reshape(3, 2, 9).permute(2, 0, 1), True),
            (lambda t: t.reshape(2, 1, 27).transpose(0, 2), True),
            (lambda t: t.reshape(6, 9)[:, ::2], False),
        ]
        for view, dense in views:
            x = view(make_input((54,), dtype, device)).detach().requires_grad_()
            assert not x.is_contiguous()
            y = self.spec.fn(x)
            if dense:
                assert y.stride() == x.stride(), (y.stride(), x.stride())
            else:
                assert y.is_contiguous()
            assert_close(y, self.spec.ref(x.detach().double().cpu()), dtype)
            for grad in (make_input(tuple(x.shape), dtype, device, scale=1.0), torch.ones_like(y)):
                (dx,) = torch.autograd.grad(y, x, grad, retain_graph=True)
                assert_close(dx, self.spec.ref_grad(x, grad, dtype), dtype)

    @pytest.mark.parametrize("device", devices())
    @pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=lambda d: str(d)[6:])
    def test_views_that_are_not_dense(self, device, dtype):
        """Inputs that are not dense, y contiguous: those whose dimensions merge into at
        most two with rows of 128 or more are read in place as strided rows (every other column, a
        corner with offsets, a 3-D slice whose outer dimensions merge, an expanded row, a 1-D step,
        more rows than a grid's y), the rest copied first (short rows, dimensions that do not
        merge, rows whose stride is the larger). Forward, the public operator's gradient and
        <op>_forward, against float64."""
        views = [
            lambda: make_input((40, 600), dtype, device)[:, ::2],
            lambda: make_input((30, 300), dtype, device)[1:, 3:],
            lambda: make_input((5, 6, 400), dtype, device)[:, ::2, 1:],
            lambda: make_input((1, 300), dtype, device).expand(50, 300),
            lambda: make_input((3001,), dtype, device)[::3],
            lambda: make_input((70_000, 130), dtype, device)[:, 1:],
            lambda: make_input((7, 50), dtype, device)[:, ::2],
            lambda: make_input((4, 6, 300), dtype, device)[::2, ::2, ::2],
            lambda: make_input((300, 400), dtype, device)[::2].t(),
        ]
        for view in views:
            x = view().detach().requires_grad_()
            assert not is_dense(x)
            y = self.spec.fn(x)
            assert y.is_contiguous() and y.shape == x.shape
            want = self.spec.ref(x.detach().double().cpu())
            assert_close(y, want, dtype)
            y_op = self.spec.forward_op(x.detach())
            assert y_op.is_contiguous() and torch.equal(y_op, y)
            grad = make_input(tuple(x.shape), dtype, device, scale=1.0)
            (dx,) = torch.autograd.grad(y, x, grad)
            assert_close(dx, self.spec.ref_grad(x, grad, dtype), dtype)

    @pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
    def test_special_values(self, device, dtype):
        """NaN and +-inf as PyTorch has them; saturation at +-1000; signed zeros; halves."""
        x = torch.tensor(SPECIAL, dtype=dtype, device=device).requires_grad_()
        y = self.spec.fn(x)
        ref = self.spec.ref(x.detach().double().cpu())
        assert_close(y, ref, dtype)
        assert torch.equal(y.isnan().cpu(), ref.isnan())
        grad = torch.linspace(-2, 2, len(SPECIAL), dtype=dtype, device=device)
        (dx,) = torch.autograd.grad(y, x, grad)
        assert_close(dx, self.spec.ref_grad(x, grad, dtype), dtype)

    @pytest.mark.parametrize("device", devices())
    def test_gradient_of_a_sum(self, device):
        """Backward gets an expanded (stride-0) gradient from sum(): made contiguous first."""
        x = make_input((5, 9), torch.float64, device).requires_grad_()
        self.spec.fn(x).sum().backward()
        expected = self.spec.ref_grad(x, torch.ones_like(x), torch.float64)
        assert_close(x.grad, expected, torch.float64)

    @pytest.mark.parametrize("device", devices())
    def test_function_and_module(self, device):
        x = make_input((4, 6), torch.float32, device)
        y = self.spec.fn(x)
        torch.testing.assert_close(self.spec.function.apply(x), y, rtol=0, atol=0)
        torch.testing.assert_close(self.spec.module()(x), y, rtol=0, atol=0)
        for name in self.spec.exports:
            assert getattr(lltm_ext, name) is not None and name in lltm_ext.__all__

    @pytest.mark.parametrize("device", devices())
    def test_opcheck(self, device):
        for dtype in (torch.float32, torch.float64):
            x = make_input((3, 17), dtype, device)
            torch.library.opcheck(self.spec.public_op, (x.clone().requires_grad_(),))
            torch.library.opcheck(
                self.spec.public_op, (make_input((3, 17), dtype, device, "strided"),)
            )
            torch.library.opcheck(self.spec.forward_op, (x,))
            if self.spec.backward_op is not None:
                y = self.spec.forward_op(x)
                torch.library.opcheck(self.spec.backward_op, (torch.randn_like(y), y))

    @pytest.mark.parametrize("device", devices())
    @pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
    def test_torch_compile_fullgraph(self, device, backend):
        """fullgraph=True fails on any graph break; forward and backward match eager."""
        x = make_input((4, 33), torch.float32, device).requires_grad_()

        def step(x):
            return (self.spec.fn(x * 1.5) * 2).sum()

        assert_compiled_matches_eager(step, (x,), backend)

    def test_autograd_is_cpp(self):
        """The gradient comes from the public operator's C++ Autograd kernel (no Python
        autograd.Function), eagerly and through torch.ops alike."""
        x = torch.randn(5, requires_grad=True)
        for y in (self.spec.fn(x), self.spec.public_op(x)):
            node = y.grad_fn
            assert not isinstance(node, torch.autograd.function.BackwardCFunction), node
            assert "lltm_ext::elementwise::AutogradFunction" in node.name(), node.name()
        assert self.spec.fn(x.detach()).grad_fn is None
        with torch.no_grad():
            assert self.spec.fn(x).grad_fn is None

    def test_operator_alone_is_not_differentiable(self):
        """Gradients come from the public operator's autograd; backward through a bare call of an
        operator below it raises instead of silently dropping the gradient."""
        y = self.spec.forward_op(torch.randn(5, requires_grad=True))
        with pytest.raises(RuntimeError, match="not implemented"):
            y.sum().backward()

    def test_bad_dtype(self):
        with pytest.raises(RuntimeError, match=r"`x` must have a floating-point dtype.*Int"):
            self.spec.fn(torch.arange(6, dtype=torch.int32))
        with pytest.raises(RuntimeError, match=r"`x` must have a floating-point dtype.*Long"):
            self.spec.forward_op(torch.arange(6))

    def test_kernel_checks(self):
        """The operators below the public one check what it otherwise guarantees; their fake
        kernels (meta tensors) give the same messages."""
        for device in ("cpu", "meta"):
            # <op>_forward takes any layout (a contiguous result where x is not dense)
            assert self.spec.forward_op(torch.randn(3, 8, device=device)[:, ::2]).is_contiguous()
            if self.spec.backward_op is None:
                continue
            y = self.spec.forward_op(torch.randn(3, 4, device=device))
            with pytest.raises(RuntimeError, match=r"`grad` must have the strides of `output`"):
                self.spec.backward_op(torch.randn(4, 3, device=device).t(), y)
            with pytest.raises(RuntimeError, match=r"`grad` must have the shape of `output`"):
                self.spec.backward_op(torch.randn(4, 3, device=device), y)
            with pytest.raises(RuntimeError, match=r"one dtype.*`grad` is Double"):
                self.spec.backward_op(torch.randn(3, 4, dtype=torch.float64, device=device), y)
            with pytest.raises(RuntimeError, match=r"`output` must have a floating-point dtype"):
                self.spec.backward_op(
                    torch.randn(3, 4, device=device),
                    torch.ones(3, 4, dtype=torch.int64, device=device),
                )

    def test_no_entry_points_beside_the_operator(self):
        """The compiled module binds the public operator only (no forward / backward functions
        that would bypass the dispatcher)."""
        ext = load_extension(self.spec.name)
        public = {n for n in vars(ext) if not n.startswith("_")}
        assert public == {self.spec.name}, public

    def test_double_backward(self):
        """A backward kernel is not differentiable: a second derivative raises, never a wrong one.
        (round_ste's backward is the identity on the gradient, which is differentiable.)"""
        x = torch.randn(6, dtype=torch.float64, requires_grad=True)
        (g,) = torch.autograd.grad(self.spec.fn(x).sum(), x, create_graph=True)
        if self.spec.backward_op is None:
            assert not g.requires_grad  # d(sum)/dx is all ones: nothing left to differentiate
            return
        with pytest.raises(RuntimeError, match=r"second derivatives are not supported"):
            torch.autograd.grad(g.sum(), x)

    @pytest.mark.cuda
    def test_mixed_devices_in_backward(self):
        """A gradient on another device than the saved output: an error naming both."""
        if self.spec.backward_op is None:
            pytest.skip("no backward kernel: the gradient passes through unchanged")
        y = self.spec.forward_op(torch.randn(8, device="cuda"))
        with pytest.raises(
            RuntimeError, match=r"one device.*`grad` is on cpu.*`output` is on cuda"
        ):
            self.spec.backward_op(torch.randn(8), y)

    @pytest.mark.cuda
    def test_cuda_tensor_on_cpu_only_build(self):
        """Run against a CPU-only build (LLTM_EXT_CUDA=0) on a GPU machine: a clear error."""
        if cuda_built(self.spec.name):
            pytest.skip("this build has CUDA kernels; a CPU-only build on a GPU machine runs this")
        with pytest.raises(RuntimeError, match=r"built without CUDA support"):
            self.spec.fn(torch.randn(4, device="cuda"))

    @pytest.mark.cuda
    def test_cuda_current_stream(self):
        """Work goes on the current stream; 5M elements (many blocks, a tail after a pack)."""
        x = make_input((5_000_011,), torch.float32, "cuda")
        expected = self.spec.fn(x)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            got = self.spec.fn(x)
        torch.cuda.current_stream().wait_stream(side)
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
        assert_close(got, self.spec.ref(x.double().cpu()), torch.float32)

    @pytest.mark.cuda
    @pytest.mark.large
    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
    def test_cuda_more_than_2_31_elements(self, dtype):
        """2^31 + 3 elements (4 GiB per tensor): 64-bit indexing, aligned and misaligned."""
        n = 2**31 + 3
        if torch.cuda.mem_get_info()[0] < 6 * n * 2:
            pytest.skip("needs about 24 GiB of free GPU memory")
        tol = TOLERANCES[dtype]
        chunk = 2**28

        def check(got: Tensor, want_fn: Callable[..., Tensor], *inputs: Tensor) -> None:
            assert got.numel() == n
            for i in range(0, n, chunk):
                parts = [t[i : i + chunk] for t in inputs]
                torch.testing.assert_close(got[i : i + chunk], want_fn(*parts), **tol)

        storage = torch.randn(n + 1, device="cuda", dtype=dtype)
        for x in (storage[:n], storage[1:]):  # 16-byte aligned, then not
            y = self.spec.fn(x)
            check(y, self.spec.same_dtype, x)
            if self.spec.backward_same_dtype is not None:
                grad = torch.randn_like(y)
                dx = self.spec.backward_op(grad, y)
                check(dx, self.spec.backward_same_dtype, grad, y)
                del grad, dx
            del y
