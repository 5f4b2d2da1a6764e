"""lltm_ext's ops under torch.distributed: DDP, FSDP2, torch.compile and no_sync on 2 ranks give
what one process gives on the whole batch (tests/dist_cases.py's float64 plain-PyTorch reference);
checkpoints saved at 2 ranks load at 1; what cannot work fails clearly; the example trains under
torchrun (2 processes, and 2 "nodes" of 1 process with a c10d rendezvous) and resumes.

CPU: gloo, 2 processes on 127.0.0.1. GPU (marked `multigpu`: 2 GPUs, NCCL) the same cases.
Every run is bounded: collectives time out, and tests/dist_world.py ends a world that does not
answer in time.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import dist_cases
import pytest
import torch
from dist_world import RankFailed, World, free_port

import lltm_ext
from lltm_ext import distributed as lltm_dist

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available(), reason="torch.distributed is not available"
)

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "train_lltm.py"
# Tolerances for parameters after a few steps, against the float64 reference: float64 differs by
# summation order only; float32 by its rounding (relative 1e-7 per operation), grown by the steps.
TOL = {"float64": dict(rtol=1e-9, atol=1e-11), "float32": dict(rtol=2e-5, atol=2e-6)}


class WorldHolder:
    """One world of 2 ranks per device for the whole module, started again after a test broke it."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.world: World | None = None

    def run(self, fn, **kwargs):
        if self.world is None or not self.world.alive:
            self.world = World(2, self.device)
        return self.world.run(fn, **kwargs)

    def close(self) -> None:
        if self.world is not None:
            self.world.close()


@pytest.fixture(
    scope="module",
    params=["cpu", pytest.param("cuda", marks=[pytest.mark.cuda, pytest.mark.multigpu])],
)
def world(request):
    holder = WorldHolder(request.param)
    yield holder
    holder.close()


def assert_params_close(params: dict, reference: dict, dtype: str) -> None:
    assert params.keys() == reference.keys()
    for name in params:
        torch.testing.assert_close(
            params[name], reference[name], **TOL[dtype], msg=lambda m, n=name: f"{n}: {m}"
        )


def test_world_is_two_ranks(world):
    envs = world.run(dist_cases.environment)
    assert [e["rank"] for e in envs] == [0, 1]
    # the ranks test the lltm_ext this process tests (not a source tree that a test put on sys.path)
    assert {e["lltm_ext"] for e in envs} == {lltm_ext.__file__}
    assert {e["backend"] for e in envs} == {"gloo" if world.device == "cpu" else "nccl"}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_ddp_matches_one_process(world, dtype):
    rank0, rank1 = world.run(dist_cases.train_ddp, dtype=dtype, steps=3)
    assert_params_close(rank0["params"], rank0["reference"], dtype)
    assert_params_close(rank1["params"], rank0["reference"], dtype)
    # The parameters moved: a run that trained nothing would not match either.
    start = dist_cases.full_parameters(dist_cases.initial_net(torch.float64))
    assert all(not torch.equal(rank0["params"][k], start[k]) for k in start)


@pytest.mark.parametrize("per_layer", [True, False], ids=["per-layer", "root"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_fsdp2_matches_one_process(world, dtype, per_layer):
    rank0, rank1 = world.run(dist_cases.train_fsdp, dtype=dtype, steps=3, per_layer=per_layer)
    assert_params_close(rank0["params"], rank0["reference"], dtype)
    assert_params_close(rank1["params"], rank0["reference"], dtype)
    # Sharded for real: each rank holds its rows of each parameter (15 = 8 + 7: uneven).
    assert rank0["sharded"]["seq.weights"][2] == (8, 8)
    assert rank1["sharded"]["seq.weights"][2] == (7, 8)
    assert "Shard(dim=0)" in rank0["sharded"]["seq.weights"][1]


def test_ddp_compiled_fullgraph_matches_one_process(world):
    rank0, _ = world.run(
        dist_cases.train_ddp, dtype="float64", steps=2, compile_backend="inductor", timeout=300
    )
    assert_params_close(rank0["params"], rank0["reference"], "float64")


def test_ddp_no_sync_accumulation_matches_one_process(world):
    rank0, rank1 = world.run(dist_cases.train_ddp_no_sync, dtype="float64", steps=2, micro=2)
    assert_params_close(rank0["params"], rank0["reference"], "float64")
    assert_params_close(rank1["params"], rank0["reference"], "float64")
    # Under no_sync the ranks' gradients differ (nothing was all-reduced); after the last
    # micro-batch they agree.
    assert rank0["reduced"] == [False, True, False, True]


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")  # DCP: "loads in one process"
def test_checkpoint_saved_at_2_ranks_loads_at_1(world, tmp_path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    path = tmp_path / "ckpt"
    rank0, rank1 = world.run(dist_cases.fsdp_save_checkpoint, path=str(path), steps=2)
    assert rank0["shards"]["seq.weights"] == (8, 8) and rank1["shards"]["seq.weights"] == (7, 8)
    # One process, no process group: a plain model and optimizer of the same kind.
    net = dist_cases.initial_net(torch.float64)
    opt = torch.optim.Adam(net.parameters(), lr=0.05)
    model_state, optim_state = get_state_dict(net, opt)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(net, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    for name, p in net.named_parameters():
        torch.testing.assert_close(p.detach(), rank0["model"][name], rtol=0, atol=0)
    loaded = get_state_dict(net, opt)[1]["state"]
    for name, saved in rank0["optim"]["state"].items():
        for key in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(loaded[name][key], saved[key], rtol=0, atol=0)


@pytest.mark.parametrize(
    "batch_first, in_place", [(False, False), (True, True)], ids=["time_first", "batch_first"]
)
def test_fsdp2_outputs_are_no_views(world, batch_first, in_place):
    # FSDP2 warns when a module returns a view: an in-place op on it would drop the pre-backward
    # hook. LLTMSequence's outputs are all new tensors; batch_first's is a copy, which an in-place
    # op may change with the gradients still right. (The time-first output is saved for
    # backward: an in-place op on it makes backward raise autograd's own error.)
    for rank in world.run(dist_cases.fsdp_outputs, batch_first=batch_first, in_place=in_place):
        assert rank["warnings"] == []
        assert rank["grad_error"] < 1e-12


def test_ranks_with_different_models_fail_clearly_on_every_rank(world):
    # Rank 1 builds its LLTMSequence with state_size 4, rank 0 with 5. Unchecked, FSDP2's
    # all-gathers disagree in size and gloo aborts the process; check_model says what differs.
    messages = world.run(dist_cases.check_mismatched_model)
    for rank, message in enumerate(messages):
        assert message.startswith(f"lltm_ext.distributed.check_model (rank {rank} of 2): ")
        assert "rank 1's model differs from rank 0's: rank 1's `head` is float64 [4, 2], " in (
            message
        )
        assert (
            "rank 1's `seq.weights` is float64 [12, 7], rank 0's `seq.weights` float64 [15, 8] "
            "(LLTMSequence(3, 4) on rank 1, LLTMSequence(3, 5) on rank 0)"
        ) in message
        assert message.endswith("; and 2 more. Every rank must build the same model.")


def test_a_failing_rank_ends_the_step_clearly_and_in_bounded_time(world):
    # The last rank passes a state of the wrong size: it raises the op's own error, while rank 0
    # waits for it in the gradient all-reduce; the world is ended (as torchrun ends a job whose
    # process failed) instead of hanging.
    start = time.monotonic()
    with pytest.raises(RankFailed) as failure:
        world.run(dist_cases.ddp_step_with_bad_state_on_last_rank, timeout=60)
    message = str(failure.value)
    assert "rank 1 raised" in message
    assert "LLTMSequence.forward: `h_0` must have shape [1, 4, 5]" in message
    assert "rank 0 did not finish" in message
    assert time.monotonic() - start < 60
    # The next call starts a fresh world.
    assert [e["rank"] for e in world.run(dist_cases.environment)] == [0, 1]


def infos(device: str, *shapes: tuple[int, ...], dtype: str = "float32") -> list:
    return [
        lltm_dist.TensorInfo(f"p{i}", shape, dtype, device, "Owner()")
        for i, shape in enumerate(shapes)
    ]


def test_model_problems_nccl_needs_cuda_tensors_on_every_rank():
    # What check_model decides from the gathered descriptions; testable without GPUs or NCCL.
    good = infos("cuda", (3, 4), (3,))
    assert lltm_dist.model_problems([good, good], "nccl") == []
    cpu = infos("cpu", (3, 4), (3,))
    (problem,) = lltm_dist.model_problems([good, cpu], "nccl")
    assert problem.startswith("rank 1 has 2 of its 2 model tensors off the GPU (`p0` (cpu), ")
    assert "the process group's backend, nccl, communicates CUDA tensors only" in problem
    # gloo, and a group with a CPU backend beside NCCL, serve CPU tensors.
    assert lltm_dist.model_problems([cpu, cpu], "gloo") == []
    assert lltm_dist.model_problems([good, cpu], "cpu:gloo,cuda:nccl") == []
    assert lltm_dist.model_problems([cpu, cpu], "cuda:nccl") != []


def test_model_problems_names_what_differs():
    base = infos("cpu", (15, 8), (15,))
    assert lltm_dist.model_problems([base, infos("cpu", (15, 8))], "gloo") == [
        "rank 1's model has 1 parameters and buffers, rank 0's has 2: every rank must build "
        "the same model."
    ]
    other = infos("cpu", (15, 8), (15,), dtype="float64")
    (problem,) = lltm_dist.model_problems([base, other], "gloo")
    assert problem == (
        "rank 1's model differs from rank 0's: rank 1's `p0` is float64 [15, 8], rank 0's `p0` "
        "float32 [15, 8]; rank 1's `p1` is float64 [15], rank 0's `p1` float32 [15]. Every "
        "rank must build the same model."
    )


def test_describe_model_lists_parameters_and_buffers():
    model = torch.nn.Sequential(dist_cases.Net(), torch.nn.BatchNorm1d(2))
    infos = {i.name: i for i in lltm_dist.describe_model(model)}
    assert next(iter(infos)) == "0.head" and infos["0.head"].owner == "Net()"
    seq = infos["0.seq.weights"]
    assert (seq.shape, seq.dtype, seq.device) == ((15, 8), "float32", "cpu")
    assert seq.owner == "LLTMSequence(3, 5)"
    assert infos["1.running_mean"].shape == (2,)  # buffers too
    assert infos["1.running_mean"].owner.startswith("BatchNorm1d(2, ")


# --- the example under torchrun ------------------------------------------------------------------


def torchrun() -> list[str]:
    """The torchrun beside this Python (as a user runs it), or its module."""
    exe = Path(sys.executable).with_name("torchrun")
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "torch.distributed.run"]


# A short float64 run: 4 steps per epoch of 10-step sequences, 8 rows per process.
EXAMPLE_ARGS = [
    "--device", "cpu", "--no-lstm", "--dtype", "float64", "--seq-len", "10",
    "--steps-per-epoch", "4", "--timeout", "60",
]  # fmt: skip


def run(cmd: list[str], cwd: Path, timeout: float = 240) -> str:
    """Run cmd (1 CPU thread per process); its stdout. Fails the test on a non-zero exit."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)
    assert result.returncode == 0, f"{cmd} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def losses(path: Path) -> list[float]:
    return json.loads(path.read_text())["models"]["lltm"]["losses"]


@pytest.fixture(scope="module")
def one_process_run(tmp_path_factory) -> list[float]:
    """The example in one process on the whole batch (16 rows), 2 epochs, uninterrupted."""
    out = tmp_path_factory.mktemp("one") / "one.json"
    args = [*EXAMPLE_ARGS, "--batch", "16", "--epochs", "2", "--json", str(out)]
    run([sys.executable, str(EXAMPLE), *args], cwd=out.parent)
    return losses(out)


def test_example_two_nodes_fsdp2_then_resume_in_one_process(tmp_path, one_process_run):
    # Two "nodes" of one process each (a c10d rendezvous on 127.0.0.1), FSDP2, one epoch with a
    # checkpoint; then one process resumes it (the shards loaded whole) for a second epoch.
    ckpt, out = tmp_path / "ckpt", tmp_path / "nodes.json"
    # What a user runs on each of two machines (here both on 127.0.0.1).
    launcher = "--nnodes 2 --nproc_per_node 1 --rdzv_backend c10d --rdzv_id test".split()
    launcher += ["--rdzv_endpoint", f"127.0.0.1:{free_port()}"]
    args = [*EXAMPLE_ARGS, "--batch", "8", "--epochs", "1", "--fsdp"]
    args += ["--checkpoint", str(ckpt), "--json", str(out)]
    agents = [
        subprocess.Popen(
            [*torchrun(), *launcher, "--node_rank", str(node), str(EXAMPLE), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
            env=dict(os.environ, OMP_NUM_THREADS="1"),
        )
        for node in range(2)
    ]
    outputs = []
    try:
        for agent in agents:
            stdout, stderr = agent.communicate(timeout=240)
            assert agent.returncode == 0, f"{stdout}\n{stderr}"
            outputs.append(stdout)
    finally:
        for agent in agents:
            if agent.poll() is None:
                agent.kill()
    # Rank 0 alone logs (whichever node it is on).
    logged = "".join(outputs)
    assert logged.count("epoch   1/1") == 1, logged
    assert "2 process(es) on cpu, gloo (FSDP2)" in logged
    record = json.loads(out.read_text())
    assert (record["world_size"], record["engine"], record["global_batch"]) == (2, "fsdp2", 16)
    nodes = record["models"]["lltm"]["losses"]
    assert len(nodes) == 4
    torch.testing.assert_close(nodes, one_process_run[:4], rtol=1e-10, atol=0)
    assert [p.name for p in (ckpt / "lltm").iterdir()] == ["epoch_0001"]

    resumed = tmp_path / "resumed.json"
    args = [*EXAMPLE_ARGS, "--batch", "16", "--epochs", "2", "--checkpoint", str(ckpt)]
    stdout = run(
        [sys.executable, str(EXAMPLE), *args, "--resume", "--json", str(resumed)], cwd=tmp_path
    )
    assert "resumed from" in stdout and "after step 4" in stdout
    torch.testing.assert_close(losses(resumed), one_process_run, rtol=1e-10, atol=0)
    # A run with another global batch would not continue the same curve: refused, saying why.
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), *args, "--epochs", "3", "--batch", "8", "--resume"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode != 0
    assert "global_batch 16 (checkpoint) vs 8 (this run)" in result.stderr, result.stderr


def test_example_ddp_compiled_under_torchrun_standalone(tmp_path, one_process_run):
    out = tmp_path / "ddp.json"
    args = [*EXAMPLE_ARGS, "--batch", "8", "--epochs", "2", "--compile", "--json", str(out)]
    stdout = run(
        [*torchrun(), "--standalone", "--nproc_per_node", "2", str(EXAMPLE), *args], cwd=tmp_path
    )
    assert "2 process(es) on cpu, gloo (DDP, compiled)" in stdout
    assert stdout.count("epoch   2/2") == 1
    # The table: time per step, tokens per second of both processes, final loss.
    assert re.search(r"^lltm_ext\.LLTMSequence .* \d+\.\d\d +\d+ +\d\.\d{4}$", stdout, re.M), stdout
    # Inductor may order float64 sums differently from eager: close, not equal.
    torch.testing.assert_close(losses(out), one_process_run, rtol=1e-9, atol=0)


def test_ops_take_dtensors(world):
    # Each op on DTensors split across the 2 ranks (DTensor redistributes to the placements that
    # lltm_ext.distributed registers) matches the op on whole tensors, outputs and gradients.
    results, _ = world.run(dist_cases.dtensor_ops)
    for name, r in results.items():
        assert r["out"] < 1e-12 and r["grad"] < 1e-12, (name, r)
    assert (
        results["lltm_sequence batch-split"]["placements"]
        == ["Shard(dim=1)"] + ["Shard(dim=0)"] * 2
    )
    assert results["lltm batch-split"]["placements"] == ["Shard(dim=0)"] * 2
    assert results["gemm rows"]["placements"] == ["Shard(dim=0)"]
    assert results["gemm columns"]["placements"] == ["Shard(dim=1)"]
    assert results["gemm inner"]["placements"] == ["Partial(sum)"]
    assert results["relu dim 1"]["placements"] == ["Shard(dim=1)"]
