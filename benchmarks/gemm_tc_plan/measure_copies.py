"""Times the mma kernel after copying unaligned operands to 16-byte aligned rows, against the
register-staged kernel the planner runs on them in place, and cuBLAS: the data behind the
planner's "mma after copies" candidates (src/gemm/gemm_tc_plan.cpp).

For each of N shapes drawn as `lltm-ext bench --sweep` draws them (lltm_ext.cli.sweep.gemm_shapes,
this seed) and each dtype, where an operand's rows are not 16-byte aligned: lltm_ext.gemm as it
runs, the register-staged 64 x 64 tile at the planner's K splits, lltm_ext.gemm on the copies,
and each aligned mma tile at its planned K splits after the copies (each copy timed with its
call: rows padded to 16 bytes, ATen's copy, as the wgmma path copies), all timed against
torch.mm interleaved (L2 flushed before each call).

    python benchmarks/gemm_tc_plan/measure_copies.py copies.json --shapes 200 --seed 1 \\
        --dtypes bfloat16,float16
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
from measure_plans import make  # this folder's operand maker (run as a script from here)

import lltm_ext
from lltm_ext._extension import load_extension
from lltm_ext.cli.sweep import _CudaSampler, gemm_shapes

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "tf32": torch.float32}


def aligned(t: torch.Tensor) -> bool:
    """Whether t's rows (along its unit stride) start 16 bytes apart from a 16-byte base."""
    ld = t.stride(0) if t.stride(1) == 1 or t.size(1) == 1 else t.stride(1)
    per16 = 16 // t.element_size()
    return ld % per16 == 0 and t.data_ptr() % 16 == 0


def aligned_copy(t: torch.Tensor) -> torch.Tensor:
    """t in the same layout with rows padded to 16 bytes (as the wgmma path's copies)."""
    per16 = 16 // t.element_size()
    row_major = t.stride(1) == 1
    rows = t if row_major else t.t()
    cols = rows.size(1)
    padded = (cols + per16 - 1) // per16 * per16
    buf = torch.empty(rows.size(0), padded, dtype=t.dtype, device=t.device)
    view = buf[:, :cols]
    view.copy_(rows)
    return view if row_major else view.t()


def candidates(ext, a: torch.Tensor, b: torch.Tensor) -> tuple[dict, dict, bool, bool]:
    """The calls to time on a @ b (name -> call), the plans behind them, and which operands the
    aligned candidates copy."""
    copy_a, copy_b = not aligned(a), not aligned(b)

    def copied(fn):
        def run():
            return fn(aligned_copy(a) if copy_a else a, aligned_copy(b) if copy_b else b)

        return run

    ca = aligned_copy(a) if copy_a else a
    cb = aligned_copy(b) if copy_b else b
    cands = {
        "cublas": lambda: torch.mm(a, b),
        "auto": lambda: lltm_ext.gemm(a, b),
        "mma64u": lambda: ext._gemm_tensor_core(a, b, "mma", tile=64, registers=True),
        "copy_auto": copied(lltm_ext.gemm),
    }
    plans = {"auto": list(ext._cuda_tc_plan(a, b)), "copy_auto": list(ext._cuda_tc_plan(ca, cb))}
    for tile in (64, 128, 256):
        cands[f"copy_mma{tile}"] = copied(
            lambda x, y, tile=tile: ext._gemm_tensor_core(x, y, "mma", tile=tile)
        )
    for name, fn in list(cands.items()):
        try:
            fn()
        except RuntimeError:  # no such plan here (a workspace over the limit)
            del cands[name]
    return cands, plans, copy_a, copy_b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", help="where to write the rows")
    parser.add_argument("--shapes", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dtypes", default="bfloat16,float16")
    parser.add_argument("--budget", type=float, default=0.2, help="seconds of samples per shape")
    args = parser.parse_args()
    ext = load_extension("gemm")
    sampler = _CudaSampler(torch.device("cuda"))
    rows = []
    for dname in args.dtypes.split(","):
        dtype = DTYPES[dname]
        torch.backends.cuda.matmul.allow_tf32 = dname == "tf32"
        gen = torch.Generator().manual_seed(args.seed)
        for i, s in enumerate(gemm_shapes(args.shapes, args.seed, "cuda")):
            m, n, k, layout = s["M"], s["N"], s["K"], s["layout"]
            a = make(m, k, layout[0] == "t", gen, dtype)
            b = make(k, n, layout[1] == "t", gen, dtype)
            if min(m, n) <= 4 or (aligned(a) and aligned(b)):
                continue
            cands, plans, copy_a, copy_b = candidates(ext, a, b)
            names = list(cands)
            fns = [cands[nm] for nm in names]
            torch.cuda.synchronize()
            first = sampler.run(fns, 1)
            per_round = sum(t[0] for t in first)
            reps = int(min(30, max(5, args.budget / max(per_round, 1e-9))))
            samples = sampler.run(fns, reps)
            times = {nm: statistics.median(t) * 1e6 for nm, t in zip(names, samples, strict=True)}
            row = dict(
                dtype=dname, M=m, N=n, K=k, layout=layout, a_aligned=not copy_a,
                b_aligned=not copy_b, times_us=times, plans=plans, reps=reps,
            )  # fmt: skip
            rows.append(row)
            best = min(
                [(v, nm) for nm, v in times.items() if nm.startswith("copy_mma")] or [(0.0, "-")]
            )
            auto_plan = plans["auto"]
            print(
                f"{dname} {i:3d} {m}x{n}x{k} {layout} cublas {times['cublas']:.1f} auto "
                f"{times['auto']:.1f} ({auto_plan[0]} {auto_plan[1]} al={auto_plan[2]} "
                f"s={auto_plan[3]}) copy+auto {times.get('copy_auto', 0.0):.1f} best copy+mma "
                f"{best[0]:.1f} {best[1]}",
                flush=True,
            )
            if len(rows) % 10 == 0:
                with open(args.json, "w") as f:
                    json.dump(rows, f)
    with open(args.json, "w") as f:
        json.dump(rows, f)


if __name__ == "__main__":
    main()
