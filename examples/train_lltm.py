"""Train lltm_ext.LLTMSequence on the adding problem, a synthetic sequence task it makes itself,
beside torch.nn.LSTM on the same batches: in one process, or in several under torchrun (DDP or
FSDP2).

    python examples/train_lltm.py                          # CUDA if torch sees a GPU, else CPU
    python examples/train_lltm.py --device cpu --epochs 6 --plot loss.png
    torchrun --nproc_per_node 2 examples/train_lltm.py --no-lstm           # DDP, 2 processes
    torchrun --nproc_per_node 2 examples/train_lltm.py --no-lstm --fsdp --compile
    torchrun --nproc_per_node 2 examples/train_lltm.py --no-lstm --checkpoint ckpt
    torchrun --nproc_per_node 2 examples/train_lltm.py --no-lstm --checkpoint ckpt --resume
    torchrun --nnodes 2 --nproc_per_node 1 --rdzv_backend c10d --rdzv_endpoint HOST:29500 \\
        examples/train_lltm.py --no-lstm                   # on each of 2 machines

The adding problem (Hochreiter & Schmidhuber, 1997): each sequence step carries two inputs, a
random value in [0, 1) and a marker that is 1 at exactly two steps (one in each half) and 0
elsewhere; the target is the sum of the two marked values. Predicting the mean (1.0) gives a mean
squared error of 1/6 = 0.167; a model that solves the task gets far below that.

The LLTM runs over the whole sequence in one call, ``output, (h, c) = lltm_seq(x)``, and a linear
layer reads the sum from the last h. ``torch.nn.LSTM`` (cuDNN on CUDA) trains on the same batches
from the same seed, and ``--cell-loop`` adds the Python loop of ``lltm_ext.LLTM`` cells that
LLTMSequence replaces. Each epoch (``--steps-per-epoch`` Adam steps) prints a progress line; at
the end a table compares time per step, tokens (sequence steps) per second and loss. With --plot
PATH (and matplotlib installed: pip install 'lltm_ext[plot]'), the loss curves are saved as a PNG.

Under torchrun each process trains on its own slice of every batch (``--batch`` rows per process:
all processes draw the same global batch of world size x ``--batch`` rows from one generator and
each takes its rows, so a run of N processes sees the same data as one process with N times the
batch), on CUDA device LOCAL_RANK with NCCL, or on the CPU with gloo. DDP averages the gradients
by default; ``--fsdp`` shards the parameters with FSDP2 (``fully_shard`` on the recurrent layer,
then on the model); ``--compile`` runs the model under ``torch.compile``. Only rank 0 prints. The
loss printed is the mean over all processes. ``--checkpoint DIR`` writes a checkpoint with
``torch.distributed.checkpoint`` after each epoch (model, optimizer, step, data generator, the
losses so far); ``--resume`` continues from the newest one, at any number of processes whose
global batch is the checkpoint's, with the loss curve an uninterrupted run would have had.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.util
import json
import os
import platform
import shutil
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

import lltm_ext
from lltm_ext import distributed as lltm_dist

BASELINE = 1.0 / 6.0  # MSE of always predicting the mean sum, 1.0
NAMES = {"LLTM": "lltm", "LSTM": "lstm", "LLTM loop": "lltm_loop"}  # checkpoint folder names


def adding_batch(
    batch: int, seq_len: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs (seq_len, batch, 2) and targets (batch, 1) of the adding problem, made on the
    generator's device (a GPU's: no copy from the host, no wait for it)."""
    device = generator.device
    values = torch.rand(seq_len, batch, generator=generator, device=device)
    half = seq_len // 2
    first = torch.randint(0, half, (batch,), generator=generator, device=device)
    second = torch.randint(half, seq_len, (batch,), generator=generator, device=device)
    markers = torch.zeros(seq_len, batch, device=device)
    rows = torch.arange(batch, device=device)
    markers[first, rows] = 1.0
    markers[second, rows] = 1.0
    x = torch.stack([values, markers], dim=2)
    target = (values * markers).sum(dim=0, keepdim=True).t()
    return x, target


class LLTMRegressor(nn.Module):
    """lltm_ext.LLTMSequence over the sequence (one call), and a linear read-out of the last h."""

    def __init__(self, input_features: int, state_size: int) -> None:
        super().__init__()
        self.lltm = lltm_ext.LLTMSequence(input_features, state_size)
        self.head = nn.Linear(state_size, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (T, B, I) -> prediction (B, 1)."""
        _, (h, _) = self.lltm(x)  # h (1, B, S), as nn.LSTM's: (num_layers, batch, state)
        return self.head(h[-1])


class CellLoopRegressor(nn.Module):
    """An lltm_ext.LLTM cell unrolled in a Python loop: what LLTMSequence replaces."""

    def __init__(self, input_features: int, state_size: int) -> None:
        super().__init__()
        self.cell = lltm_ext.LLTM(input_features, state_size)
        self.head = nn.Linear(state_size, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (T, B, I) -> prediction (B, 1)."""
        h = x.new_zeros(x.shape[1], self.cell.state_size)
        c = x.new_zeros(x.shape[1], self.cell.state_size)  # its own tensor, not an alias of h
        for x_t in x:
            h, c = self.cell(x_t, (h, c))
        return self.head(h)


class LSTMRegressor(nn.Module):
    """torch.nn.LSTM over the sequence, and a linear read-out of the last h (for comparison)."""

    def __init__(self, input_features: int, state_size: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(input_features, state_size)
        self.head = nn.Linear(state_size, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (T, B, I) -> prediction (B, 1)."""
        _, (h, _) = self.lstm(x)
        return self.head(h[-1])


@dataclass
class World:
    """This process's place in the run: rank, world size, device and process group backend
    (None when training in one process without a process group)."""

    rank: int
    size: int
    device: torch.device
    backend: str | None

    def log(self, *args: object, **kwargs: object) -> None:
        """print on rank 0 only."""
        if self.rank == 0:
            print(*args, **kwargs, flush=True)  # type: ignore[call-overload]


def setup_world(args: argparse.Namespace) -> World:
    """Joins the process group when started by torchrun (RANK and WORLD_SIZE set): NCCL on CUDA
    device LOCAL_RANK, gloo on the CPU. --fsdp in a single process gets a group of one (FSDP2
    needs a device mesh). Otherwise no group: plain single-process training."""
    device = torch.device(args.device)
    launched = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    if not launched and not args.fsdp:
        return World(0, 1, device, None)
    backend = "nccl" if device.type == "cuda" else "gloo"
    timeout = datetime.timedelta(seconds=args.timeout)
    if launched:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if device.type == "cuda":
            count = torch.cuda.device_count()
            if local_rank >= count:
                raise SystemExit(
                    f"train_lltm.py: LOCAL_RANK {local_rank}, but this machine has {count} CUDA "
                    f"GPU(s): start at most {count} processes per node (--nproc_per_node), or "
                    "train on the CPU (--device cpu)."
                )
            device = torch.device("cuda", local_rank)
            torch.cuda.set_device(device)
        dist.init_process_group(
            backend, timeout=timeout, device_id=device if device.type == "cuda" else None
        )
    else:
        dist.init_process_group(
            backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout
        )
    return World(dist.get_rank(), dist.get_world_size(), device, backend)


def distribute(model: nn.Module, args: argparse.Namespace, world: World) -> nn.Module:
    """The model as this run trains it: checked (the same parameters on every rank, on a device
    the backend serves), wrapped in DDP or sharded with FSDP2 when there is a process group, and
    compiled with --compile."""
    if args.compile and not args.fsdp:
        # The whole model in one graph (fullgraph: no break); under DDP, DDP's forward has
        # torch.compile split it at DDP's gradient buckets, so that all-reduces overlap backward.
        model = torch.compile(model, fullgraph=True)
    if world.backend is not None:
        lltm_dist.check_model(model)  # the same model on every rank, where the backend works
        if args.fsdp:
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard

            # The mesh of this job's device type, given explicitly: fully_shard's default takes
            # the machine's accelerator, which a gloo job of CPU tensors on a GPU machine is not.
            mesh = init_device_mesh(world.device.type, (world.size,))
            # Per layer: the recurrent layer is its own FSDP unit (all-gathered before it runs,
            # freed after); the root holds the head.
            for child in model.children():
                if child is not getattr(model, "head", None):
                    fully_shard(child, mesh=mesh)
            fully_shard(model, mesh=mesh)
        elif world.size > 1:
            from torch.nn.parallel import DistributedDataParallel

            ids = [world.device.index] if world.device.type == "cuda" else None
            model = DistributedDataParallel(model, device_ids=ids)
    if args.compile and args.fsdp:
        # After fully_shard: FSDP2's hooks (all-gather, reduce-scatter) run eagerly between the
        # compiled pieces.
        model = torch.compile(model)
    return model


def local_rows(
    global_batch: tuple[torch.Tensor, torch.Tensor], world: World
) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's slice of a global batch: rows rank * b ... (rank + 1) * b of x (T, N, I) and
    target (N, 1), with b = N / world size."""
    x, target = global_batch
    rows = x.shape[1] // world.size
    start = world.rank * rows
    return x[:, start : start + rows], target[start : start + rows]


def mean_over_ranks(t: torch.Tensor, world: World) -> torch.Tensor:
    """The mean of `t` over all ranks (each rank's shard has the same size)."""
    if world.size > 1:
        t = t.clone()
        dist.all_reduce(t, async_op=True).wait()  # SUM: gloo has no AVG
        wait_until_sole_owner(t)
        t /= world.size
    return t


def wait_until_sole_owner(t: torch.Tensor, timeout: float = 5.0) -> None:
    """Waits (at most `timeout` seconds) until Python holds the only reference to `t`.

    A collective's work object keeps its tensors, and gloo's worker thread drops it a moment after
    `wait()` returns. If that thread frees the last reference to a tensor Python created, it must
    take the GIL; during interpreter shutdown that aborts the process ("terminate called without
    an active exception") after the run is done. destroy_process_group() does not join the
    threads: a DDP model keeps its process group alive. So the main thread frees `t` itself.
    """
    deadline = time.monotonic() + timeout
    while t._use_count() > 1 and time.monotonic() < deadline:
        time.sleep(0)


# --- checkpoints --------------------------------------------------------------------------------


def checkpoint_dirs(root: Path) -> list[Path]:
    """The complete checkpoints under root (epoch_NNNN folders whose .metadata DCP wrote, last),
    oldest first."""
    done = [p for p in root.glob("epoch_*") if (p / ".metadata").is_file()]
    return sorted(done, key=lambda p: int(p.name.split("_")[1]))


@contextlib.contextmanager
def single_process_quiet() -> Iterator[None]:
    """Without a process group, DCP warns that it saves or loads in one process: it does."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def run_config(args: argparse.Namespace, world: World) -> dict[str, object]:
    """What a resumed run must share with the checkpoint's to continue the same loss curve."""
    return {
        "global_batch": args.batch * world.size,
        "seq_len": args.seq_len,
        "state": args.state,
        "lr": args.lr,
        "seed": args.seed,
        "dtype": args.dtype,
        "steps_per_epoch": args.steps_per_epoch,
        "data_device": world.device.type,  # the data generator's kind (CPU and CUDA differ)
    }


def save_checkpoint(
    root: Path,
    epoch: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    train_state: dict[str, object],
    world: World,
) -> Path:
    """Writes root/epoch_NNNN with torch.distributed.checkpoint (every rank writes its shards;
    replicated tensors once), then removes older ones (rank 0, after all ranks are done)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    path = root / f"epoch_{epoch:04d}"
    model_state, optim_state = get_state_dict(model, optimizer)
    with single_process_quiet():
        dcp.save(
            {"model": model_state, "optim": optim_state, "train": train_state}, checkpoint_id=path
        )
    if world.backend is not None:
        dist.barrier()
    if world.rank == 0:
        for old in checkpoint_dirs(root):
            if old != path:
                shutil.rmtree(old, ignore_errors=True)
    return path


def load_checkpoint(
    root: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    generator: torch.Generator,
    config: dict[str, object],
) -> tuple[Path, dict[str, object]]:
    """Loads the newest checkpoint under root into model and optimizer (resharded to this run's
    layout by torch.distributed.checkpoint) and returns it with its training state."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    found = checkpoint_dirs(root)
    if not found:
        raise SystemExit(f"train_lltm.py: --resume, but {root} holds no complete checkpoint.")
    path = found[-1]
    model_state, optim_state = get_state_dict(model, optimizer)
    metadata = dcp.FileSystemReader(str(path)).read_metadata().state_dict_metadata
    steps = metadata["train.losses"].size[0]  # type: ignore[union-attr]
    train_state: dict[str, object] = {
        "step": torch.zeros((), dtype=torch.int64),
        "generator": generator.get_state(),
        "losses": torch.zeros(steps, dtype=torch.float64),
        "config": "",  # JSON, replaced by the checkpoint's
    }
    state = {"model": model_state, "optim": optim_state, "train": train_state}
    with single_process_quiet():
        dcp.load(state, checkpoint_id=path)
    saved = json.loads(train_state["config"])  # type: ignore[arg-type]
    if saved != config:
        diff = ", ".join(
            f"{k} {saved.get(k)!r} (checkpoint) vs {v!r} (this run)"
            for k, v in config.items()
            if saved.get(k) != v
        )
        raise SystemExit(
            f"train_lltm.py: {path} was written by a run with other settings: {diff}. Resume "
            "with the same settings (global_batch = processes x --batch) to continue its curve."
        )
    set_state_dict(model, optimizer, model_state_dict=model_state, optim_state_dict=optim_state)
    return path, train_state


# --- training -----------------------------------------------------------------------------------


@dataclass
class Result:
    """One model's run: the loss of every step (mean over ranks), seconds per step (steps of this
    run after its first, which warms up or compiles), tokens (sequence steps) per second, and
    per epoch of this run the steps timed and their seconds (the last one: warm, recompiles
    done)."""

    losses: list[float]
    seconds: float
    tokens_per_second: float
    epochs: list[tuple[int, float]]


def train(
    name: str,
    make_model: Callable[[], nn.Module],
    args: argparse.Namespace,
    world: World,
) -> Result:
    """Train a fresh model (or resume one) for args.epochs x args.steps_per_epoch Adam steps."""
    torch.manual_seed(args.seed)  # the same initial weights and batches for every model
    dtype = getattr(torch, args.dtype)
    model = distribute(make_model().to(world.device, dtype), args, world)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    generator = torch.Generator(world.device).manual_seed(args.seed)
    losses: list[float] = []
    first = 1
    root = Path(args.checkpoint) / NAMES[name] if args.checkpoint else None
    config = run_config(args, world)
    if root is not None and args.resume:
        path, state = load_checkpoint(root, model, optimizer, generator, config)
        generator.set_state(state["generator"])  # type: ignore[arg-type]
        losses = state["losses"].tolist()  # type: ignore[attr-defined]
        first = int(state["step"]) + 1  # type: ignore[call-overload]
        world.log(f"{name:<9} resumed from {path} after step {first - 1}")
    steps = args.epochs * args.steps_per_epoch
    if first > steps:
        raise SystemExit(
            f"train_lltm.py: the checkpoint is at step {first - 1}, past this run's {steps} "
            "steps: raise --epochs to train on."
        )
    batch = args.batch * world.size
    pending: list[torch.Tensor] = []  # this epoch's losses, on the device: one sync per epoch
    epochs: list[tuple[int, float]] = []
    start = mark = time.perf_counter()
    mark_step = first
    for step in range(first, steps + 1):
        x, target = local_rows(adding_batch(batch, args.seq_len, generator), world)
        loss = nn.functional.mse_loss(model(x.to(dtype)), target.to(dtype))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        pending.append(loss.detach())
        if step == first:
            losses += mean_over_ranks(torch.stack(pending), world).tolist()  # waits for the step
            pending.clear()
            start = mark = time.perf_counter()
        if step % args.steps_per_epoch == 0:
            if pending:
                losses += mean_over_ranks(torch.stack(pending), world).tolist()
                pending.clear()
            now = time.perf_counter()
            if step > mark_step:
                epochs.append((step - mark_step, now - mark))
            mark, mark_step = now, step
            epoch = step // args.steps_per_epoch
            recent = losses[-args.steps_per_epoch :]
            ms = (time.perf_counter() - start) / max(step - first, 1) * 1e3
            world.log(
                f"{name:<9} epoch {epoch:>3}/{args.epochs}  loss {sum(recent) / len(recent):.4f}"
                f"  ({ms:.2f} ms/step)"
            )
            if root is not None:
                elapsed = time.perf_counter()
                train_state = {
                    "step": torch.tensor(step),
                    "generator": generator.get_state(),
                    "losses": torch.tensor(losses, dtype=torch.float64),
                    "config": json.dumps(config),
                }
                save_checkpoint(root, epoch, model, optimizer, train_state, world)
                mark = time.perf_counter()
                start += mark - elapsed  # saving is not training time
    if pending:
        losses += mean_over_ranks(torch.stack(pending), world).tolist()
    seconds = (time.perf_counter() - start) / max(steps - first, 1)
    return Result(losses, seconds, batch * args.seq_len / seconds, epochs)


def final_loss(losses: list[float]) -> float:
    """The mean loss of the last 10% of the steps (at least 1): less noisy than the last one."""
    tail = losses[-max(1, len(losses) // 10) :]
    return sum(tail) / len(tail)


def save_plot(path: str, curves: dict[str, list[float]]) -> None:
    """The loss curves, log scale, with the predict-the-mean baseline."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    # The loop of cells computes what LLTMSequence does: dashed, over it.
    styles = {"LLTM loop": dict(linestyle="--", linewidth=1.2)}
    names = {"LLTM": "LLTMSequence", "LSTM": "nn.LSTM", "LLTM loop": "loop of LLTM cells"}
    for name, losses in curves.items():
        style = styles.get(name, dict(linewidth=1))
        ax.plot(range(1, len(losses) + 1), losses, label=names[name], **style)
    ax.axhline(BASELINE, color="gray", linestyle="--", label="predict the mean (1/6)")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (MSE)")
    ax.set_title(f"adding problem, lltm_ext {lltm_ext.__version__}")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def engine(args: argparse.Namespace, world: World) -> str:
    """How the run trains, in words: 'DDP', 'FSDP2' or 'one process', + ', compiled'."""
    name = "FSDP2" if args.fsdp else ("DDP" if world.size > 1 else "one process")
    return name + (", compiled" if args.compile else "")


def write_json(
    path: str, args: argparse.Namespace, world: World, results: dict[str, Result]
) -> None:
    """The run's settings and every model's losses and speed, as JSON (rank 0)."""
    record = {
        "lltm_ext": lltm_ext.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": sys.argv,
        "device": str(world.device),
        "gpu": torch.cuda.get_device_name(world.device) if world.device.type == "cuda" else None,
        "world_size": world.size,
        "backend": world.backend,
        "engine": "fsdp2" if args.fsdp else ("ddp" if world.size > 1 else "single"),
        "compiled": args.compile,
        "batch_per_process": args.batch,
        "global_batch": args.batch * world.size,
        "seq_len": args.seq_len,
        "state": args.state,
        "dtype": args.dtype,
        "models": {
            NAMES[name]: {
                "ms_per_step": r.seconds * 1e3,
                "tokens_per_second": r.tokens_per_second,
                "epochs": [{"steps": n, "seconds": t} for n, t in r.epochs],
                "final_loss": final_loss(r.losses),
                "losses": r.losses,
            }
            for name, r in results.items()
        },
    }
    with open(path, "w") as f:
        json.dump(record, f, indent=1)


@contextlib.contextmanager
def process_group(world: World) -> Iterator[None]:
    """Leaves the process group at the end, also on errors (no rank waits for a dead one)."""
    try:
        yield
    finally:
        if world.backend is not None and dist.is_initialized():
            dist.destroy_process_group()


def parse_args() -> argparse.Namespace:
    """The command line, checked."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default="cuda" if torch.cuda.is_available() else "cpu",
        help="where to train (default: cuda if torch sees a GPU, else cpu); under torchrun, "
        "cuda means the GPU numbered LOCAL_RANK",
    )
    parser.add_argument("--epochs", type=int, default=10, help="epochs (default: 10)")
    parser.add_argument(
        "--steps-per-epoch", type=int, default=50, help="Adam steps per epoch (default: 50)"
    )
    parser.add_argument("--seq-len", type=int, default=20, help="sequence length (default: 20)")
    parser.add_argument(
        "--batch", type=int, default=64, help="batch size per process (default: 64)"
    )
    parser.add_argument("--state", type=int, default=32, help="LLTM state size (default: 32)")
    parser.add_argument("--lr", type=float, default=1e-2, help="Adam learning rate (default: 0.01)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    parser.add_argument(
        "--dtype",
        choices=["float32", "float64"],
        default="float32",
        help="parameter and data type (default: float32)",
    )
    parser.add_argument(
        "--no-lstm", action="store_true", help="leave out the torch.nn.LSTM comparison"
    )
    parser.add_argument(
        "--cell-loop",
        action="store_true",
        help="also train a Python loop of lltm_ext.LLTM cells (what LLTMSequence replaces)",
    )
    parser.add_argument(
        "--fsdp",
        action="store_true",
        help="shard the parameters with FSDP2 (fully_shard) instead of DDP",
    )
    parser.add_argument("--compile", action="store_true", help="train under torch.compile")
    parser.add_argument(
        "--checkpoint",
        metavar="DIR",
        help="write a checkpoint (torch.distributed.checkpoint) to DIR/<model>/ after each epoch",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue from the newest checkpoint in --checkpoint DIR (--epochs: the total)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=600,
        help="seconds a collective may wait for the other processes (default: 600)",
    )
    parser.add_argument("--json", metavar="PATH", help="write the settings and results as JSON")
    parser.add_argument(
        "--plot", metavar="PATH", help="save the loss curves as a PNG (needs matplotlib)"
    )
    args = parser.parse_args()
    if args.epochs < 1 or args.steps_per_epoch < 1 or args.batch < 1:
        parser.error("--epochs, --steps-per-epoch and --batch must be at least 1")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda, but torch sees no CUDA GPU")
    if args.resume and not args.checkpoint:
        parser.error("--resume needs --checkpoint DIR (where to resume from)")
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        print(
            "note: --plot needs matplotlib (pip install 'lltm_ext[plot]'); training without it",
            file=sys.stderr,
        )
        args.plot = None
    return args


def main() -> int:
    """Parse the options, train (and compare), report; returns the exit status."""
    args = parse_args()
    world = setup_world(args)
    with process_group(world):
        where = str(world.device)
        if world.backend is not None:  # the engine too
            where = f"{world.size} process(es) on {world.device.type}, {world.backend} "
            where += f"({engine(args, world)})"
        elif args.compile:
            where += " (compiled)"
        world.log(
            f"adding problem: sequences of {args.seq_len}, batch {args.batch * world.size}, "
            f"state {args.state}, {args.epochs} epochs of {args.steps_per_epoch} steps on {where}"
            f"; predicting the mean gives loss {BASELINE:.3f}"
        )
        models = {"LLTM": LLTMRegressor}
        if not args.no_lstm:
            models["LSTM"] = LSTMRegressor
        if args.cell_loop:
            models["LLTM loop"] = CellLoopRegressor
        results = {
            name: train(name, lambda model=model: model(2, args.state), args, world)
            for name, model in models.items()
        }
        # Several processes: tokens (sequence steps) per second of all of them, too.
        tokens = world.backend is not None
        world.log(
            f"\n{'model':<42} {'ms/step':>8}"
            + (f" {'tokens/s':>10}" if tokens else "")
            + f" {'final loss':>11}"
        )
        labels = {
            "LLTM": "lltm_ext.LLTMSequence (one call/sequence)",
            "LSTM": "torch.nn.LSTM" + (" (cuDNN)" if world.device.type == "cuda" else ""),
            "LLTM loop": "Python loop of lltm_ext.LLTM cells",
        }
        for name, r in results.items():
            world.log(
                f"{labels[name]:<42} {r.seconds * 1e3:8.2f}"
                + (f" {r.tokens_per_second:10.0f}" if tokens else "")
                + f" {final_loss(r.losses):11.4f}"
            )
        if world.rank == 0:
            if args.plot:
                save_plot(args.plot, {name: r.losses for name, r in results.items()})
                print(f"wrote {args.plot}")
            if args.json:
                write_json(args.json, args, world, results)
                print(f"wrote {args.json}")
        lltm = results["LLTM"].losses
        world.log(
            f"final loss {final_loss(lltm):.4f} (LLTM; first step {lltm[0]:.4f}, "
            f"predicting the mean {BASELINE:.4f})"
        )
    return 0


if __name__ == "__main__":
    code = main()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # The run is done and its files closed. gloo's worker threads may still hold a finished
        # collective's tensors (FSDP2's buffers too, which wait_until_sole_owner cannot reach);
        # one dropping the last reference during the interpreter's teardown aborts the process
        # ("terminate called without an active exception", seen in CI after a completed run).
        # So a process of a group leaves without that teardown; errors raise above as usual.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
