"""The LLTM sequence's float32 accuracy at each precision setting, against float64.

For each (T, B, I, S): max |out - out64| / max |out64| of the forward output (T, B, S), where
out64 is the same computation in float64 from the same weights, input and zero state, for

* ``lltm_sequence`` at torch's defaults, then under each ``LLTM_EXT_SEQUENCE_PRODUCT`` value given
  (``--products``), with ``torch.backends.cudnn.rnn.fp32_precision = "ieee"``, and with TF32
  matmuls allowed (``torch.backends.cuda.matmul.allow_tf32``);
* a Python loop of ``lltm`` cells (float32 matmuls at torch's default, then with TF32 allowed);
* ``torch.nn.LSTM(I, S)`` at torch's defaults (against itself in float64).

Usage: python tools/measure/sequence_accuracy.py [--device cuda] [--json FILE]
       [--products tf32,simt] [--shapes T,B,I,S ...]
Prints a markdown table; --json writes the same figures.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch

import lltm_ext
from lltm_ext.cli.sweep import _max_err as max_err
from lltm_ext.ops.lltm import lltm_loop

# Points of increasing state and length, the last one of the sweep's kind (a long, wide state).
DEFAULT_SHAPES = [(64, 32, 64, 256), (200, 16, 32, 64), (128, 128, 256, 768), (256, 4, 16, 2048)]


@contextmanager
def setting(
    product: str | None = None, rnn: str | None = None, matmul_tf32: bool | None = None
) -> Iterator[None]:
    """LLTM_EXT_SEQUENCE_PRODUCT, cudnn.rnn.fp32_precision and matmul.allow_tf32 for a block."""
    saved_env = os.environ.get("LLTM_EXT_SEQUENCE_PRODUCT")
    saved_rnn = torch.backends.cudnn.rnn.fp32_precision
    saved_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        if product is not None:
            os.environ["LLTM_EXT_SEQUENCE_PRODUCT"] = product
        if rnn is not None:
            torch.backends.cudnn.rnn.fp32_precision = rnn
        if matmul_tf32 is not None:
            torch.backends.cuda.matmul.allow_tf32 = matmul_tf32
        yield
    finally:
        if saved_env is None:
            os.environ.pop("LLTM_EXT_SEQUENCE_PRODUCT", None)
        else:
            os.environ["LLTM_EXT_SEQUENCE_PRODUCT"] = saved_env
        torch.backends.cudnn.rnn.fp32_precision = saved_rnn
        torch.backends.cuda.matmul.allow_tf32 = saved_tf32


def cell_loop(seq: lltm_ext.LLTMSequence, x: torch.Tensor) -> torch.Tensor:
    """The sequence as a Python loop of lltm cells from a zero state: output (T, B, S)."""
    h0 = x.new_zeros(x.shape[1], seq.state_size)
    return lltm_loop(lltm_ext.lltm, x, seq.weights, seq.bias, h0, torch.zeros_like(h0))


def row(shape: tuple[int, int, int, int], device: str, products: list[str]) -> dict[str, float]:
    t, b, i, s = shape
    torch.manual_seed(0)
    seq = lltm_ext.LLTMSequence(i, s).to(device)
    lstm = torch.nn.LSTM(i, s).to(device)
    x = torch.randn(t, b, i, device=device)
    seq64, lstm64 = copy.deepcopy(seq).double(), copy.deepcopy(lstm).double()
    with torch.no_grad():
        out64 = seq64(x.double())[0]
        lstm_out64 = lstm64(x.double())[0]
        result: dict[str, float] = {}
        result["sequence, defaults"] = max_err(seq(x)[0], out64)
        for p in products:
            with setting(product=p):
                result[f"sequence, PRODUCT={p}"] = max_err(seq(x)[0], out64)
        with setting(rnn="ieee"):
            result['sequence, rnn "ieee"'] = max_err(seq(x)[0], out64)
        with setting(matmul_tf32=True):
            result["sequence, TF32 matmul"] = max_err(seq(x)[0], out64)
        result["cell loop, defaults"] = max_err(cell_loop(seq, x), out64)
        with setting(matmul_tf32=True):
            result["cell loop, TF32 matmul"] = max_err(cell_loop(seq, x), out64)
        result["nn.LSTM, defaults"] = max_err(lstm(x)[0], lstm_out64)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument(
        "--products",
        default="",
        help="LLTM_EXT_SEQUENCE_PRODUCT values to add as columns, comma-separated",
    )
    parser.add_argument("--shapes", nargs="*", help="T,B,I,S each (default: four shapes)")
    args = parser.parse_args()
    shapes = (
        [tuple(int(v) for v in sh.split(",")) for sh in args.shapes]
        if args.shapes
        else DEFAULT_SHAPES
    )
    products = [p for p in args.products.split(",") if p]
    rows = {}
    for shape in shapes:
        rows[shape] = row(shape, args.device, products)  # type: ignore[arg-type]
    cols = list(next(iter(rows.values())))
    print("| T, B, I, S | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for shape, r in rows.items():
        print(f"| {', '.join(map(str, shape))} | " + " | ".join(f"{r[c]:.1e}" for c in cols) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "device": args.device,
                    "torch": torch.__version__,
                    "rows": [{"shape": list(s), **r} for s, r in rows.items()],
                },
                f,
                indent=2,
            )


if __name__ == "__main__":
    main()
