"""Times plans the planner changed against the plans it picked before: each row of a JSON of
changed picks ({"MxNxK:tf32[:layout]": [old plan, new plan]}, plans as ``_tc_plan`` returns them;
layout as the sweep's, "nt" (``a @ b.T``) where none is given; contiguous operands), the old plan
forced (``_gemm_tensor_core``), the planner's pick (``lltm_ext.gemm``) and cuBLAS, interleaved,
each checked against float64; 16-bit rows in --dtype. Rows whose old plan cannot run on these
operands are skipped; the JSON is rewritten after every row.

    python benchmarks/gemm_tc_plan/measure_widths.py \\
        benchmarks/results/gemm_tc_plan/width_rule_changes.json widths.json
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import torch

import lltm_ext
from lltm_ext._extension import load_extension
from lltm_ext.cli.sweep import time_medians


def measure(
    ext: Any, key: str, old: list[Any], budget: float, dtype16: torch.dtype
) -> dict[str, Any] | None:
    """One changed pick: the old plan forced, the planner's pick and cuBLAS (None: the old plan
    does not run on these operands)."""
    dev = torch.device("cuda")
    shape, tf32, *rest = key.split(":")
    layout = rest[0] if rest else "nt"
    m, n, k = (int(v) for v in shape.split("x"))
    torch.backends.cuda.matmul.allow_tf32 = tf32 == "1"
    dtype = torch.float32 if tf32 == "1" else dtype16

    def operand(rows: int, cols: int, trans: bool) -> torch.Tensor:
        """rows x cols of random values: contiguous, or (trans) a contiguous tensor's transpose."""
        if trans:
            return torch.randn(cols, rows, device=dev).to(dtype).t()
        return torch.randn(rows, cols, device=dev).to(dtype)

    a, b = operand(m, k, layout[0] == "t"), operand(k, n, layout[1] == "t")
    ref = a.double() @ b.double()

    def forced_old() -> torch.Tensor:
        return ext._gemm_tensor_core(a, b, old[0], old[1], old[3])

    try:
        c_old = forced_old()
    except RuntimeError as e:
        print(f"{key}: skipped ({e})")
        return None
    c_new = lltm_ext.gemm(a, b)
    err = [float((c.double() - ref).norm() / ref.norm()) for c in (c_old, c_new)]
    (t_old, t_new, t_ref), samples = time_medians(
        [forced_old, lambda: lltm_ext.gemm(a, b), lambda: a @ b], dev, budget
    )
    now = ext._cuda_tc_plan(a, b)
    print(
        f"{key:22s} {old[0]}{old[1]}/{old[3]} -> {now[0]}{now[1]}/{now[3]}: "
        f"{t_old * 1e6:8.1f} -> {t_new * 1e6:8.1f} us (cuBLAS {t_ref * 1e6:8.1f}): "
        f"ratio {t_ref / t_old:.3f} -> {t_ref / t_new:.3f}  err {err[0]:.1e} {err[1]:.1e}",
        flush=True,
    )
    return {"key": key, "dtype": str(dtype).removeprefix("torch."), "old": list(old[:4]),
            "new": list(now[:4]), "old_us": t_old * 1e6,
            "new_us": t_new * 1e6, "ref_us": t_ref * 1e6, "err_old": err[0], "err_new": err[1],
            "samples": samples}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("changes", help="JSON of the changed picks")
    parser.add_argument("json", help="where to write the rows")
    parser.add_argument("--budget", type=float, default=0.12, help="seconds of samples per row")
    parser.add_argument(
        "--dtype", choices=("bfloat16", "float16"), default="bfloat16", help="16-bit rows' type"
    )
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("measure_widths.py: times CUDA kernels, but torch sees no GPU")
    ext = load_extension("gemm")
    rows = []
    with open(args.changes) as f:
        changes = json.load(f)
    for key, (old, _new) in changes.items():
        row = measure(ext, key, old, args.budget, getattr(torch, args.dtype))
        if row is None:
            continue
        rows.append(row)
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
