"""One machine's results file: every figure the README and the design notes show, from one run.

``run`` times the build that is installed (or built in place in this tree) on this machine and
writes ``benchmarks/results/<machine>.json``: the command line, the build (git commit, version,
architectures), the date, the hardware and versions, and every figure:

* ``bench``: ``lltm-ext bench``'s fixed cases of every op (lltm_ext against PyTorch's own way);
* ``sweeps``: ``lltm-ext bench --sweep``'s random shapes of GEMM and of ``lltm_sequence``, each
  point and the distribution of the ratios;
* ``linear``: ``lltm-ext bench --linear``: GEMM as linear layers call it (``x @ W.T``, and a
  weight stored (K, N)) over common layers and numbers of tokens M, each point and the per-M
  summary, with the copy bandwidth measured in the same run;
* ``accuracy`` (CUDA): the float32 sequence's error against float64 at each precision setting
  (tools/measure/sequence_accuracy.py's rows).

The plan (sizes, shape counts, time budgets) is fixed per device so that a results file is the same
measurement each time: about 5 minutes on one CUDA GPU, about 4 on one CPU thread. The file is
written after each part, so a run stopped early keeps what it measured. Then
``python tools/docs/results_md.py --write`` renders the README's and the docs' tables and pictures
from every committed results file (tests/test_results.py holds the docs to them).

Usage:
    python tools/measure/results.py run --machine cpu                      # CPU, one thread
    python tools/measure/results.py run --machine h200 --out /tmp/h200.json  # on the GPU
    python tools/measure/results.py run --machine h200 --parts accuracy --out /tmp/h200.json
    python tools/measure/results.py run --machine h200 --parts linear --keep-older  # a newer build
    python tools/measure/results.py plan [--machine NAME]                  # print the plan
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"

# The machines whose results the docs show: name -> the device it times and a line of what it is.
MACHINES: dict[str, dict[str, str]] = {
    "cpu": {"device": "cpu", "what": "one thread of the development machine's CPU"},
    "h200": {"device": "cuda", "what": "one NVIDIA H200 GPU"},
}

# What a run measures, per device. Each part is one `lltm-ext bench` command (its arguments after
# `bench`), or the accuracy table.
PLANS: dict[str, list[dict[str, Any]]] = {
    "cpu": [
        {"part": "bench", "args": ["--device", "cpu", "--threads", "1", "--budget", "1"]},
        {
            "part": "sweep:gemm",
            "args": ["--device", "cpu", "--threads", "1", "--ops", "gemm"]
            + ["--sweep", "200", "--seed", "1"],
        },
        {
            "part": "sweep:lltm_sequence",
            "args": ["--device", "cpu", "--threads", "1", "--ops", "lltm_sequence"]
            + ["--sweep", "12", "--seed", "1"],
        },
        {
            "part": "linear",
            "args": ["--device", "cpu", "--threads", "1", "--linear", "--linear-layouts", "t,n"],
        },
    ],
    "cuda": [
        {"part": "bench", "args": ["--device", "cuda", "--budget", "0.2"]},
        {
            "part": "sweep:gemm",
            "args": ["--device", "cuda", "--ops", "gemm", "--sweep", "100", "--seed", "1"],
        },
        {
            "part": "sweep:lltm_sequence",
            "args": ["--device", "cuda", "--ops", "lltm_sequence", "--sweep", "40", "--seed", "1"],
        },
        {
            "part": "sweep:lltm_sequence_autocast",
            "args": ["--sweep", "40", "--seed", "1", "--ops", "lltm_sequence"]
            + ["--dtypes", "autocast", "--device", "cuda"],
        },
        {
            "part": "sweep:lltm_sequence_large",
            "args": ["--sweep", "1", "--seed", "1", "--seq-shapes", "large"]
            + ["--dtypes", "float32,bfloat16,autocast", "--budget", "0.02", "--ops"]
            + ["lltm_sequence"],
        },
        {
            "part": "sweep:lltm_sequence_configs",
            "args": ["--sweep", "20", "--seed", "1", "--seq-configs", "l2,l4,bi"]
            + ["--dtypes", "float32,bfloat16,autocast", "--budget", "0.02", "--ops"]
            + ["lltm_sequence"],
        },
        {
            "part": "sweep:lltm_sequence_packed",
            "args": ["--sweep", "20", "--seed", "1", "--seq-configs", "packed"]
            + ["--dtypes", "float32,bfloat16,autocast", "--budget", "0.02", "--ops"]
            + ["lltm_sequence"],
        },
        {
            "part": "sweep:lltm_sequence_loop",
            "args": ["--sweep", "40", "--seed", "1", "--ops", "lltm_sequence"]
            + ["--dtypes", "float32,bfloat16,autocast", "--sweep-timer", "loop"]
            + ["--device", "cuda"],
        },
        {
            "part": "sweep:lltm_sequence_configs_loop",
            "args": ["--sweep", "20", "--seed", "1", "--seq-configs", "l2,l4,bi"]
            + ["--dtypes", "float32,bfloat16,autocast", "--budget", "0.02", "--sweep-timer"]
            + ["loop", "--ops", "lltm_sequence"],
        },
        {
            "part": "linear",
            "args": ["--device", "cuda", "--linear", "--dtypes", "bfloat16,float16"]
            + ["--linear-layouts", "t,n"],
        },
        {"part": "accuracy", "device": "cuda"},
    ],
}

# The accuracy table's shapes (T, B, I, S): increasing states and lengths; the last three run the
# sequence's tiled kernels on a GPU, the others its cluster, small-state and cuBLAS paths.
ACCURACY_SHAPES = [
    (64, 32, 64, 256),
    (200, 16, 32, 64),
    (128, 128, 256, 768),
    (256, 4, 16, 2048),
    (256, 16, 32, 1100),
    (200, 2, 16, 1397),
    (65, 261, 71, 285),
]


def run_command(machine: str) -> str:
    """The command that writes `machine`'s results file (as the docs quote it)."""
    return f"python tools/measure/results.py run --machine {machine}"


def file_command(machine: str, held: list[str]) -> str:
    """The command that measures again the parts `held` of `machine`'s results file (its
    top-level ``command``): run_command(machine) where the file holds the whole plan, else with
    ``--parts`` naming those it holds, in the plan's order. Each part keeps the command that timed
    it (its ``command``) and, where that was an earlier build, the build (``part_builds``)."""
    plan = [p["part"] for p in PLANS[MACHINES[machine]["device"]]]
    if set(plan) <= set(held):
        return run_command(machine)
    return f"{run_command(machine)} --parts {','.join(p for p in plan if p in held)}"


def results_path(machine: str) -> Path:
    return RESULTS / f"{machine}.json"


def _import_lltm_ext() -> Any:
    """lltm_ext as installed, else the source tree's in-place build (appended to the path, so an
    install stays first)."""
    try:
        import lltm_ext
    except ImportError:
        sys.path.append(str(ROOT))
        import lltm_ext
    if str(ROOT) not in sys.path:
        sys.path.append(str(ROOT))  # tools.measure.sequence_accuracy
    return lltm_ext


def _git(*args: str) -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return ""
    return out.stdout.strip()


def build_record(lltm_ext: Any, commit: str | None = None) -> dict[str, Any]:
    """What was timed: the commit of this tree (`commit` where the tree has no git of its own),
    whether tracked files differed from it (None: not known, with `commit` given), and the build
    record of the lltm_ext imported (version,
    torch, CUDA, architectures, compiler)."""
    try:
        from lltm_ext._build_info import BUILD_INFO
    except ImportError:
        BUILD_INFO = {}
    keep = (
        "version",
        "torch_version",
        "cuda_version",
        "cuda_arch_list",
        "cuda_targets",
        "compiler",
        "debug",
    )
    return {
        "git_commit": commit or _git("rev-parse", "HEAD"),
        # With `commit` given, the tree's own .git (if any) is not that commit's (a copy of a
        # working tree carries a stale one): whether the tree differs is not known here.
        "git_dirty": None
        if commit
        else bool(_git("status", "--porcelain", "--untracked-files=no")),
        "lltm_ext": lltm_ext.__version__,
        "imported_from": str(Path(lltm_ext.__file__).parent),
        **{k: BUILD_INFO.get(k) for k in keep},
    }


def _round(value: Any) -> Any:
    """Floats to 4 significant digits (a results file is read by people and diffs)."""
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, dict):
        return {k: _round(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_round(v) for v in value]
    return value


def _bench_part(args: list[str]) -> dict[str, Any]:
    from lltm_ext.cli.main import main

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "part.json")
        argv = ["bench", *args, "--json", path]
        code = main(argv)
        if code != 0:
            raise SystemExit(f"results: lltm-ext {' '.join(argv)} failed ({code})")
        with open(path) as f:
            data = json.load(f)
    env = data.pop("environment")
    return {"command": "lltm-ext bench " + " ".join(args), "environment": env, **data}


def _accuracy_part(device: str) -> dict[str, Any]:
    from tools.measure.sequence_accuracy import row

    rows = []
    for shape in ACCURACY_SHAPES:
        rows.append({"shape": list(shape), **row(shape, device, [])})
        print("accuracy", shape, rows[-1], flush=True)
    shapes = " ".join(",".join(map(str, s)) for s in ACCURACY_SHAPES)
    return {
        "command": f"python tools/measure/sequence_accuracy.py --device {device} --shapes {shapes}",
        "measure": "max |out - out64| / max |out64| of the forward output, from a zero state",
        "rows": rows,
    }


def part_names(doc: dict[str, Any]) -> list[str]:
    """The plan's parts a results file holds (bench, sweep:NAME, linear, accuracy)."""
    names = [k for k in ("bench", "linear", "accuracy") if k in doc]
    return names + [f"sweep:{k}" for k in doc.get("sweeps", {})]


def merge_parts(old: dict[str, Any], doc: dict[str, Any], running: list[str]) -> dict[str, Any]:
    """The new file `doc` (about to run the parts `running`) with the other parts of the file
    `old`. A part kept from another build than doc's names that build (commit, version, date) in
    ``part_builds``, where the docs show it beside the part's figures; a part run again drops it."""
    kept = {k: old[k] for k in ("bench", "linear", "accuracy") if k in old}
    sweeps = {k: v for k, v in old.get("sweeps", {}).items() if f"sweep:{k}" not in running}
    if sweeps:
        kept["sweeps"] = sweeps
    for k in ("bench", "linear", "accuracy"):
        if k in running:
            kept.pop(k, None)
    builds = dict(old.get("part_builds", {}))
    if old["build"]["git_commit"] != doc["build"]["git_commit"]:
        mine = {
            "git_commit": old["build"]["git_commit"],
            "lltm_ext": old["build"].get("lltm_ext"),
            "date": old["date"],
        }
        for name in part_names(old):
            builds.setdefault(name, mine)
    builds = {k: v for k, v in builds.items() if k not in running and k in part_names(kept)}
    builds = {k: v for k, v in builds.items() if v["git_commit"] != doc["build"]["git_commit"]}
    merged = {**doc, **kept, "seconds": {**old.get("seconds", {})}}
    if builds:
        merged["part_builds"] = builds
    return merged


def run(
    machine: str,
    out: Path,
    parts: list[str] | None,
    commit: str | None = None,
    keep_older: bool = False,
) -> int:
    device = MACHINES[machine]["device"] if machine in MACHINES else None
    if device is None:
        print(f"results: unknown machine {machine!r}; known: {sorted(MACHINES)}", file=sys.stderr)
        return 2
    unknown = sorted(set(parts or ()) - {p["part"] for p in PLANS[device]})
    if unknown:
        known = ", ".join(p["part"] for p in PLANS[device])
        print(
            f"results: no part {unknown} in {machine}'s plan; its parts: {known}", file=sys.stderr
        )
        return 2
    lltm_ext = _import_lltm_ext()
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        print("results: this machine's plan times CUDA, but torch sees no GPU", file=sys.stderr)
        return 2
    plan = [p for p in PLANS[device] if parts is None or p["part"] in parts]
    from lltm_ext.cli.bench import metadata

    env = metadata(torch.device(device))
    build = build_record(lltm_ext, commit)
    if len(build["git_commit"]) != 40:
        print("results: no git commit found for this tree: pass --git-commit SHA", file=sys.stderr)
        return 2
    doc: dict[str, Any] = {
        "machine": machine,
        "what": MACHINES[machine]["what"],
        "command": run_command(machine),  # file_command of the parts held, at each write
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "build": build,
        "hardware": {
            k: env[k] for k in ("cpu", "cpu_isa", "gpu", "gpus", "sms", "cuda") if k in env
        },
        "versions": {k: env[k] for k in ("python", "torch", "platform") if k in env},
        "seconds": {},
    }
    if parts is not None and out.is_file():  # more parts: merged into the file
        with open(out) as f:
            old = json.load(f)
        same = old["build"]["git_commit"] == build["git_commit"]
        if old.get("machine") != machine or not (same or keep_older):
            print(
                f"results: {out} is another machine's or build's; not merging (--keep-older "
                "keeps an earlier build's other parts, each marked with its build)",
                file=sys.stderr,
            )
            return 2
        doc = merge_parts(old, doc, [p["part"] for p in plan])
    out.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    for step in plan:
        t0 = time.perf_counter()
        name = step["part"]
        print(f"\n== results: {name} ==", flush=True)
        if name == "accuracy":
            result = _accuracy_part(step["device"])
        else:
            result = _bench_part(step["args"])
        if name == "bench":
            doc["bench"] = result
        elif name.startswith("sweep:"):
            doc.setdefault("sweeps", {})[name.split(":", 1)[1]] = result
        else:
            doc[name] = result
        doc["seconds"][name] = round(time.perf_counter() - t0, 1)
        doc["command"] = file_command(machine, part_names(doc))
        with open(out, "w") as f:  # after each part: a run stopped early keeps what it measured
            json.dump(_round(doc), f, indent=1)
            f.write("\n")
        print(f"results: {name} took {doc['seconds'][name]:.0f} s; wrote {out}", flush=True)
    print(f"results: {time.perf_counter() - start:.0f} s in all; wrote {out}")
    print("then: python tools/docs/results_md.py --write (the tables and pictures of the docs)")
    return 0


def import_part(machine: str, part: str, path: Path, out: Path, commit: str) -> int:
    """Records the JSON that `lltm-ext bench ... --json PATH` wrote, run by hand as the plan's
    part `part` on `machine`, into `out`, the machine's results file of build `commit`: the
    command it ran must be the part's, and the file's build that commit (the run's tree)."""
    device = MACHINES[machine]["device"] if machine in MACHINES else None
    steps = [s for s in PLANS.get(device or "", []) if s["part"] == part and "args" in s]
    if not steps:
        print(f"results: {machine!r} has no bench part {part!r}", file=sys.stderr)
        return 2
    with open(path) as f:
        data = json.load(f)
    env = data.pop("environment")
    argv = list(env.get("argv", [])[1:])
    if "--json" in argv:  # where the run wrote its JSON is not part of what it measured
        i = argv.index("--json")
        del argv[i : i + 2]
    if argv != ["bench", *steps[0]["args"]]:
        print(
            f"results: {path} ran {argv}, not the part's bench {steps[0]['args']}", file=sys.stderr
        )
        return 2
    with open(out) as f:
        doc = json.load(f)
    if doc.get("machine") != machine or doc["build"]["git_commit"] != commit:
        print(f"results: {out} is another machine's or build's than {commit}", file=sys.stderr)
        return 2
    record = {"command": "lltm-ext " + " ".join(argv), "environment": env, **data}
    if part.startswith("sweep:"):
        doc.setdefault("sweeps", {})[part.split(":", 1)[1]] = record
    else:  # bench, linear: a key of their own, as `run` stores them
        doc[part] = record
    doc["command"] = file_command(machine, part_names(doc))
    with open(out, "w") as f:
        json.dump(_round(doc), f, indent=1)
        f.write("\n")
    print(f"results: {path} recorded as {part} in {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="time this machine's plan and write its results file")
    p.add_argument("--machine", required=True, help=f"one of {sorted(MACHINES)}")
    p.add_argument("--out", type=Path, help="where to write (default benchmarks/results/NAME.json)")
    p.add_argument(
        "--parts",
        help="comma-separated parts to run (default: all; bench, sweep:gemm, "
        "sweep:lltm_sequence, linear, accuracy); an existing --out file of the same machine and "
        "commit keeps its other parts",
    )
    p.add_argument(
        "--keep-older",
        action="store_true",
        help="with --parts: an existing --out file of an earlier build keeps its other parts too, "
        "each marked with its build (the docs show it beside the part's figures)",
    )
    p.add_argument(
        "--git-commit",
        metavar="SHA",
        help="the commit this tree is (default: git rev-parse HEAD; for a tree without git)",
    )
    p = sub.add_parser(
        "import",
        help="record a part run by hand (lltm-ext bench ... --json FILE, the part's arguments) "
        "into a results file of the same build",
    )
    p.add_argument("--machine", required=True, help=f"one of {sorted(MACHINES)}")
    p.add_argument("--part", required=True, help="the plan's part it ran (see plan)")
    p.add_argument("--json", required=True, type=Path, help="what the run wrote")
    p.add_argument(
        "--git-commit", required=True, metavar="SHA", help="the commit the run's tree was"
    )
    p.add_argument(
        "--out", type=Path, help="the results file (default benchmarks/results/NAME.json)"
    )
    p = sub.add_parser("plan", help="print what each machine's run measures")
    p.add_argument("--machine", help="only this machine")
    args = parser.parse_args(argv)
    if args.command == "plan":
        for name, m in MACHINES.items():
            if args.machine in (None, name):
                print(f"{name} ({m['what']}): {run_command(name)}")
                for step in PLANS[m["device"]]:
                    what = "lltm-ext bench " + " ".join(step["args"]) if "args" in step else ""
                    print(f"  {step['part']:<20} {what}")
        return 0
    if args.command == "import":
        out = args.out or results_path(args.machine)
        return import_part(args.machine, args.part, args.json, out, args.git_commit)
    parts = [p.strip() for p in args.parts.split(",")] if args.parts else None
    out = args.out or results_path(args.machine)
    return run(args.machine, out, parts, args.git_commit, keep_older=args.keep_older)


if __name__ == "__main__":
    sys.exit(main())
