"""Times the matrix-vector row kernel (src/gemm/tiles/gemv.cuh: the side of 1 to 4 against a
K-contiguous operand) where that operand's rows start off 16-byte boundaries (an odd K as row
pitch), against the same values stored at a pitch of whole 128 bytes and against cuBLAS: what the
unaligned rows cost the kernel, and so whether its padded staging of Y leaves any of it.

Each point is M x N x K in a layout of the random sweep (``a`` / ``b`` row-major "n" or a
transposed view "t"); "pitched" is ``b`` (or ``a``, whichever holds the long K-contiguous rows)
copied into rows of a 128-byte pitch, as the aligned case it is measured against.

    python benchmarks/gemm_skinny/measure_gemv_pitch.py gemv_pitch.json
"""

from __future__ import annotations

import argparse
import json

import torch
from rows import timed_row  # this folder's (run as a script from here)

import lltm_ext

POINTS = (
    "1x5320x9038:tt",
    "1x5320x9038:nt",
    "1x11008x4097:nt",
    "3x11008x4097:nt",
    "1x11008x8195:nt",
    "4x11008x8195:nt",
    "1x37x8195:nt",
    "1x11008x4096:nt",
    "3x11008x4096:nt",
    "3x10250x13:tt",
    "2x7449x5:nt",
)


def operand(rows: int, cols: int, dtype: torch.dtype, pitch: int, gen: torch.Generator):
    """A (rows, cols) standard-normal tensor stored with row pitch `pitch` >= cols elements."""
    base = torch.randn(rows, pitch, generator=gen, device="cuda").to(dtype)
    return base[:, :cols]


def pitched(t: torch.Tensor) -> torch.Tensor:
    """t's values, its unit-stride dimension's rows at a pitch of whole 128 bytes."""
    if t.stride(-1) == 1:
        rows, cols = t.shape
        p = -(-cols * t.element_size() // 128) * 128 // t.element_size()
        out = torch.empty(rows, p, dtype=t.dtype, device=t.device)[:, :cols]
        out.copy_(t)
        return out
    return pitched(t.t()).t()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", help="where to write the rows")
    parser.add_argument("--points", default=",".join(POINTS), help="MxNxK:layout, comma-separated")
    parser.add_argument("--dtypes", default="bfloat16,float16,float32")
    parser.add_argument("--budget", type=float, default=0.2, help="seconds of samples per point")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("measure_gemv_pitch.py: times CUDA kernels, but torch sees no GPU")
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for dtype_name in args.dtypes.split(","):
        dtype = getattr(torch, dtype_name)
        for point in args.points.split(","):
            shape, layout = point.split(":")
            m, n, k = (int(v) for v in shape.split("x"))
            a = (
                operand(k, m, dtype, m, gen).t()
                if layout[0] == "t"
                else operand(m, k, dtype, k, gen)
            )
            b = (
                operand(n, k, dtype, k, gen).t()
                if layout[1] == "t"
                else operand(k, n, dtype, n, gen)
            )
            # The long rows: b's when the side is M, a's when it is N.
            a_p, b_p = (a, pitched(b)) if m <= n else (pitched(a), b)
            fns = {
                "cublas": lambda a=a, b=b: a @ b,
                "ours": lambda a=a, b=b: lltm_ext.gemm(a, b),
                "ours_pitched": lambda a=a_p, b=b_p: lltm_ext.gemm(a, b),
            }
            row = timed_row(a, b, fns, args.budget, layout=layout, dtype=dtype_name)
            us = row["us"]
            print(
                f"{dtype_name:9} {shape:>14} {layout}  cublas {us['cublas']:7.1f}  ours "
                f"{us['ours']:7.1f}  pitched {us['ours_pitched']:7.1f} us  cuBLAS/ours "
                f"{us['cublas'] / us['ours']:.3f}",
                flush=True,
            )
            rows.append(row)
    meta = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
    }
    with open(args.json, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
