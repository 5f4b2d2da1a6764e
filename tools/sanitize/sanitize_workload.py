"""The workload tools/sanitize/sanitize.sh runs under compute-sanitizer: every op, forward and
backward, in every CUDA dtype, on small edge cases, each result checked against a float64 CPU
reference.
Covered: relu, sigmoid and round_ste (sizes 0, 1, odd, tails after every vector width, more than one
block; misaligned views x[1:] into forward and backward kernels; inputs that are not dense, copied
or read as strided rows; transposed and permuted inputs, run in place), lltm
(empty batch / features, odd sizes, misaligned state and gradient tensors; the LLTM module through
SGD steps, as a user trains it), lltm_sequence (empty sequence, batch or features, odd sizes,
misaligned views, time-major and batch-first, backward through time; the fused step kernels and, on
sm_90, the cluster kernels), gemm through the public API (every layout a @ b, a @ b.T, a.T @ b, a.T
@ b.T; sizes 0, 1, odd, tile-unaligned 17 x 33 x 65; misaligned and padded operands; `out=`,
contiguous or not; split-K from the heuristic, float32 and float64; the register-staged path
forced), every float32 tile config through the tuning entry point (_gemm_with_config: with and
without split-K, and tail split-K on ragged tiles), and the Hopper tensor-core kernels (gemm_wgmma:
each block tile width forced, for bfloat16, float16 and float32 as TF32, every layout, and again
with its blocks in clusters of two sharing B (gemm_wgmma_clusters), and exact float32 in three tf32
passes (gemm_wgmma_exact: split copies, K splits, Inf / NaN operands), operands with
the 16-byte aligned rows TMA needs and M / N / K tails, C stored by TMA and element by element,
out=; tf32's K-major copies from aligned, unaligned and misaligned operands; the row copies of
the operands it copies, gemm_row_copies: 16-, 4- and 2-byte loads, rows long and short; skipped,
with a line saying so, where the wgmma path cannot run), and the sm_80+ tensor-core kernels
(gemm_mma: each block tile forced, for bfloat16, float16 and float32 as TF32 with allow_tf32 on,
every layout, 16-byte aligned rows with M / N / K tails, K % 8 != 0 (K % 4 != 0 for tf32: a partial
16-byte chunk), more tiles than SMs, C stored in pairs and element by element, out= contiguous,
transposed and misaligned, unaligned operands falling back to the SIMT kernel, autograd's transposed
views; skipped, with a line saying so, where the mma path cannot run), and the short-K kernel forced
(gemm_short_k: float32, float16, bfloat16, every layout, K within and past one staged chunk, tile
edges, operands and out= off by one element; its mma form for float16 and bfloat16 at K up to 64,
C's rows shifted off their 16-byte boundaries), and the skinny kernel (gemm_skinny: float16 and
bfloat16, a side of 1 to 32 ending inside each tile, both orientations, the weight stored (N, K) and
(K, N), 1, 3 and 8 warps with K splits and without, and through the public API), and the wgmma
kernel's narrow tiles (gemm_narrow: a side of 1 to 32, both orientations, both weight layouts, K
splits, tiles of 128 and 64 rows), the wgmma kernel's 256-row tiles (gemm_wgmma 256x152: bfloat16
and float16, B K-major, with and without K splits), and the 256-wide wgmma tile's Stream-K kernel
(gemm_stream_k:
forced on, bfloat16, float16 and TF32, every layout, a tile's parts over one to many blocks, whole
rounds before a partial one, a full round alone; the partial sums' slices and flags read and
written across blocks), and a.T @ b.T run as its transpose (gemm_swap: bfloat16 and float16, C
stored transposed by TMA and directly, forced tiles and K splits).
Under --prefilled-tma-outputs (initcheck without --check-tensor-ops, which does
not see the copy engine's stores) the wgmma kernels write only into NaN-filled out= buffers, and
the `gemm` section runs bfloat16 / float16 on the SIMT kernel.

Nothing here reads memory it did not write: inputs are made on the CPU (torch.randn) and copied
to the GPU, `out=` buffers are filled before use, and no torch.empty buffer is ever copied, so
that initcheck reports point at the ops. Every result is copied back to the CPU whole (an output
element an op failed to write is an initcheck report, "cudaMemcpy source").

Usage (from a checkout built in place): PYTHONPATH=$PWD python3 tools/sanitize/sanitize_workload.py
[--ops relu,gemm] [--dtypes float32,float16]. Exit status 0 when every check passed.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from types import ModuleType

import torch
from torch import Tensor

import lltm_ext
from lltm_ext._extension import load_extension
from lltm_ext.ops.lltm import lltm_reference

DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
# Largest error allowed against float64 references, relative to max(max |reference|, 1): loose
# (about 50 roundings of the largest value; tests/test_fuzz.py measures accuracy), but far below
# what a wrong, stale or unwritten element gives.
NORM_TOL = {torch.float64: 1e-9, torch.float32: 1e-4, torch.float16: 5e-2, torch.bfloat16: 2e-1}
# Relative Frobenius error of GEMM results (tests/test_gemm.py's REL_BOUND); float32 with TF32
# allowed: inputs rounded to 10 mantissa bits (tests/test_gemm.py's floor).
GEMM_REL = {torch.float64: 1e-13, torch.float32: 4e-6, torch.float16: 1e-3, torch.bfloat16: 6e-3}
GEMM_REL_TF32 = 2e-3

HALF = (torch.float16, torch.bfloat16)
CHECKS = 0
GEN = torch.Generator().manual_seed(0)
DEVICE = "cuda"  # --device cpu: a dry run of the workload's own logic on the CPU


def randn(*shape: int, dtype: torch.dtype, scale: float = 1.0, offset: int = 0) -> Tensor:
    """A CUDA tensor of `shape` from CPU random numbers; `offset` > 0: a view starting that many
    elements into its (fully written) storage, so contiguous but misaligned."""
    n = math.prod(shape)
    values = torch.randn(n + offset, generator=GEN, dtype=torch.float64) * scale
    return values.to(dtype).to(DEVICE)[offset:].view(shape)


def check(got: Tensor, want: Tensor, dtype: torch.dtype, what: str) -> None:
    """got (any device) matches want (float64, CPU): the same shape and NaNs, and
    max |got - want| <= NORM_TOL[dtype] max(max |want|, 1). Copies got to the CPU whole."""
    global CHECKS
    got, want = got.detach().cpu().double(), want.detach().double()
    assert got.shape == want.shape, (
        f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    )
    assert torch.equal(got.isnan(), want.isnan()), f"{what}: NaNs differ"
    if want.numel():
        got, want = got.nan_to_num(0.0), want.nan_to_num(0.0)
        err = (got - want).abs().max().item()
        bound = NORM_TOL[dtype] * max(want.abs().max().item(), 1.0)
        assert err <= bound, f"{what}: max error {err:.3e} > {bound:.3e}"
    CHECKS += 1


def check_gemm(
    c: Tensor, a: Tensor, b: Tensor, dtype: torch.dtype, what: str, bound: float | None = None
) -> None:
    global CHECKS
    bound = GEMM_REL[dtype] if bound is None else bound
    ref = a.detach().double().cpu() @ b.detach().double().cpu()
    c = c.detach().cpu().double()
    assert c.shape == ref.shape, (what, c.shape, ref.shape)
    assert torch.isfinite(c).all(), what
    denom = ref.norm().item()
    err = (c - ref).norm().item() / (denom if denom > 0 else 1.0)
    assert err <= bound, f"{what}: relative error {err:.2e} > {bound:.0e}"
    CHECKS += 1


# ---------------------------------------------------------------------------------------------
# Element-wise ops.
# ---------------------------------------------------------------------------------------------

ELEMENTWISE: dict[str, tuple[Callable[[Tensor], Tensor], Callable[[Tensor], Tensor]]] = {
    "relu": (lltm_ext.relu, torch.relu),
    "sigmoid": (lltm_ext.sigmoid, torch.sigmoid),
    "round_ste": (lltm_ext.round_ste, lambda x: torch.floor(x) + (x - torch.floor(x) >= 0.5)),
}
# 0, 1, odd sizes with a tail after every vector width (2, 4, 8 elements), more than one block.
ELEMENTWISE_SIZES = (0, 1, 3, 7, 17, 1001, 4099, 70001)


def run_elementwise(name: str, dtype: torch.dtype) -> None:
    fn, ref = ELEMENTWISE[name]
    backward_op = getattr(torch.ops.lltm_ext, f"{name}_backward", None)
    for n, offset in itertools.product(ELEMENTWISE_SIZES, (0, 1)):
        x = randn(n, dtype=dtype, scale=3.0, offset=offset).requires_grad_()
        y = fn(x)
        x64 = x.detach().double().cpu()
        check(y, ref(x64), dtype, f"{name} forward n={n} offset={offset}")
        grad = randn(n, dtype=dtype, offset=offset)
        (dx,) = torch.autograd.grad(y, x, grad)
        x64.requires_grad_()
        if name == "round_ste":
            want = grad.double().cpu()
        else:
            (want,) = torch.autograd.grad(ref(x64), x64, grad.double().cpu())
        check(dx, want, dtype, f"{name} backward n={n} offset={offset}")
        if backward_op is not None and n > 1:
            # The backward kernel (its operator) on misaligned gradient and output pointers.
            y_off = randn(n, dtype=dtype, offset=1)
            y_off.copy_(y.detach())
            dx_off = backward_op.default(grad, y_off)
            check(dx_off, dx.detach().double().cpu(), dtype, f"{name} backward misaligned n={n}")
    # Inputs that are not dense: short rows (copied contiguous first); rows of 128 or more read in
    # place as strided rows (every other column, a corner at an offset, an expanded row).
    strided = (
        randn(33, 18, dtype=dtype)[:, ::2],
        randn(33, 300, dtype=dtype)[:, ::2],
        randn(9, 7, 261, dtype=dtype)[1:, ::2, 3:],
        randn(1, 257, dtype=dtype).expand(5, 257),
    )
    for x in strided:
        x = x.detach().requires_grad_()
        y = fn(x)
        check(y, ref(x.detach().double().cpu()), dtype, f"{name} forward {list(x.stride())}")
        torch.autograd.grad(y.sum(), x)
    # Dense views (transposed, permuted) run in place, y laid out as x; backward from a gradient
    # laid out otherwise (copied as y is laid out) and from one laid out as y.
    for x in (randn(33, 17, dtype=dtype).t(), randn(3, 5, 7, dtype=dtype).permute(2, 0, 1)):
        x.requires_grad_()
        y = fn(x)
        check(y, ref(x.detach().double().cpu()), dtype, f"{name} forward {list(x.stride())}")
        for grad in (randn(*x.shape, dtype=dtype), torch.ones_like(y)):
            (dx,) = torch.autograd.grad(y, x, grad, retain_graph=True)
            if name == "round_ste":
                want = grad.double().cpu()
            else:
                x64 = x.detach().double().cpu().requires_grad_()
                (want,) = torch.autograd.grad(ref(x64), x64, grad.double().cpu())
            check(dx, want, dtype, f"{name} backward {list(x.stride())}")


# ---------------------------------------------------------------------------------------------
# LLTM.
# ---------------------------------------------------------------------------------------------

# (batch, input features, state size): the tutorial's, single elements, empty batch / features,
# odd and tile-unaligned sizes.
LLTM_SIZES = ((16, 32, 128), (1, 1, 1), (0, 4, 6), (3, 0, 5), (5, 3, 7), (17, 33, 65))


def run_lltm(dtype: torch.dtype) -> None:
    """The cell on each CUDA path (LLTM_EXT_CELL_PATH: the small cell's two kernels, then cat,
    cuBLAS and the gate kernels)."""
    old = os.environ.get("LLTM_EXT_CELL_PATH")
    try:
        for path in ("fused", "cublas") if DEVICE == "cuda" else ("auto",):
            os.environ["LLTM_EXT_CELL_PATH"] = path
            _run_lltm(dtype)
    finally:
        if old is None:
            os.environ.pop("LLTM_EXT_CELL_PATH", None)
        else:
            os.environ["LLTM_EXT_CELL_PATH"] = old


def _run_lltm(dtype: torch.dtype) -> None:
    for (batch, features, state), offset in itertools.product(LLTM_SIZES, (0, 1)):
        stdv = 1.0 / math.sqrt(state)
        args = [
            randn(batch, features, dtype=dtype, offset=offset),
            randn(3 * state, state + features, dtype=dtype, scale=stdv),
            randn(3 * state, dtype=dtype, scale=stdv, offset=offset),
            randn(batch, state, dtype=dtype, offset=offset),
            randn(batch, state, dtype=dtype, offset=offset),
        ]
        args = [a.requires_grad_() for a in args]
        new_h, new_cell = lltm_ext.lltm(*args)
        args64 = [a.detach().double().cpu().requires_grad_() for a in args]
        ref_h, ref_cell = lltm_reference(*args64)
        what = f"lltm B={batch} I={features} S={state} offset={offset}"
        check(new_h, ref_h, dtype, what + " new_h")
        check(new_cell, ref_cell, dtype, what + " new_cell")
        grads = [randn(batch, state, dtype=dtype, offset=offset) for _ in range(2)]
        ours = torch.autograd.grad((new_h, new_cell), args, grads)
        refs = torch.autograd.grad((ref_h, ref_cell), args64, [g.double().cpu() for g in grads])
        names = ("input", "weights", "bias", "old_h", "old_cell")
        for name, got, want in zip(names, ours, refs, strict=True):
            check(got, want, dtype, f"{what} grad {name}")
    # Three steps, the state carried: each step's d_old_h reaches the step before as a column
    # block of its d_X, read with a row stride.
    for batch, features, state in ((5, 3, 7), (17, 33, 65)):
        args = [
            randn(batch, features, dtype=dtype),
            randn(3 * state, state + features, dtype=dtype),
        ]
        args += [randn(3 * state, dtype=dtype), randn(batch, state, dtype=dtype)]
        args += [randn(batch, state, dtype=dtype)]
        args = [(a * 0.3).detach().requires_grad_() for a in args]
        args64 = [a.detach().double().cpu().requires_grad_() for a in args]
        outs = []
        for fn, (x, w, b, h, c) in ((lltm_ext.lltm, args), (lltm_reference, args64)):
            for _ in range(3):
                h, c = fn(x, w, b, h, c)
            outs.append((h, c))
        ours = torch.autograd.grad(outs[0][0].sum() + outs[0][1].sum(), args)
        refs = torch.autograd.grad(outs[1][0].sum() + outs[1][1].sum(), args64)
        names = ("input", "weights", "bias", "old_h", "old_cell")
        for name, got, want in zip(names, ours, refs, strict=True):
            check(got, want, dtype, f"lltm 3 steps B={batch} S={state} grad {name}")
    # Only one output used: the other's gradient is None (zeros made by the Python layer).
    args = [randn(4, 3, dtype=dtype), randn(15, 8, dtype=dtype, scale=0.4)]
    args += [randn(15, dtype=dtype, scale=0.4), randn(4, 5, dtype=dtype), randn(4, 5, dtype=dtype)]
    args = [a.requires_grad_() for a in args]
    torch.autograd.grad(lltm_ext.lltm(*args)[0].sum(), args)


def run_lltm_module(dtype: torch.dtype) -> None:
    """The user's path: LLTM modules (32 features, state 128: a (384, 160) weight) made on the
    device or moved there, a few SGD steps from a zero state, parameters and gradients copied back
    to the CPU (state_dict, logging) after each step."""
    torch.manual_seed(0)
    made_there = lltm_ext.LLTM(32, 128, device=DEVICE, dtype=dtype)
    moved = lltm_ext.LLTM(32, 128).to(DEVICE, dtype)
    for cell in (made_there, moved):
        opt = torch.optim.SGD(cell.parameters(), lr=1e-2)
        x = randn(16, 32, dtype=dtype)
        h = c = torch.zeros(16, 128, device=DEVICE, dtype=dtype)
        for step in range(3):
            params64 = [p.detach().double().cpu() for p in (cell.weights, cell.bias)]
            new_h, new_c = cell(x, (h, c))
            ref_h, ref_c = lltm_reference(
                x.double().cpu(), *params64, h.double().cpu(), c.double().cpu()
            )
            check(new_h, ref_h, dtype, f"LLTM module step {step} new_h")
            check(new_c, ref_c, dtype, f"LLTM module step {step} new_cell")
            (new_h.float().square().mean() + new_c.float().mean()).backward()
            opt.step()
            state = {k: v.cpu() for k, v in cell.state_dict().items()}
            grads = [p.grad.cpu() for p in cell.parameters()]
            assert all(t.isfinite().all() for t in (*state.values(), *grads))
            opt.zero_grad()
            h, c = new_h.detach(), new_c.detach()


# (steps, batch, input features, state size): empty sequence, empty batch, no features, single
# elements, odd and tile-unaligned sizes (the fused step kernels; the cluster kernels' partial
# batch slices, S < 8 and S not a multiple of 8; the wide-state kernels' row blocks past the batch
# and parts past K, S = 9, 65 and 518 (not multiples of 4: rows read element by element; past
# 512: x staged in two chunks for the tensor cores), and three rows of blocks, each with its own
# step barriers, over six steps; the tiled kernels at all of these, and S = 1100 (past the wide
# kernels; cuBLAS every step for the other paths)); products that cuBLAS would split into pieces
# of a few K elements, run unsplit through cuBLASLt (the projection 18 x 141 x 126, d h0 9 x 65 x
# 195, and on the cuBLAS path a step's 16 x 333 x 111 and d h0 16 x 111 x 333); the weight
# gradients' kernel over one split of T B rows (the sizes above) and three uneven ones (5 x 41).
SEQUENCE_SIZES = (
    (0, 3, 2, 4),
    (4, 0, 3, 5),
    (3, 2, 0, 4),
    (1, 1, 1, 1),
    (5, 3, 7, 9),
    (6, 17, 33, 65),
    (3, 37, 5, 100),
    (3, 5, 4, 260),
    (2, 17, 3, 518),
    (6, 40, 3, 132),
    (3, 7, 2, 93),
    (2, 5, 3, 1100),
    (9, 2, 126, 47),
    (9, 9, 169, 65),
    (5, 16, 119, 111),
    (5, 41, 6, 20),
)
# Beside those, for Hopper's float32 step product (cublas-wgmma): a row tile whose second
# warpgroup's rows are partly in (B = 70) and a second row tile of two rows (B = 130).
WGMMA_STEP_SIZES = ((2, 70, 3, 40), (2, 130, 3, 21))


def run_lltm_sequence(
    dtype: torch.dtype, only: list[str] | None = None, packed: bool = False
) -> None:
    """lltm_sequence forward and backward through time, states given (and None: zeros, with the
    output's gradient alone), misaligned (offset) views, time-major and batch-first (`packed`:
    lltm_sequence_packed over packed batches instead), against a
    loop of the float64 pure-PyTorch cell. float32 products
    at torch's default full float32 precision (the cluster and wide kernels' tensor cores in three
    TF32 passes), then on CUDA the tensor-core paths again with TF32 allowed (one pass), at
    float16's tolerance."""
    matmul = torch.backends.cuda.matmul
    allow_tf32, matmul.allow_tf32 = matmul.allow_tf32, False
    # Every path: the fused step kernels (cuBLAS past their states), cuBLAS every step, the
    # wide-state kernels, the small-state kernels (not float64), and on sm_90 the cluster
    # kernels, the wide and cluster kernels with their recurrent product on the tensor cores (the
    # half types in one pass, float32 in three and, below, with TF32 allowed in one) and on the
    # SIMT cores ("-simt").
    paths = ["grid", "cublas", "wide", "wide-simt"]
    if DEVICE == "cuda" and dtype == torch.float32:  # both step products split over K, forced:
        paths.append("cublas-own")  # on the SIMT cores
        if torch.cuda.get_device_capability() >= (8, 0):
            paths.append("cublas-tensor")  # 3xTF32 on the tensor cores
        if torch.cuda.get_device_capability() == (9, 0):
            paths.append("cublas-wgmma")  # 3xTF32 on Hopper's wgmma, the input products too
    if DEVICE == "cuda" and dtype != torch.float64:
        paths.append("small")
    if DEVICE == "cuda" and torch.cuda.get_device_capability() == (9, 0):
        if dtype != torch.float64:  # the tiled kernels: the planner's tile, one m-tile a block,
            paths += ["tiled", "tiled-1", "tiled-ring6"]  # and a ring of x six stages deep
    if DEVICE == "cuda" and torch.cuda.get_device_capability() >= (9, 0):
        paths += ["cluster", "cluster-simt"]
    if only:  # --sequence-paths: these of the paths that apply
        paths = [p for p in paths if p in only]
    keys = (
        "LLTM_EXT_SEQUENCE_PATH",
        "LLTM_EXT_SEQUENCE_PRODUCT",
        "LLTM_EXT_SEQUENCE_CLUSTER_ROWS",
        "LLTM_EXT_SEQUENCE_CLUSTER_BLOCKS",
        "LLTM_EXT_SEQUENCE_TILED_TILES",
        "LLTM_EXT_SEQUENCE_TILED_STAGES",
        "LLTM_EXT_SEQUENCE_STEP_GEMM",
        "LLTM_EXT_SEQUENCE_INPUT_GEMM",
    )
    old = {k: os.environ.get(k) for k in keys}
    run = _run_lltm_sequence_packed if packed else _run_lltm_sequence
    try:
        for path in paths:
            base, _, product = path.partition("-")
            os.environ["LLTM_EXT_SEQUENCE_PATH"] = base
            # "tiled-1": the tiled kernels' tile held to one m-tile (more rows of blocks);
            # "tiled-ring6": six stages of x's ring (every chunk of K <= 1280 in flight at once)
            os.environ["LLTM_EXT_SEQUENCE_TILED_TILES"] = product if path == "tiled-1" else ""
            os.environ["LLTM_EXT_SEQUENCE_TILED_STAGES"] = "6" if path == "tiled-ring6" else ""
            os.environ["LLTM_EXT_SEQUENCE_STEP_GEMM"] = product if base == "cublas" else ""
            # The products over all steps (x W_i^T, dG W_i) on the same Hopper kernel.
            os.environ["LLTM_EXT_SEQUENCE_INPUT_GEMM"] = "tensor" if path == "cublas-wgmma" else ""
            product = "" if base in ("tiled", "cublas") else product
            os.environ["LLTM_EXT_SEQUENCE_PRODUCT"] = product or "auto"
            # The cluster kernels' tensor cores take slices of 8 or 16 rows: 16 forced there.
            os.environ["LLTM_EXT_SEQUENCE_CLUSTER_ROWS"] = "16" if base == "cluster" else ""
            # Clusters of 4 blocks on the SIMT cores, in 2-row slices (16 rows would not fit a
            # block's threads at S = 132); the rule's size elsewhere.
            few_blocks = path == "cluster-simt"
            os.environ["LLTM_EXT_SEQUENCE_CLUSTER_BLOCKS"] = "4" if few_blocks else ""
            if few_blocks:
                os.environ["LLTM_EXT_SEQUENCE_CLUSTER_ROWS"] = "2"
            run(dtype, path)
        if dtype == torch.float32 and DEVICE == "cuda":  # the float32 tensor-core products
            matmul.allow_tf32 = True
            os.environ["LLTM_EXT_SEQUENCE_PRODUCT"] = "auto"
            for path in [p for p in paths if p in ("wide", "cluster", "tiled")]:
                os.environ["LLTM_EXT_SEQUENCE_PATH"] = path
                os.environ["LLTM_EXT_SEQUENCE_TILED_TILES"] = ""
                os.environ["LLTM_EXT_SEQUENCE_TILED_STAGES"] = ""
                os.environ["LLTM_EXT_SEQUENCE_CLUSTER_ROWS"] = "16" if path == "cluster" else ""
                os.environ["LLTM_EXT_SEQUENCE_CLUSTER_BLOCKS"] = ""
                run(dtype, path + "-tf32")
    finally:
        matmul.allow_tf32 = allow_tf32
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _run_lltm_sequence(dtype: torch.dtype, path: str) -> None:
    # TF32 products keep float16's 10 mantissa bits: checked at float16's tolerance.
    tol = torch.float16 if path.endswith("-tf32") else dtype
    # offset 1: misaligned views, batch-first; zero_state: state=None (no h0 or c0 tensor: the
    # kernels read zeros) and gradients from the output alone (none for h_n, c_n).
    variants = ((0, False), (1, False), (0, True))
    sizes = SEQUENCE_SIZES + (WGMMA_STEP_SIZES if path == "cublas-wgmma" else ())
    for (steps, batch, features, state), (offset, zero_state) in itertools.product(sizes, variants):
        if path != "grid" and steps * batch == 0:
            continue  # no kernel runs: the grid pass covered it
        if (
            (path.startswith("cluster") and state > 256)
            or (path == "small" and state > (96 if dtype == torch.float32 else 88))
            or (path.startswith("wide") and state > 1024)
        ):
            continue  # the path does not apply (forced, it raises)
        stdv = 1.0 / math.sqrt(state)
        args = [
            randn(steps, batch, features, dtype=dtype, offset=offset),
            randn(3 * state, state + features, dtype=dtype, scale=stdv),
            randn(3 * state, dtype=dtype, scale=stdv, offset=offset),
            randn(batch, state, dtype=dtype, offset=offset),
            randn(batch, state, dtype=dtype, offset=offset),
        ]
        if zero_state:
            args[3], args[4] = args[3].zero_(), args[4].zero_()  # the reference's state
        args = [a.requires_grad_() for a in args]
        batch_first = offset == 1
        x = args[0].transpose(0, 1) if batch_first else args[0]
        state_arg = None if zero_state else (args[3], args[4])
        output, (h_n, c_n) = lltm_ext.lltm_sequence(
            x, args[1], args[2], state_arg, batch_first=batch_first
        )
        if batch_first:
            output = output.transpose(0, 1)
        args64 = [a.detach().double().cpu().requires_grad_() for a in args]
        xs, w, b, h, c = args64
        ref_steps = []
        for t in range(steps):
            h, c = lltm_reference(xs[t], w, b, h, c)
            ref_steps.append(h)
        ref_out = torch.stack(ref_steps) if ref_steps else xs.new_zeros((0, batch, state))
        what = f"lltm_sequence {path} T={steps} B={batch} I={features} S={state} offset={offset}"
        what += " state=None" if zero_state else ""
        check(output, ref_out, tol, what + " output")
        check(h_n, h, tol, what + " h_n")
        check(c_n, c, tol, what + " c_n")
        grads = [randn(steps, batch, state, dtype=dtype, offset=offset)]
        if zero_state:  # the output's gradient alone; h_n's and c_n's None
            grads += [torch.zeros(batch, state, dtype=dtype, device=DEVICE) for _ in range(2)]
            if steps == 0:
                continue  # an empty output is in no graph
            ours = torch.autograd.grad(output, args[:3], grads[0])  # no state to differentiate
        else:
            grads += [randn(batch, state, dtype=dtype, offset=offset) for _ in range(2)]
            ours = torch.autograd.grad((output, h_n, c_n), args, grads)
        pairs = [
            (o, g.double().cpu())
            for o, g in zip((ref_out, h, c), grads, strict=True)
            if o.requires_grad
        ]
        refs = torch.autograd.grad(
            [o for o, _ in pairs], args64, [g for _, g in pairs], allow_unused=True
        )
        names = ("input", "weights", "bias", "h0", "c0")
        for name, got, want, arg in zip(names, ours, refs, args64, strict=False):  # 3: no state
            check(got, torch.zeros_like(arg) if want is None else want, tol, f"{what} d_{name}")


# Mixed calls (T, B, I, S): past 32 batch rows, so that the mixed loops run (not the float32
# sequence); odd and unaligned states, W_h's aligned copy (T >= 4, S + I unaligned), one step.
MIXED_SIZES = ((5, 37, 13, 37), (4, 40, 9, 72), (1, 33, 5, 9), (6, 64, 3, 130), (3, 48, 20, 64))


def run_lltm_sequence_mixed(dtype: torch.dtype) -> None:
    """lltm_sequence's mixed call (input, weights, bias in `dtype`, a half type; the state
    float32) on the cuBLAS path, forward and backward, misaligned views, state given and not,
    against the float64 loop on the same operands, at `dtype`'s tolerance."""
    old = os.environ.get("LLTM_EXT_SEQUENCE_PATH")
    os.environ["LLTM_EXT_SEQUENCE_PATH"] = "cublas"
    try:
        for (steps, batch, features, state), offset in itertools.product(MIXED_SIZES, (0, 1)):
            stdv = 1.0 / math.sqrt(state)
            args = [
                randn(steps, batch, features, dtype=dtype, offset=offset),
                randn(3 * state, state + features, dtype=dtype, scale=stdv),
                randn(3 * state, dtype=dtype, scale=stdv, offset=offset),
                randn(batch, state, dtype=torch.float32, offset=offset),
                randn(batch, state, dtype=torch.float32, offset=offset),
            ]
            if offset:  # no h0: c0 of zeros says the state is float32
                args[3] = None
                args[4] = args[4].zero_()
            args = [a if a is None else a.requires_grad_() for a in args]
            out = torch.ops.lltm_ext.lltm_sequence(*args)
            args64 = [
                None if a is None else a.detach().double().cpu().requires_grad_() for a in args
            ]
            xs, w, b, h, c = args64
            h = torch.zeros_like(c) if h is None else h
            ref_steps = []
            for t in range(steps):
                h, c = lltm_reference(xs[t], w, b, h, c)
                ref_steps.append(h)
            ref = (torch.stack(ref_steps), h, c)
            what = f"lltm_sequence mixed T={steps} B={batch} I={features} S={state} {offset=}"
            for got, want, name in zip(out, ref, ("output", "h_n", "c_n"), strict=True):
                assert got.dtype == torch.float32, f"{what} {name}: {got.dtype}"
                check(got, want, dtype, f"{what} {name}")
            grads = [randn(*o.shape, dtype=torch.float32) for o in out]
            wanted = [a for a in args if a is not None and a.requires_grad]
            ours = torch.autograd.grad(out, wanted, grads)
            wanted64 = [a for a in args64 if a is not None and a.requires_grad]
            refs = torch.autograd.grad(ref, wanted64, [g.double().cpu() for g in grads])
            for i, (got, want) in enumerate(zip(ours, refs, strict=True)):
                check(got, want, dtype, f"{what} d_arg{i}")
    finally:
        if old is None:
            os.environ.pop("LLTM_EXT_SEQUENCE_PATH", None)
        else:
            os.environ["LLTM_EXT_SEQUENCE_PATH"] = old


# The autocast kernels' rounded operands (float32 tensors rounded to a half type in one launch):
# sizes 0, 1, odd, views that start off 16-byte alignment, more tensors than one launch takes.
ROUNDED_SIZES = ((0,), (1,), (7,), (4099,), (33, 65), (3, 5, 7))


def run_rounded_operands(dtype: torch.dtype) -> None:
    """lltm_rounded and lltm_sequence_rounded over float32 tensors, rounding to `dtype` (a half
    type), forward and backward, against the casts to `dtype` and back (exactly)."""
    for name, offset in itertools.product(("lltm_rounded", "lltm_sequence_rounded"), (0, 1, 2)):
        args = [randn(*shape, dtype=torch.float32, offset=offset) for shape in ROUNDED_SIZES]
        args = [a.requires_grad_() for a in args]
        out = getattr(torch.ops.lltm_ext, name)(args, dtype)
        grads = [randn(*o.shape, dtype=torch.float32) for o in out]
        ours = torch.autograd.grad(out, args, grads)
        for k, (a, o, g, d) in enumerate(zip(args, out, grads, ours, strict=True)):
            what = f"{name} {dtype} {tuple(a.shape)} {offset=}"
            if o.numel():
                check(o, a.detach().to(dtype).double().cpu(), torch.float32, what)
            assert torch.equal(o.cpu(), a.detach().to(dtype).float().cpu()), what
            assert torch.equal(d.cpu(), g.to(dtype).float().cpu()), f"{what} gradient {k}"


# Packed batches (sequence lengths, input features, state size): every stretch of steps with one
# batch runs on the path forced (or planned), from the rows of the stretch before; lengths that
# shrink step by step, long stretches, one sequence, and sizes as above.
PACKED_SIZES = (
    ((5, 5, 3, 2, 2, 1), 3, 9),
    ((1,), 2, 4),
    ((7, 6, 6, 6, 3, 3, 1, 1, 1) * 2, 5, 65),
    ((4, 4, 4, 2, 1) * 4, 3, 132),
    ((3, 2, 2), 4, 518),
)


def _run_lltm_sequence_packed(dtype: torch.dtype, path: str) -> None:
    tol = torch.float16 if path.endswith("-tf32") else dtype
    for unsorted, features, state in PACKED_SIZES:
        lengths = sorted(unsorted, reverse=True)  # row j of a step: the j-th longest sequence
        if (
            (path.startswith("cluster") and state > 256)
            or (path == "small" and state > (96 if dtype == torch.float32 else 88))
            or (path.startswith("wide") and state > 1024)
        ):
            continue
        sizes = [sum(n > t for n in lengths) for t in range(max(lengths))]
        stdv = 1.0 / math.sqrt(state)
        args = [
            randn(sum(sizes), features, dtype=dtype),
            randn(3 * state, state + features, dtype=dtype, scale=stdv),
            randn(3 * state, dtype=dtype, scale=stdv),
            randn(len(lengths), state, dtype=dtype),
            randn(len(lengths), state, dtype=dtype),
        ]
        args = [a.requires_grad_() for a in args]
        got = torch.ops.lltm_ext.lltm_sequence_packed(args[0], sizes, *args[1:])
        args64 = [a.detach().double().cpu().requires_grad_() for a in args]
        data, w, b, h0, c0 = args64
        offsets = [sum(sizes[:t]) for t in range(len(sizes))]
        rows: list = [None] * data.shape[0]
        h_n, c_n = [], []
        for j in range(len(lengths)):
            h, c = h0[j : j + 1], c0[j : j + 1]
            for t in range(lengths[j]):
                h, c = lltm_reference(data[offsets[t] + j : offsets[t] + j + 1], w, b, h, c)
                rows[offsets[t] + j] = h[0]
            h_n.append(h[0])
            c_n.append(c[0])
        want = (torch.stack(rows), torch.stack(h_n), torch.stack(c_n))
        what = f"lltm_sequence_packed {path} lengths={lengths[:9]} I={features} S={state}"
        for name, g, r in zip(("output", "h_n", "c_n"), got, want, strict=True):
            check(g, r, tol, f"{what} {name}")
        seeds = [randn(*r.shape, dtype=dtype) for r in want]
        ours = torch.autograd.grad(got, args, seeds)
        refs = torch.autograd.grad(want, args64, [g.double().cpu() for g in seeds])
        for name, g, r in zip(("data", "weights", "bias", "h0", "c0"), ours, refs, strict=True):
            check(g, r, tol, f"{what} d_{name}")


# ---------------------------------------------------------------------------------------------
# GEMM.
# ---------------------------------------------------------------------------------------------

GEMM_SHAPES = ((0, 5, 3), (5, 0, 3), (4, 6, 0), (1, 1, 1), (3, 5, 7), (17, 33, 65), (131, 259, 77))
LAYOUTS = ("nn", "nt", "tn", "tt")


def operands(m: int, n: int, k: int, layout: str, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """a (m, k), b (k, n); "t": that operand is a transposed view of a row-major matrix."""
    a = randn(k, m, dtype=dtype).t() if layout[0] == "t" else randn(m, k, dtype=dtype)
    b = randn(n, k, dtype=dtype).t() if layout[1] == "t" else randn(k, n, dtype=dtype)
    return a, b


def run_gemm(dtype: torch.dtype) -> None:
    for (m, n, k), layout in itertools.product(GEMM_SHAPES, LAYOUTS):
        a, b = operands(m, n, k, layout, dtype)
        a.requires_grad_()
        b.requires_grad_()
        what = f"gemm {m}x{n}x{k} {layout} {dtype}"
        c = lltm_ext.gemm(a, b)
        check_gemm(c, a, b, dtype, what)
        grad = randn(m, n, dtype=dtype)
        da, db = torch.autograd.grad(c, (a, b), grad)  # grad @ b.T and a.T @ grad
        check_gemm(da, grad, b.t(), dtype, what + " grad a")
        check_gemm(db, a.t(), grad, dtype, what + " grad b")
    # Misaligned and padded operands; out= contiguous, transposed and misaligned.
    wide = randn(70, 141, dtype=dtype, offset=1)
    cases = [
        (randn(17, 65, dtype=dtype, offset=1), randn(65, 33, dtype=dtype, offset=3)),
        (wide[:, 1:66], wide[:65, 2:35]),  # lda = ldb = 141, unaligned starts
        (wide[:, ::2], randn(71, 9, dtype=dtype)),  # no unit stride: copied
        (randn(1, 40, dtype=dtype).expand(6, 40), randn(40, 12, dtype=dtype)),
    ]
    for i, (a, b) in enumerate(cases):
        check_gemm(lltm_ext.gemm(a, b), a, b, dtype, f"gemm view case {i} {dtype}")
    a, b = randn(17, 65, dtype=dtype), randn(65, 33, dtype=dtype)
    for j, out in enumerate(
        (
            torch.full((17, 33), math.nan, dtype=dtype, device=DEVICE),
            torch.full((33, 17), math.nan, dtype=dtype, device=DEVICE).t(),
            torch.full((17 * 33 + 1,), math.nan, dtype=dtype, device=DEVICE)[1:].view(17, 33),
        )
    ):
        assert lltm_ext.gemm(a, b, out=out) is out
        check_gemm(out, a, b, dtype, f"gemm out= case {j} {dtype}")
    # The matrix-vector row kernel over rows that start off 16-byte boundaries (odd K): Y's padded
    # chunks, K past one chunk, with and without K splits; short rows that a few lanes share.
    for m, n, k in ((1, 37, 8195), (3, 5, 20001), (3, 700, 13), (2, 300, 150)):
        a, b = operands(m, n, k, "nt", dtype)
        check_gemm(lltm_ext.gemm(a, b), a, b, dtype, f"gemm matrix-vector {m}x{n}x{k} {dtype}")
    # Split-K from the heuristic: few tiles, long K (float32 and float64 split; halves do not).
    for m, n, k in ((64, 48, 20000), (8, 8, 4097)):
        a, b = randn(m, k, dtype=dtype), randn(k, n, dtype=dtype)
        check_gemm(lltm_ext.gemm(a, b), a, b, dtype, f"gemm split-K {m}x{n}x{k} {dtype}")


def run_gemm_configs(only: list[int] | None = None) -> None:
    """Every float32 tile config (or those in `only`), every layout, with and without split-K;
    tail split-K."""
    ext = load_extension("gemm")
    names = ext._cuda_configs()
    staged_only = ext._gemm_path() == "staged"
    # The last shape is aligned with whole 128 x 256 and 256 x 128 tiles inside: the kernels' fast
    # loops run.
    shapes = ((131, 259, 77), (17, 33, 65), (1, 129, 300), (288, 272, 256))
    for config, name in enumerate(names):
        if only is not None and config not in only:
            continue
        if staged_only and "staged" not in name:
            print(f"  config {config} ({name}): skipped, cp.async is not run on this GPU's path")
            continue
        for (m, n, k), layout in itertools.product(shapes, LAYOUTS):
            a, b = operands(m, n, k, layout, torch.float32)
            for splits in (1, 3):
                c = ext._gemm_with_config(a, b, config, splits)
                check_gemm(
                    c, a, b, torch.float32, f"config {config} {m}x{n}x{k} {layout} s{splits}"
                )
        # Tail split-K: ragged tiles (N % 4 == 3), every tile in the tail, and a few.
        for (m, n, k), tail_tiles, tail_splits in (
            ((300, 263, 77), 10**6, 3),
            ((129, 257, 1024), 3, 2),
        ):
            for layout in ("nn", "tn"):
                a, b = operands(m, n, k, layout, torch.float32)
                c = ext._gemm_with_config(a, b, config, 1, tail_tiles, tail_splits)
                what = f"config {config} {m}x{n}x{k} {layout} tail {tail_tiles}x{tail_splits}"
                check_gemm(c, a, b, torch.float32, what)
    # The register-staged path as a pre-sm_80 GPU runs it: heuristic configs and split-K.
    ext._set_gemm_path("staged")
    try:
        for (m, n, k), layout in itertools.product(((131, 259, 77), (64, 48, 20000)), ("nn", "nt")):
            a, b = operands(m, n, k, layout, torch.float32)
            check_gemm(lltm_ext.gemm(a, b), a, b, torch.float32, f"staged {m}x{n}x{k} {layout}")
    finally:
        ext._set_gemm_path("auto")


# (M, N, K) for the tensor-core kernels: tails of the 128-row and 64/128/256-wide tiles and of the
# 64-element (32 for tf32) K step; one tile smaller than a TMA box; K longer than the ring; more
# tiles than an H100 / H200 has SMs at every width (2100 x 2200: persistent blocks walk several).
# N % 8 == 0 stores C by TMA, 130 two elements at a time, 131 one at a time.
WGMMA_SHAPES = (
    (136, 264, 72),
    (8, 8, 8),
    (520, 200, 1032),
    (72, 130, 40),
    (40, 131, 24),
    (2100, 2200, 72),
)


def padded(rows: int, cols: int, dtype: torch.dtype, offset: int = 0) -> Tensor:
    """A (rows, cols) view of fully written storage whose rows are cols rounded up to 8 elements
    apart (16 bytes for 16-bit types): any sizes, with the strides TMA needs."""
    stride = (cols + 7) // 8 * 8
    return randn(rows, stride, dtype=dtype, offset=offset)[:, :cols]


def product(a: Tensor, b: Tensor, prefilled: bool) -> Tensor:
    """lltm_ext.gemm(a, b), or with `prefilled`, written into a NaN-filled out= buffer."""
    if not prefilled:
        return lltm_ext.gemm(a, b)
    out = torch.full((a.shape[0], b.shape[1]), math.nan, dtype=a.dtype, device=DEVICE)
    assert lltm_ext.gemm(a, b, out=out) is out
    return out


def _force_each(ext: ModuleType, paths: tuple[str | None, ...]) -> Iterator[str | None]:
    """The `paths` in turn, each forced (``_set_gemm_half_path``) as it is reached; None: none."""
    for path in paths:
        if path is not None:
            ext._set_gemm_half_path(path)
        yield path


@contextlib.contextmanager
def tensor_core_paths(path: str, forced: tuple[str, ...]) -> Iterator[Iterator[str | None]]:
    """The frame of a tensor-core section (gemm_<path>: gemm_wgmma, gemm_mma): yields the GEMM
    half paths to run its checks under, each forced as the loop reaches it: `forced` (e.g. one
    per block tile) where lltm_ext's `path` ("wgmma" or "mma") can run; one None, nothing forced,
    on the CPU dry run (--device cpu); none, the section skipped, where the path cannot run. The
    last two say so in a line. Inside, torch.backends.cuda.matmul.allow_tf32 is on (float32 runs
    as TF32); on the way out, even by an exception, it is restored and the path is back to auto."""
    ext = load_extension("gemm")
    paths: tuple[str | None, ...] = forced
    if DEVICE != "cuda":
        print(f"  gemm_{path}: skipped (no CUDA device); its checks run on the CPU", flush=True)
        paths = (None,)
    else:
        try:
            ext._set_gemm_half_path(path)
            ext._gemm_half_path()
        except RuntimeError as e:
            print(f"  gemm_{path}: skipped (the {path} path cannot run here: {e})", flush=True)
            paths = ()
        finally:
            ext._set_gemm_half_path("auto")
    if not paths:
        yield iter(())
        return
    saved_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = True
        yield _force_each(ext, paths)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved_tf32
        if DEVICE == "cuda":
            ext._set_gemm_half_path("auto")


def run_gemm_wgmma(dtypes: list[torch.dtype], prefilled: bool = False) -> None:
    """The Hopper tensor-core kernels with each block tile width forced (bfloat16, float16, and
    float32 as TF32 with allow_tf32 on), every layout, out= (only out=, NaN-filled, when
    `prefilled`). Where they cannot run it says it skipped them (on the CPU, --device cpu, the
    same checks then run once as a dry run)."""
    with tensor_core_paths("wgmma", ("wgmma64", "wgmma128", "wgmma192", "wgmma256")) as widths:
        for width in widths:
            for dtype in [d for d in dtypes if d != torch.float64]:
                bound = GEMM_REL_TF32 if dtype == torch.float32 else GEMM_REL[dtype]
                name = "tf32" if dtype == torch.float32 else str(dtype)[6:]
                for (m, n, k), layout in itertools.product(WGMMA_SHAPES, LAYOUTS):
                    a = padded(k, m, dtype).t() if layout[0] == "t" else padded(m, k, dtype)
                    b = padded(n, k, dtype).t() if layout[1] == "t" else padded(k, n, dtype)
                    what = f"gemm_wgmma {width} {name} {m}x{n}x{k} {layout}"
                    check_gemm(product(a, b, prefilled), a, b, dtype, what, bound)
                    out = torch.full((m, n), math.nan, dtype=dtype, device=DEVICE)
                    assert lltm_ext.gemm(a, b, out=out) is out
                    check_gemm(out, a, b, dtype, what + " out=", bound)
                if dtype == torch.float32:
                    # tf32's K-major copies from contiguous operands with odd rows (no 16-byte
                    # loads), a misaligned one, and vectors.
                    cases = [
                        (randn(136, 72, dtype=dtype), randn(72, 263, dtype=dtype)),
                        (randn(77, 131, dtype=dtype).t(), randn(77, 259, dtype=dtype)),
                        (randn(64, 40, dtype=dtype), randn(40, 96, dtype=dtype, offset=1)),
                        (randn(1, 40, dtype=dtype), randn(40, 33, dtype=dtype)),
                        (randn(40, 33, dtype=dtype).t(), randn(40, 1, dtype=dtype)),
                    ]
                    for i, (a, b) in enumerate(cases):
                        what = f"gemm_wgmma {width} tf32 copy case {i}"
                        check_gemm(product(a, b, prefilled), a, b, dtype, what, bound)
    run_gemm_wgmma_part_atoms(dtypes)
    run_gemm_wgmma_tall(dtypes)


def run_gemm_wgmma_exact(dtypes: list[torch.dtype]) -> None:
    """Exact float32 on the wgmma kernel in three tf32 passes (LLTM_EXT_GEMM_F32=tensor, TF32
    off): every layout, operands with padded and with odd rows (split copies by 16-byte and by
    element loads, transposed or not), K splits, NaN-filled outputs; and Inf / NaN operands, whose
    outputs the kernel recomputes from the operands as given (non-finite where float32's are).
    Skipped, with a line saying so, where the wgmma kernel cannot run."""
    ext = load_extension("gemm")
    if torch.float32 not in dtypes or DEVICE != "cuda" or ext._gemm_half_path() != "wgmma":
        print("  gemm_wgmma_exact: skipped (no float32, or no wgmma kernel here)", flush=True)
        return
    saved_tf32, saved_env = (
        torch.backends.cuda.matmul.allow_tf32,
        os.environ.get("LLTM_EXT_GEMM_F32"),
    )
    dtype = torch.float32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        os.environ["LLTM_EXT_GEMM_F32"] = "tensor"
        shapes = [s for s in WGMMA_SHAPES if min(s) > 16] + [(33, 65, 37), (24, 40, 9000)]
        for (m, n, k), layout, make in itertools.product(shapes, LAYOUTS, (padded, randn)):
            a = make(k, m, dtype=dtype).t() if layout[0] == "t" else make(m, k, dtype=dtype)
            b = make(n, k, dtype=dtype).t() if layout[1] == "t" else make(k, n, dtype=dtype)
            c = torch.full((m, n), math.nan, dtype=dtype, device=DEVICE)
            assert lltm_ext.gemm(a, b, out=c) is c
            check_gemm(c, a, b, dtype, f"gemm_wgmma exact {m}x{n}x{k} {layout} {make.__name__}")
        a, b = randn(136, 72, dtype=dtype).cpu(), randn(72, 264, dtype=dtype).cpu()
        a[3, 5], a[7, 9], b[5, 11] = math.inf, math.nan, 0.0
        c = torch.full((136, 264), math.nan, dtype=dtype, device=DEVICE)
        c = lltm_ext.gemm(a.to(DEVICE), b.to(DEVICE), out=c).cpu()
        ref = a.double() @ b.double()
        assert torch.equal(torch.isfinite(c), torch.isfinite(ref)), "gemm_wgmma exact Inf / NaN"
        global CHECKS
        CHECKS += 1
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved_tf32
        if saved_env is None:
            os.environ.pop("LLTM_EXT_GEMM_F32", None)
        else:
            os.environ["LLTM_EXT_GEMM_F32"] = saved_env


def run_gemm_wgmma_part_atoms(dtypes: list[torch.dtype]) -> None:
    """The 144- and 168-wide tiles (not whole 64-column atoms: B K-major only, tf32's B copied
    K-major first; C's whole 64-column passes by TMA, the last 16 or 40 columns stored directly),
    forced through `_gemm_tensor_core` into NaN-filled outputs, with and without K splits. Skipped
    where the wgmma kernel cannot run (it says so in run_gemm_wgmma's line)."""
    ext = load_extension("gemm")
    if DEVICE != "cuda" or ext._gemm_half_path() != "wgmma":
        return
    saved_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = True
        for dtype in [d for d in dtypes if d != torch.float64]:
            bound = GEMM_REL_TF32 if dtype == torch.float32 else GEMM_REL[dtype]
            layouts = LAYOUTS if dtype == torch.float32 else ("nt", "tt")
            for (m, n, k), layout, splits, width in itertools.product(
                WGMMA_SHAPES, layouts, (1, 3), (144, 168)
            ):
                a = padded(k, m, dtype).t() if layout[0] == "t" else padded(m, k, dtype)
                b = padded(n, k, dtype).t() if layout[1] == "t" else padded(k, n, dtype)
                c = torch.full((m, n), math.nan, dtype=dtype, device=DEVICE)
                ext._gemm_tensor_core(a, b, "wgmma", tile=width, splits=splits, out=c)
                what = f"gemm_wgmma {width} {str(dtype)[6:]} {m}x{n}x{k} {layout} {splits} splits"
                check_gemm(c, a, b, dtype, what, bound)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved_tf32


def run_gemm_wgmma_tall(dtypes: list[torch.dtype]) -> None:
    """The 256-row tiles (bfloat16 / float16, B K-major: each consumer two 64-row slabs; C's whole
    64-column passes by TMA slab after slab, the last 24 columns stored directly), forced through
    `_gemm_tensor_core` into NaN-filled outputs, with and without K splits, M past one and two
    tiles and inside one slab. Skipped where the wgmma kernel cannot run."""
    ext = load_extension("gemm")
    if DEVICE != "cuda" or ext._gemm_half_path() != "wgmma":
        return
    shapes = WGMMA_SHAPES + ((300, 457, 200),)
    for dtype in [d for d in dtypes if d in (torch.bfloat16, torch.float16)]:
        for (m, n, k), layout, splits in itertools.product(shapes, ("nt", "tt"), (1, 3)):
            a = padded(k, m, dtype).t() if layout[0] == "t" else padded(m, k, dtype)
            b = padded(n, k, dtype).t()
            c = torch.full((m, n), math.nan, dtype=dtype, device=DEVICE)
            ext._gemm_tensor_core(a, b, "wgmma", tile_m=256, splits=splits, out=c)
            what = f"gemm_wgmma 256x152 {str(dtype)[6:]} {m}x{n}x{k} {layout} {splits} splits"
            check_gemm(c, a, b, dtype, what, GEMM_REL[dtype])


def run_gemm_wgmma_clusters(dtypes: list[torch.dtype], prefilled: bool = False) -> None:
    """run_gemm_wgmma's checks with the wgmma kernel's blocks in clusters of two wherever they can
    pair (two tile rows or more: B's stages multicast to both; `_set_gemm_wgmma_knobs(cluster=2)`),
    K splits too; `prefilled` as there. Then, still in pairs, a K-major B at widths off the
    64-column grid (each block's half of B's rows overlapping the other's) and the 256-row tiles
    (an odd number of tile rows: the last pair's second block idle)."""
    ext = load_extension("gemm")
    if DEVICE == "cuda":
        ext._set_gemm_wgmma_knobs(cluster=2)
    try:
        run_gemm_wgmma(dtypes, prefilled)
        if DEVICE == "cuda" and ext._gemm_half_path() == "wgmma":
            for dtype in [d for d in dtypes if d in HALF]:
                a, b = padded(520, 1032, dtype), padded(200, 1032, dtype).t()
                runs = ((128, 3, 128), (256, 2, 128), (144, 1, 128), (168, 2, 128))
                for tile, splits, rows in runs + ((152, 1, 256), (152, 3, 256)):
                    c = torch.full((520, 200), math.nan, dtype=dtype, device=DEVICE)
                    ext._gemm_tensor_core(
                        a, b, "wgmma", tile=tile, splits=splits, tile_m=rows, out=c
                    )
                    what = f"gemm_wgmma_clusters {rows}x{tile} {splits} splits {dtype}"
                    check_gemm(c, a, b, dtype, what, GEMM_REL[dtype])
    finally:
        if DEVICE == "cuda":
            ext._set_gemm_wgmma_knobs()


# (M, N, K) for the mma.sync kernels: tails of the 64 / 128 tiles and of the 32-element K step,
# K % 8 != 0 (the last 16-byte chunk of a K-major row partly past K), 1 x 1 x 1, K longer than the
# 4-stage ring, odd N (the last column stored alone), and more tiles than an H100 / H200 has SMs.
MMA_SHAPES = (
    (136, 264, 72),
    (1, 1, 1),
    (65, 72, 3),
    (129, 257, 77),
    (520, 200, 1032),
    (40, 131, 24),
    (2100, 2200, 40),
)


def run_gemm_mma(dtypes: list[torch.dtype]) -> None:
    """The sm_80+ tensor-core kernels (mma.sync) with each block tile forced, bfloat16, float16
    and float32 as TF32 (allow_tf32 on): every layout from padded operands, out= (NaN-filled), out=
    a transposed view and a misaligned buffer, unaligned operands (the SIMT kernel runs; exact
    float32 for float32) and a backward through autograd. Where they cannot run it says it skipped
    them (on the CPU the same checks run once)."""
    with tensor_core_paths("mma", ("mma64", "mma128", "mma256")) as tiles:
        for tile in tiles:
            for dtype in [d for d in dtypes if d in HALF or d == torch.float32]:
                tf32 = dtype == torch.float32
                bound = GEMM_REL_TF32 if tf32 else GEMM_REL[dtype]
                name = f"gemm_mma {tile} {'tf32' if tf32 else str(dtype)[6:]}"
                for (m, n, k), layout in itertools.product(MMA_SHAPES, LAYOUTS):
                    a = padded(k, m, dtype).t() if layout[0] == "t" else padded(m, k, dtype)
                    b = padded(n, k, dtype).t() if layout[1] == "t" else padded(k, n, dtype)
                    what = f"{name} {m}x{n}x{k} {layout}"
                    check_gemm(lltm_ext.gemm(a, b), a, b, dtype, what, bound)
                    out = torch.full((m, n), math.nan, dtype=dtype, device=DEVICE)
                    assert lltm_ext.gemm(a, b, out=out) is out
                    check_gemm(out, a, b, dtype, what + " out=", bound)
                a, b = padded(130, 72, dtype), padded(72, 66, dtype)
                outs = (
                    torch.full((66, 130), math.nan, dtype=dtype, device=DEVICE).t(),
                    torch.full((130 * 66 + 1,), math.nan, dtype=dtype, device=DEVICE)[1:].view(
                        130, 66
                    ),
                )
                for j, out in enumerate(outs):
                    assert lltm_ext.gemm(a, b, out=out) is out
                    check_gemm(out, a, b, dtype, f"{name} out= case {j}", bound)
                # Operands the 16-byte copies cannot read (the SIMT kernel runs), one per side.
                for i, (a, b) in enumerate(
                    (
                        (randn(17, 65, dtype=dtype, offset=1), padded(65, 40, dtype)),
                        (padded(33, 72, dtype), randn(72, 65, dtype=dtype, offset=1)),
                        (randn(33, 37, dtype=dtype), randn(37, 35, dtype=dtype)),
                    )
                ):
                    what = f"{name} fallback case {i}"
                    check_gemm(lltm_ext.gemm(a, b), a, b, dtype, what, bound)
                # Autograd: the backward's g @ b.T and a.T @ g on the transposed views.
                a = randn(136, 200, dtype=dtype).requires_grad_()
                b = randn(200, 264, dtype=dtype).requires_grad_()
                g = randn(136, 264, dtype=dtype)
                da, db = torch.autograd.grad(lltm_ext.gemm(a, b), (a, b), g)
                check_gemm(da, g, b.detach().t(), dtype, f"{name} grad a", bound)
                check_gemm(db, a.detach().t(), g, dtype, f"{name} grad b", bound)


# Odd sizes (rows not a multiple of 16 bytes), a long K with few tiles (K splits), tails.
TC_PLAN_SHAPES = ((3, 5, 7), (65, 33, 300), (2, 10, 2050), (130, 70, 97))


def word_rows(rows: int, cols: int, dtype: torch.dtype) -> Tensor:
    """A (rows, cols) view whose rows are 4-byte aligned and not 16-byte aligned: cols rounded up
    to an even count apart, the base 4 bytes into its storage, which ends at the last element."""
    elem = torch.empty(0, dtype=dtype).element_size()
    stride, offset = (cols + 1) // 2 * 2, 4 // elem
    flat = randn((rows - 1) * stride + cols + offset, dtype=dtype)
    return flat[offset:].as_strided((rows, cols), (stride, 1))


@contextlib.contextmanager
def forced_plan_types(
    section: str, dtypes: list[torch.dtype]
) -> Iterator[list[tuple[torch.dtype, float]]]:
    """The frame of a section that forces tensor-core plans through _gemm_tensor_core: yields
    (dtype, error bound) for bfloat16, float16 and float32 (as TF32: allow_tf32 on inside,
    restored on the way out, even by an exception) among `dtypes`; none, the section said skipped,
    off CUDA."""
    if DEVICE != "cuda":
        print(f"  {section}: skipped (no CUDA device)", flush=True)
        yield []
        return
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        yield [
            (d, GEMM_REL_TF32 if d == torch.float32 else GEMM_REL[d])
            for d in dtypes
            if d in HALF or d == torch.float32
        ]
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def run_gemm_tc_plans(dtypes: list[torch.dtype]) -> None:
    """Each tensor-core plan forced through _gemm_tensor_core, bfloat16, float16 and float32 as
    TF32: the mma kernel's register-staged loads (unaligned rows, a base off 16 bytes), its 4-byte
    copies (rows 4-byte aligned only) and its 16-byte copies, each with and without K splits, and
    the wgmma kernel after operand copies and with K splits; every layout, NaN-filled outputs.
    Plans that cannot run here are said to be skipped."""
    ext = load_extension("gemm")
    with forced_plan_types("gemm_tc_plans", dtypes) as types:
        for dtype, bound in types:
            # (kernel, tile, splits, unaligned, copy, offset, registers); offset -1: word_rows.
            plans = [
                ("mma", 64, s, True, False, off, True) for s in (1, 3, 0) for off in (0, 1)
            ]  # fmt: skip
            plans += [("mma", t, s, True, False, -1, False) for t in (64, 128) for s in (1, 3)]
            plans += [("mma", t, s, False, False, 0, False) for t in (64, 128, 256) for s in (1, 5)]
            plans += [("wgmma", 0, 0, False, True, off, False) for off in (0, 1)]
            # K splits: aligned rows (N padded to 8), and after copies (odd N: single stores)
            plans += [("wgmma", 0, s, False, False, 0, False) for s in (2, 5)]
            plans += [("wgmma", 0, 3, False, True, 0, False)]
            for kernel, tile, splits, unaligned, copy, off, registers in plans:
                for (m, n, k), layout in itertools.product(TC_PLAN_SHAPES, LAYOUTS):
                    if off < 0:  # the 4-byte copies
                        a = word_rows(k, m, dtype).t() if layout[0] == "t" else (
                            word_rows(m, k, dtype))  # fmt: skip
                        b = word_rows(n, k, dtype).t() if layout[1] == "t" else (
                            word_rows(k, n, dtype))  # fmt: skip
                    elif not unaligned and not copy:  # the aligned copies: 16-byte rows
                        m, n, k = ((x + 7) // 8 * 8 for x in (m, n, k))
                        a = padded(k, m, dtype).t() if layout[0] == "t" else padded(m, k, dtype)
                        b = padded(n, k, dtype).t() if layout[1] == "t" else padded(k, n, dtype)
                    else:
                        a = randn(k, m, dtype=dtype, offset=off).t() if layout[0] == "t" else (
                            randn(m, k, dtype=dtype, offset=off))  # fmt: skip
                        b = randn(n, k, dtype=dtype, offset=off).t() if layout[1] == "t" else (
                            randn(k, n, dtype=dtype, offset=off))  # fmt: skip
                    out = torch.full((m, n), math.nan, dtype=dtype, device=DEVICE)
                    what = (
                        f"gemm_tc_plans {kernel} {tile} {splits} {unaligned} {copy} {off} "
                        f"{registers} {dtype}"
                    )
                    try:
                        ext._gemm_tensor_core(
                            a, b, kernel, tile, splits, unaligned, copy, out, registers
                        )
                    except RuntimeError as e:
                        # The 4-byte copies' operands always have a plan (no skip hides them).
                        if "does not run" in str(e) or (
                            "no tensor-core plan" in str(e) and off >= 0
                        ):
                            print(f"  {what}: skipped ({e})", flush=True)
                            break
                        raise
                    check_gemm(out, a, b, dtype, f"{what} {m}x{n}x{k} {layout}", bound)


def run_gemm_row_copies(dtypes: list[torch.dtype]) -> None:
    """The wgmma kernel's operand copies (gemm/tiles/copy_rows.cuh), forced through
    _gemm_tensor_core(copy=True), bfloat16, float16 and float32 as TF32 (K-major operands: row
    copies too), through each load width: 16-byte rows that start inside sectors, a base 2 and 4
    bytes off; rows longer than a block's 256 lanes of 16 bytes, and rows of one chunk and a tail;
    NaN-filled outputs."""
    ext = load_extension("gemm")
    with forced_plan_types("gemm_row_copies", dtypes) as types:
        for dtype, bound in types:
            for (m, n, k), off, layout in itertools.product(
                ((24, 4104, 40), (300, 5, 12)), (0, 1, 2), ("nn", "tt")
            ):
                a = randn(k, m, dtype=dtype, offset=off).t() if layout[0] == "t" else (
                    randn(m, k, dtype=dtype, offset=off))  # fmt: skip
                b = randn(n, k, dtype=dtype, offset=off).t() if layout[1] == "t" else (
                    randn(k, n, dtype=dtype, offset=off))  # fmt: skip
                out = torch.full((m, n), math.nan, dtype=dtype, device=DEVICE)
                what = f"gemm_row_copies {m}x{n}x{k} {layout} {off} {dtype}"
                try:
                    ext._gemm_tensor_core(a, b, "wgmma", copy=True, out=out)
                except RuntimeError as e:
                    if "does not run" not in str(e):
                        raise
                    print(f"  {what}: skipped ({e})", flush=True)
                    return
                check_gemm(out, a, b, dtype, what, bound)


# M or N of at most 4 (the matrix-vector kernels): 16-byte rows and not, a long K (K splits).
SMALL_SIDE_SHAPES = ((1, 37, 1001), (3, 1, 700), (4, 300, 77), (300, 2, 77), (2, 5, 9000))


def run_gemm_small_side(dtypes: list[torch.dtype]) -> None:
    """Products with a side of at most 4 through the public API, every dtype and layout, operands
    aligned or off by one element, NaN-filled out=."""
    for dtype in dtypes:
        for (m, n, k), layout, off in itertools.product(SMALL_SIDE_SHAPES, LAYOUTS, (0, 1)):
            a = randn(k, m, dtype=dtype, offset=off).t() if layout[0] == "t" else (
                randn(m, k, dtype=dtype, offset=off))  # fmt: skip
            b = randn(n, k, dtype=dtype, offset=off).t() if layout[1] == "t" else (
                randn(k, n, dtype=dtype, offset=off))  # fmt: skip
            out = torch.full((m, n), math.nan, dtype=dtype, device=DEVICE)
            assert lltm_ext.gemm(a, b, out=out) is out
            check_gemm(out, a, b, dtype, f"gemm_small_side {m}x{n}x{k} {layout} {off} {dtype}")


# The skinny kernel (a side of at most 32, both operands K-contiguous, 16-byte rows): a side of
# 1, ending inside each 8-column tile (3, 9, 17) and at 32; the large side ending inside a 16-row
# block; K of one run, inside a 64-k turn, and long enough for every warp's ring to wrap.
SKINNY_SHAPES = ((1, 37, 8), (3, 300, 72), (9, 129, 1032), (17, 50, 264), (32, 1000, 4104))
# Its column kernel (the large operand contiguous along its side, a multiple of 8): inside and past
# one block of 32 and of 64 columns.
SKINNY_COLS_SHAPES = ((1, 8, 8), (3, 296, 72), (9, 136, 1032), (17, 64, 264), (32, 1000, 4104))


def linear_case(
    m: int, n: int, k: int, layout: str, mirror: bool, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """(a, b) of a linear layer's product over x (m, k): layout t, W (n, k) as nn.Linear stores it,
    x @ W.T (or with `mirror` W @ x.T); layout n, W (k, n), x @ W (or W.T @ x.T)."""
    x = randn(m, k, dtype=dtype)
    if layout == "t":
        w = randn(n, k, dtype=dtype)
        return (w, x.t()) if mirror else (x, w.t())
    w = randn(k, n, dtype=dtype)
    return (w.t(), x.t()) if mirror else (x, w)


def run_gemm_skinny(dtypes: list[torch.dtype]) -> None:
    """The skinny kernel, forced (_gemm_skinny) at 1, 3 and 8 warps with K splits or none (the
    column kernel in blocks of 32 and 64 columns), and through the public API (x @ W.T and its
    mirror), for float16 / bfloat16, NaN-filled out= (CUDA only: the CPU dry run skips it)."""
    if DEVICE != "cuda":
        print("  gemm_skinny: skipped, a CUDA kernel", flush=True)
        return
    ext = load_extension("gemm")
    cases = [(shape, "t") for shape in SKINNY_SHAPES] + [(s, "n") for s in SKINNY_COLS_SHAPES]
    for dtype in (d for d in dtypes if d in HALF):
        for ((m, n, k), layout), mirror in itertools.product(cases, (False, True)):
            a, b = linear_case(m, n, k, layout, mirror, dtype)
            widths = (32, 64) if layout == "n" else (0,)
            for (warps, splits), cols in itertools.product(((1, 1), (3, 3), (8, 0)), widths):
                out = torch.full((a.size(0), b.size(1)), math.nan, dtype=dtype, device=DEVICE)
                ext._gemm_skinny(a, b, out=out, warps=warps, splits=splits, cols=cols)
                what = f"{m}x{n}x{k} {layout} mirror={mirror} warps={warps} splits={splits} {dtype}"
                check_gemm(out, a, b, dtype, f"gemm_skinny {what} cols={cols}")
            out = torch.full((a.size(0), b.size(1)), math.nan, dtype=dtype, device=DEVICE)
            assert lltm_ext.gemm(a, b, out=out) is out
            check_gemm(out, a, b, dtype, f"gemm_skinny auto {m}x{n}x{k} {layout} {mirror} {dtype}")


# (M, N, K) for the Stream-K kernel forced on: one tile over as many blocks as it has K steps, a few
# tiles over many blocks, whole rounds then a partial one (on 132 SMs: 144 tiles, the last 12 a
# step a block), a full round alone (132 tiles), tiles cut by M and N with odd N, a K of one step.
STREAM_K_SHAPES = (
    (128, 256, 2048),
    (300, 520, 700),
    (1500, 3000, 520),
    (1536, 2816, 200),
    (200, 87, 1000),
    (136, 72, 8),
)


def run_gemm_stream_k(dtypes: list[torch.dtype]) -> None:
    """The 256-wide wgmma tile with Stream-K forced on (`_set_gemm_wgmma_knobs(stream_k="on")`),
    bfloat16, float16 and TF32, every layout, into NaN-filled outputs (CUDA only, where the wgmma
    kernel runs: skipped with a line saying so elsewhere)."""
    ext = load_extension("gemm")
    if DEVICE != "cuda" or ext._gemm_half_path() != "wgmma":
        print("  gemm_stream_k: skipped, the wgmma kernel does not run here", flush=True)
        return
    saved_tf32 = torch.backends.cuda.matmul.allow_tf32
    ext._set_gemm_wgmma_knobs(cluster=1, stream_k="on")  # blocks alone: Stream-K's
    try:
        torch.backends.cuda.matmul.allow_tf32 = True
        for dtype in [d for d in dtypes if d != torch.float64]:
            bound = GEMM_REL_TF32 if dtype == torch.float32 else GEMM_REL[dtype]
            for (m, n, k), layout in itertools.product(STREAM_K_SHAPES, LAYOUTS):
                a = padded(k, m, dtype).t() if layout[0] == "t" else padded(m, k, dtype)
                b = padded(n, k, dtype).t() if layout[1] == "t" else padded(k, n, dtype)
                c = torch.full((m, n), math.nan, dtype=dtype, device=DEVICE)
                ext._gemm_tensor_core(a, b, "wgmma", tile=256, splits=1, out=c)
                what = f"gemm_stream_k {str(dtype)[6:]} {m}x{n}x{k} {layout}"
                check_gemm(c, a, b, dtype, what, bound)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved_tf32
        ext._set_gemm_wgmma_knobs()


# a.T @ b.T run as its transpose: tails, a side of 1, odd sides (copied first), K splits forced,
# rows inside sectors (N = 8 mod 16 where the swapped B is N-major: clusters of two).
SWAP_SHAPES = ((136, 72, 1000), (333, 517, 91), (300, 520, 700), (264, 1, 520), (520, 264, 64))


def run_gemm_swap(dtypes: list[torch.dtype]) -> None:
    """16-bit a.T @ b.T with `_set_gemm_wgmma_knobs(swap="on")`: b^T a^T on the wgmma kernel, C
    stored transposed by TMA (aligned out=) and by each thread (out= off by one element), the
    auto plan and tiles 64, 128 and 256 forced with K splits, into NaN-filled outputs (CUDA only,
    where the wgmma kernel runs: skipped with a line saying so elsewhere)."""
    ext = load_extension("gemm")
    if DEVICE != "cuda" or ext._gemm_half_path() != "wgmma":
        print("  gemm_swap: skipped, the wgmma kernel does not run here", flush=True)
        return
    ext._set_gemm_wgmma_knobs(swap="on")
    try:
        for dtype in [d for d in dtypes if d in HALF]:
            for m, n, k in SWAP_SHAPES:
                a, b = padded(k, m, dtype).t(), padded(n, k, dtype).t()
                for offset in (0, 1):
                    flat = torch.full((m * n + offset,), math.nan, dtype=dtype, device=DEVICE)
                    c = flat[offset:].view(m, n)
                    lltm_ext.gemm(a, b, out=c)
                    what = f"gemm_swap {str(dtype)[6:]} {m}x{n}x{k} offset {offset}"
                    check_gemm(c, a, b, dtype, what, GEMM_REL[dtype])
                for tile, splits in ((128, 1), (256, 2), (64, 1)):
                    c = torch.full((m, n), math.nan, dtype=dtype, device=DEVICE)
                    ext._gemm_tensor_core(a, b, "wgmma", tile=tile, splits=splits, out=c)
                    what = f"gemm_swap {str(dtype)[6:]} {m}x{n}x{k} tile {tile} splits {splits}"
                    check_gemm(c, a, b, dtype, what, GEMM_REL[dtype])
    finally:
        ext._set_gemm_wgmma_knobs()


# The narrow tiles: the small side 1 to 32 (16 and 32 wide), the large side ending inside a 64- and
# 128-row tile, K ending inside a 64-element step and past several (K splits).
NARROW_SHAPES = ((1, 200, 72), (16, 136, 1032), (9, 328, 520), (5, 64, 8), (17, 200, 520))
NARROW_SHAPES += ((32, 136, 1032), (27, 72, 72))


def run_gemm_narrow(dtypes: list[torch.dtype]) -> None:
    """The wgmma kernel's narrow tiles, forced (_gemm_narrow) with K splits 1, 3 and its own, in
    tiles of its own rows, 64 and 128, both orientations (the small side M: operands swapped, C
    stored transposed), the weight stored (N, K) and (K, N), NaN-filled out= (CUDA only, where the
    wgmma kernel runs: skipped with a line saying so elsewhere)."""
    if DEVICE != "cuda":
        print("  gemm_narrow: skipped, a CUDA kernel", flush=True)
        return
    ext = load_extension("gemm")
    probe = torch.ones(8, 8, dtype=torch.bfloat16, device=DEVICE)
    try:
        ext._gemm_narrow(probe, probe.t())
    except RuntimeError as e:
        print(f"  gemm_narrow: skipped (the narrow tile cannot run here: {e})", flush=True)
        return
    for dtype in (d for d in dtypes if d in HALF):
        for (m, n, k), layout, mirror in itertools.product(NARROW_SHAPES, "tn", (False, True)):
            a, b = linear_case(m, n, k, layout, mirror, dtype)
            for splits, rows in itertools.product((1, 3, 0), (0, 64, 128)):
                out = torch.full((a.size(0), b.size(1)), math.nan, dtype=dtype, device=DEVICE)
                ext._gemm_narrow(a, b, out=out, splits=splits, rows=rows)
                what = f"{m}x{n}x{k} {layout} mirror={mirror} splits={splits} rows={rows} {dtype}"
                check_gemm(out, a, b, dtype, f"gemm_narrow {what}")


# A short K beside a larger output (the short-K kernel): K within one staged chunk, past it, of 1;
# M / N at and past the 64 x 128 tile's edges; more tiles than its persistent grid (2 blocks per
# SM), so that blocks take several.
SHORT_K_SHAPES = ((65, 129, 33), (7, 300, 1), (130, 5, 64), (64, 128, 3), (2100, 1100, 37))
# Its mma form (K <= 64): the 128 x 128 tile's edges, each K-step count (9, 17, 41), odd rows of C;
# the small-product kernel (K <= 512): the 32 x 32 tile's edges, K within one warp's step, past the
# 8 warps' steps, at the limit.
SHORT_K_MMA_SHAPES = ((129, 131, 9), (7, 300, 17), (300, 129, 64), (128, 128, 41))
SMALL_MMA_SHAPES = ((33, 31, 9), (130, 194, 54), (7, 65, 129), (40, 9, 512))


def run_gemm_short_k(dtypes: list[torch.dtype]) -> None:
    """The short-K kernel forced (_gemm_short_k) for the dtypes it takes, every layout, operands
    and NaN-filled out= aligned or off by one element; its mma form and the small-product kernel
    for float16 / bfloat16 with operands and out= off by 0 or 3 elements (CUDA only: the CPU dry
    run skips it)."""
    if DEVICE != "cuda":
        print("  gemm_short_k: skipped, a CUDA kernel", flush=True)
        return
    ext = load_extension("gemm")
    half = (torch.float16, torch.bfloat16)
    runs = (
        ("simt", (torch.float32, *half), SHORT_K_SHAPES, (0, 1)),
        ("mma", half, SHORT_K_MMA_SHAPES, (0, 3)),
        ("small", half, SMALL_MMA_SHAPES, (0, 3)),
    )
    for kernel, kinds, shapes, offsets in runs:
        for dtype in (d for d in dtypes if d in kinds):
            for (m, n, k), layout, off in itertools.product(shapes, LAYOUTS, offsets):
                a = randn(k, m, dtype=dtype, offset=off).t() if layout[0] == "t" else (
                    randn(m, k, dtype=dtype, offset=off))  # fmt: skip
                b = randn(n, k, dtype=dtype, offset=off).t() if layout[1] == "t" else (
                    randn(k, n, dtype=dtype, offset=off))  # fmt: skip
                flat = torch.full((m * n + off,), math.nan, dtype=dtype, device=DEVICE)
                out = flat[off:].view(m, n)
                ext._gemm_short_k(a, b, out=out, kernel=kernel)
                what = f"{kernel} {m}x{n}x{k} {layout} {off} {dtype}"
                check_gemm(out, a, b, dtype, f"gemm_short_k {what}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--ops",
        default="relu,sigmoid,round_ste,lltm,lltm_module,lltm_sequence,lltm_sequence_packed,"
        "lltm_sequence_mixed,rounded_operands,gemm,"
        "gemm_configs,"
        "gemm_wgmma,gemm_wgmma_clusters,gemm_wgmma_exact,gemm_mma,gemm_tc_plans,gemm_row_copies,"
        "gemm_small_side,"
        "gemm_short_k,gemm_skinny,"
        "gemm_narrow,gemm_stream_k,gemm_swap",
    )
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument(
        "--gemm-configs",
        default="",
        help="comma-separated float32 config indices for gemm_configs (default: every config)",
    )
    parser.add_argument(
        "--sequence-paths",
        default="",
        help="comma-separated lltm_sequence paths to run (e.g. tiled,tiled-1; default: every one "
        "that applies), for one tool's run over one kernel family",
    )
    parser.add_argument(
        "--device", default="cuda", help="cpu: a dry run of the checks (no gemm_configs)"
    )
    parser.add_argument(
        "--skip-cublas-half",
        action="store_true",
        help="leave out the LLTM in float16/bfloat16 (initcheck: its cuBLAS GEMM results count as "
        "never written; see tools/sanitize/initcheck_cublas_half_repro.py)",
    )
    parser.add_argument(
        "--prefilled-tma-outputs",
        action="store_true",
        help="the wgmma kernels write only into filled out= buffers, and the gemm section runs "
        "half types on the SIMT kernel (initcheck without --check-tensor-ops counts what the copy "
        "engine stores as never written)",
    )
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("sanitize_workload: no CUDA GPU visible", file=sys.stderr)
        return 2
    ops = args.ops.split(",")
    dtypes = [DTYPES[d] for d in args.dtypes.split(",")]
    simt_halves = args.prefilled_tma_outputs and DEVICE == "cuda"  # the gemm section's halves
    gpu = torch.cuda.get_device_name() if DEVICE == "cuda" else "CPU"
    print(f"sanitize_workload: torch {torch.__version__}, {gpu}", flush=True)
    for op in ops:
        t0 = time.perf_counter()
        if op == "gemm_configs":
            only = [int(c) for c in args.gemm_configs.split(",")] if args.gemm_configs else None
            run_gemm_configs(only)
        elif op == "gemm_wgmma":
            run_gemm_wgmma(dtypes, args.prefilled_tma_outputs)
        elif op == "gemm_wgmma_clusters":
            run_gemm_wgmma_clusters(dtypes, args.prefilled_tma_outputs)
        elif op == "gemm_wgmma_exact":
            run_gemm_wgmma_exact(dtypes)
        elif op == "gemm_mma":
            run_gemm_mma(dtypes)
        elif op == "gemm_row_copies":
            run_gemm_row_copies(dtypes)
        elif op == "gemm_tc_plans":
            run_gemm_tc_plans(dtypes)
        elif op == "gemm_small_side":
            run_gemm_small_side(dtypes)
        elif op == "gemm_short_k":
            run_gemm_short_k(dtypes)
        elif op == "gemm_skinny":
            run_gemm_skinny(dtypes)
        elif op == "gemm_narrow":
            run_gemm_narrow(dtypes)
        elif op == "gemm_stream_k":
            run_gemm_stream_k(dtypes)
        elif op == "gemm_swap":
            run_gemm_swap(dtypes)
        else:
            for dtype in dtypes:
                if op in ELEMENTWISE:
                    run_elementwise(op, dtype)
                elif op.startswith("lltm") and args.skip_cublas_half and dtype in HALF:
                    print(f"  {op} {dtype}: left out (--skip-cublas-half)", flush=True)
                elif op == "lltm":
                    run_lltm(dtype)
                elif op == "lltm_module":
                    run_lltm_module(dtype)
                elif op == "lltm_sequence":
                    only = args.sequence_paths.split(",") if args.sequence_paths else None
                    run_lltm_sequence(dtype, only)
                elif op == "lltm_sequence_packed":
                    only = args.sequence_paths.split(",") if args.sequence_paths else None
                    run_lltm_sequence(dtype, only, packed=True)
                elif op == "rounded_operands":
                    if dtype in HALF:
                        run_rounded_operands(dtype)
                elif op == "lltm_sequence_mixed":
                    if dtype in HALF:  # a half type's products on a float32 state
                        run_lltm_sequence_mixed(dtype)
                elif op == "gemm" and simt_halves and dtype in HALF:
                    load_extension("gemm")._set_gemm_half_path("simt")
                    try:
                        run_gemm(dtype)
                    finally:
                        load_extension("gemm")._set_gemm_half_path("auto")
                elif op == "gemm":
                    run_gemm(dtype)
                else:
                    raise SystemExit(f"unknown op {op!r}")
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        print(
            f"  {op}: done in {time.perf_counter() - t0:.1f} s ({CHECKS} checks so far)", flush=True
        )
    print(f"sanitize_workload: all {CHECKS} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
