"""The example's training throughput on 1 and 2 GPUs (the same batch per GPU), under DDP and FSDP2,
eager and compiled: runs examples/train_lltm.py under torchrun for each, prints a table with the
2-GPU / 1-GPU speedups, writes JSON.

    python tools/measure/dist_throughput.py --json dist_throughput.json
    python tools/measure/dist_throughput.py --gpus 1,2,4 --engines ddp --example-args "--batch 128"

tokens/s counts sequence steps (global batch x sequence length) per second, over the last epoch of
each run (warm: compiled graphs built, the allocator settled). On 1 GPU "ddp" is the plain model
(DDP is not used for a single process) and "fsdp2" a world of one. Every run must exit cleanly;
the script exits 1 if one did not, or (with --require X) if a 2-GPU speedup is below X.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "train_lltm.py"
# Large enough that the GPUs, not the host, set the pace: 256 sequences of 128 steps per GPU,
# state 512.
DEFAULT_ARGS = "--batch 256 --seq-len 128 --state 512 --lr 1e-3 --epochs 3 --steps-per-epoch 20"


def torchrun() -> list[str]:
    """The torchrun beside this Python, or its module."""
    exe = Path(sys.executable).with_name("torchrun")
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "torch.distributed.run"]


def run_one(
    gpus: int,
    engine: str,
    compiled: bool,
    device: str,
    example_args: list[str],
    log_dir: Path,
    timeout: float,
) -> dict:
    """One torchrun of the example; its JSON record, with the last epoch's tokens/s added."""
    name = f"{gpus}gpu_{engine}_{'compiled' if compiled else 'eager'}"
    out = log_dir / f"{name}.json"
    cmd = [*torchrun(), "--standalone", "--nproc_per_node", str(gpus), str(EXAMPLE)]
    cmd += ["--device", device, "--no-lstm", *example_args, "--json", str(out)]
    cmd += ["--fsdp"] if engine == "fsdp2" else []
    cmd += ["--compile"] if compiled else []
    print(f"$ {shlex.join(cmd)}", flush=True)
    with open(log_dir / f"{name}.log", "w") as log:
        result = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout)
    if result.returncode != 0 or not out.is_file():
        tail = (log_dir / f"{name}.log").read_text().splitlines()[-15:]
        print(f"  FAILED (exit {result.returncode}):\n    " + "\n    ".join(tail), flush=True)
        return {"gpus": gpus, "engine": engine, "compiled": compiled, "ok": False}
    record = json.loads(out.read_text())
    model = record["models"]["lltm"]
    steps, seconds = model["epochs"][-1]["steps"], model["epochs"][-1]["seconds"]
    tokens = record["global_batch"] * record["seq_len"] * steps / seconds
    row = {
        "gpus": gpus,
        "engine": engine,
        "compiled": compiled,
        "ok": True,
        "tokens_per_second": tokens,
        "ms_per_step": seconds / steps * 1e3,
        "final_loss": model["final_loss"],
        "gpu": record["gpu"],
        "run": record,
    }
    print(f"  {tokens:,.0f} tokens/s, {row['ms_per_step']:.2f} ms/step", flush=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gpus", default="1,2", help="GPU counts, comma-separated (default 1,2)")
    parser.add_argument("--engines", default="ddp,fsdp2", help="ddp, fsdp2 or both (default: both)")
    parser.add_argument(
        "--modes", default="eager,compiled", help="eager, compiled or both (default: both)"
    )
    parser.add_argument(
        "--example-args",
        default=DEFAULT_ARGS,
        help=f"options for train_lltm.py (default: {DEFAULT_ARGS!r})",
    )
    parser.add_argument(
        "--device",
        choices=["cuda", "cpu"],
        default="cuda",
        help="cuda (default: N GPUs, NCCL), or cpu (N processes, gloo: a dry run of the script)",
    )
    parser.add_argument("--timeout", type=float, default=600, help="seconds per run (600)")
    parser.add_argument("--logs", help="folder for each run's log and JSON (default: a temp one)")
    parser.add_argument("--json", metavar="PATH", help="write the table and every run as JSON")
    parser.add_argument(
        "--require", type=float, help="exit 1 if a speedup at the largest GPU count is below this"
    )
    args = parser.parse_args()
    gpus = [int(g) for g in args.gpus.split(",")]
    engines = args.engines.split(",")
    modes = args.modes.split(",")
    log_dir = Path(args.logs or tempfile.mkdtemp(prefix="dist_throughput-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    example_args = shlex.split(args.example_args)
    env_threads = os.environ.get("OMP_NUM_THREADS")
    rows = []
    for engine in engines:
        for mode in modes:
            for n in gpus:
                rows.append(
                    run_one(
                        n,
                        engine,
                        mode == "compiled",
                        args.device,
                        example_args,
                        log_dir,
                        args.timeout,
                    )
                )
    base = {(r["engine"], r["compiled"]): r for r in rows if r["gpus"] == gpus[0] and r["ok"]}
    print(f"\n{'engine':<8} {'mode':<9} {'GPUs':>4} {'tokens/s':>13} {'ms/step':>9} {'speedup':>8}")
    ok = all(r["ok"] for r in rows)
    for r in rows:
        mode = "compiled" if r["compiled"] else "eager"
        if not r["ok"]:
            print(f"{r['engine']:<8} {mode:<9} {r['gpus']:>4} {'FAILED':>13}")
            continue
        ref = base.get((r["engine"], r["compiled"]))
        r["speedup"] = r["tokens_per_second"] / ref["tokens_per_second"] if ref else None
        speedup = f"{r['speedup']:.2f}x" if r["speedup"] is not None else "-"
        print(
            f"{r['engine']:<8} {mode:<9} {r['gpus']:>4} {r['tokens_per_second']:>13,.0f} "
            f"{r['ms_per_step']:>9.2f} {speedup:>8}"
        )
        if args.require and r["gpus"] == gpus[-1] and (r["speedup"] or 0) < args.require:
            ok = False
    print(f"(speedup: tokens/s over the same engine and mode at {gpus[0]}; logs in {log_dir})")
    if args.json:
        record = {
            "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": sys.argv,
            "example_args": example_args,
            "omp_num_threads": env_threads,
            "rows": rows,
        }
        Path(args.json).write_text(json.dumps(record, indent=1))
        print(f"wrote {args.json}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
