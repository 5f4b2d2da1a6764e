"""Lists the picks a planner change makes differently: the tensor-core planner
(src/gemm/gemm_tc_plan.{h,cpp}) of two revisions, each compiled alone with plan_harness.cpp (plain
C++, no GPU, no torch build), asked the same problems, and the problems whose plan differs (any
field but the modelled time) written as {"MxNxK:tf32:layout": [old plan, new plan]}, the input
measure_widths.py times on a GPU.

The problems, each in 16-bit and in TF32 (--dtypes): the linear layers of ``lltm-ext bench
--linear`` at every M of --ms in layouts nt (``x @ W.T``) and nn (``x @ W``); the GEMM sweep's
shapes of each seed of --seeds (``lltm_ext.cli.sweep.gemm_shapes``, 100 a seed, their layouts);
--random shapes of --lo to --hi in every layout. Operands contiguous as the sweep makes them (a
layout's "t" a transposed contiguous tensor), on a GPU of --sms SMs running both tensor-core
kernels; a 16-bit product of an M-major A and a K-major B planned as the host's automatic swap
plans it (``wgmma_swaps``: the transpose, stored transposed, where its plan is the wgmma kernel's).
What runs before the planner (the skinny, narrow and matrix-vector paths) is not modelled: a pick
listed there may not run.

    python benchmarks/gemm_tc_plan/plan_changes.py 4b8e206 changes.json   # old rev -> work tree
    python benchmarks/gemm_tc_plan/plan_changes.py 4b8e206 changes.json --new sk-width
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PLANNER = ("src/gemm/gemm_tc_plan.h", "src/gemm/gemm_tc_plan.cpp")
Problem = tuple[int, int, int, bool, str]  # M, N, K, tf32, layout


def planner_source(rev: str | None, into: Path) -> None:
    """The planner's two files at `rev` (None: the working tree) under into/gemm/."""
    (into / "gemm").mkdir(parents=True)
    for path in PLANNER:
        if rev is None:
            text = (ROOT / path).read_text()
        else:
            text = subprocess.run(
                ["git", "-C", str(ROOT), "show", f"{rev}:{path}"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        (into / "gemm" / Path(path).name).write_text(text)


def build_harness(rev: str | None, work: Path, cxx: str) -> Path:
    """plan_harness.cpp compiled against the planner at `rev`; the executable's path."""
    src = work / (rev or "worktree").replace("/", "_")
    planner_source(rev, src)
    exe = src / "plan_harness"
    cmd = [cxx, "-std=c++20", "-O2", f"-I{src}", str(HERE / "plan_harness.cpp")]
    subprocess.run([*cmd, str(src / "gemm" / "gemm_tc_plan.cpp"), "-o", str(exe)], check=True)
    return exe


def aligned(ld: int, outer: int, elem: int, bytes_: int) -> bool:
    """The host's rows_aligned for a contiguous operand (its base aligned)."""
    return outer <= 1 or ld * elem % bytes_ == 0


def operand_flags(m: int, n: int, k: int, elem: int, a_k: bool, b_k: bool) -> list[int]:
    """a_aligned b_aligned a_words b_words a_sectors b_sectors of contiguous operands."""
    a_ld, a_outer = (k, m) if a_k else (m, k)
    b_ld, b_outer = (k, n) if b_k else (n, k)
    return [
        int(aligned(ld, outer, elem, bytes_))
        for bytes_ in (16, 4, 32)
        for ld, outer in ((a_ld, a_outer), (b_ld, b_outer))
    ]


def harness_lines(problem: Problem, sms: int) -> list[str]:
    """The harness's input for a problem: the product as given, then (where the host would swap
    it) its transpose stored transposed."""
    m, n, k, tf32, layout = problem
    elem = 4 if tf32 else 2
    a_k, b_k = layout[0] == "n", layout[1] == "t"

    def line(m: int, n: int, k: int, a_k: bool, b_k: bool, c_trans: bool) -> str:
        flags = operand_flags(m, n, k, elem, a_k, b_k)
        fields = [m, n, k, int(tf32), int(a_k), int(b_k), *flags, int(c_trans), sms]
        return " ".join(str(v) for v in fields)

    lines = [line(m, n, k, a_k, b_k, False)]
    # wgmma_swaps (auto): 16-bit, A M-major, B K-major, unless C's rows are not 16-byte aligned
    # while both operands' rows are.
    direct_store = not aligned(n, m, 2, 16)
    if not tf32 and not a_k and b_k:
        both = aligned(m, k, 2, 16) and aligned(k, n, 2, 16)
        if not (direct_store and both):
            lines.append(line(n, m, k, True, False, True))
    return lines


def parse_plan(text: str) -> list[object]:
    """One harness output line as the `_tc_plan` tuple's fields."""
    f = text.split()
    return [f[0], int(f[1]), f[2] == "1", int(f[3]), int(f[4]), f[5] == "1", f[6] == "1",
            float(f[7]), f[8] == "1", int(f[9]), int(f[10])]  # fmt: skip


def run_harness(exe: Path, lines: list[str]) -> list[list[object]]:
    """The harness `exe`'s plan for each input line."""
    out = subprocess.run(
        [str(exe)], input="\n".join(lines) + "\n", check=True, capture_output=True, text=True
    ).stdout.splitlines()
    assert len(out) == len(lines), (len(out), len(lines))
    return [parse_plan(text) for text in out]


def plans(exe: Path, problems: list[Problem], sms: int) -> list[list[object]]:
    """Each problem's plan from the harness `exe`, as the `_tc_plan` tuple's fields."""
    lines, owners = [], []
    for i, p in enumerate(problems):
        for line in harness_lines(p, sms):
            lines.append(line)
            owners.append(i)
    raw: list[list[list[object]]] = [[] for _ in problems]
    for owner, plan in zip(owners, run_harness(exe, lines), strict=True):
        raw[owner].append(plan)
    # The swap's plan where it is the wgmma kernel's, else the product as given.
    return [r[1] if len(r) > 1 and r[1][0] == "wgmma" else r[0] for r in raw]


def problems_of(args: argparse.Namespace) -> list[Problem]:
    """The linear layers, the sweep's seeds and the random shapes, in each dtype."""
    sys.path.insert(0, str(ROOT))
    from lltm_ext.cli.linear import LINEAR_LAYERS
    from lltm_ext.cli.sweep import GEMM_LAYOUTS, gemm_shapes

    shapes: list[tuple[int, int, int, str]] = []
    ms = [int(v) for v in args.ms.split(",") if v]
    shapes += [(m, n, k, lay) for m in ms for k, n in LINEAR_LAYERS["cuda"] for lay in ("nt", "nn")]
    for seed in (int(v) for v in args.seeds.split(",") if v):
        shapes += [(s["M"], s["N"], s["K"], s["layout"]) for s in gemm_shapes(100, seed, "cuda")]
    rng = random.Random(args.random_seed)
    for _ in range(args.random):
        m, n, k = (rng.randint(args.lo, args.hi) for _ in range(3))
        shapes.append((m, n, k, rng.choice(GEMM_LAYOUTS)))
    dtypes = args.dtypes.split(",")
    out: list[Problem] = []
    for m, n, k, layout in dict.fromkeys(shapes):
        out += [(m, n, k, dt == "tf32", layout) for dt in dtypes]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", help="the revision whose planner picked before (git rev)")
    parser.add_argument("json", help="where to write the changed picks")
    parser.add_argument("--new", default=None, help="the revision after (default: the work tree)")
    parser.add_argument("--sms", type=int, default=132, help="the GPU's SMs (H100 / H200: 132)")
    parser.add_argument("--ms", default="1,8,16,32,128,512,1024,2048,4096,8192")
    parser.add_argument("--seeds", default="1,2,3", help="the GEMM sweep's seeds")
    parser.add_argument("--random", type=int, default=4000, help="random shapes")
    parser.add_argument("--random-seed", type=int, default=0)
    parser.add_argument("--lo", type=int, default=256, help="random shapes' smallest side")
    parser.add_argument("--hi", type=int, default=8192, help="random shapes' largest side")
    parser.add_argument("--dtypes", default="16bit,tf32", help="16bit, tf32 or both")
    parser.add_argument("--cxx", default=os.environ.get("CXX", "g++"))
    args = parser.parse_args()
    problems = problems_of(args)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        old = plans(build_harness(args.old, work, args.cxx), problems, args.sms)
        new = plans(build_harness(args.new, work, args.cxx), problems, args.sms)
    changes = {}
    for (m, n, k, tf32, layout), a, b in zip(problems, old, new, strict=True):
        if a[:7] + a[8:] != b[:7] + b[8:]:  # every field but the modelled time
            changes[f"{m}x{n}x{k}:{int(tf32)}:{layout}"] = [a, b]
    with open(args.json, "w") as f:
        json.dump(changes, f, indent=1)
    print(f"{len(changes)} of {len(problems)} picks change; wrote {args.json}")
    for key, (a, b) in list(changes.items())[:40]:
        print(f"  {key:26s} {a[0]} {a[1]}/{a[3]}/{a[10]} -> {b[0]} {b[1]}/{b[3]}/{b[10]}")


if __name__ == "__main__":
    main()
