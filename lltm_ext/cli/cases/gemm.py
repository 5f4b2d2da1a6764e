"""``lltm-ext bench`` cases of the GEMM (:mod:`lltm_ext.ops.gemm`): ``lltm_ext.gemm`` against
``torch.mm`` (cuBLAS on CUDA, MKL/oneDNN on the CPU), per dtype and operand layout."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from lltm_ext._extension import load_extension
from lltm_ext.cli.bench import BenchCase
from lltm_ext.ops.gemm import gemm

BENCH_OPS = ("gemm",)
"""The `op` names of this module's bench cases."""

# (M, N, K, layout): "nn" a @ b; "nt" a @ b.T and "tn" a.T @ b are backward's layouts (grad_a =
# grad_c @ b.T, grad_b = a.T @ grad_c), read in place from transposed views.
_CUDA_SHAPES = [
    (1024, 1024, 1024, "nn"),
    (4096, 4096, 4096, "nn"),
    (8192, 8192, 8192, "nn"),
    (4096, 1024, 4096, "nn"),
    (8192, 8192, 1024, "nn"),
    (4096, 4096, 4096, "nt"),
    (4096, 4096, 4096, "tn"),
]
_CUDA_QUICK = [(1024, 1024, 1024, "nn"), (4096, 4096, 4096, "nn")]
# float32 with TF32 allowed (torch.backends.cuda.matmul.allow_tf32), both sides.
_CUDA_TF32_SHAPES = [
    (4096, 4096, 4096, "nn"),
    (8192, 8192, 8192, "nn"),
    (4096, 4096, 4096, "nt"),
    (4096, 4096, 4096, "tn"),
]
_CPU_SHAPES = [(256, 256, 256, "nn"), (512, 512, 512, "nn"), (1024, 1024, 1024, "nn")]
_CPU_SHAPES += [(1024, 256, 1024, "nn")]
_CPU_QUICK = [(256, 256, 256, "nn"), (512, 512, 512, "nn")]


def _tf32(fn: Callable[[], Any], allow: bool) -> Callable[[], Any]:
    """fn run with TF32 matmuls allowed or not (torch.mm: cuBLAS TF32 or SGEMM; lltm_ext.gemm:
    its tf32 wgmma or mma.sync kernel where one runs, or exact float32), the caller's setting
    restored."""

    def run() -> Any:
        saved = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = allow
        try:
            return fn()
        finally:
            torch.backends.cuda.matmul.allow_tf32 = saved

    return run


def _no_tf32(fn: Callable[[], Any]) -> Callable[[], Any]:
    """fn run with TF32 matmuls off (cuBLAS SGEMM for torch.mm), the caller's setting restored."""
    return _tf32(fn, False)


_HALF_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16"}


def _half_path(fn: Callable[[], Any], path: str) -> Callable[[], Any]:
    """fn run with lltm_ext's bfloat16 / float16 (and float32-with-TF32) path forced to `path`,
    then back to LLTM_EXT_GEMM_HALF_PATH's setting (else auto)."""

    def run() -> Any:
        ext = load_extension("gemm")
        ext._set_gemm_half_path(path)
        try:
            return fn()
        finally:
            ext._set_gemm_half_path(os.environ.get("LLTM_EXT_GEMM_HALF_PATH", "auto"))

    return run


def _forced_mma_differs() -> bool:
    """Whether the mma.sync path can run on the current GPU but is not what it runs by default
    (Hopper with sm_90a code: wgmma): then the bench adds rows that force it."""
    ext = load_extension("gemm")
    try:
        default = ext._gemm_half_path()
        ext._set_gemm_half_path("mma")
        ext._gemm_half_path()
    except RuntimeError:
        return False
    finally:
        ext._set_gemm_half_path(os.environ.get("LLTM_EXT_GEMM_HALF_PATH", "auto"))
    return default != "mma"


def benchmarks(device: torch.device, quick: bool) -> list[BenchCase]:
    """float32 GEMM vs ``torch.mm`` (cuBLAS SGEMM with TF32 off on CUDA; MKL/oneDNN on the CPU);
    on CUDA also bfloat16 and float16 vs ``torch.mm`` (cuBLAS on tensor cores) on the same
    shapes and layouts, and float32 with TF32 allowed on both sides (``lltm_ext.gemm`` runs these
    on the tensor-core kernels the planner picks where the GPU and the build allow, on the SIMT
    kernel otherwise).
    Where the GPU runs wgmma by default but could run the mma.sync kernel (an H100 / H200), rows
    ``bf16_mma`` / ``fp16_mma`` / ``tf32_mma`` force the latter, against the same cuBLAS
    reference (TF32 allowed on both sides for ``tf32_mma``)."""
    if device.type == "cuda":
        shapes = _CUDA_QUICK if quick else _CUDA_SHAPES
        dtypes = (torch.float32, torch.bfloat16, torch.float16)
        runs = [(d, s, False, False) for d in dtypes for s in shapes]
        tf32_shapes = _CUDA_QUICK if quick else _CUDA_TF32_SHAPES
        runs += [(torch.float32, s, True, False) for s in tf32_shapes]
        if _forced_mma_differs():
            runs += [(d, s, False, True) for d in dtypes[1:] for s in shapes]
            runs += [(torch.float32, s, True, True) for s in shapes]
    else:
        runs = [(torch.float32, s, False, False) for s in (_CPU_QUICK if quick else _CPU_SHAPES)]
    cases = []
    for dtype, (m, n, k, layout), tf32, mma in runs:
        gen = torch.Generator(device=device).manual_seed(m * 31 + n * 7 + k)
        # a (M x K) and b (K x N), each row-major or a transposed view of a row-major matrix.
        kw: dict[str, Any] = dict(device=device, generator=gen, dtype=dtype)
        a = torch.randn(k, m, **kw).t() if layout[0] == "t" else torch.randn(m, k, **kw)
        b = torch.randn(n, k, **kw).t() if layout[1] == "t" else torch.randn(k, n, **kw)
        c_ours = torch.empty(m, n, device=device, dtype=dtype)
        c_ref = torch.empty(m, n, device=device, dtype=dtype)

        def call_ours(a=a, b=b, c=c_ours):
            return gemm(a, b, out=c)

        def call_ref(a=a, b=b, c=c_ref):
            return torch.mm(a, b, out=c)

        ours: Callable[[], Any] = call_ours  # wrapped below by the TF32 and path settings
        ref: Callable[[], Any] = call_ref

        ref_name, notes_extra = "torch.mm", ""
        if tf32:
            ours, ref = _tf32(ours, True), _tf32(ref, True)
            case, ref_name = "tf32", "torch.mm (cuBLAS, TF32)"
            notes_extra = "; TF32 on both sides"
            if mma:
                ours, case = _half_path(ours, "mma"), "tf32_mma"
                notes_extra += "; lltm_ext's mma.sync path forced"
        elif dtype == torch.float32:
            case = "fp32"
            if device.type == "cuda":
                ref, case, ref_name = _no_tf32(ref), "fp32_notf32", "torch.mm (cuBLAS, TF32 off)"
        else:
            case, ref_name = _HALF_NAMES[dtype], "torch.mm (cuBLAS)"
            if mma:
                ours, case = _half_path(ours, "mma"), case + "_mma"
                notes_extra = "; lltm_ext's mma.sync path forced"
        cases.append(
            BenchCase(
                op="gemm",
                case=case + ("" if layout == "nn" else f"_{layout}"),
                dtype=dtype,
                size=f"{m}x{n}x{k}",
                ours=ours,
                ref=ref,
                ref_name=ref_name,
                flops=2 * m * n * k,
                notes="M x N x K"
                + {"nn": "", "nt": ", a @ b.T", "tn": ", a.T @ b"}[layout]
                + notes_extra,
            )
        )
    return cases
