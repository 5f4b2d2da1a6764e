"""Times the GEMM with an N-major B (x @ W, W stored (K, N) row-major) at several row pitches of W
against cuBLAS: whether the wgmma kernel's loads of B slow down where W's rows are only 16-byte
aligned (3000 x 5000 x 2000: rows of 10000 bytes), and by how much a pitch of whole 32 / 64 / 128
bytes recovers. Also the K-major B (x @ W.T) for reference, and the time of a copy of W into a
128-byte pitch (what a padding copy would cost).

    python benchmarks/gemm_tc_plan/measure_pitch.py pitch.json --shape 3000x5000x2000
"""

from __future__ import annotations

import argparse
import json

import torch

import lltm_ext
from lltm_ext.cli.sweep import time_medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", help="where to write the rows")
    parser.add_argument("--shape", default="3000x5000x2000", help="MxNxK")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    parser.add_argument("--budget", type=float, default=0.3, help="seconds of samples per row")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("measure_pitch.py: times CUDA kernels, but torch sees no GPU")
    m, n, k = (int(v) for v in args.shape.split("x"))
    dtype = getattr(torch, args.dtype)
    dev = torch.device("cuda")
    x = torch.randn(m, k, device=dev).to(dtype)
    w = torch.randn(k, n, device=dev).to(dtype)
    rows = []
    elem = w.element_size()
    # N itself, then rounded up to whole 16, 32, 64 and 128 bytes.
    pitches = sorted({n, *(-(-n * elem // a) * a // elem for a in (16, 32, 64, 128))})
    for pitch in pitches:
        buf = torch.zeros(k, pitch, device=dev, dtype=dtype)
        buf[:, :n] = w
        b = buf[:, :n]  # N-major, rows `pitch` elements apart
        (ours, ref), samples = time_medians([lambda b=b: lltm_ext.gemm(x, b), lambda b=b: x @ b],
                                            dev, args.budget)  # fmt: skip
        rows.append({"layout": "n", "pitch_bytes": pitch * elem, "ours_us": ours * 1e6,
                     "ref_us": ref * 1e6, "samples": samples})  # fmt: skip
    wt = w.t().contiguous()  # K-major B: x @ wt.T
    (ours, ref), samples = time_medians(
        [lambda: lltm_ext.gemm(x, wt.t()), lambda: x @ wt.t()], dev, args.budget
    )
    rows.append({"layout": "t", "pitch_bytes": k * elem, "ours_us": ours * 1e6,
                 "ref_us": ref * 1e6, "samples": samples})  # fmt: skip
    pad = pitches[-1]
    dst = torch.empty(k, pad, device=dev, dtype=dtype)
    (copy,), _ = time_medians([lambda: dst[:, :n].copy_(w)], dev, args.budget)
    for r in rows:
        print(
            f"{args.dtype} {m}x{n}x{k} B {'N' if r['layout'] == 'n' else 'K'}-major, rows "
            f"{r['pitch_bytes']} bytes apart: ours {r['ours_us']:.1f} us, cuBLAS "
            f"{r['ref_us']:.1f} us, {r['ref_us'] / r['ours_us']:.3f}x"
        )
    print(f"copy of W into a {pad * elem}-byte pitch: {copy * 1e6:.1f} us")
    with open(args.json, "w") as f:
        json.dump({"shape": [m, n, k], "dtype": args.dtype, "rows": rows,
                   "copy_us": copy * 1e6}, f)  # fmt: skip


if __name__ == "__main__":
    main()
