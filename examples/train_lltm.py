"""Train lltm_ext.LLTMSequence on the adding problem, a synthetic sequence task it makes itself,
beside torch.nn.LSTM on the same batches.

    python examples/train_lltm.py                          # CUDA if torch sees a GPU, else CPU
    python examples/train_lltm.py --device cpu --epochs 6 --plot loss.png

The adding problem (Hochreiter & Schmidhuber, 1997): each sequence step carries two inputs, a
random value in [0, 1) and a marker that is 1 at exactly two steps (one in each half) and 0
elsewhere; the target is the sum of the two marked values. Predicting the mean (1.0) gives a mean
squared error of 1/6 = 0.167; a model that solves the task gets far below that.

The LLTM runs over the whole sequence in one call, ``output, (h, c) = lltm_seq(x)``, and a linear
layer reads the sum from the last h. ``torch.nn.LSTM`` (cuDNN on CUDA) trains on the same batches
from the same seed, and ``--cell-loop`` adds the Python loop of ``lltm_ext.LLTM`` cells that
LLTMSequence replaces. Each epoch (``--steps-per-epoch`` Adam steps) prints a progress line; at
the end a table compares time per step and loss. With --plot PATH (and matplotlib installed: pip
install 'lltm_ext[plot]'), the loss curves are saved as a PNG.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Callable

import torch
from torch import nn

import lltm_ext

BASELINE = 1.0 / 6.0  # MSE of always predicting the mean sum, 1.0


def adding_batch(
    batch: int, seq_len: int, generator: torch.Generator, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs (seq_len, batch, 2) and targets (batch, 1) of the adding problem."""
    values = torch.rand(seq_len, batch, generator=generator)
    half = seq_len // 2
    first = torch.randint(0, half, (batch,), generator=generator)
    second = torch.randint(half, seq_len, (batch,), generator=generator)
    markers = torch.zeros(seq_len, batch)
    rows = torch.arange(batch)
    markers[first, rows] = 1.0
    markers[second, rows] = 1.0
    x = torch.stack([values, markers], dim=2)
    target = (values * markers).sum(dim=0, keepdim=True).t()
    return x.to(device), target.to(device)


class LLTMRegressor(nn.Module):
    """lltm_ext.LLTMSequence over the sequence (one call), and a linear read-out of the last h."""

    def __init__(self, input_features: int, state_size: int) -> None:
        super().__init__()
        self.lltm = lltm_ext.LLTMSequence(input_features, state_size)
        self.head = nn.Linear(state_size, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (T, B, I) -> prediction (B, 1)."""
        _, (h, _) = self.lltm(x)
        return self.head(h)


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


def train(
    name: str,
    make_model: Callable[[], nn.Module],
    args: argparse.Namespace,
    device: torch.device,
) -> tuple[list[float], float]:
    """Train a fresh model for args.epochs x args.steps_per_epoch Adam steps; returns the losses
    and seconds per step (the first epoch's first step, warm-up, left out of the time)."""
    torch.manual_seed(args.seed)  # the same initial weights and batches for every model
    model = make_model().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    generator = torch.Generator().manual_seed(args.seed)
    losses: list[float] = []
    steps = args.epochs * args.steps_per_epoch
    start = time.perf_counter()
    for step in range(1, steps + 1):
        x, target = adding_batch(args.batch, args.seq_len, generator, device)
        loss = nn.functional.mse_loss(model(x), target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())  # synchronizes: the time per step is the GPU's too
        if step == 1:
            start = time.perf_counter()
        if step % args.steps_per_epoch == 0:
            epoch = step // args.steps_per_epoch
            recent = losses[-args.steps_per_epoch :]
            ms = (time.perf_counter() - start) / max(step - 1, 1) * 1e3
            print(
                f"{name:<9} epoch {epoch:>3}/{args.epochs}  loss {sum(recent) / len(recent):.4f}"
                f"  ({ms:.2f} ms/step)",
                flush=True,
            )
    seconds = (time.perf_counter() - start) / max(steps - 1, 1)
    return losses, seconds


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


def main() -> int:
    """Parse the options, train (and compare), report; returns the exit status."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default="cuda" if torch.cuda.is_available() else "cpu",
        help="where to train (default: cuda if torch sees a GPU, else cpu)",
    )
    parser.add_argument("--epochs", type=int, default=10, help="epochs (default: 10)")
    parser.add_argument(
        "--steps-per-epoch", type=int, default=50, help="Adam steps per epoch (default: 50)"
    )
    parser.add_argument("--seq-len", type=int, default=20, help="sequence length (default: 20)")
    parser.add_argument("--batch", type=int, default=64, help="batch size (default: 64)")
    parser.add_argument("--state", type=int, default=32, help="LLTM state size (default: 32)")
    parser.add_argument("--lr", type=float, default=1e-2, help="Adam learning rate (default: 0.01)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    parser.add_argument(
        "--no-lstm", action="store_true", help="leave out the torch.nn.LSTM comparison"
    )
    parser.add_argument(
        "--cell-loop",
        action="store_true",
        help="also train a Python loop of lltm_ext.LLTM cells (what LLTMSequence replaces)",
    )
    parser.add_argument(
        "--plot", metavar="PATH", help="save the loss curves as a PNG (needs matplotlib)"
    )
    args = parser.parse_args()
    if args.epochs < 1 or args.steps_per_epoch < 1:
        parser.error("--epochs and --steps-per-epoch must be at least 1")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda, but torch sees no CUDA GPU")
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        print(
            "note: --plot needs matplotlib (pip install 'lltm_ext[plot]'); training without it",
            file=sys.stderr,
        )
        args.plot = None
    device = torch.device(args.device)
    print(
        f"adding problem: sequences of {args.seq_len}, batch {args.batch}, state {args.state}, "
        f"{args.epochs} epochs of {args.steps_per_epoch} steps on {device}; predicting the mean "
        f"gives loss {BASELINE:.3f}"
    )
    models = {"LLTM": LLTMRegressor}
    if not args.no_lstm:
        models["LSTM"] = LSTMRegressor
    if args.cell_loop:
        models["LLTM loop"] = CellLoopRegressor
    curves, times = {}, {}
    for name, model in models.items():
        curves[name], times[name] = train(
            name, lambda model=model: model(2, args.state), args, device
        )
    print(f"\n{'model':<42} {'ms/step':>8} {'final loss':>11}")
    labels = {
        "LLTM": "lltm_ext.LLTMSequence (one call/sequence)",
        "LSTM": "torch.nn.LSTM" + (" (cuDNN)" if device.type == "cuda" else ""),
        "LLTM loop": "Python loop of lltm_ext.LLTM cells",
    }
    for name in models:
        print(f"{labels[name]:<42} {times[name] * 1e3:8.2f} {final_loss(curves[name]):11.4f}")
    if args.plot:
        save_plot(args.plot, curves)
        print(f"wrote {args.plot}")
    print(
        f"final loss {final_loss(curves['LLTM']):.4f} (LLTM; first step {curves['LLTM'][0]:.4f}, "
        f"predicting the mean {BASELINE:.4f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
