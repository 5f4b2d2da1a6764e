"""Times the linear layers at small M under the two ways of emptying L2 before a sample
(``lltm_ext.cli.sweep._CudaSampler``'s `flush`): "write" (a 256 MB zero fill, L2 left full of
dirty lines that the timed call writes back) and "read" (a 256 MB sum, L2 left clean), to show how
much of a memory-bound call's time is the previous fill's write-back rather than its own reads.

Per layer of ``lltm-ext bench --linear`` (x @ W.T, bfloat16, W (N, K) as nn.Linear stores it) and
per M of --ms, interleaved in one timing per flush: lltm_ext.gemm, cuBLAS (x @ W.T), and a
read-only reference, W.sum() (torch's reduction: W's bytes in, nothing out); with each flush the
copy bandwidth (``copy_bandwidth``'s buffer, timed the same way). One JSON row per (layer, M,
flush), with W's bytes over each time as a fraction of that flush's copy bandwidth.

    python benchmarks/gemm_skinny/measure_flush.py flush.json
"""

from __future__ import annotations

import argparse
import json

import torch

import lltm_ext
from lltm_ext.cli.linear import LINEAR_LAYERS
from lltm_ext.cli.sweep import time_medians

FLUSHES = ("write", "read")


def copy_gbps(nbytes: int, flush: str, budget_s: float, device: str) -> float:
    """dst.copy_(src) of `nbytes`, 2 bytes / median time in GB/s, under `flush`."""
    src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    (t,), _ = time_medians([lambda: dst.copy_(src)], src.device, budget_s, flush=flush)
    return 2 * nbytes / t / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", help="where to write the rows")
    parser.add_argument("--ms", default="1,16")
    parser.add_argument("--device", default="cuda", help="cpu: a dry run (nothing flushed)")
    parser.add_argument("--budget", type=float, default=0.1, help="seconds of samples per point")
    args = parser.parse_args()
    ms = [int(m) for m in args.ms.split(",")]
    layers = LINEAR_LAYERS[args.device]
    largest = max(k * n * 2 for k, n in layers)
    copies = {f: copy_gbps(largest, f, args.budget, args.device) for f in FLUSHES}
    print("copy GB/s:", {f: round(g) for f, g in copies.items()}, flush=True)
    rows = []
    for k, n in layers:
        w = torch.rand(n, k, device=args.device).sub_(0.5).to(torch.bfloat16)
        w_bytes = w.numel() * 2
        for m in ms:
            x = torch.randn(m, k, device=args.device).to(torch.bfloat16)
            fns = {
                "ours": lambda x=x, w=w: lltm_ext.gemm(x, w.t()),
                "cublas": lambda x=x, w=w: x @ w.t(),
                "w_sum": lambda w=w: w.sum(),
            }
            for flush in FLUSHES:
                times, samples = time_medians(list(fns.values()), w.device, args.budget, flush)
                row = {
                    "M": m,
                    "K": k,
                    "N": n,
                    "flush": flush,
                    "samples": samples,
                    "copy_gbps": copies[flush],
                }
                for name, t in zip(fns, times, strict=True):
                    row[f"{name}_us"] = t * 1e6
                    row[f"{name}_bw_fraction"] = w_bytes / t / 1e9 / copies[flush]
                rows.append(row)
                print(
                    f"{m:5d} {k:6d}x{n:<6d} {flush:5s} "
                    + "  ".join(
                        f"{name} {row[f'{name}_us']:7.1f} us {row[f'{name}_bw_fraction']:.2f}"
                        for name in fns
                    ),
                    flush=True,
                )
    with open(args.json, "w") as f:
        json.dump({"copy_gbps": copies, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
