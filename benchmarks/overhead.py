"""Per-call host overhead of lltm_ext's Python path: tiny inputs, so the time is the host's.

Times eager forward and forward+backward of `relu` on a 1-element tensor and of `lltm` at the
tutorial's size (batch 16, 32 features, state 128), on the CPU and (if present) a CUDA GPU, with
`torch.utils.benchmark` (medians of blocked_autorange). Prints a table; `--json PATH` writes it.
Used to compare two builds (run it under each) or the pure-PyTorch/torch-op floor beside them.
"""

from __future__ import annotations

import argparse
import json
import math

import torch
import torch.utils.benchmark as tb

import lltm_ext


def _lltm_args(device: str) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(0)
    b, i, s = 16, 32, 128
    shapes = [(b, i), (3 * s, s + i), (3 * s,), (b, s), (b, s)]
    scale = [1.0, 1 / math.sqrt(s), 1 / math.sqrt(s), 1.0, 1.0]
    return tuple(
        (torch.randn(*sh, generator=gen) * sc).to(device).requires_grad_()
        for sh, sc in zip(shapes, scale, strict=True)
    )


def cases(device: str) -> dict[str, tuple[str, dict]]:
    """name -> (statement, globals) for Timer."""
    x = torch.randn(1, device=device).requires_grad_()
    g1 = torch.randn(1, device=device)
    args = _lltm_args(device)
    grads = (torch.randn(16, 128, device=device), torch.randn(16, 128, device=device))
    env = {"lltm_ext": lltm_ext, "torch": torch, "x": x, "g1": g1, "args": args, "grads": grads}
    return {
        "relu fwd (1 elem)": ("with torch.no_grad(): lltm_ext.relu(x)", env),
        "relu fwd+bwd (1 elem)": ("torch.autograd.grad(lltm_ext.relu(x), x, g1)", env),
        "torch.relu fwd+bwd (1 elem)": ("torch.autograd.grad(torch.relu(x), x, g1)", env),
        "lltm fwd (16x32x128)": ("with torch.no_grad(): lltm_ext.lltm(*args)", env),
        "lltm fwd+bwd (16x32x128)": ("torch.autograd.grad(lltm_ext.lltm(*args), args, grads)", env),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--min-run-time", type=float, default=1.0, help="seconds per case")
    parser.add_argument("--label", default="", help="a name for this build in the output")
    args = parser.parse_args()
    torch.set_num_threads(min(torch.get_num_threads(), 2))
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    rows = []
    for device in devices:
        for name, (stmt, env) in cases(device).items():
            timer = tb.Timer(stmt=stmt, globals=env)
            timer.timeit(50)  # warm-up
            m = timer.blocked_autorange(min_run_time=args.min_run_time)
            rows.append(
                {
                    "label": args.label,
                    "device": device,
                    "case": name,
                    "median_us": m.median * 1e6,
                    "iqr_us": m.iqr * 1e6,
                }
            )
            print(
                f"{args.label:>10} {device:>5} {name:<30} {m.median * 1e6:9.2f} us "
                f"(IQR {m.iqr * 1e6:.2f})",
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
