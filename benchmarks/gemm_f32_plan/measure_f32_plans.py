"""Times every exact float32 SIMT GEMM schedule (tile config x K splits, forced) and cuBLAS on
random shapes: the data that fit_f32_model.py fits the heuristic's constants to
(src/gemm/gemm_heuristic.cpp).

For each of N shapes drawn as `lltm-ext bench --sweep` draws them (lltm_ext.cli.sweep.gemm_shapes,
this seed) whose sides are both above 4 (smaller sides take the matrix-vector kernels, not the
heuristic): each candidate config at each power-of-two number of K splits whose parts are at least
64 deep, what the heuristic picks, torch.mm and (--short-k) the short-K kernel forced at any K, all
sampled interleaved (one call each in turn, L2 flushed before each, as the sweep samples). Writes
one JSON row per shape (rewritten every 10 rows, so a run cut short keeps what it measured).

    python benchmarks/gemm_f32_plan/measure_f32_plans.py f32_plans.json --shapes 200 --seed 2
    python benchmarks/gemm_f32_plan/measure_f32_plans.py short_k.json --seed 3 --k-max 128 --short-k
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics

import torch

import lltm_ext
from lltm_ext._extension import load_extension
from lltm_ext.cli.sweep import _CudaSampler, gemm_shapes

CONFIGS = (0, 1, 2, 3, 11, 12, 13, 14, 15)  # the heuristic's candidates on the cp.async path
# --large: the bench's kind of shape, aligned, in every layout (so that a fit keeps their picks).
LARGE = (
    (4096, 4096, 4096), (8192, 8192, 8192), (2048, 2048, 2048), (3000, 5000, 2000),
    (2048, 12288, 2048), (1024, 1024, 1024),
)  # fmt: skip
SPLITS = (1, 2, 4, 8, 16, 32, 64)


def make(rows: int, cols: int, transposed: bool, gen: torch.Generator) -> torch.Tensor:
    """A random (rows, cols) float32 CUDA matrix, row-major or a transposed row-major one's view."""
    x = (
        torch.randn(cols, rows, generator=gen)
        if transposed
        else torch.randn(rows, cols, generator=gen)
    )
    x = x.to("cuda")
    return x.t() if transposed else x


def aligned(t: torch.Tensor) -> bool:
    """Whether t's rows (along its unit stride) start 16 bytes apart from a 16-byte base."""
    ld = t.stride(0) if t.stride(1) == 1 else t.stride(1)
    return ld % 4 == 0 and t.data_ptr() % 16 == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", help="where to write the rows")
    parser.add_argument("--shapes", type=int, default=200)
    parser.add_argument("--seed", type=int, default=2, help="not the seed the sweep reports")
    parser.add_argument("--budget", type=float, default=0.3, help="seconds of samples per shape")
    parser.add_argument(
        "--large", action="store_true", help="the LARGE shapes in every layout, not random ones"
    )
    parser.add_argument(
        "--configs",
        default=",".join(map(str, CONFIGS)),
        help="comma-separated float32 config indices to time (gemm_configs.h)",
    )
    parser.add_argument("--k-max", type=int, default=0, help="only shapes of K at most this")
    parser.add_argument(
        "--short-k", action="store_true", help="also the short-K kernel (`_gemm_short_k`), any K"
    )
    args = parser.parse_args()
    configs = [int(c) for c in args.configs.split(",")]
    ext = load_extension("gemm")
    dev = torch.device("cuda")
    torch.set_float32_matmul_precision("highest")
    sampler = _CudaSampler(dev)
    rows = []
    shapes = (
        [dict(M=m, N=n, K=k, layout=lay) for m, n, k in LARGE for lay in ("nn", "nt", "tn", "tt")]
        if args.large
        else gemm_shapes(args.shapes, args.seed, "cuda")
    )
    for idx, s in enumerate(shapes):
        m, n, k, layout = s["M"], s["N"], s["K"], s["layout"]
        if min(m, n) <= 4 or (args.k_max and k > args.k_max):
            continue
        gen = torch.Generator().manual_seed(idx)
        a, b = make(m, k, layout[0] == "t", gen), make(k, n, layout[1] == "t", gen)
        names = ["torch.mm", "auto"]
        fns = [functools.partial(torch.mm, a, b), functools.partial(lltm_ext.gemm, a, b)]
        if args.short_k:
            names.append("short_k")
            fns.append(functools.partial(ext._gemm_short_k, a, b))
        for config in configs:
            for splits in SPLITS:
                if splits > 1 and -(-k // splits) < 64:
                    break
                fn = functools.partial(ext._gemm_with_config, a, b, config, splits)
                try:
                    fn()
                except RuntimeError:  # config 11 where B is not K-contiguous, and the like
                    continue
                names.append(f"{config}/{splits}")
                fns.append(fn)
        for fn in fns:
            fn()
        torch.cuda.synchronize()
        first = sampler.run(fns, 1)
        per_side = int(min(30, max(5, args.budget / max(sum(x[0] for x in first), 1e-9))))
        times = [statistics.median(x) * 1e6 for x in sampler.run(fns, per_side)]
        rows.append(
            dict(
                **s,
                a_aligned=aligned(a),
                b_aligned=aligned(b),
                choice=list(ext._cuda_choose(m, n, k, layout[1] == "t")),
                ref_us=times[0],
                auto_us=times[1],
                plans={nm: t for nm, t in zip(names[2:], times[2:], strict=True) if "/" in nm},
                **({"short_k_us": times[2]} if args.short_k else {}),
                samples=per_side,
            )
        )
        if len(rows) % 10 == 0:
            with open(args.json, "w") as f:
                json.dump(rows, f)
        best = min(rows[-1]["plans"].items(), key=lambda kv: kv[1])
        short = f" short_k {times[2]:.1f}" if args.short_k else ""
        print(
            f"{m}x{n}x{k} {layout} ref {times[0]:.1f} auto {times[1]:.1f} {rows[-1]['choice']}"
            f" best {best[0]} {best[1]:.1f}{short}",
            flush=True,
        )
    with open(args.json, "w") as f:
        json.dump(rows, f)


if __name__ == "__main__":
    main()
