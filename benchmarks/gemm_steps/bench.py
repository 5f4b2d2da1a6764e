"""Times each GEMM step (step_NN_*.cu) and lltm_ext.gemm's tile configs against cuBLAS SGEMM.

Usage (on the GPU machine, after building lltm_ext's gemm op and libgemm_steps.so, which holds
every step file: run_gpu.sh builds both)::

    python3 benchmarks/gemm_steps/bench.py --lib /tmp/libgemm_steps.so --json out.json [--quick]

float32, TF32 off; inputs random; every timed kernel's output is checked against cuBLAS first.
Rounds of all candidates are interleaved (the GPU's clocks drift with heat); medians are reported.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import importlib.util
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch

STEPS = {
    1: "naive (coalesced)",
    2: "smem tiling 32x32",
    3: "1-D register blocking 64x64, 8x1",
    4: "2-D register blocking 128x128, 8x8",
    5: "vectorized (LDG/LDS.128, A^T in smem)",
    6: "warp tiling (conflict-free, 1 buffer)",
    7: "register double buffering (pkg, 128x128x8)",
    8: "cp.async 4 stages (pkg, 128x128x8)",
    9: "8x16/thread, BK 16, 3 stages (pkg, 128x256x16)",
    10: "8x8, 3 blocks/SM, A K-major in smem (64x128x16)",
    12: "step 10 + tail split-K (tail tiles x 4)",
    14: "A transposed through registers (64x128x16)",
}
# Step 11 (config and K splits chosen per shape) is the package's heuristic: the row
# "lltm_ext.gemm (heuristic)". Step 13 (copying operands first) was measured and not kept.
SHAPES = [  # (M, N, K)
    (1024, 1024, 1024),
    (4096, 4096, 4096),
    (8192, 8192, 8192),
    (4096, 1024, 4096),
    (8192, 8192, 1024),
]


# Block tile (BM, BN) and resident blocks per SM of float32 configs (for --tail).
TILE = {0: (64, 128), 1: (128, 256), 2: (128, 128), 3: (64, 64), 5: (64, 128), 7: (64, 128)}
TILE.update({8: (64, 128), 9: (128, 128), 10: (128, 256), 11: (256, 128)})
SLOTS = {0: 3, 1: 1, 2: 2, 3: 4, 5: 3, 7: 3, 8: 3, 9: 2, 10: 1, 11: 1}


def load_gemm_module():
    """lltm_ext's compiled gemm module (straight from its .so if the package import fails)."""
    try:
        return importlib.import_module("lltm_ext._extension").load_extension("gemm")
    except Exception as exc:  # another op's module may be broken mid-edit: load ours directly
        root = Path(__file__).resolve().parents[2] / "lltm_ext"
        path = next(root.glob("_gemm*.so"))
        print(f"(package import failed: {exc!r}; loading {path.name} directly)", file=sys.stderr)
        spec = importlib.util.spec_from_file_location("_gemm", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module


def step_entry(lib: ctypes.CDLL, step: int):
    """gemm_step_NN of step_NN_*.cu (see common.cuh): (A, B, C, M, N, K, splits, workspace,
    stream) -> cudaError_t."""
    fn = getattr(lib, f"gemm_step_{step:02d}")
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 4 + [ctypes.c_void_p] * 2
    return fn


def median_time(fn: Callable[[], object], reps: int) -> list[float]:
    """Per-call seconds of `reps` calls, each between CUDA events."""
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(reps)
    ]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) / 1e3 for s, e in events]


def rel_err(c: torch.Tensor, ref: torch.Tensor) -> float:
    return ((c.double() - ref.double()).norm() / ref.double().norm()).item()


def timed_table(
    title: str,
    cands: dict[str, Callable[[], torch.Tensor]],
    flops: int,
    base_name: str,
    args: argparse.Namespace,
    ref: torch.Tensor,
    poison: Callable[[], None] = lambda: None,
    tol: float = 1e-5,
) -> list[dict]:
    """Checks each candidate's output against ref (after poisoning the output buffer), times them
    in interleaved rounds, prints a table; rows for JSON."""
    errors = {}
    for name, fn in cands.items():
        poison()
        out = fn()
        torch.cuda.synchronize()
        errors[name] = rel_err(out, ref)
    probe = {name: statistics.median(median_time(fn, 2)) for name, fn in cands.items()}
    times: dict[str, list[float]] = {name: [] for name in cands}
    for _ in range(args.rounds):
        for name, fn in cands.items():
            reps = int(min(50, max(2, args.budget / max(probe[name], 1e-6))))
            times[name] += median_time(fn, reps)
    base = flops / statistics.median(times[base_name]) / 1e12
    print(f"\n== {title}")
    print(f"{'candidate':<52} {'TFLOP/s':>8} {'% ref':>8} {'rel err':>9}")
    rows = []
    for name in cands:
        tflops = flops / statistics.median(times[name]) / 1e12
        flag = "  WRONG" if not errors[name] <= tol else ""
        print(f"{name:<52} {tflops:8.2f} {100 * tflops / base:7.1f}% {errors[name]:9.1e}{flag}")
        rows.append(
            dict(
                table=title,
                candidate=name,
                tflops=tflops,
                pct_ref=100 * tflops / base,
                rel_err=errors[name],
                samples=len(times[name]),
            )
        )
    return rows


def operand(rows: int, cols: int, transposed: bool) -> torch.Tensor:
    """A random (rows, cols) float32 matrix, row-major or a transposed (column-major) view."""
    if transposed:
        return torch.randn(cols, rows, device="cuda").t()
    return torch.randn(rows, cols, device="cuda")


def shape_table(lib, ext, args, m: int, n: int, k: int) -> list[dict]:
    """Steps, the package's heuristic and (--sweep) every config/split at one shape, vs cuBLAS."""
    a, b = operand(m, k, False), operand(k, n, False)
    c = torch.empty(m, n, device="cuda")
    ref = torch.mm(a, b)
    workspace = torch.empty(8 * m * n, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    cands: dict[str, Callable[[], torch.Tensor]] = {
        "cuBLAS torch.mm (TF32 off)": lambda: torch.mm(a, b, out=c)
    }

    def step_fn(step: int) -> Callable[[], torch.Tensor]:
        entry = step_entry(lib, step)

        def run() -> torch.Tensor:
            ptrs = (a.data_ptr(), b.data_ptr(), c.data_ptr())
            err = entry(*ptrs, m, n, k, 1, workspace.data_ptr(), stream)
            if err:
                raise RuntimeError(f"step {step}: CUDA error {err}")
            return c

        return run

    if not args.no_steps:
        for step, name in STEPS.items():
            if step == 1 and m * n * k > 4096**3:
                continue  # about a second a call
            cands[f"step {step}: {name}"] = step_fn(step)
    cands["lltm_ext.gemm (heuristic)"] = lambda: ext.gemm_out(a, b, c)
    config, splits, tail_tiles, tail_splits = ext._cuda_choose(m, n, k)
    names = list(ext._cuda_configs())
    if args.sweep:
        for ci, cname in enumerate(names):
            for s in (1, 2, 4) if m * n <= 4096 * 1024 else (1,):
                cands[f"cfg {ci} {cname} s{s}"] = lambda ci=ci, s=s: ext._gemm_with_config(
                    a, b, ci, s
                )
    for ci, tt, ts in args.tail:  # tail split-K variants: config, tail tiles (or -waves), splits
        if ts <= 1:  # the config without any split, as the baseline
            cands[f"cfg {ci}"] = lambda ci=ci: ext._gemm_with_config(a, b, ci, 1)
            continue
        if tt < 0:  # the tiles past the last `-tt` - 1 full waves of `slots`
            tiles = -(-m // TILE[ci][0]) * -(-n // TILE[ci][1])
            slots = SLOTS[ci] * torch.cuda.get_device_properties(0).multi_processor_count
            tt = tiles - (tiles // slots - (-tt - 1)) * slots
        if tt <= 0:
            continue
        cands[f"cfg {ci} tail {tt}x{ts}"] = lambda ci=ci, tt=tt, ts=ts: ext._gemm_with_config(
            a, b, ci, 1, tt, ts
        )
    tail = f", tail split-K {tail_tiles} tiles x {tail_splits}" if tail_splits else ""
    title = (
        f"{m} x {n} x {k} (M x N x K) float32; heuristic: config {config} ({names[config]}), "
        f"{splits} split(s){tail}; ref = cuBLAS"
    )
    return timed_table(
        title,
        cands,
        2 * m * n * k,
        "cuBLAS torch.mm (TF32 off)",
        args,
        ref,
        poison=lambda: c.fill_(float("nan")),
    )


def extras(ext, args) -> list[dict]:
    """Transposed operands (backward's layouts) and the other dtypes."""
    rows = []
    m = n = k = 4096
    for layout in ("tn", "nt", "tt"):
        a, b = operand(m, k, layout[0] == "t"), operand(k, n, layout[1] == "t")
        cands = {
            "cuBLAS": lambda a=a, b=b: torch.mm(a, b),
            "lltm_ext.gemm": lambda a=a, b=b: ext.gemm(a, b),
        }
        for ci in range(len(ext._cuda_configs())):
            cands[f"cfg {ci}"] = lambda a=a, b=b, ci=ci: ext._gemm_with_config(a, b, ci, 1)
        config, splits, tail_tiles, tail_splits = ext._cuda_choose(m, n, k, layout[1] == "t")
        title = (
            f"{layout} layout (t: transposed view), float32 4096^3; heuristic: config {config}, "
            f"{splits} split(s), tail {tail_tiles} x {tail_splits}"
        )
        rows += timed_table(title, cands, 2 * m * n * k, "cuBLAS", args, torch.mm(a, b))
    for dtype, size in ((torch.float64, 2048), (torch.float16, 4096), (torch.bfloat16, 4096)):
        a = torch.randn(size, size, device="cuda", dtype=dtype)
        b = torch.randn(size, size, device="cuda", dtype=dtype)
        cands = {
            "torch.mm": lambda a=a, b=b: torch.mm(a, b),
            "lltm_ext.gemm": lambda a=a, b=b: ext.gemm(a, b),
        }
        title = f"{dtype} {size}^3 (torch.mm uses tensor cores for half types)"
        ref = a.double() @ b.double()
        tol = 1e-12 if dtype == torch.float64 else 1e-2
        rows += timed_table(title, cands, 2 * size**3, "torch.mm", args, ref, tol=tol)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lib", help="path of libgemm_steps.so (needed for the steps)")
    parser.add_argument("--json", help="write all timings here")
    parser.add_argument("--quick", action="store_true", help="two shapes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=0.08, help="seconds per candidate/round")
    parser.add_argument("--no-steps", action="store_true", help="only cuBLAS and the package")
    parser.add_argument("--sweep", action="store_true", help="also every package config/split")
    parser.add_argument("--extras", action="store_true", help="transposed layouts, other dtypes")
    parser.add_argument("--no-shapes", action="store_true", help="skip the per-shape tables")
    parser.add_argument(
        "--tail",
        action="append",
        default=[],
        type=lambda v: tuple(int(x) for x in v.split(",")),
        help="time tail split-K CONFIG,TAIL_TILES,SPLITS (TAIL_TILES -w: past all but w-1 full "
        "waves); repeatable",
    )
    args = parser.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False
    lib = None
    if args.lib:
        lib = ctypes.CDLL(args.lib)
        for step in STEPS:
            step_entry(lib, step)  # every step is in the library
    elif not args.no_steps:
        parser.error("--lib is needed for the steps (or pass --no-steps)")
    ext = load_gemm_module()
    props = torch.cuda.get_device_properties(0)
    print(f"device: {props.name}, {props.multi_processor_count} SMs; torch {torch.__version__}")
    results = []
    for m, n, k in [] if args.no_shapes else SHAPES[:2] if args.quick else SHAPES:
        results += shape_table(lib, ext, args, m, n, k)
        torch.cuda.empty_cache()
    if args.extras:
        results += extras(ext, args)
    if args.json:
        Path(args.json).write_text(json.dumps({"device": props.name, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
