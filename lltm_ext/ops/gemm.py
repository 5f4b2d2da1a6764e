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
are (or, for a large product, reads them slowly: rows that start inside 32-byte sectors); or, on
Hopper and on every GPU from sm_80 on, the mma.sync kernel, which reads operands of any alignment
(16-byte cp.async copies where rows allow, register-staged loads where not) and splits K for
skinny and long-K products. Row-major and transposed (column-major) operands are read in place,
so the backward products ``grad_a = grad_c @ b.T`` and ``grad_b = a.T @ grad_c`` copy nothing
(wgmma's copies aside). float16 / bfloat16 accumulate in float32, float64 in float64. float32
follows PyTorch's setting for its own matmuls exactly as ``torch.mm`` does: exact float32 (SIMT
kernels) under ``torch.get_float32_matmul_precision()`` "highest", the default; TF32 tensor cores
(float32 accumulation) under "high" / "medium" or ``torch.backends.cuda.matmul.allow_tf32 = True``,
planned as the half types are (wgmma's tf32 form reads K-major operands only, so the others are
copied K-major for it). Where no tensor-core kernel runs (before sm_80) the result is exact
float32. ``LLTM_EXT_GEMM_TF32=0`` in the environment turns TF32 off (debugging).

The path of a call: ``gemm(a, b)`` -> the operator ``torch.ops.lltm_ext.gemm`` (``gemm_out`` for
``out=``), called through its module's binding (``lltm_ext._gemm.gemm``: PyTorch's C++ dispatcher,
without ``torch.ops``'s Python-side argument boxing, a third of a small product's time on the
CPU; torch.compile sees the operator), registered by ``src/gemm/gemm.cpp`` with its autograd in
C++ (both gradients are ``gemm`` calls; ``gemm_out`` is not differentiable) -> its checks, operand
layouts and CPU/CUDA dispatch -> the kernels in ``src/gemm/``. Eager and compiled calls run the
same path.
"""

import functools

import torch
from torch import Tensor
from torch.overrides import handle_torch_function, has_torch_function_variadic

from lltm_ext._extension import load_ops, operator_call, register_fake
from lltm_ext.ops._checks import (
    check_dim,
    check_floating,
    check_like,
    check_shape,
    describe,
)

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
    """The checks the C++ op makes (``check_operands`` in src/gemm/gemm.cpp), in its order and with
    its messages, for fake tensors (torch.compile tracing) and meta tensors."""
    check_floating(a, "a")
    check_floating(b, "b")
    check_dim(a, "a", 2)
    check_dim(b, "b", 2)
    check_like(b, "b", a, "a")
    torch._check(
        b.shape[0] == a.shape[1],
        lambda: (
            f"lltm_ext.gemm: `b` must have a.size(1) = {a.shape[1]} rows (a is M x K, b is K x N), "
            f"but got a {describe(b)} for a {describe(a)}."
        ),
    )
    torch._check(
        all(size < 2**31 for size in (*a.shape, *b.shape)),
        lambda: (
            "lltm_ext.gemm: each of M, N and K must be below 2^31, but got a "
            f"{describe(a)} and a {describe(b)}."
        ),
    )


def _dense(t: Tensor) -> bool:
    """Whether `t`'s elements fill a block of memory each once (ATen's
    ``is_non_overlapping_and_dense``): its strides, size-1 dimensions aside and in increasing
    order, are those of a contiguous tensor of some order of its dimensions."""
    expected = 1
    for size, stride in sorted(
        ((size, stride) for size, stride in zip(t.shape, t.stride(), strict=True) if size != 1),
        key=lambda dim: dim[1],
    ):
        if stride != expected:
            return False
        expected *= size
    return True


def _shares_memory(out: Tensor, t: Tensor) -> bool:
    """Whether ``at::get_overlap_status(out, t)`` is Full or Partial: one tensor, or two dense
    tensors of one storage whose bytes overlap (TooHard, for tensors with gaps, passes)."""
    if out is t:
        return True
    if out.untyped_storage()._cdata != t.untyped_storage()._cdata:
        return False
    if out.numel() == 0 or t.numel() == 0:
        return False
    if not (_dense(out) and _dense(t)):
        return False
    out_begin, t_begin = out.storage_offset() * out.itemsize, t.storage_offset() * t.itemsize
    out_end, t_end = out_begin + out.numel() * out.itemsize, t_begin + t.numel() * t.itemsize
    return bool(out_begin < t_end and t_begin < out_end)


def _check_fake_out(out: Tensor, a: Tensor, b: Tensor) -> None:
    """``check_out`` in src/gemm/gemm.cpp: `out` like `a`, (M, N), no element stored twice, no
    memory shared with `a` or `b`."""
    check_like(out, "out", a, "a")
    check_shape(out, "out", (a.shape[0], b.shape[1]))
    torch._check(
        not any(st == 0 and size > 1 for st, size in zip(out.stride(), out.shape, strict=True)),
        lambda: (
            "lltm_ext.gemm: `out` must not have elements that share memory (an expanded or "
            f"otherwise self-overlapping view), but got a {describe(out)} with strides "
            f"{list(out.stride())}."
        ),
    )
    for name, t in (("a", a), ("b", b)):
        torch._check(not _shares_memory(out, t), functools.partial(_shared_message, name, out))


def _shared_message(name: str, out: Tensor) -> str:
    return (
        f"lltm_ext.gemm: `out` must not share memory with `{name}`, but it does (got a "
        f"{describe(out)})."
    )


@register_fake(_ops, "lltm_ext::gemm")
def _(a, b):
    _check_fake(a, b)
    return a.new_empty((a.shape[0], b.shape[1]))


@register_fake(_ops, "lltm_ext::gemm_out")
def _(a, b, out):
    _check_fake(a, b)
    _check_fake_out(out, a, b)


class GemmFunction:
    """The name of the GEMM's former autograd.Function: ``GemmFunction.apply(a, b) -> c`` is
    :func:`gemm` (the autograd is C++, in the operator ``torch.ops.lltm_ext.gemm``: ``grad_a =
    grad_c @ b.T``, ``grad_b = a.T @ grad_c``, each a ``gemm`` call on transposed views, itself
    differentiable under ``create_graph=True``)."""

    @staticmethod
    def apply(a: Tensor, b: Tensor) -> Tensor:
        return gemm(a, b)


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
