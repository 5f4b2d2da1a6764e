"""Matrix multiply ``c = a @ b`` on lltm_ext's own kernels (no cuBLAS, no ``at::mm``).

Shapes: ``a`` (M, K), ``b`` (K, N) -> ``c`` (M, N). CPU: by shape, packed register tiles, rows of C
streaming B in place, or dot products along K, in whichever orientation costs less (C or C^T), on
the threads of ATen's pool (docs/gemm_cpu.md). CUDA: a product with a side of at most 4 (M or N)
runs on matrix-vector kernels in every dtype (the large operand read once, at memory speed), but
for a side of 2 to 4 over an M- / N-contiguous operand in the tensor cores' dtypes (their K splits).
Otherwise float32 and float64 run on a tiled SIMT kernel (shared-memory tiles, register-blocked
outer products, split-K for small grids), and bfloat16 / float16 on the tensor cores, where a
planner picks per call: on Hopper GPUs (sm_90a builds) the wgmma kernel (TMA loads,
warp-specialized, persistent), its operands first copied aligned where TMA cannot read them as they
are; or, on Hopper and on every GPU from sm_80 on, the mma.sync kernel, which reads operands of any
alignment (16-byte cp.async copies where rows allow, register-staged loads where not) and splits K
for skinny and long-K products. Row-major and transposed (column-major) operands are read in place,
so the backward products ``grad_a = grad_c @ b.T`` and ``grad_b = a.T @ grad_c`` copy nothing
(wgmma's copies aside). float16 / bfloat16 accumulate in float32, float64 in float64. float32
follows PyTorch's setting for its own matmuls exactly as ``torch.mm`` does: exact float32 (SIMT
kernels) under ``torch.get_float32_matmul_precision()`` "highest", the default; TF32 tensor cores
(float32 accumulation) under "high" / "medium" or ``torch.backends.cuda.matmul.allow_tf32 = True``,
planned as the half types are (wgmma's tf32 form reads K-major operands only, so the others are
copied K-major for it). Where no tensor-core kernel runs (before sm_80) the result is exact
float32. ``LLTM_EXT_GEMM_TF32=0`` in the environment turns TF32 off (debugging).

The path of a call: ``gemm(a, b)`` -> ``GemmFunction`` (only where an input needs a gradient) ->
the operator ``lltm_ext::gemm`` (``gemm_out`` for ``out=``), registered by ``src/gemm/gemm.cpp``
(checks, operand layouts, CPU/CUDA dispatch) -> the kernels in ``src/gemm/``. The operator is
called through its module's binding (``lltm_ext._gemm.gemm``: PyTorch's C++ dispatcher, without
``torch.ops``'s Python-side argument boxing, a third of a small product's time on the CPU), which
torch.compile sees as ``torch.ops.lltm_ext.gemm``: eager and compiled calls run the same operator.
"""

from typing import Any

import torch
from torch import Tensor
from torch.overrides import handle_torch_function, has_torch_function_variadic

from lltm_ext._extension import load_ops, operator_call, register_fake
from lltm_ext.ops._checks import check_floating, check_like

__all__ = ["GemmFunction", "gemm"]

_ops = load_ops("gemm")
gemm_op = _ops.gemm.default
"""``gemm_op(a, b) -> c``: c (M, N) = a (M, K) @ b (K, N), a new contiguous tensor."""
gemm_out_op = _ops.gemm_out.default
"""``gemm_out_op(a, b, out) -> None``: out (M, N) = a @ b, written in place."""
# The same operators, called through the C++ dispatcher (what torch.compile sees: gemm_op and
# gemm_out_op themselves).
_gemm_call = operator_call("gemm", "gemm", gemm_op)
_gemm_out_call = operator_call("gemm", "gemm_out", gemm_out_op)


def _check_fake(a: Tensor, b: Tensor) -> None:
    """The checks the C++ op makes, in its order, for fake tensors (torch.compile tracing) and
    meta tensors."""
    check_floating(a, "a")
    check_floating(b, "b")
    torch._check(a.dim() == 2, lambda: f"lltm_ext.gemm: `a` must be 2-D, but got shape {a.shape}")
    torch._check(b.dim() == 2, lambda: f"lltm_ext.gemm: `b` must be 2-D, but got shape {b.shape}")
    check_like(b, "b", a, "a")
    torch._check(
        a.shape[1] == b.shape[0],
        lambda: f"lltm_ext.gemm: `b` must have a.size(1) = {a.shape[1]} rows, got {b.shape}",
    )


@register_fake(_ops, "lltm_ext::gemm")
def _(a, b):
    _check_fake(a, b)
    return a.new_empty((a.shape[0], b.shape[1]))


@register_fake(_ops, "lltm_ext::gemm_out")
def _(a, b, out):
    _check_fake(a, b)
    check_like(out, "out", a, "a")
    torch._check(
        tuple(out.shape) == (a.shape[0], b.shape[1]),
        lambda: f"lltm_ext.gemm: `out` must have shape {(a.shape[0], b.shape[1])}, got {out.shape}",
    )


class GemmFunction(torch.autograd.Function):
    """Autograd for ``c = a @ b``: ``GemmFunction.apply(a, b)`` with a (M, K), b (K, N).

    Backward: ``grad_a = grad_c @ b.T`` (M, K) and ``grad_b = a.T @ grad_c`` (K, N), each one
    call of the same kernels on transposed views (no copies). Under ``create_graph=True`` these
    are ``GemmFunction`` calls themselves, so higher-order gradients work too.
    """

    @staticmethod
    def forward(ctx: Any, a: Tensor, b: Tensor) -> Tensor:
        ctx.save_for_backward(a, b)
        return _gemm_call(a, b)

    @staticmethod
    def backward(ctx: Any, grad_c: Tensor) -> tuple[Tensor | None, Tensor | None]:
        a, b = ctx.saved_tensors
        # Grad mode is on here only under create_graph=True: then the products must be
        # differentiable themselves.
        mm = GemmFunction.apply if torch.is_grad_enabled() else _gemm_call
        grad_a = mm(grad_c, b.t()) if ctx.needs_input_grad[0] else None
        grad_b = mm(a.t(), grad_c) if ctx.needs_input_grad[1] else None
        return grad_a, grad_b


def gemm(a: Tensor, b: Tensor, *, out: Tensor | None = None) -> Tensor:
    """Matrix product ``c = a @ b``.

    Args:
        a: (M, K) matrix.
        b: (K, N) matrix, same dtype and device as ``a`` (may be ``a`` itself).
        out: optional (M, N) tensor of the same dtype and device, written and returned. Like
            ``torch.mm(..., out=)``, it does not take part in autograd.

    Returns:
        c: (M, N), a new contiguous tensor (or ``out``).

    Any M, N, K >= 0 (K = 0 gives zeros). Dtypes float32 (exact, or TF32 on tensor cores (sm_80 and
    newer) where PyTorch's float32 matmul precision allows it, as for ``torch.mm``), float64,
    float16 and bfloat16 (accumulated in float32), on the CPU or a CUDA device. Row-major and
    transposed (e.g. ``x.t()``) operands are read without copies (except where the planner copies
    them for the wgmma kernel: see the module notes); other strides are made contiguous.
    Differentiable in ``a`` and ``b`` when ``out`` is not given.
    """
    if has_torch_function_variadic(a, b, out):  # tensor subclasses and modes see lltm_ext.gemm
        return handle_torch_function(gemm, (a, b, out), a, b, out=out)
    if out is None:
        if b is a:  # a @ a: torch.compile needs distinct tensors
            b = b.view_as(b)
        if (a.requires_grad or b.requires_grad) and torch.is_grad_enabled():
            return GemmFunction.apply(a, b)
        # Nothing to differentiate: the operator alone (autograd.Function's own cost is most of the
        # time of a small product on the CPU: docs/decisions.md#gemm-no-grad-call).
        return _gemm_call(a, b)
    if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad or out.requires_grad):
        names = [f"`{n}`" for n, t in (("a", a), ("b", b), ("out", out)) if t.requires_grad]
        raise RuntimeError(
            "lltm_ext.gemm(..., out=...) does not support automatic differentiation, but "
            f"{' and '.join(names)} {'requires' if len(names) == 1 else 'require'} grad; call it "
            "without `out` (or under torch.no_grad())."
        )
    _gemm_out_call(a, b, out)
    return out
