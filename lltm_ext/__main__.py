"""Command line: `python -m lltm_ext info | bench` (also installed as `lltm-ext`)."""

from __future__ import annotations

import argparse
import json
import platform
import sys

import torch


def _info(args: argparse.Namespace) -> int:
    import lltm_ext
    from lltm_ext._extension import build_info, cpu_isa, load_extension
    from lltm_ext.ops import MODULES

    built = build_info() or {}
    running = {
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
        ("C++11 ABI", built.get("cxx11_abi"), running["cxx11_abi"]),
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
    for op, o in ops.items():
        if not o["loaded"]:
            print(f"    {op:<8} NOT LOADED: {o['error']}")
        elif o["cuda"]:
            print(f"    {op:<8} CPU + CUDA kernels for {o['cuda_targets'].replace(',', ', ')}")
        elif built.get("ops", {}).get(op, {}).get("cuda"):
            print(
                f"    {op:<8} CPU kernels ({o['loaded']}: this torch has no CUDA; the build also "
                f"has CUDA kernels for {targets})"
            )
        else:
            print(f"    {op:<8} CPU kernels only (this build has no CUDA kernels)")
    return 0


def _bench(args: argparse.Namespace) -> int:
    from lltm_ext._bench import HEADER, environment, run_cases, write_json
    from lltm_ext.ops import MODULES

    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench: --device cuda, but torch sees no CUDA GPU.", file=sys.stderr)
        return 2
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    wanted = set(args.ops.split(",")) if args.ops else set(MODULES)
    unknown = wanted - set(MODULES)
    if unknown:
        print(f"bench: unknown ops {sorted(unknown)}; known: {sorted(MODULES)}", file=sys.stderr)
        return 2
    print("environment:", ", ".join(f"{k}={v}" for k, v in environment(device).items()))
    print("ratio = PyTorch time / lltm_ext time (> 1: lltm_ext is faster); medians after warm-up")
    print(HEADER)
    rows = []
    for op, module in MODULES.items():
        if op in wanted and hasattr(module, "benchmarks"):
            cases = module.benchmarks(device, quick=args.quick)
            rows += run_cases(cases, device, budget_s=0.1 if args.quick else 0.4)
    if args.json:
        write_json(args.json, rows, device)
        print(f"wrote {args.json}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lltm_ext", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="how lltm_ext was built, and what is running it")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=_info)
    p = sub.add_parser("bench", help="time lltm_ext's ops against PyTorch's")
    p.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda if available")
    p.add_argument("--ops", help="comma-separated ops to run (default: all)")
    p.add_argument("--quick", action="store_true", help="fewer sizes and shorter timing")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    p.set_defaults(func=_bench)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
