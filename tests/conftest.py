"""pytest setup: the `cuda` marker skips cleanly without a GPU (or fails, if a GPU is required);
`multigpu` tests skip with fewer than two GPUs; `slow` tests run only when selected (`-m slow`,
or any -m expression that names `slow`) or with LLTM_EXT_RUN_SLOW=1; the fuzz tests' example
counts are printed at the end (and written as JSON to LLTM_EXT_FUZZ_REPORT, if set); hypothesis's
caches live outside the source tree; under pytest-xdist each worker gets its share of the CPU's
threads."""

import json
import os
import tempfile
from collections import defaultdict

import pytest
import torch

# Hypothesis keeps caches (its example database is off, but it caches the constants it collects
# from the code) in .hypothesis/ under the working directory: not in the source tree.
os.environ.setdefault(
    "HYPOTHESIS_STORAGE_DIRECTORY",
    os.path.join(
        tempfile.gettempdir(), f"lltm_ext-hypothesis-{getattr(os, 'getuid', lambda: 0)()}"
    ),
)

# Under pytest-xdist each worker would start as many CPU threads as the machine has cores (24
# workers on 32 cores: 768 threads, and tests that take seconds alone take minutes): each worker,
# and the processes tests start (examples, the CLI), gets its share of the cores instead.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1 and "OMP_NUM_THREADS" not in os.environ:
    _threads = max(1, (os.cpu_count() or 1) // _WORKERS)
    os.environ["OMP_NUM_THREADS"] = str(_threads)
    torch.set_num_threads(_threads)


def pytest_collection_modifyitems(config, items):
    markexpr = config.getoption("markexpr", default="") or ""
    if "slow" not in markexpr and os.environ.get("LLTM_EXT_RUN_SLOW") != "1":
        skip_slow = pytest.mark.skip(reason="slow: select with -m slow (or LLTM_EXT_RUN_SLOW=1)")
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(skip_slow)
    if torch.cuda.is_available():
        if torch.cuda.device_count() < 2:
            skip_multi = pytest.mark.skip(reason="needs two CUDA GPUs")
            for item in items:
                if "multigpu" in item.keywords:
                    item.add_marker(skip_multi)
        return
    if os.environ.get("LLTM_EXT_REQUIRE_CUDA") == "1":
        raise pytest.UsageError("LLTM_EXT_REQUIRE_CUDA=1, but torch sees no CUDA GPU.")
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords or "multigpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# Example counts of the fuzz tests (tests/test_fuzz.py records one per shard as a user property,
# which pytest-xdist carries from its workers to this process).
_fuzz_shards: list[dict] = []


def pytest_runtest_logreport(report):
    if report.when == "call":
        _fuzz_shards.extend(v for k, v in report.user_properties if k == "fuzz_examples")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _fuzz_shards or hasattr(config, "workerinput"):
        return
    per_op: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for shard in _fuzz_shards:
        per_op[shard["op"]][shard["device"]] += shard["examples"]
    profile = os.environ.get("LLTM_EXT_FUZZ_PROFILE", "ci")
    terminalreporter.section(f"fuzz examples run (profile {profile})")
    for op in sorted(per_op):
        counts = ", ".join(f"{device} {n}" for device, n in sorted(per_op[op].items()))
        terminalreporter.write_line(f"{op}: {counts}")
    path = os.environ.get("LLTM_EXT_FUZZ_REPORT")
    if path:
        report = {
            "profile": profile,
            "per_op": {op: dict(devices) for op, devices in sorted(per_op.items())},
            "shards": sorted(_fuzz_shards, key=lambda s: (s["op"], s["device"], s["dtype"])),
        }
        with open(path, "w") as f:
            json.dump(report, f, indent=1)
        terminalreporter.write_line(f"written to {path}")
