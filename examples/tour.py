"""A quick tour of lltm_ext's public ops: shapes, the error against plain PyTorch, a gradient.

    python examples/tour.py                 # on CUDA if torch sees a GPU, else on the CPU
    python examples/tour.py --device cpu

Every op is compared with the same math written in plain PyTorch (the reference) and run once
through autograd. Runs in a few seconds on a CPU.
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F

import lltm_ext


def lltm_reference(
    x: torch.Tensor,
    weights: torch.Tensor,
    bias: torch.Tensor,
    old_h: torch.Tensor,
    old_cell: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The LLTM cell in plain PyTorch: x (B, I), weights (3S, S + I), bias (3S,), states (B, S)."""
    gates = torch.cat([old_h, x], dim=1) @ weights.t() + bias
    input_gate, output_gate, candidate = gates.chunk(3, dim=1)
    new_cell = old_cell + F.elu(candidate) * torch.sigmoid(input_gate)
    new_h = torch.tanh(new_cell) * torch.sigmoid(output_gate)
    return new_h, new_cell


def max_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest absolute difference of two tensors."""
    return (a.double() - b.double()).abs().max().item()


def show(name: str, shapes: str, error: float, grad: torch.Tensor) -> None:
    """One line per op: its shapes, its max error against the reference, a gradient's norm."""
    print(
        f"{name:<10} {shapes:<44} max |ours - reference| = {error:.2e}   "
        f"grad {tuple(grad.shape)} norm {grad.norm():.4f}"
    )


def tour(device: torch.device) -> None:
    """Run every public op once on `device`, with its reference and a backward pass."""
    torch.manual_seed(0)
    batch, features, state = 8, 16, 32

    # lltm: the functional cell.
    x = torch.randn(batch, features, device=device, requires_grad=True)
    stdv = 1.0 / math.sqrt(state)
    weights = torch.empty(3 * state, features + state, device=device).uniform_(-stdv, stdv)
    bias = torch.empty(3 * state, device=device).uniform_(-stdv, stdv)
    h, c = torch.randn(batch, state, device=device), torch.randn(batch, state, device=device)
    new_h, new_cell = lltm_ext.lltm(x, weights, bias, h, c)
    ref_h, ref_cell = lltm_reference(x, weights, bias, h, c)
    (grad,) = torch.autograd.grad(new_h.sum() + new_cell.sum(), x)
    err = max(max_error(new_h, ref_h), max_error(new_cell, ref_cell))
    show("lltm", f"x {tuple(x.shape)} -> h, cell {tuple(new_h.shape)}", err, grad)

    # LLTM: the same cell as an nn.Module holding its weights and bias.
    cell = lltm_ext.LLTM(features, state).to(device)
    new_h, new_cell = cell(x, (h, c))
    ref_h, ref_cell = lltm_reference(x, cell.weights, cell.bias, h, c)
    new_h.pow(2).mean().backward()
    err = max(max_error(new_h, ref_h), max_error(new_cell, ref_cell))
    show("LLTM", f"LLTM({features}, {state})(x, (h, c))", err, cell.weights.grad)

    # Element-wise ops: relu, sigmoid, and round with a straight-through gradient.
    x = torch.randn(4, 1000, device=device, requires_grad=True)
    for name, ours, reference in (
        ("relu", lltm_ext.relu, torch.relu),
        ("sigmoid", lltm_ext.sigmoid, torch.sigmoid),
        ("round_ste", lltm_ext.round_ste, lambda t: torch.floor(t + 0.5)),
    ):
        y = ours(x)
        (grad,) = torch.autograd.grad((y * y).sum(), x)
        show(name, f"{tuple(x.shape)} -> {tuple(y.shape)}", max_error(y, reference(x)), grad)

    # gemm: this project's own matrix multiply (not cuBLAS / MKL), differentiable.
    a = torch.randn(64, 48, device=device, requires_grad=True)
    b = torch.randn(48, 80, device=device, requires_grad=True)
    c = lltm_ext.gemm(a, b)
    (grad,) = torch.autograd.grad(c.sum(), a)
    ref = a.double() @ b.double()
    show(
        "gemm", f"{tuple(a.shape)} @ {tuple(b.shape)} -> {tuple(c.shape)}", max_error(c, ref), grad
    )


def main() -> None:
    """Parse --device and run the tour."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default="cuda" if torch.cuda.is_available() else "cpu",
        help="where to run (default: cuda if torch sees a GPU, else cpu)",
    )
    args = parser.parse_args()
    print(f"lltm_ext {lltm_ext.__version__}, torch {torch.__version__}, device {args.device}")
    tour(torch.device(args.device))


if __name__ == "__main__":
    main()
