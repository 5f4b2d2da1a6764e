"""What the distributed tests run on every rank (tests/dist_world.py sends these functions): a model
with each kind of lltm_ext layer (LLTMSequence, LLTM, relu, gemm), its pure-PyTorch float64 twin,
and training under DDP, FSDP2, torch.compile and no_sync, with checkpoints.

Every step draws one global batch (GLOBAL_BATCH rows, from a generator seeded by the step) and
each rank trains on its rows, so a run on N ranks must end where one process training on the
whole batch ends: ``reference_training`` computes that in float64, in plain PyTorch.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import warnings
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

import lltm_ext
from lltm_ext import distributed as lltm_dist

FEATURES, STATE, OUT, SEQ_LEN = 3, 5, 2, 4  # 3 * STATE = 15 rows: FSDP2 shards them unevenly
GLOBAL_BATCH = 8
LR, MOMENTUM = 0.2, 0.9


class Net(nn.Module):
    """x (T, B, FEATURES) -> LLTMSequence -> one LLTM cell step on relu(last output), from the
    sequence's final state -> gemm with a (state, OUT) head -> (B, OUT)."""

    def __init__(self, state: int = STATE) -> None:
        super().__init__()
        self.seq = lltm_ext.LLTMSequence(FEATURES, state)
        self.cell = lltm_ext.LLTM(state, state)
        self.head = nn.Parameter(torch.empty(state, OUT).uniform_(-1, 1) / math.sqrt(state))

    def forward(self, x: Tensor) -> Tensor:
        out, (h, c) = self.seq(x)  # h, c (1, B, S), as nn.LSTM's
        h2, _ = self.cell(lltm_ext.relu(out[-1]), (h[-1], c[-1]))
        return lltm_ext.gemm(h2, self.head)


def _cell(x: Tensor, w: Tensor, b: Tensor, h: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
    """The LLTM cell in plain PyTorch."""
    gates = torch.cat([h, x], 1) @ w.t() + b
    i, o, z = gates.chunk(3, 1)
    c = c + torch.nn.functional.elu(z) * torch.sigmoid(i)
    return torch.tanh(c) * torch.sigmoid(o), c


def reference_forward(p: dict[str, Tensor], x: Tensor) -> Tensor:
    """Net's forward in plain PyTorch, from its parameters `p` (by name)."""
    h = c = x.new_zeros(x.shape[1], p["seq.bias"].shape[0] // 3)
    for x_t in x:
        h, c = _cell(x_t, p["seq.weights"], p["seq.bias"], h, c)
    h2, _ = _cell(torch.relu(h), p["cell.weights"], p["cell.bias"], h, c)
    return h2 @ p["head"]


def device() -> torch.device:
    """This rank's device: its GPU under NCCL, else the CPU."""
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def initial_net(dtype: torch.dtype, state: int = STATE) -> Net:
    """The same initial Net on every rank (seeded), on this rank's device. On CUDA, float32
    products are full float32 (LLTMSequence follows torch's matmul setting, full float32 by
    default; pinned here), as the tolerances against the float64 reference assume."""
    if device().type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(1234)
    return Net(state).to(device(), dtype)


def global_batch(step: int, rows: int = GLOBAL_BATCH) -> tuple[Tensor, Tensor]:
    """Step `step`'s whole batch: x (SEQ_LEN, rows, FEATURES) and target (rows, OUT), float64."""
    g = torch.Generator().manual_seed(100 + step)
    x = torch.randn(SEQ_LEN, rows, FEATURES, generator=g, dtype=torch.float64)
    return x, torch.randn(rows, OUT, generator=g, dtype=torch.float64)


def my_rows(batch: tuple[Tensor, Tensor], part: int = 0, parts: int = 1) -> tuple[Tensor, Tensor]:
    """This rank's rows of a global batch, cut into `parts` micro-batches: micro-batch `part`."""
    x, target = batch
    per = x.shape[1] // (dist.get_world_size() * parts)
    start = (dist.get_rank() * parts + part) * per
    return x[:, start : start + per], target[start : start + per]


def full_parameters(model: nn.Module) -> dict[str, Tensor]:
    """The model's parameters by name, whole (FSDP2's DTensor shards gathered), float64 on CPU."""
    model = getattr(model, "module", model)  # DDP
    model = getattr(model, "_orig_mod", model)  # torch.compile
    out = {}
    for name, p in model.named_parameters():
        full = p.full_tensor() if hasattr(p, "full_tensor") else p
        out[name] = full.detach().to("cpu", torch.float64).clone()
    return out


def reference_training(
    start: dict[str, Tensor], steps: int, rows: int = GLOBAL_BATCH
) -> dict[str, Tensor]:
    """One process, float64, plain PyTorch: `steps` SGD steps (LR, MOMENTUM) on each step's whole
    global batch of `rows` rows, mean squared error. Returns the parameters."""
    p = {k: v.clone().requires_grad_() for k, v in start.items()}
    opt = torch.optim.SGD(p.values(), lr=LR, momentum=MOMENTUM)
    for step in range(steps):
        x, target = global_batch(step, rows)
        loss = nn.functional.mse_loss(reference_forward(p, x), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {k: v.detach() for k, v in p.items()}


def _sgd_steps(model: nn.Module, dtype: torch.dtype, steps: int) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    for step in range(steps):
        x, target = my_rows(global_batch(step))
        loss = nn.functional.mse_loss(model(x.to(device(), dtype)), target.to(device(), dtype))
        opt.zero_grad()
        loss.backward()
        opt.step()


def _result(model: nn.Module, start: dict[str, Tensor], steps: int) -> dict[str, Any]:
    """What a training case returns: the trained parameters, and (rank 0) the reference's."""
    out: dict[str, Any] = {"params": full_parameters(model)}
    if dist.get_rank() == 0:
        out["reference"] = reference_training(start, steps)
    return out


def train_ddp(dtype: str, steps: int, compile_backend: str | None = None) -> dict[str, Any]:
    """DDP (around torch.compile(fullgraph=True) of the model with `compile_backend`), `steps`
    SGD steps."""
    from torch.nn.parallel import DistributedDataParallel

    dt = getattr(torch, dtype)
    net = initial_net(dt)
    start = full_parameters(net)
    lltm_dist.check_model(net)
    ids = [device().index] if device().type == "cuda" else None
    inner: nn.Module = net
    if compile_backend is not None:
        # Compiled inside DDP: fullgraph holds for the model (DDP's own Python around it is
        # not traced), and DDP's forward tells dynamo to split the graph at its buckets.
        torch._dynamo.reset()
        inner = torch.compile(net, fullgraph=True, backend=compile_backend)
    model = DistributedDataParallel(inner, device_ids=ids)
    _sgd_steps(model, dt, steps)
    return _result(model, start, steps)


def fsdp_mesh() -> Any:
    """A 1-D mesh of all ranks on this rank's device type. Given to fully_shard explicitly: its
    default mesh takes the machine's accelerator, so on a GPU machine a gloo job of CPU tensors
    would be sharded onto CUDA."""
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device().type, (dist.get_world_size(),))


def fsdp_model(net: Net, per_layer: bool) -> Net:
    """FSDP2 over Net: the root alone, or per layer (seq, cell, then the root)."""
    from torch.distributed.fsdp import fully_shard

    mesh = fsdp_mesh()
    if per_layer:
        fully_shard(net.seq, mesh=mesh)
        fully_shard(net.cell, mesh=mesh)
    fully_shard(net, mesh=mesh)
    return net


def train_fsdp(
    dtype: str, steps: int, per_layer: bool, compile_backend: str | None = None
) -> dict[str, Any]:
    """FSDP2 (fully_shard on the root, or per layer), `steps` SGD steps; optionally compiled."""
    dt = getattr(torch, dtype)
    net = initial_net(dt)
    start = full_parameters(net)
    lltm_dist.check_model(net)
    model: nn.Module = fsdp_model(net, per_layer)
    if compile_backend is not None:
        torch._dynamo.reset()
        model = torch.compile(model, backend=compile_backend)
    _sgd_steps(model, dt, steps)
    out = _result(model, start, steps)
    out["sharded"] = {
        name: (type(p).__name__, str(getattr(p, "placements", None)), tuple(p.to_local().shape))
        for name, p in net.named_parameters()
        if hasattr(p, "to_local")
    }
    return out


def train_ddp_no_sync(dtype: str, steps: int, micro: int) -> dict[str, Any]:
    """DDP with gradient accumulation: `micro` micro-batches per step, all but the last under
    no_sync() (no all-reduce), each loss scaled by 1 / micro."""
    from torch.nn.parallel import DistributedDataParallel

    dt = getattr(torch, dtype)
    net = initial_net(dt)
    start = full_parameters(net)
    ids = [device().index] if device().type == "cuda" else None
    model = DistributedDataParallel(net, device_ids=ids)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    reduced = []  # whether each micro-batch's backward all-reduced (grads equal across ranks)
    for step in range(steps):
        batch = global_batch(step)
        opt.zero_grad()
        for part in range(micro):
            x, target = my_rows(batch, part, micro)
            last = part == micro - 1
            with model.no_sync() if not last else contextlib.nullcontext():
                pred = model(x.to(device(), dt))
                loss = nn.functional.mse_loss(pred, target.to(device(), dt)) / micro
                loss.backward()
            grad = net.head.grad.detach().clone()
            gathered = [torch.zeros_like(grad) for _ in range(dist.get_world_size())]
            dist.all_gather(gathered, grad)  # compare the ranks' gradients
            reduced.append(all(torch.equal(g, gathered[0]) for g in gathered))
        opt.step()
    out = _result(model, start, steps)
    out["reduced"] = reduced
    return out


def fsdp_save_checkpoint(path: str, steps: int) -> dict[str, Any]:
    """FSDP2 per layer, `steps` Adam steps, then a torch.distributed.checkpoint of the model and
    optimizer at `path`. Returns the whole parameters and optimizer state (gathered), and the
    shards' shapes on this rank."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_state_dict,
    )

    net = fsdp_model(initial_net(torch.float64), per_layer=True)
    opt = torch.optim.Adam(net.parameters(), lr=0.05)
    for step in range(steps):
        x, target = my_rows(global_batch(step))
        loss = nn.functional.mse_loss(net(x.to(device())), target.to(device()))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model_state, optim_state = get_state_dict(net, opt)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=path)
    full = StateDictOptions(full_state_dict=True, cpu_offload=True)
    full_model, full_optim = get_state_dict(net, opt, options=full)
    shards = {k: tuple(v.to_local().shape) for k, v in model_state.items()}
    return {"model": full_model, "optim": full_optim, "shards": shards}


def check_mismatched_model() -> str:
    """Rank 1 builds its LLTMSequence with another state size: check_model's error, as raised
    on this rank (every rank must raise)."""
    net = initial_net(torch.float64, state=STATE if dist.get_rank() == 0 else STATE - 1)
    try:
        lltm_dist.check_model(net)
    except RuntimeError as e:
        return str(e)
    return "no error"


def ddp_step_with_bad_state_on_last_rank() -> None:
    """A DDP step where the last rank passes its LLTMSequence a state of the wrong size: that rank
    raises the op's error; the others wait in the gradient all-reduce (until the test's harness,
    as torchrun would, ends them)."""
    from torch.nn.parallel import DistributedDataParallel

    net = initial_net(torch.float64)
    model = DistributedDataParallel(net)
    x, target = my_rows(global_batch(0))
    x = x.to(device())
    state = STATE + (1 if dist.get_rank() == dist.get_world_size() - 1 else 0)
    h0 = x.new_zeros(1, x.shape[1], state)
    out, _ = model.module.seq(x, (h0, h0.clone()))  # the bad call itself
    loss = (model(x) - target.to(device())).square().mean() + out.sum() * 0
    loss.backward()


def fsdp_outputs(batch_first: bool, in_place: bool) -> dict[str, Any]:
    """FSDP2 over an LLTMSequence (per layer), 1 added to its output (in place: what FSDP2 warns
    about for views) before the loss: the warnings that mention a view tensor, and how far the
    gradients are from the same module's without FSDP2 (every rank has the same input)."""
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    plain = lltm_ext.LLTMSequence(FEATURES, STATE, batch_first=batch_first)
    plain.to(device(), torch.float64)
    model = nn.Sequential(copy.deepcopy(plain))
    mesh = fsdp_mesh()
    fully_shard(model[0], mesh=mesh)
    fully_shard(model, mesh=mesh)
    x = torch.randn(3, 4, FEATURES, dtype=torch.float64, device=device())

    def loss(module: nn.Module) -> Tensor:
        out, (h, _) = module(x)
        if in_place:
            out.add_(1)
        else:
            out = out + 1
        return out.square().sum() + h.sum()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss(model).backward()
    loss(plain).backward()
    errors = [
        (p.grad.full_tensor() - q.grad).abs().max().item()
        for p, q in zip(model.parameters(), plain.parameters(), strict=True)
    ]
    return {
        "warnings": [str(w.message) for w in caught if "view" in str(w.message)],
        "grad_error": max(errors),
    }


def environment() -> dict[str, Any]:
    """This rank's view of the world (for the harness's own test)."""
    return {
        "rank": dist.get_rank(),
        "size": dist.get_world_size(),
        "backend": str(dist.get_backend()),
        "threads": torch.get_num_threads(),
        "omp": os.environ.get("OMP_NUM_THREADS"),
        "lltm_ext": lltm_ext.__file__,
    }


def _dtensor_case(
    fn: Any, inputs: list[Tensor], placements: list[Any], mesh: Any
) -> dict[str, Any]:
    """fn on DTensors placed as `placements` vs fn on the whole tensors: the largest differences
    of the outputs and of the inputs' gradients (a fixed random weighting of the outputs as the
    loss), and the outputs' placements."""
    from torch.distributed.tensor import Replicate, distribute_tensor

    def outputs(result: Any) -> list[Tensor]:
        flat = []
        for item in result if isinstance(result, (tuple, list)) else [result]:
            flat += outputs(item) if isinstance(item, (tuple, list)) else [item]
        return flat

    plain = [t.detach().clone().requires_grad_() for t in inputs]
    expected = outputs(fn(*plain))
    g = torch.Generator().manual_seed(7)
    weights = [torch.randn(t.shape, generator=g, dtype=t.dtype).to(t.device) for t in expected]
    sum(((o * w).sum() for o, w in zip(expected, weights, strict=True)), torch.zeros(())).backward()

    dts = [
        distribute_tensor(t.detach().clone(), mesh, [p]).requires_grad_()
        for t, p in zip(inputs, placements, strict=True)
    ]
    got = outputs(fn(*dts))
    loss = sum(
        (o * distribute_tensor(w, mesh, [Replicate()])).sum()
        for o, w in zip(got, weights, strict=True)
    )
    loss.backward()
    return {
        "out": max(
            (o.full_tensor() - e).abs().max().item() for o, e in zip(got, expected, strict=True)
        ),
        "grad": max(
            (d.grad.full_tensor() - p.grad).abs().max().item()
            for d, p in zip(dts, plain, strict=True)
        ),
        "placements": [repr(o.placements[0]) for o in got],
    }


def dtensor_ops() -> dict[str, Any]:
    """Each op on DTensors over all ranks (lltm_ext.distributed registers their sharding rules)
    against the same op on whole tensors, float64."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard

    import lltm_ext.distributed  # registers the sharding rules

    mesh = init_device_mesh(device().type, (dist.get_world_size(),))
    torch.manual_seed(0)
    T, B, F, S = 4, 6, 3, 5  # steps, batch, features, state
    dev, f64 = device(), torch.float64

    def rand(*shape: int, scale: float = 1.0) -> Tensor:
        return (torch.randn(*shape, dtype=f64) * scale).to(dev)

    R, S0, S1 = Replicate(), Shard(0), Shard(1)
    seq = [rand(T, B, F), rand(3 * S, S + F, scale=0.4), rand(3 * S, scale=0.4)]
    seq += [rand(B, S), rand(B, S)]
    cell = [rand(B, F), rand(3 * S, S + F, scale=0.4), rand(3 * S, scale=0.4)]
    cell += [rand(B, S), rand(B, S)]
    a, b = rand(6, 4), rand(4, 8)
    x = rand(4, 6)
    cases = {
        # the weights as FSDP2 keeps them between steps (rows split): replicated for the call
        "lltm_sequence batch-split": (
            lambda x, w, b, h, c: lltm_ext.lltm_sequence(x, w, b, (h, c)),
            seq,
            [S1, S0, R, S0, S0],
        ),
        "lltm_sequence replicated": (
            lambda x, w, b, h, c: lltm_ext.lltm_sequence(x, w, b, (h, c)),
            seq,
            [R] * 5,
        ),
        "lltm batch-split": (lltm_ext.lltm, cell, [S0, S0, R, S0, S0]),
        "gemm rows": (lltm_ext.gemm, [a, b], [S0, R]),
        "gemm columns": (lltm_ext.gemm, [a, b], [R, S1]),
        "gemm inner": (lltm_ext.gemm, [a, b], [S1, S0]),
        "relu dim 1": (lltm_ext.relu, [x], [S1]),
        "sigmoid dim 0": (lltm_ext.sigmoid, [x], [S0]),
        "round_ste dim 1": (lltm_ext.round_ste, [x], [S1]),
        "sigmoid of a partial gemm": (
            lambda a, b: lltm_ext.sigmoid(lltm_ext.gemm(a, b)),
            [a, b],
            [S1, S0],
        ),
    }
    return {name: _dtensor_case(fn, inputs, pl, mesh) for name, (fn, inputs, pl) in cases.items()}
