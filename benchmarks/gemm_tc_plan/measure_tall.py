"""The planner with and without the wgmma kernel's 256-row tiles (`_set_gemm_wgmma_knobs(tall=)`),
`lltm_ext.gemm` each way and cuBLAS, interleaved, each checked against float64, at every point
whose plan the 256-row tiles change: 3000x5000x2000 in every layout, the linear layers of
`lltm-ext bench --linear` (x @ W.T and x @ W), the bench's random sweep shapes (bfloat16 and
float16; TF32 never takes them), and those of `--large` random `a @ b.T` shapes of 256-8192 that
the planner gives 256-row tiles. The measurements behind kWgmmaTallTiles and kTallRoundCost
(docs/decisions.md#wgmma-tall).

    python benchmarks/gemm_tc_plan/measure_tall.py tall.json [--random 100 --seed 1 --large 2000]
"""

from __future__ import annotations

from typing import Any

import torch
from measure_tile_widths import operands, parse_args, random_points, run_points

import lltm_ext
from lltm_ext._extension import load_extension
from lltm_ext.cli.linear import LINEAR_LAYERS, LINEAR_MS
from lltm_ext.cli.sweep import gemm_shapes, time_medians

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
LAYOUTS = ("nn", "nt", "tn", "tt")


def large_tall(ext: Any, n: int, seed: int) -> list[tuple[str, int, int, int, str, str]]:
    """Of measure_tile_widths' n random `a @ b.T` shapes (M, N, K of 256-8192, bfloat16), those the
    planner gives 256-row tiles (its plan from the shape alone, `_tc_plan`; the run checks it on
    the tensors)."""
    out = []
    for _what, m, n_, k, layout, dtype in random_points(n, seed):
        whole = k % 16 == 0  # rows of K 16-bit elements: whole 32-byte sectors apart
        flags = (True, True, True, True, 132, True, True, True, True, whole, whole)
        if ext._tc_plan(m, n_, k, False, *flags)[10] == 256:
            out.append(("large", m, n_, k, layout, dtype))
    return out


def candidates(n_random: int, seed: int) -> list[tuple[str, int, int, int, str, str]]:
    """(what, M, N, K, layout, dtype) of every point tried (kept only where the plans differ)."""
    out = [("uneven", 3000, 5000, 2000, lay, dt) for dt in DTYPES for lay in LAYOUTS]
    for dt in DTYPES:
        for m in sorted(set(LINEAR_MS) | {64, 256, 1024, 4096}):
            layers = LINEAR_LAYERS["cuda"]
            out += [("linear", m, n, k, lay, dt) for k, n in layers for lay in ("nt", "nn")]
    for s in gemm_shapes(n_random, seed, "cuda"):
        out += [("random", s["M"], s["N"], s["K"], s["layout"], dt) for dt in DTYPES]
    return out


def main() -> None:
    args = parse_args(__doc__, 0.2, large=True)
    ext = load_extension("gemm")
    skipped = 0

    def plans(a: torch.Tensor, b: torch.Tensor) -> tuple[list[Any], list[Any]]:
        ext._set_gemm_wgmma_knobs(tall=True)
        on = list(ext._cuda_tc_plan(a, b))
        ext._set_gemm_wgmma_knobs(tall=False)
        off = list(ext._cuda_tc_plan(a, b))
        ext._set_gemm_wgmma_knobs()
        return on, off

    def one(what: str, m: int, n: int, k: int, layout: str, dtype: str) -> dict[str, Any] | None:
        nonlocal skipped
        a, b = operands(m, n, k, layout, DTYPES[dtype])
        on, off = plans(a, b)
        if on == off:
            skipped += 1
            return None
        ref = a.double() @ b.double()
        errs = {}
        for name, tall in (("tall", True), ("off", False)):
            ext._set_gemm_wgmma_knobs(tall=tall)
            c = lltm_ext.gemm(a, b)
            errs[name] = float((c.double() - ref).norm() / ref.norm())
            assert errs[name] < 1e-2, (m, n, k, layout, dtype, name, errs)
        ext._set_gemm_wgmma_knobs()

        def with_knob(tall: bool):  # one knob call each way: the same overhead on both sides
            def f() -> None:
                ext._set_gemm_wgmma_knobs(tall=tall)
                lltm_ext.gemm(a, b)

            return f

        def ref_fn() -> None:
            ext._set_gemm_wgmma_knobs()
            torch.matmul(a, b)

        t, samples = time_medians(
            [with_knob(True), with_knob(False), ref_fn], torch.device("cuda"), args.budget
        )
        ext._set_gemm_wgmma_knobs()
        us = {"tall": t[0] * 1e6, "off": t[1] * 1e6, "ref": t[2] * 1e6}
        print(
            f"{what:7s} {m}x{n}x{k} {layout} {dtype:8s} plan {on[1]}x{on[10]} (off {off[1]}"
            f"/{off[3]}): tall {us['tall']:.1f} off {us['off']:.1f} cuBLAS {us['ref']:.1f} us, "
            f"off/tall {us['off'] / us['tall']:.3f}, cuBLAS/tall {us['ref'] / us['tall']:.3f}",
            flush=True,
        )
        return {"what": what, "M": m, "N": n, "K": k, "layout": layout, "dtype": dtype,
                "plan_tall": on, "plan_off": off, "us": us, "err": errs,
                "samples": samples}  # fmt: skip

    points = candidates(args.random, args.seed) + large_tall(ext, args.large, args.seed)
    run_points(args, points, one, {"what": __doc__.split("\n\n")[0]})
    print(f"{skipped} points whose plan the 256-row tiles leave as it was", flush=True)


if __name__ == "__main__":
    main()
