"""compute-sanitizer initcheck and lltm_ext.gemm's TMA stores: what it reports, and why.

On Hopper, lltm_ext.gemm's wgmma kernel (src/gemm/tiles/kernel_sm90.cuh) stores C with the bulk
tensor copy engine (TMA, cp.async.bulk.tensor) where C's base and rows are 16-byte aligned, and with
ordinary per-thread stores otherwise. initcheck of CUDA 13.0 (compute-sanitizer 2025.3.1, which has
no --check-tensor-ops) does not see TMA stores: memory that only a TMA store wrote counts as never
written, so the first ordinary kernel that reads it (PyTorch's copy, a reduction) is reported, one
report per 32 bytes, although every element was written and is right.

    compute-sanitizer --tool initcheck python3 tools/sanitize/initcheck_tma_store_repro.py CASE

    backward            the case reported: c = gemm(a.T, b) and c.backward(g) with TF32 allowed,
                        at 256x512x384 and 1000x520x776; then PyTorch reads c and the gradients
                        (autograd's AccumulateGrad copies d(a.T).T into a's layout: the copy
                        kernel in the reports)
    fwd:M,K,N:AB:OUT    one product, A and B plain (n) or transposed views (t), into a new
                        tensor (OUT new), into out= a view one element past an aligned base
                        (unaligned: the same kernel stores per thread), or into out= a tensor
                        filled first (prefilled: TMA stores over memory a seen kernel wrote)

On the H200 (driver 580.159.04, torch 2.11.0+cu130, LLTM_EXT_GEMM_HALF_PATH=wgmma, TF32 allowed,
2026-11-29), fwd:1000,520,776 reported 97,000 errors for each of nn, tn and nt into a new tensor
(one per 32-byte sector of C: every element), and 0 unaligned, 0 prefilled, 0 with the mma.sync
kernel (LLTM_EXT_GEMM_HALF_PATH=mma, per-thread stores); fwd:512,384,256:nn:new 16,384 (every
sector) and :unaligned 0 with PYTORCH_NO_CUDA_MEMORY_CACHING=1. Without that variable a small C
often lands on memory that PyTorch's allocator had handed to a kernel initcheck sees, and nothing
is reported. backward: 771 errors (initcheck keeps about 256 a launch) with the planner's choice,
0 with mma; LLTM_EXT_TRACE=1 prints each operator's tensors, and every reported address lay in a
tensor that lltm_ext.gemm returned. Every case's result is within TF32's error of float64 (2.9e-4).

So initcheck's reports after lltm_ext.gemm on Hopper are the sanitizer not seeing TMA stores, not
reads of unwritten memory. tools/sanitize/sanitize.sh runs initcheck over the wgmma kernel with its
C prefilled (--prefilled-tma-outputs; a NaN fill, so a missed element still fails the check) where
the sanitizer has no --check-tensor-ops.
"""

from __future__ import annotations

import os
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import lltm_ext


class Trace(TorchDispatchMode):
    """With LLTM_EXT_TRACE=1: each operator run, with its tensors' address ranges (to find which
    tensor a sanitizer report's address lies in)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if os.environ.get("LLTM_EXT_TRACE") == "1":

            def ranges(x: object) -> list[str]:
                flat = x if isinstance(x, (list, tuple)) else [x]
                return [
                    f"{t.data_ptr():#x}+{t.untyped_storage().nbytes()} {tuple(t.shape)}"
                    f"{'' if t.is_contiguous() else ' strided'}"
                    for t in flat
                    if isinstance(t, torch.Tensor) and t.is_cuda
                ]

            print(f"  op {func}: in {ranges(list(args))} -> out {ranges(out)}", flush=True)
        return out


def check(name: str, got: torch.Tensor, ref: torch.Tensor) -> None:
    err = ((got.double() - ref).norm() / ref.norm()).item()
    print(f"  {name}: relative error {err:.1e} against float64")
    assert err < 5e-3, f"{name}: relative error {err} (TF32 is near 3e-4)"


def main(case: str) -> None:
    torch.set_float32_matmul_precision("high")
    gen = torch.Generator(device="cuda").manual_seed(0)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device="cuda", generator=gen)

    if case == "backward":
        for k, m, n in ((256, 512, 384), (1000, 520, 776)):  # a is (K, M): a.T @ b
            a = randn(k, m).requires_grad_()
            b = randn(k, n).requires_grad_()
            with Trace():
                c = lltm_ext.gemm(a.t(), b)
                g = randn(m, n)
                c.backward(g)
                torch.cuda.synchronize()
            a64, b64, g64 = a.detach().double(), b.detach().double(), g.double()
            check(f"{m}x{k}x{n} c", c.detach(), a64.t() @ b64)
            assert a.grad is not None and b.grad is not None
            check(f"{m}x{k}x{n} d a", a.grad, (g64 @ b64.t()).t())
            check(f"{m}x{k}x{n} d b", b.grad, a64 @ g64)
    elif case.startswith("fwd:"):  # fwd:M,K,N:LAYOUT:OUT, LAYOUT nn/tn/nt (a or b transposed)
        _, size, layout, where = case.split(":")
        m, k, n = (int(v) for v in size.split(","))
        x = randn(k, m).t() if layout[0] == "t" else randn(m, k)
        w = randn(n, k).t() if layout[1] == "t" else randn(k, n)
        ref = x.double() @ w.double()
        if where == "new":
            c = lltm_ext.gemm(x, w)
        elif where == "unaligned":
            c = torch.empty(m * n + 1, device="cuda")[1:].view(m, n)
            lltm_ext.gemm(x, w, out=c)
        elif where == "prefilled":
            c = torch.full((m, n), float("nan"), device="cuda")
            lltm_ext.gemm(x, w, out=c)
        else:
            sys.exit(f"unknown OUT {where!r}: new, unaligned or prefilled")
        check(case, c.clone(), ref)
    else:
        sys.exit(f"unknown case {case!r}: backward or fwd:M,K,N:AB:OUT (see the docstring)")
    torch.cuda.synchronize()
    print(f"initcheck_tma_store_repro: {case} done")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "backward")
