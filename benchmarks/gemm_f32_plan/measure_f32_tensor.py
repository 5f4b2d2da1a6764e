"""Times exact float32 GEMMs on Hopper's tensor cores in three TF32 passes against the SIMT kernels,
the auto choice between them and cuBLAS, on random shapes, with each one's error against float64:
the data behind the choice (cuda_exact_plan, src/gemm/gemm_tc_cuda_host.cpp).

For each of N shapes drawn as `lltm-ext bench --sweep` draws them (lltm_ext.cli.sweep.gemm_shapes,
this seed) that reach the SIMT tiles (both sides above 4, K above 16: smaller ones take the
matrix-vector and short-K kernels first): torch.mm at full precision, lltm_ext.gemm with
LLTM_EXT_GEMM_F32=simt, =tensor and auto, sampled interleaved (one call each in turn, L2 flushed
before each, as the sweep samples); the planner's modelled times of both paths
(`_cuda_exact_plan`); and max |error| / max |product| of each against float64 (computed on the
GPU). One JSON row per shape under "rows", with the device, build and command; rewritten every 10
rows.

    python benchmarks/gemm_f32_plan/measure_f32_tensor.py f32_tensor.json --shapes 100 --seed 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

import torch

import lltm_ext
from lltm_ext._extension import load_extension
from lltm_ext.cli.sweep import _CudaSampler, gemm_shapes

LARGE = ((4096, 4096, 4096), (8192, 8192, 8192), (3000, 5000, 2000), (1024, 1024, 1024))


def make(rows: int, cols: int, transposed: bool, gen: torch.Generator) -> torch.Tensor:
    """A random (rows, cols) float32 CUDA matrix, row-major or a transposed row-major one's view."""
    shape = (cols, rows) if transposed else (rows, cols)
    x = torch.randn(*shape, generator=gen).to("cuda")
    return x.t() if transposed else x


def with_setting(value: str | None, a: torch.Tensor, b: torch.Tensor):
    """A call of lltm_ext.gemm(a, b) under LLTM_EXT_GEMM_F32=value (None: unset, auto)."""

    def call() -> torch.Tensor:
        if value is None:
            os.environ.pop("LLTM_EXT_GEMM_F32", None)
        else:
            os.environ["LLTM_EXT_GEMM_F32"] = value
        return lltm_ext.gemm(a, b)

    return call


def document(rows: list[dict]) -> dict:
    """The rows with what they are and where they come from."""
    try:
        build = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        build = "unknown"
    return dict(
        device=torch.cuda.get_device_name(),
        what="exact float32: torch.mm, lltm_ext.gemm with LLTM_EXT_GEMM_F32=simt / tensor / auto "
        "(us, medians of interleaved samples); the planner's modelled times of both paths; max "
        "|error| / max |product| against float64",
        build=build,
        torch=torch.__version__,
        command="python " + " ".join(sys.argv),
        rows=rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", help="where to write the rows")
    parser.add_argument("--shapes", type=int, default=100)
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument("--budget", type=float, default=0.3, help="seconds of samples per shape")
    parser.add_argument(
        "--large", action="store_true", help="large aligned shapes in every layout instead"
    )
    args = parser.parse_args()
    ext = load_extension("gemm")
    torch.set_float32_matmul_precision("highest")
    sampler = _CudaSampler(torch.device("cuda"))
    shapes = (
        [dict(M=m, N=n, K=k, layout=lay) for m, n, k in LARGE for lay in ("nn", "nt", "tn", "tt")]
        if args.large
        else gemm_shapes(args.shapes, args.seed, "cuda")
    )
    rows = []
    for idx, s in enumerate(shapes):
        m, n, k, layout = s["M"], s["N"], s["K"], s["layout"]
        if min(m, n) <= 4 or k <= 16:
            continue
        gen = torch.Generator().manual_seed(idx)
        a, b = make(m, k, layout[0] == "t", gen), make(k, n, layout[1] == "t", gen)
        os.environ.pop("LLTM_EXT_GEMM_F32", None)
        takes, simt_est, plan = ext._cuda_exact_plan(a, b)
        names = ["torch.mm", "simt", "tensor", "auto"]
        fns = [
            lambda a=a, b=b: torch.mm(a, b),
            with_setting("simt", a, b),
            with_setting("tensor", a, b),
            with_setting(None, a, b),
        ]
        ref = a.double() @ b.double()
        scale = ref.abs().max().item() or 1.0
        errs = {
            name: (fn().double() - ref).abs().max().item() / scale
            for name, fn in zip(names, fns, strict=True)
        }
        del ref
        torch.cuda.synchronize()
        first = sampler.run(fns, 1)
        per_side = int(min(30, max(5, args.budget / max(sum(x[0] for x in first), 1e-9))))
        times = [statistics.median(x) * 1e6 for x in sampler.run(fns, per_side)]
        os.environ.pop("LLTM_EXT_GEMM_F32", None)
        rows.append(
            dict(
                **s,
                us=dict(zip(names, times, strict=True)),
                err=errs,
                auto_takes_tensor=takes,
                simt_model_us=simt_est,
                tensor_plan=dict(tile=plan[1], splits=plan[3], model_us=plan[7]),
                samples=per_side,
            )
        )
        if len(rows) % 10 == 0:
            with open(args.json, "w") as f:
                json.dump(document(rows), f)
        u = rows[-1]["us"]
        print(
            f"{m}x{n}x{k} {layout} ref {u['torch.mm']:.1f} simt {u['simt']:.1f} tensor "
            f"{u['tensor']:.1f} auto {u['auto']:.1f} (model {simt_est:.1f} / {plan[7]:.1f}, "
            f"tile {plan[1]} x{plan[3]}) err {errs['tensor']:.1e} / {errs['torch.mm']:.1e}",
            flush=True,
        )
    with open(args.json, "w") as f:
        json.dump(document(rows), f)


if __name__ == "__main__":
    main()
