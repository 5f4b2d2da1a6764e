"""Element-wise ops on inputs laid out as users pass them: contiguous, transposed, permuted, sliced.

An experiment (not shipped): lltm_ext.relu / sigmoid / round_ste against torch.relu / sigmoid /
round on x of --shape in each layout (``t``: the last two dimensions of a contiguous tensor
transposed; ``permuted``: a 3-D tensor's dimensions reversed; ``sliced``: every other column, not
dense), timed in turn in one process (``lltm_ext.cli.sweep.time_medians``: medians of interleaved
samples; on CUDA each sample after an L2 flush), forward only. Records each output's strides
beside torch's; --json writes the rows and the environment (``write_json``).

    python benchmarks/elementwise_layouts.py --device cpu --threads 1 --json layouts.json
"""

from __future__ import annotations

import argparse
import sys

import torch

import lltm_ext
from lltm_ext.cli.bench import write_json
from lltm_ext.cli.sweep import time_medians

OPS = {"relu": torch.relu, "sigmoid": torch.sigmoid, "round_ste": torch.round}


def layouts(rows: int, cols: int, dtype: torch.dtype, device: str) -> dict[str, torch.Tensor]:
    """x of rows x cols elements (values of both signs) in each layout."""
    base = torch.randn(rows * cols * 2, device=device).to(dtype) * 3
    flat = base[: rows * cols]
    return {
        "contiguous": flat.view(rows, cols),
        "t": flat.view(cols, rows).t(),
        "permuted": flat.view(2, cols, rows // 2).permute(2, 1, 0),
        "sliced": base.view(rows, 2 * cols)[:, ::2],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    p.add_argument("--shapes", default="4096x4096,1000x998,6x300000", help="RxC list")
    p.add_argument("--dtypes", default="float32,bfloat16", help="comma list")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (CPU)")
    p.add_argument("--budget", type=float, default=0.3, help="seconds per case (default 0.3)")
    p.add_argument("--json", help="write the rows and the environment here")
    args = p.parse_args(argv)

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    rows = []
    for dtype_name in args.dtypes.split(","):
        dtype = getattr(torch, dtype_name)
        for shape in args.shapes.split(","):
            r, c = (int(v) for v in shape.split("x"))
            for layout, x in layouts(r, c, dtype, args.device).items():
                for op, ref in OPS.items():
                    ours = getattr(lltm_ext, op)
                    (t_ours, t_ref), samples = time_medians(
                        [lambda ours=ours, x=x: ours(x), lambda ref=ref, x=x: ref(x)],
                        device,
                        args.budget,
                    )
                    row = {
                        "op": op,
                        "dtype": dtype_name,
                        "shape": [r, c],
                        "layout": layout,
                        "ours_us": round(t_ours * 1e6, 2),
                        "ref_us": round(t_ref * 1e6, 2),
                        "ratio": round(t_ref / t_ours, 3),
                        "strides": [list(ours(x).stride()), list(ref(x).stride())],
                        "samples": samples,
                    }
                    rows.append(row)
                    print(
                        f"{dtype_name:8s} {shape:11s} {layout:10s} {op:9s} "
                        f"{row['ours_us']:10.1f} {row['ref_us']:10.1f} us  {row['ratio']:.2f}x",
                        flush=True,
                    )
    if args.json:
        write_json(args.json, rows, device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
