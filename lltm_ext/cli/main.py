"""Command line of lltm_ext: `lltm-ext info | bench` (the same as `python -m lltm_ext ...`): the
arguments, the commands and ``main``, the entry point of the ``lltm-ext`` script."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from typing import Any

import torch

# Shown next to the "C++11 ABI" row of `info`.
ABI_NOTE = "(libstdc++'s dual ABI, _GLIBCXX_USE_CXX11_ABI: must match torch's to load)"


def _info(args: argparse.Namespace) -> int:
    import lltm_ext
    from lltm_ext._extension import build_info, cpu_isa, load_extension, wheel_page_url
    from lltm_ext.ops import MODULES

    built = build_info() or {}
    running: dict[str, Any] = {
        "torch_version": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "python": platform.python_version(),
        "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
        "gpus": [
            "{} (sm_{}{})".format(
                torch.cuda.get_device_name(i), *torch.cuda.get_device_capability(i)
            )
            for i in range(torch.cuda.device_count())
        ]
        if torch.cuda.is_available()
        else [],
        # The release's find-links page of wheels for this torch (README, "Installing a prebuilt
        # wheel"); it exists where the release built that torch and CUDA.
        "wheel_page": wheel_page_url(),
    }
    ops = {}
    for op in MODULES:
        built_op = built.get("ops", {}).get(op, {})
        try:
            module = load_extension(op)
            ops[op] = dict(
                module._build_info(),
                loaded=module.__name__,
                cpu_twin=built_op.get("cpu_twin", False),
            )
        except ImportError as exc:
            ops[op] = {"loaded": None, "error": str(exc)}
    if args.json:
        json.dump(
            {"version": lltm_ext.__version__, "built": built, "running": running, "ops": ops},
            sys.stdout,
            indent=2,
        )
        print()
        return 0
    print(f"lltm_ext {lltm_ext.__version__}")
    rows = [
        ("torch", built.get("torch_version"), running["torch_version"]),
        (
            "CUDA",
            built.get("cuda_version") or "none (CPU-only build)",
            running["torch_cuda"] or "none (CPU-only torch)",
        ),
        ("Python", built.get("python"), running["python"]),
        (
            "C++11 ABI",
            built.get("cxx11_abi"),
            f"{running['cxx11_abi']}  {ABI_NOTE}",
        ),
        ("compiler", built.get("compiler"), ""),
        ("arch list", built.get("cuda_arch_list") or "-", ""),
        ("GPUs", "", ", ".join(running["gpus"]) or "none visible"),
        (
            "CPU loops",
            "",
            f"{cpu_isa() or '?'} (torch's CPU kernels: {torch.backends.cpu.get_cpu_capability()})",
        ),
    ]
    print(f"  {'':<11} {'built with':<34} running with")
    for name, b, r in rows:
        print(f"  {name:<11} {b!s:<34} {r!s}")
    print("  ops:")
    targets = ", ".join(built.get("cuda_targets") or [])
    w = max((len(op) for op in ops), default=0)  # one column for every op's name
    for op, o in ops.items():
        if not o["loaded"]:
            print(f"    {op:<{w}} NOT LOADED: {o['error']}")
        elif o["cuda"]:
            print(f"    {op:<{w}} CPU + CUDA kernels for {o['cuda_targets'].replace(',', ', ')}")
        elif built.get("ops", {}).get(op, {}).get("cuda"):
            print(
                f"    {op:<{w}} CPU kernels ({o['loaded']}: this torch has no CUDA; the build also "
                f"has CUDA kernels for {targets})"
            )
        else:
            print(f"    {op:<{w}} CPU kernels only (this build has no CUDA kernels)")
    if running["wheel_page"]:
        cuda = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only"
        print(
            f"prebuilt wheels for torch {torch.__version__} ({cuda}): "
            f"pip install lltm_ext -f {running['wheel_page']}"
        )
    return 0


def bench_ops(op: str) -> tuple[str, ...]:
    """The `op` names of an op's bench cases: its case module's ``BENCH_OPS``."""
    from lltm_ext.cli.cases import CASES

    return tuple(CASES[op].BENCH_OPS)


def _bench(args: argparse.Namespace) -> int:
    from lltm_ext.cli.bench import choose_timer
    from lltm_ext.ops import MODULES

    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench: --device cuda, but torch sees no CUDA GPU.", file=sys.stderr)
        return 2
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    known = {name for op in MODULES for name in bench_ops(op)}
    wanted = {o.strip() for o in args.ops.split(",")} if args.ops else known
    unknown = wanted - known
    if unknown:
        print(f"bench: unknown ops {sorted(unknown)}; known: {sorted(known)}", file=sys.stderr)
        return 2
    try:
        timer = choose_timer(device, args.timer)
    except ValueError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    # Fail before timing, not after minutes of it.
    for option, path in (("--json", args.json), ("--plot", args.plot)):
        folder = os.path.dirname(os.path.abspath(path)) if path else None
        if folder and not os.path.isdir(folder):
            print(f"bench: {option} {path}: the folder {folder} does not exist", file=sys.stderr)
            return 2
    from lltm_ext.cli.linear import check_args

    try:
        linear = check_args(args, device)
    except ValueError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    if args.plot:
        from lltm_ext.cli.plot import require_matplotlib

        try:
            require_matplotlib()
        except ImportError as exc:
            print(f"bench: {exc}", file=sys.stderr)
            return 2
    if args.sweep is not None:
        from lltm_ext.cli.sweep import GEMM_DTYPES, SEQ_DTYPES, SEQ_EXTRA_DTYPES, SWEEP_OPS

        known_dtypes = {
            d
            for table in (GEMM_DTYPES, SEQ_DTYPES, SEQ_EXTRA_DTYPES)
            for ds in table.values()
            for d in ds
        }
        bad = sorted(
            {d.strip() for d in (args.dtypes or "").split(",") if d.strip()} - known_dtypes
        )
        if bad:
            print(f"bench: unknown --dtypes {bad}; known: {sorted(known_dtypes)}", file=sys.stderr)
            return 2
        from lltm_ext.cli.sweep import SEQ_CONFIGS

        bad = sorted(
            {c.strip() for c in (args.seq_configs or "").split(",") if c.strip()} - set(SEQ_CONFIGS)
        )
        if bad:
            print(
                f"bench: unknown --seq-configs {bad}; known: {list(SEQ_CONFIGS)}", file=sys.stderr
            )
            return 2
        sweep_ops = [o for o in SWEEP_OPS if o in wanted]
        if not sweep_ops:
            print(
                f"bench: --sweep times {', '.join(SWEEP_OPS)}; --ops names none of them",
                file=sys.stderr,
            )
            return 2
    threads = torch.get_num_threads()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    try:
        if linear is not None:
            from lltm_ext.cli.bench import metadata
            from lltm_ext.cli.linear import run_cli

            return run_cli(args, device, linear, metadata(device, timer, args.argv))
        if args.sweep is not None:
            return _run_sweep(args, device, sweep_ops, timer)
        return _run_bench(args, device, wanted, timer)
    finally:
        torch.set_num_threads(threads)  # main() may be called in a process that goes on


def _run_bench(args: argparse.Namespace, device: torch.device, wanted: set[str], timer: str) -> int:
    from lltm_ext.cli.bench import HEADER, metadata, run_cases, write_json
    from lltm_ext.cli.cases import CASES
    from lltm_ext.ops import MODULES

    budget = args.budget if args.budget is not None else (0.1 if args.quick else 0.4)
    meta = metadata(device, timer, args.argv)
    shown = ("lltm_ext", "torch", "device", "cpu", "threads", "cpu_isa", "gpu", "timer")
    print("environment:", ", ".join(f"{k}={meta[k]}" for k in shown if k in meta))
    print(
        "ratio = PyTorch time / lltm_ext time (> 1: lltm_ext is faster); times: median "
        f"(IQR as % of the median), interleaved, after warm-up; {budget:g} s per case"
    )
    print(HEADER)
    rows = []
    for op in MODULES:
        if wanted & set(bench_ops(op)):
            cases = [c for c in CASES[op].benchmarks(device, quick=args.quick) if c.op in wanted]
            rows += run_cases(cases, device, budget_s=budget, timer=timer)
    if args.json:
        write_json(args.json, rows, device, meta)
        print(f"wrote {args.json}")
    if args.plot:
        from lltm_ext.cli.plot import plot

        plot(rows, meta, args.plot)
        print(f"wrote {args.plot}")
    return 0


def _run_sweep(args: argparse.Namespace, device: torch.device, ops: list[str], timer: str) -> int:
    from lltm_ext.cli.bench import metadata
    from lltm_ext.cli.sweep import (
        SUMMARY_HEADER,
        format_summary,
        plot_sweep,
        run_sweep,
        summarize,
        sweep_json,
    )

    meta = metadata(device, timer, args.argv)
    meta["timer"] = (
        "host clock around blocks of calls"
        if device.type != "cuda"
        else "CUDA events around a few calls back to back, no flush, no spin (the host's time "
        "counted)"
        if args.sweep_timer == "loop"
        else "CUDA events around each call, L2 flushed before it"
    )
    meta["sweep"] = {"n": args.sweep, "seed": args.seed, "ops": ops, "timer": args.sweep_timer}
    budget = args.budget if args.budget is not None else 0.05
    shown = ("lltm_ext", "torch", "device", "cpu", "threads", "gpu")
    print("environment:", ", ".join(f"{k}={meta[k]}" for k in shown if k in meta))
    print(
        f"sweep: {args.sweep} random shapes per op and dtype, seed {args.seed}; ratio = reference "
        "time / lltm_ext time (> 1: lltm_ext is faster), medians of interleaved samples; "
        "err = error against float64 of lltm_ext / of the reference (GEMM: |c - c64| / |c64|; "
        "lltm_sequence: max |out - out64| / max |out64|)"
    )
    dtypes = [d.strip() for d in args.dtypes.split(",")] if args.dtypes else None
    configs = [c.strip() for c in args.seq_configs.split(",")] if args.seq_configs else None
    points = run_sweep(
        ops,
        args.sweep,
        args.seed,
        device,
        dtypes=dtypes,
        budget_s=budget,
        seq_configs=configs,
        seq_large=args.seq_shapes == "large",
        timer=args.sweep_timer,
    )
    summaries = summarize(points)
    print()
    print(SUMMARY_HEADER)
    for s in summaries:
        print(format_summary(s))
    for s in summaries:
        print(f"worst {s.op} {s.dtype}: " + "; ".join(s.worst))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": meta, **sweep_json(points, summaries)}, f, indent=2)
            f.write("\n")
        print(f"wrote {args.json}")
    if args.plot:
        plot_sweep(points, meta, args.plot)
        print(f"wrote {args.plot}")
    return 0


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return int(text)


def _prog() -> str:
    """The name the user ran: `python -m lltm_ext` or the `lltm-ext` script."""
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if name in ("__main__.py", "-m", "-c", ""):
        return "python -m lltm_ext"
    return name if name.startswith("lltm") else "lltm-ext"


_MAIN_EPILOG = """\
examples:
  {prog} info                 how lltm_ext was built, and what runs it
  {prog} bench --quick        a quick timing against PyTorch
  {prog} bench --help         the bench options
"""

_INFO_EPILOG = """\
The table puts what the installed build was compiled with next to what runs it now. A torch
major.minor other than the build's, a CUDA major other than the build's, or another C++11 ABI
setting (libstdc++'s dual ABI, _GLIBCXX_USE_CXX11_ABI) keeps the compiled modules from loading.
The last line names the release's find-links page of prebuilt wheels for the running torch and
its CUDA (pip install lltm_ext -f <page>).

examples:
  {prog} info
  {prog} info --json > info.json
"""

_BENCH_EPILOG = """\
Each case times lltm_ext's kernel and PyTorch's own way of doing the same job, interleaved in
rounds in one run (so noise hits both), with torch.utils.benchmark.Timer.blocked_autorange, or
on CUDA with triton.testing.do_bench when triton is installed. A time is the median of the
samples, its spread the interquartile range (IQR, 25th-75th percentile); ratio = PyTorch time /
lltm_ext time. Element-wise ops also time a copy of the same bytes (their bandwidth roofline).

examples:
  {prog} bench --quick                      all ops, fewer sizes, ~0.1 s per case
  {prog} bench --ops lltm,gemm --device cpu
  {prog} bench --json bench.json --plot bench.png
  {prog} bench --sweep 200 --seed 1 --ops gemm --json sweep.json --plot sweep.png

--sweep N times N random shapes per op and dtype instead of the fixed cases (GEMM: M, N, K each
log-uniform in [1, 12000] under a FLOP cap, all four layouts, bfloat16, float16, float32 and TF32;
lltm_sequence: T in [8, 2048], B in [1, 512], S in [32, 2048], I in [1, 2048], forward+backward
against torch.nn.LSTM) and prints the distribution of the ratios: geometric mean, 10th percentile,
minimum, median, maximum, and the worst shapes. On CUDA each call is timed alone, the host's time
hidden (--sweep-timer covered), or in calls back to back, the host's time counted (loop).

--linear times lltm_ext.gemm(x, W.t()) against x @ W.t(), x (M, K) random normal and W (N, K) as
nn.Linear stores and initializes it, over common layers (K, N) and numbers of tokens M, each M's
ratios summarized over the layers (geometric mean, worst); small M is bound by reading W: its
bandwidth (W bytes / time) is given as a fraction of a copy's, measured in the same run. Both
sides are timed as --sweep times them (CUDA events, L2 flushed; medians of interleaved samples).
  {prog} bench --linear                                   the defaults
  {prog} bench --linear --linear-layouts t,n --json linear.json
  {prog} bench --linear --device cpu --linear-ms 1,16,256 --linear-layers 512x1024,1024x512
"""


_PLAN_SHAPES = {"lltm_sequence": "T,B,I,S", "lltm": "B,I,S", "gemm": "M,K,N"}


def _plan(args: argparse.Namespace) -> int:
    """`plan`: lltm_ext.explain for a call of the given shape, on random tensors."""
    from lltm_ext.explain import explain

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        print(f"{args.argv[0]}: error: --device cuda, but torch sees no GPU", file=sys.stderr)
        return 2
    dtype = {"tf32": torch.float32}.get(args.dtype, getattr(torch, args.dtype))
    torch.backends.cuda.matmul.allow_tf32 = args.dtype == "tf32"
    try:
        dims = [int(d) for d in args.shape.split(",")]
    except ValueError:
        dims = []
    want = _PLAN_SHAPES[args.op]
    if len(dims) != want.count(",") + 1 or min(dims) < 0:
        print(
            f"{args.argv[0]} plan: error: --shape for {args.op} is {want} (non-negative integers),"
            f" got {args.shape!r}",
            file=sys.stderr,
        )
        return 2

    def rand(*shape: int, grad: bool = True) -> torch.Tensor:
        return torch.randn(*shape, device=device, dtype=dtype).requires_grad_(grad)

    call: tuple[torch.Tensor, ...]
    if args.op == "lltm_sequence":
        steps, batch, features, state = dims
        call = (rand(steps, batch, features), rand(3 * state, state + features), rand(3 * state))
    elif args.op == "lltm":
        batch, features, state = dims
        call = (
            rand(batch, features),
            rand(3 * state, state + features),
            rand(3 * state),
            rand(batch, state),
            rand(batch, state),
        )
    else:
        m, k, n = dims
        call = (rand(m, k), rand(k, n))
    found = explain(args.op, *call, run=args.run)
    print(json.dumps(found.as_dict(), indent=2) if args.json else found)
    return 0


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of the command line (`prog`: the name shown in help and errors)."""
    import lltm_ext
    from lltm_ext.cli.linear import (
        CPU_MAX_M,
        DEFAULT_LAYOUTS,
        LINEAR_LAYERS,
        LINEAR_LAYOUTS,
        LINEAR_MS,
    )
    from lltm_ext.ops import MODULES

    prog = prog or _prog()
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog=prog,
        description="lltm_ext: hand-written PyTorch C++/CUDA extension ops.\n"
        "`lltm-ext` and `python -m lltm_ext` are the same command.",
        epilog=_MAIN_EPILOG.format(prog=prog),
        formatter_class=raw,
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"lltm_ext {lltm_ext.__version__} (torch {torch.__version__})",
        help="print the version of lltm_ext (and of the torch running it) and exit",
    )
    sub = parser.add_subparsers(dest="command", metavar="command")

    p = sub.add_parser(
        "info",
        help="how lltm_ext was built, and what is running it",
        description="Show how lltm_ext was built (torch, CUDA, Python, C++ ABI, compiler, GPU\n"
        "architectures) next to what is running it, and which kernels each op module has.",
        epilog=_INFO_EPILOG.format(prog=prog),
        formatter_class=raw,
    )
    p.add_argument("--json", action="store_true", help="print the same as JSON instead of a table")
    p.set_defaults(func=_info)

    p = sub.add_parser(
        "bench",
        help="time lltm_ext's ops against PyTorch's",
        description="Time lltm_ext's ops against PyTorch's; print a table, and optionally "
        "write JSON and a picture.",
        epilog=_BENCH_EPILOG.format(prog=prog),
        formatter_class=raw,
    )
    p.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        help="where to run (default: cuda if torch sees a GPU, else cpu)",
    )
    p.add_argument(
        "--ops",
        metavar="OP[,OP...]",
        help="comma-separated ops to time (default: all: "
        f"{','.join(n for op in MODULES for n in bench_ops(op))})",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="fewer and smaller sizes, and a shorter budget per case (default budget 0.1 s)",
    )
    p.add_argument(
        "--budget",
        type=_positive_seconds,
        metavar="SECONDS",
        help="measuring time per case, lltm_ext and PyTorch together, after warm-up "
        "(default: 0.4, or 0.1 with --quick; per shape with --sweep or --linear: 0.05); more "
        "gives tighter spreads",
    )
    p.add_argument(
        "--threads",
        type=_positive_int,
        metavar="N",
        help="CPU threads for torch and lltm_ext (default: torch's, "
        f"{torch.get_num_threads()} here); 1 gives steadier CPU numbers on a busy machine",
    )
    p.add_argument(
        "--timer",
        choices=["auto", "torch", "triton"],
        default="auto",
        help="auto (default): triton.testing.do_bench on CUDA when triton is importable, "
        "else torch.utils.benchmark.Timer; torch or triton to choose",
    )
    p.add_argument(
        "--json",
        metavar="PATH",
        help="also write the results and the environment (versions, CPU/GPU, threads, time, "
        "command line) as JSON",
    )
    p.add_argument(
        "--plot",
        metavar="PATH",
        help="also draw the results as a PNG: one panel per op, error bars, rooflines (needs "
        "matplotlib: pip install 'lltm_ext[plot]')",
    )
    p.add_argument(
        "--sweep",
        type=_positive_int,
        metavar="N",
        help="time N random shapes per op and dtype (ops gemm and lltm_sequence) and print the "
        "distribution of the ratios instead of the fixed cases",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        metavar="S",
        help="with --sweep: the seed of the shapes (default 0): a seed draws the same shapes; "
        "with --linear: the seed of the operands",
    )
    p.add_argument(
        "--dtypes",
        metavar="D[,D...]",
        help="with --sweep: the dtypes to time (default: bfloat16,float16,float32,tf32 on CUDA; "
        "no tf32 on the CPU; lltm_sequence float32,bfloat16 on CUDA, and tf32 when named); "
        "with --linear: of bfloat16,float16,float32,tf32 (tf32 on CUDA only; default "
        "bfloat16,float16 on CUDA, bfloat16,float32 on the CPU)",
    )
    p.add_argument(
        "--seq-configs",
        metavar="C[,C...]",
        help="with --sweep: the sequence's configurations, each against nn.LSTM in the same one "
        "(default 1): 1 (one layer), l2, l3, l4 (layers), bi (bidirectional), packed (a "
        "PackedSequence of lengths uniform in [T/4, T])",
    )
    p.add_argument(
        "--sweep-timer",
        choices=["covered", "loop"],
        default="covered",
        help="with --sweep on CUDA: covered (default) times one call at a time, the L2 flushed "
        "and the host's time hidden behind a spin of the GPU (a loop that keeps the GPU busy); "
        "loop times a few calls back to back (a loop that runs nothing else: a call's host time "
        "counts where it passes its GPU time)",
    )
    p.add_argument(
        "--seq-shapes",
        choices=["random", "large"],
        default="random",
        help="with --sweep: large adds fixed large states with large batches (S >= 768, "
        "B >= 64, up to S 2048 x B 192) after the random shapes",
    )
    p.add_argument(
        "--linear",
        action="store_true",
        help="time lltm_ext.gemm as linear layers call it, x (M, K) @ W.T with W (N, K) as "
        "nn.Linear stores it (and, with --linear-layouts n, x @ W with W (K, N)), against "
        "x @ W.t(), over common layers and numbers of tokens M; print per M the geometric mean "
        "and the worst ratio over the layers, and the fraction of the copy bandwidth at M <= 16",
    )
    p.add_argument(
        "--linear-ms",
        metavar="M[,M...]",
        help="with --linear: the numbers of tokens M (default: "
        f"{','.join(map(str, LINEAR_MS))}; on the CPU those up to {CPU_MAX_M})",
    )
    p.add_argument(
        "--linear-layers",
        metavar="KxN[,KxN...]",
        help="with --linear: the layers' weights, K inputs x N outputs (default on CUDA: "
        f"{', '.join(f'{k}x{n}' for k, n in LINEAR_LAYERS['cuda'])}; on the CPU: "
        f"{', '.join(f'{k}x{n}' for k, n in LINEAR_LAYERS['cpu'])})",
    )
    p.add_argument(
        "--linear-layouts",
        metavar="L[,L...]",
        help="with --linear: how W is stored: "
        + "; ".join(f"{k}: {v}" for k, v in LINEAR_LAYOUTS.items())
        + f" (default {','.join(DEFAULT_LAYOUTS)})",
    )
    p.set_defaults(func=_bench)

    p = sub.add_parser(
        "plan",
        help="which kernels a call runs, at what precision, and why",
        description="Print what a call of an op with the given shape runs (lltm_ext.explain): "
        "the kernel family its planner picks, the precision, the kernels, and the planner's "
        "reasons. The tensors are random, on --device, in --dtype.",
    )
    p.add_argument("op", choices=sorted(_PLAN_SHAPES), help="the op")
    p.add_argument(
        "--shape",
        required=True,
        metavar="DIMS",
        help="lltm_sequence: T,B,I,S; lltm: B,I,S; gemm: M,K,N",
    )
    p.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda if torch sees a GPU")
    p.add_argument(
        "--dtype",
        choices=["float32", "tf32", "bfloat16", "float16", "float64"],
        default="float32",
        help="tf32: float32 with torch's matmul precision 'high' (default float32)",
    )
    p.add_argument("--run", action="store_true", help="also run it and list the kernels that ran")
    p.add_argument("--json", action="store_true", help="print JSON instead of the report")
    p.set_defaults(func=_plan)
    return parser


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Run the command line with `argv` (default: sys.argv[1:]); returns the exit status."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    args.argv = [parser.prog, *(sys.argv[1:] if argv is None else argv)]  # for the JSON
    if args.command is None:
        parser.print_help(sys.stderr)
        print(
            f"\n{parser.prog}: error: no command given; choose one of: info, bench, plan",
            file=sys.stderr,
        )
        return 2
    return args.func(args)
