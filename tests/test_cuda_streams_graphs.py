"""Every op on CUDA streams, in CUDA graphs, over many steps, and on a second GPU.

- Streams: each op, forward and backward, on a side stream right after a long producer kernel
  on that stream (torch.cuda._sleep) and the writes of its inputs (and incoming gradients) there:
  a kernel launched on another stream than the current one would read the stale (NaN) contents.
- Graphs: each op's forward captured in a torch.cuda.CUDAGraph and replayed with new inputs
  copied into the static ones (gemm also with split-K shapes and `out=`), equal to eager calls;
  a training step of all ops together through torch.cuda.make_graphed_callables, whose gradients
  match eager ones; and lltm_sequence's training step likewise.
- Memory (`slow`, select with -m slow): 30,000 training steps of all ops together, with no growth
  of GPU memory (torch.cuda.memory_allocated) or of the process's resident memory after warm-up.
- Two GPUs (`multigpu`, skipped with fewer): every op forward and backward on cuda:1 while cuda:0
  is current (and the reverse) equals the same call on the current device; tensors spread over
  two GPUs raise the "one device" error.

Everything here needs a GPU (the `cuda` marker).
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from helpers import assert_close
from torch import Tensor, nn

import lltm_ext

pytestmark = pytest.mark.cuda

# About 40 ms on an H100/H200 (~1.7 GHz): far longer than any launch of the ops below.
SLEEP_CYCLES = 1 << 26


@dataclass(frozen=True)
class Op:
    """One op as these tests call it: input shapes and scales, and a call returning a tuple."""

    name: str
    shapes: tuple[tuple[int, ...], ...]
    call: Callable[..., tuple[Tensor, ...]]
    scales: tuple[float, ...] | None = None
    exact: bool = True  # own kernels only (deterministic): eager and replay agree bit for bit

    def inputs(self, device, seed: int, dtype=torch.float32) -> list[Tensor]:
        """Random inputs, made on the CPU (one generator) and moved to `device`."""
        gen = torch.Generator().manual_seed(seed)
        scales = self.scales or (1.0,) * len(self.shapes)
        return [
            (torch.randn(shape, generator=gen, dtype=torch.float64) * scale).to(dtype).to(device)
            for shape, scale in zip(self.shapes, scales, strict=True)
        ]


def _lltm_shapes(batch: int, features: int, state: int) -> tuple[tuple[int, ...], ...]:
    """input, weights, bias, old_h, old_cell."""
    b, f, s = batch, features, state
    return ((b, f), (3 * s, s + f), (3 * s,), (b, s), (b, s))


def _flat_sequence(result: tuple[Tensor, tuple[Tensor, Tensor]]) -> tuple[Tensor, ...]:
    """lltm_sequence's (output, (h_n, c_n)) as one tuple."""
    output, (h_n, c_n) = result
    return output, h_n, c_n


OPS = {
    "relu": Op("relu", ((1000, 257),), lambda x: (lltm_ext.relu(x),)),
    "sigmoid": Op("sigmoid", ((1000, 257),), lambda x: (lltm_ext.sigmoid(x),)),
    "round_ste": Op("round_ste", ((1000, 257),), lambda x: (lltm_ext.round_ste(x),), (3.0,)),
    # cuBLAS does the LLTM's products: equal to eager within float32 rounding.
    "lltm": Op(
        "lltm",
        _lltm_shapes(64, 32, 128),
        lambda *args: tuple(lltm_ext.lltm(*args)),
        (1.0, 1 / math.sqrt(128), 1 / math.sqrt(128), 1.0, 1.0),
        exact=False,
    ),
    "gemm": Op("gemm", ((131, 259), (259, 77)), lambda a, b: (lltm_ext.gemm(a, b),)),
    # T = 7, B = 5, I = 24, S = 40: the time loops in the small-state kernels, the weight
    # gradients in one kernel, the input projection and d_input through cuBLAS.
    "lltm_sequence": Op(
        "lltm_sequence",
        ((7, 5, 24), (120, 64), (120,), (5, 40), (5, 40)),
        lambda x, w, b, h, c: _flat_sequence(lltm_ext.lltm_sequence(x, w, b, (h, c))),
        (1.0, 1 / math.sqrt(64), 1 / math.sqrt(64), 1.0, 1.0),
        exact=False,
    ),
}
OP_NAMES = sorted(OPS)


def assert_same(got: Tensor, want: Tensor, exact: bool) -> None:
    if exact:
        assert torch.equal(got, want), (got - want).abs().max()
    else:
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# Streams.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", OP_NAMES)
def test_side_stream_after_a_long_producer(name):
    """Inputs and incoming gradients are written on a side stream behind a ~40 ms kernel; the
    op's forward and backward, called on that stream, must see the written values."""
    op = OPS[name]
    sources = op.inputs("cuda", seed=1)
    # The same call on the default stream, from the same values: what the side stream must give.
    leaves = [s.clone().requires_grad_() for s in sources]
    want = op.call(*leaves)
    grad_sources = [torch.randn_like(w) for w in want]
    want_grads = torch.autograd.grad(want, leaves, grad_sources)

    # Stale contents: NaN everywhere, in place before the side stream starts.
    inputs = [torch.full_like(s, math.nan).requires_grad_() for s in sources]
    grads = [torch.full_like(g, math.nan) for g in grad_sources]
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(SLEEP_CYCLES)
        with torch.no_grad():
            for t, s in zip(inputs, sources, strict=True):
                t.copy_(s)
        got = op.call(*inputs)
        torch.cuda._sleep(SLEEP_CYCLES)
        for g, s in zip(grads, grad_sources, strict=True):
            g.copy_(s)
        got_grads = torch.autograd.grad(got, inputs, grads)
    torch.cuda.current_stream().wait_stream(side)
    for g, w in zip(got, want, strict=True):
        assert_same(g, w, op.exact)
    for g, w in zip(got_grads, want_grads, strict=True):
        assert_same(g, w, op.exact)


# ---------------------------------------------------------------------------------------------
# CUDA graphs.
# ---------------------------------------------------------------------------------------------


def capture(fn: Callable[[], tuple[Tensor, ...]]) -> tuple[torch.cuda.CUDAGraph, tuple]:
    """fn() warmed up on a side stream, then captured; returns the graph and its static outputs."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = fn()
    return graph, outputs


@pytest.mark.parametrize("name", OP_NAMES)
def test_graph_replay_with_new_inputs(name):
    op = OPS[name]
    static = op.inputs("cuda", seed=0)
    graph, static_out = capture(lambda: op.call(*static))
    for seed in (1, 2, 3):
        new = op.inputs("cuda", seed=seed)
        for s, n in zip(static, new, strict=True):
            s.copy_(n)
        graph.replay()
        want = op.call(*new)
        for got, w in zip(static_out, want, strict=True):
            assert_same(got, w, op.exact)


@pytest.mark.parametrize("state", [40, 160, 300])
def test_graph_replay_packed_sequence(state):
    """A packed batch's forward (several stretches: its final state made on the device, no index
    copied from the host) captured and replayed with new data equals the eager call."""
    from lltm_ext.ops.lltm_sequence import lltm_sequence_packed_op as op

    sizes = [6, 6, 5, 5, 5, 3, 2, 2, 1]
    torch.manual_seed(0)
    data = torch.randn(sum(sizes), 7, device="cuda")
    weights = torch.randn(3 * state, state + 7, device="cuda") / math.sqrt(state)
    bias = torch.randn(3 * state, device="cuda") / math.sqrt(state)
    h0, c0 = (torch.randn(sizes[0], state, device="cuda") for _ in "hc")
    graph, static_out = capture(lambda: op(data, sizes, weights, bias, h0, c0))
    for seed in (1, 2):
        torch.manual_seed(seed)
        data.copy_(torch.randn_like(data))
        h0.copy_(torch.randn_like(h0))
        graph.replay()
        for got, want in zip(static_out, op(data, sizes, weights, bias, h0, c0), strict=True):
            assert_same(got, want, exact=False)


@pytest.mark.parametrize(
    "m,n,k,layout",
    [
        (64, 48, 20000, "nn"),  # split-K (few tiles, long K)
        (1024, 1024, 256, "nt"),  # b read transposed in place
        (4096, 4096, 512, "tn"),  # many tiles: whatever the heuristic picks, a tail split on H200
        (17, 33, 65, "nn"),  # ragged tiles
    ],
)
def test_graph_replay_gemm_shapes_and_out(m, n, k, layout):
    """GEMM's split-K workspaces and reductions are captured too; `out=` (contiguous and a
    transposed view) as well."""
    gen = torch.Generator().manual_seed(0)

    def operands():
        if layout[0] == "n":
            a = torch.randn(m, k, generator=gen)
        else:
            a = torch.randn(k, m, generator=gen).t()
        if layout[1] == "n":
            b = torch.randn(k, n, generator=gen)
        else:
            b = torch.randn(n, k, generator=gen).t()
        return a.cuda(), b.cuda()  # .cuda() keeps a transposed view's layout

    a, b = operands()
    assert a.is_contiguous() == (layout[0] == "n") and b.is_contiguous() == (layout[1] == "n")
    out = torch.zeros(n, m, device="cuda").t()
    graph, (c,) = capture(lambda: (lltm_ext.gemm(a, b),))
    graph_out, _ = capture(lambda: (lltm_ext.gemm(a, b, out=out),))
    for _ in range(2):
        new_a, new_b = operands()
        a.copy_(new_a)
        b.copy_(new_b)
        graph.replay()
        graph_out.replay()
        want = lltm_ext.gemm(new_a, new_b)
        assert torch.equal(c, want)
        assert torch.equal(out, want)


class AllOps(nn.Module):
    """A step through every op: an LLTM cell, a GEMM projection, then relu, sigmoid and round_ste
    of the projection."""

    def __init__(self, features: int = 32, state: int = 64) -> None:
        super().__init__()
        self.cell = lltm_ext.LLTM(features, state)
        self.proj = nn.Parameter(torch.randn(state, state) / math.sqrt(state))

    def forward(self, x: Tensor, h: Tensor, c: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        h, c = self.cell(x, (h, c))
        z = lltm_ext.gemm(h, self.proj)
        y = lltm_ext.relu(z) * 0.5 + lltm_ext.sigmoid(z) + lltm_ext.round_ste(z * 4) * 0.25
        return y, h, c


def step_inputs(batch: int, features: int, state: int, seed: int) -> list[Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [
        torch.randn(batch, features, generator=gen).cuda(),
        torch.randn(batch, state, generator=gen).cuda(),
        torch.randn(batch, state, generator=gen).cuda(),
    ]


def assert_training_steps_match(
    graphed: tuple[Callable[..., Any], nn.Module],
    eager: tuple[Callable[..., Any], nn.Module],
    inputs: Callable[[int], list[Tensor]],
    y_shape: tuple[int, ...],
    steps: int,
) -> None:
    """`steps` SGD steps (lr 0.1) of each side, a (call, its parameters' module) pair returning
    (y, h, c), on inputs(seed) for seeds 1 .. steps (leaves that require grad; the eager side
    gets copies), loss sum(y w) + sum(h^2) + sum(c) with w of y_shape drawn each step: every
    step's outputs, input gradients and parameter gradients agree."""
    optimizers = [torch.optim.SGD(module.parameters(), lr=0.1) for _, module in (graphed, eager)]
    for seed in range(1, steps + 1):
        args = inputs(seed)
        args_eager = [t.detach().clone().requires_grad_() for t in args]
        weights = torch.randn(y_shape, device="cuda")
        results = []
        for (fn, module), opt, a in zip(
            (graphed, eager), optimizers, (args, args_eager), strict=True
        ):
            opt.zero_grad(set_to_none=True)
            y, h, c = fn(*a)
            ((y * weights).sum() + h.square().sum() + c.sum()).backward()
            results.append(
                [y.detach(), h.detach(), c.detach()]
                + [t.grad for t in a]
                + [p.grad.clone() for p in module.parameters()]
            )
            opt.step()
        for got, want in zip(*results, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_make_graphed_callables_training_step():
    """Forward and backward of all ops in CUDA graphs: outputs, input gradients and parameter
    gradients equal eager ones, over several steps with SGD updates."""
    batch, features, state = 16, 32, 64
    torch.manual_seed(0)
    eager = AllOps(features, state).cuda()
    graphed_module = copy.deepcopy(eager)
    sample = [t.requires_grad_() for t in step_inputs(batch, features, state, seed=0)]
    graphed = torch.cuda.make_graphed_callables(graphed_module, tuple(sample))
    assert_training_steps_match(
        (graphed, graphed_module),
        (eager, eager),
        lambda seed: [t.requires_grad_() for t in step_inputs(batch, features, state, seed)],
        (batch, state),
        steps=5,
    )
    for p, q in zip(graphed_module.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "size,env",
    [
        ((7, 5, 24, 40), {}),
        ((40, 16, 32, 96), {}),
        # Per step our 3xTF32 product and the gate kernel, each launched to start as the one
        # before it ends (programmatic dependent launch on sm_90).
        (
            (12, 8, 16, 80),
            {"LLTM_EXT_SEQUENCE_PATH": "cublas", "LLTM_EXT_SEQUENCE_STEP_GEMM": "tensor"},
        ),
    ],
    ids=["short", "longer", "step-kernels"],
)
def test_make_graphed_callables_sequence(size, env, monkeypatch):
    """lltm_sequence's forward and backward in CUDA graphs (the time loops' kernels, the weight
    gradients' kernel and its split sums, cuBLAS's products; per-step kernels): outputs and every
    gradient equal eager ones over several steps with SGD updates."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    T, B, features, S = size
    torch.manual_seed(0)
    eager = lltm_ext.LLTMSequence(features, S).cuda()
    graphed_module = copy.deepcopy(eager)

    def inputs(seed: int) -> list[Tensor]:
        gen = torch.Generator().manual_seed(seed)
        return [
            torch.randn(T, B, features, generator=gen).cuda().requires_grad_(),
            torch.randn(1, B, S, generator=gen).cuda().requires_grad_(),
            torch.randn(1, B, S, generator=gen).cuda().requires_grad_(),
        ]

    class Flat(nn.Module):
        """(x, h, c) -> (output, h_n, c_n): the sequence's signature as make_graphed_callables
        takes it (states (1, B, S): nn.LSTM's (num_layers, batch, state))."""

        def __init__(self, inner: nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: Tensor, h: Tensor, c: Tensor) -> tuple[Tensor, Tensor, Tensor]:
            output, (h_n, c_n) = self.inner(x, (h, c))
            return output, h_n, c_n

    graphed = torch.cuda.make_graphed_callables(Flat(graphed_module), tuple(inputs(0)))
    assert_training_steps_match(
        (graphed, graphed_module), (Flat(eager), eager), inputs, (T, B, S), steps=4
    )


# ---------------------------------------------------------------------------------------------
# Memory over many steps.
# ---------------------------------------------------------------------------------------------


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.slow
def test_30000_training_steps_keep_memory_flat():
    """30,000 steps of all ops (forward, backward, SGD): GPU memory allocated after the warm-up
    is what it is at the end (exactly, give or take one small block), and the process's resident
    memory grows by less than 32 MiB (a leak of ~1 KiB per step would show)."""
    steps, warmup = 30_000, 1_000
    batch, features, state = 16, 32, 64
    torch.manual_seed(0)
    model = AllOps(features, state).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    inputs = step_inputs(batch, features, state, seed=0)
    x, h0, c0 = (t.requires_grad_() for t in inputs)
    weights = torch.randn(batch, state, device="cuda")
    gpu, host = {}, {}
    for i in range(steps):
        opt.zero_grad(set_to_none=True)
        x.grad = h0.grad = c0.grad = None
        y, h, c = model(x, h0, c0)
        ((y * weights).sum() + h.square().sum() + c.sum()).backward()
        opt.step()
        if i + 1 in (warmup, steps // 2, steps):
            torch.cuda.synchronize()
            gpu[i + 1] = torch.cuda.memory_allocated()
            host[i + 1] = resident_bytes()
    assert torch.isfinite(model.proj).all()
    print(f"memory_allocated by step: {gpu}; resident bytes by step: {host}")
    assert gpu[steps] - gpu[warmup] <= 4096, gpu
    assert gpu[steps // 2] - gpu[warmup] <= 4096, gpu
    assert host[steps] - host[warmup] <= 32 << 20, host


# ---------------------------------------------------------------------------------------------
# Two GPUs.
# ---------------------------------------------------------------------------------------------


def forward_backward(op: Op, device: str) -> list[Tensor]:
    """Outputs and input gradients of op on fixed inputs on `device`, as CPU tensors."""
    leaves = [t.requires_grad_() for t in op.inputs(device, seed=5)]
    outputs = op.call(*leaves)
    for t in outputs:
        assert t.device == torch.device(device)
    gen = torch.Generator().manual_seed(6)
    grads = [torch.randn(t.shape, generator=gen).to(device) for t in outputs]
    input_grads = torch.autograd.grad(outputs, leaves, grads)
    for g in input_grads:
        assert g.device == torch.device(device)
    return [t.detach().cpu() for t in (*outputs, *input_grads)]


@pytest.mark.multigpu
@pytest.mark.parametrize("name", OP_NAMES)
@pytest.mark.parametrize("current,other", [(0, 1), (1, 0)], ids=["on1-current0", "on0-current1"])
def test_op_on_a_device_that_is_not_current(name, current, other):
    """The tensors' device, not the current one, runs the op (device guards): the results equal
    the same call with that device current, and the call on the current device."""
    op = OPS[name]
    with torch.cuda.device(other):
        want = forward_backward(op, f"cuda:{other}")
    with torch.cuda.device(current):
        got = forward_backward(op, f"cuda:{other}")
        on_current = forward_backward(op, f"cuda:{current}")
        assert torch.cuda.current_device() == current
    for g, w, c in zip(got, want, on_current, strict=True):
        assert_same(g, w, op.exact)
        torch.testing.assert_close(g, c, rtol=1e-5, atol=1e-5)  # two GPUs of one model
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)


@pytest.mark.multigpu
def test_tensors_on_two_gpus_raise_one_device():
    a, b = torch.randn(4, 5, device="cuda:0"), torch.randn(5, 6, device="cuda:1")
    with pytest.raises(RuntimeError, match=r"one device.*`b` is on cuda:1 and `a` is on cuda:0"):
        lltm_ext.gemm(a, b)
    b0 = b.to("cuda:0")
    with pytest.raises(RuntimeError, match=r"one device.*`out` is on cuda:1 and `a` is on cuda:0"):
        lltm_ext.gemm(a, b0, out=torch.empty(4, 6, device="cuda:1"))
    args = OPS["lltm"].inputs("cuda:0", seed=0)
    for i, name in enumerate(["weights", "bias", "old_h", "old_cell"], start=1):
        spread = list(args)
        spread[i] = spread[i].to("cuda:1")
        with pytest.raises(RuntimeError, match=rf"one device.*`{name}` is on cuda:1"):
            lltm_ext.lltm(*spread)
    for name in ("relu", "sigmoid"):
        forward = getattr(torch.ops.lltm_ext, f"{name}_forward").default
        backward = getattr(torch.ops.lltm_ext, f"{name}_backward").default
        y = forward(torch.randn(8, device="cuda:0"))
        with pytest.raises(RuntimeError, match=r"one device.*`grad` is on cuda:1"):
            backward(torch.randn(8, device="cuda:1"), y)
    # Nothing left broken on either GPU.
    for device in ("cuda:0", "cuda:1"):
        x = torch.randn(100, device=device)
        assert_close(lltm_ext.relu(x), torch.relu(x.double().cpu()), torch.float32)
        torch.cuda.synchronize(device)
