"""Bad inputs to every op through the public API: a Python exception that names the argument.

One parametrized test over all ops (lltm, relu, sigmoid, round_ste, gemm with and without
``out=``): dtypes (bool, integer, complex, a second floating dtype), 0-d / 1-d / 3-d tensors where
2-D is required, mismatched shapes, ``out=`` wrong in shape, dtype or device, overlapping an
input or itself, or requiring grad, meta tensors mixed with real ones, and (marked ``cuda``)
tensors on two devices. Each call must raise RuntimeError, TypeError or ValueError (never crash
the process), its message must come from lltm_ext and name the offending argument in backticks
(`` `old_h` ``), and a valid call of the same op right after must succeed with correct values
(on CUDA: the context is not poisoned by the failed call).

Meta tensors: a call whose tensors are all on the meta device runs the op's fake kernel and gives
meta outputs of the right shapes (shape inference, as PyTorch's own ops do); a meta tensor mixed
with CPU or CUDA tensors, or a meta tensor of a non-floating dtype, raises like any bad input.
The fake kernels restate the C++ checks by hand: every CPU case that meta tensors can express
(all but those whose bad part is a meta tensor among real ones) raises the same exception with the
same message on meta tensors as on CPU tensors, the device's name aside.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from helpers import assert_close
from torch import Tensor

import lltm_ext
from lltm_ext.ops.lltm import lltm_reference

ELEMENTWISE = ("relu", "sigmoid", "round_ste")
B, F, S = 4, 3, 5  # LLTM: batch, input features, state size
M, K, N = 4, 5, 6  # GEMM: a (M, K) @ b (K, N)
ERRORS = (RuntimeError, TypeError, ValueError)


def good_args(op: str, device: str) -> dict[str, Tensor]:
    """Valid arguments of `op` on `device`, float32, by the names the messages use."""
    gen = torch.Generator().manual_seed(0)

    def randn(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=gen).to(device)

    if op in ELEMENTWISE:
        return {"x": randn(4, 6)}
    if op == "lltm":
        stdv = 1 / math.sqrt(S)
        return {
            "input": randn(B, F),
            "weights": randn(3 * S, S + F) * stdv,
            "bias": randn(3 * S) * stdv,
            "old_h": randn(B, S),
            "old_cell": randn(B, S),
        }
    assert op == "gemm"
    return {"a": randn(M, K), "b": randn(K, N)}


def call(op: str, args: dict[str, Tensor]):
    """The public function of `op` on `args` (gemm gets `out=` when args has one)."""
    if op in ELEMENTWISE:
        return getattr(lltm_ext, op)(args["x"])
    if op == "lltm":
        return lltm_ext.lltm(
            args["input"], args["weights"], args["bias"], args["old_h"], args["old_cell"]
        )
    return lltm_ext.gemm(args["a"], args["b"], out=args.get("out"))


def reference(op: str, args: dict[str, Tensor]) -> list[Tensor]:
    """float64 CPU results of `op` on `args`."""
    r = {k: v.detach().double().cpu() for k, v in args.items()}
    if op == "relu":
        return [torch.relu(r["x"])]
    if op == "sigmoid":
        return [torch.sigmoid(r["x"])]
    if op == "round_ste":
        return [torch.floor(r["x"] + 0.5)]
    if op == "lltm":
        return list(lltm_reference(r["input"], r["weights"], r["bias"], r["old_h"], r["old_cell"]))
    return [r["a"] @ r["b"]]


def check_valid_call(op: str, device: str) -> None:
    """A valid call of `op` on `device` runs and gives the reference's values."""
    args = good_args(op, device)
    got = call(op, args)
    got = list(got) if isinstance(got, tuple) else [got]
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    for g, want in zip(got, reference(op, args), strict=True):
        assert g.device.type == torch.device(device).type
        assert_close(g, want, torch.float32, scale=10.0)


@dataclass(frozen=True)
class Bad:
    """One bad call: `op` with its valid arguments on `device`, where `slot` (default: `arg`) is
    replaced by make(valid arguments), which may change others too; the message must name `arg`
    (and `also`, if given)."""

    id: str
    op: str
    arg: str
    make: Callable[[dict[str, Tensor]], Tensor]
    device: str = "cpu"
    also: str | None = None
    slot: str | None = None


def meta(t: Tensor) -> Tensor:
    return torch.empty_like(t, device="meta")


def overlapping_out(args: dict[str, Tensor], name: str) -> Tensor:
    """An (M, N) `out` whose storage is shared with args[name] (which is replaced by a view of
    the same storage, with the same values)."""
    base = torch.zeros(M * N + K * N + M * K, device=args["a"].device)
    t = args[name]
    view = base[: t.numel()].view(t.shape).copy_(t)
    args[name] = view
    return base[: M * N].view(M, N)


CPU_CASES = [
    # relu, sigmoid, round_ste: any shape, one of four floating dtypes.
    *(
        Bad(f"{op}-{dtype_name}", op, "x", lambda a, d=dtype: a["x"].to(d))
        for op in ELEMENTWISE
        for dtype_name, dtype in (
            ("bool", torch.bool),
            ("int32", torch.int32),
            ("int64", torch.int64),
            ("complex64", torch.complex64),
        )
    ),
    *(
        Bad(
            f"{op}-meta-int", op, "x", lambda a: torch.empty(4, 6, dtype=torch.int32, device="meta")
        )
        for op in ELEMENTWISE
    ),
    # lltm: every argument 2-D (bias 1-D or [1, 3S]), of one floating dtype, consistent shapes.
    Bad("lltm-input-0d", "lltm", "input", lambda a: torch.tensor(1.0)),
    Bad("lltm-input-1d", "lltm", "input", lambda a: a["input"].reshape(-1)),
    Bad("lltm-input-3d", "lltm", "input", lambda a: a["input"][None]),
    Bad("lltm-input-features", "lltm", "input", lambda a: torch.randn(B, F + 1)),
    Bad("lltm-input-int32", "lltm", "input", lambda a: a["input"].to(torch.int32)),
    Bad("lltm-input-float64", "lltm", "input", lambda a: a["input"].double()),
    Bad("lltm-input-meta", "lltm", "input", lambda a: meta(a["input"])),
    Bad("lltm-weights-0d", "lltm", "weights", lambda a: torch.tensor(1.0)),
    Bad("lltm-weights-1d", "lltm", "weights", lambda a: a["weights"].reshape(-1)),
    Bad("lltm-weights-3d", "lltm", "weights", lambda a: a["weights"][None]),
    Bad("lltm-weights-rows", "lltm", "weights", lambda a: torch.randn(3 * S - 1, S + F)),
    Bad("lltm-weights-complex64", "lltm", "weights", lambda a: a["weights"].to(torch.complex64)),
    Bad("lltm-weights-float16", "lltm", "weights", lambda a: a["weights"].half()),
    Bad("lltm-bias-0d", "lltm", "bias", lambda a: torch.tensor(1.0)),
    Bad("lltm-bias-2x3S", "lltm", "bias", lambda a: torch.randn(2, 3 * S)),
    Bad("lltm-bias-3d", "lltm", "bias", lambda a: a["bias"].reshape(1, 1, -1)),
    Bad("lltm-bias-length", "lltm", "bias", lambda a: torch.randn(3 * S + 1)),
    Bad("lltm-bias-bool", "lltm", "bias", lambda a: a["bias"] > 0),
    Bad("lltm-old_h-0d", "lltm", "old_h", lambda a: torch.tensor(0.0)),
    Bad("lltm-old_h-1d", "lltm", "old_h", lambda a: a["old_h"].reshape(-1)),
    Bad("lltm-old_h-3d", "lltm", "old_h", lambda a: a["old_h"][None]),
    Bad("lltm-old_h-state", "lltm", "old_h", lambda a: torch.randn(B, S + 1)),
    Bad("lltm-old_h-meta", "lltm", "old_h", lambda a: meta(a["old_h"])),
    Bad("lltm-old_cell-1d", "lltm", "old_cell", lambda a: a["old_cell"].reshape(-1)),
    Bad("lltm-old_cell-batch", "lltm", "old_cell", lambda a: torch.randn(B - 1, S)),
    Bad("lltm-old_cell-complex128", "lltm", "old_cell", lambda a: a["old_cell"].cdouble()),
    Bad("lltm-old_cell-int64", "lltm", "old_cell", lambda a: a["old_cell"].long()),
    # gemm: a (M, K) and b (K, N), 2-D, of one floating dtype.
    Bad("gemm-a-0d", "gemm", "a", lambda a: torch.tensor(1.0)),
    Bad("gemm-a-1d", "gemm", "a", lambda a: a["a"].reshape(-1)),
    Bad("gemm-a-3d", "gemm", "a", lambda a: a["a"][None]),
    Bad("gemm-b-1d", "gemm", "b", lambda a: a["b"][:, 0]),
    Bad("gemm-b-3d", "gemm", "b", lambda a: a["b"].expand(2, K, N)),
    Bad("gemm-b-rows", "gemm", "b", lambda a: torch.randn(K + 1, N)),
    Bad("gemm-a-bool", "gemm", "a", lambda a: a["a"] > 0),
    Bad("gemm-b-int32", "gemm", "b", lambda a: a["b"].to(torch.int32)),
    Bad("gemm-a-complex64", "gemm", "a", lambda a: a["a"].to(torch.complex64)),
    Bad("gemm-b-float64", "gemm", "b", lambda a: a["b"].double()),
    Bad("gemm-a-meta", "gemm", "a", lambda a: meta(a["a"])),
    Bad("gemm-b-meta", "gemm", "b", lambda a: meta(a["b"])),
    # gemm(out=): (M, N), a's dtype and device, no memory shared with itself, a or b; no grad.
    Bad("gemm-out-transposed-shape", "gemm", "out", lambda a: torch.empty(N, M)),
    Bad("gemm-out-1d", "gemm", "out", lambda a: torch.empty(M * N)),
    Bad("gemm-out-3d", "gemm", "out", lambda a: torch.empty(1, M, N)),
    Bad("gemm-out-float64", "gemm", "out", lambda a: torch.empty(M, N, dtype=torch.float64)),
    Bad("gemm-out-int32", "gemm", "out", lambda a: torch.empty(M, N, dtype=torch.int32)),
    Bad("gemm-out-overlaps-a", "gemm", "out", lambda a: overlapping_out(a, "a"), also="a"),
    Bad("gemm-out-overlaps-b", "gemm", "out", lambda a: overlapping_out(a, "b"), also="b"),
    Bad("gemm-out-expanded", "gemm", "out", lambda a: torch.empty(1, N).expand(M, N)),
    Bad("gemm-out-meta", "gemm", "out", lambda a: torch.empty(M, N, device="meta")),
    Bad("gemm-out-requires-grad", "gemm", "out", lambda a: torch.empty(M, N, requires_grad=True)),
]


def _is_b(args: dict[str, Tensor]) -> Tensor:
    """`out` that is `b` itself, of the right shape: a and b become (K, K) matrices."""
    args["a"] = torch.randn(K, K, device=args["a"].device)
    args["b"] = torch.randn(K, K, device=args["a"].device)
    return args["b"]


def _a_requires_grad(args: dict[str, Tensor]) -> Tensor:
    args["a"] = args["a"].clone().requires_grad_()
    return torch.empty(M, N)


CPU_CASES += [
    Bad("gemm-out-is-b", "gemm", "out", _is_b, also="b"),
    Bad("gemm-out-a-requires-grad", "gemm", "a", _a_requires_grad, also="out", slot="out"),
]

CUDA_CASES = [
    *(
        Bad(f"{op}-cuda-complex128", op, "x", lambda a: a["x"].cdouble(), device="cuda")
        for op in ELEMENTWISE
    ),
    *(
        Bad(f"{op}-cuda-int64", op, "x", lambda a: a["x"].long(), device="cuda")
        for op in ELEMENTWISE
    ),
    Bad("lltm-cuda-weights-on-cpu", "lltm", "weights", lambda a: a["weights"].cpu(), "cuda"),
    Bad("lltm-cuda-input-on-cpu", "lltm", "input", lambda a: a["input"].cpu(), "cuda"),
    Bad("lltm-cuda-old_cell-on-cpu", "lltm", "old_cell", lambda a: a["old_cell"].cpu(), "cuda"),
    Bad("lltm-cuda-bias-int32", "lltm", "bias", lambda a: a["bias"].int(), "cuda"),
    Bad("lltm-cuda-old_h-3d", "lltm", "old_h", lambda a: a["old_h"][None], "cuda"),
    Bad("gemm-cuda-a-on-cpu", "gemm", "a", lambda a: a["a"].cpu(), "cuda"),
    Bad("gemm-cuda-b-on-cpu", "gemm", "b", lambda a: a["b"].cpu(), "cuda"),
    Bad("gemm-cuda-b-rows", "gemm", "b", lambda a: a["b"][1:], "cuda"),
    Bad("gemm-cuda-out-on-cpu", "gemm", "out", lambda a: torch.empty(M, N), "cuda"),
    Bad(
        "gemm-cuda-out-bfloat16",
        "gemm",
        "out",
        lambda a: torch.empty(M, N, device="cuda", dtype=torch.bfloat16),
        "cuda",
    ),
    Bad(
        "gemm-cuda-out-overlaps-a",
        "gemm",
        "out",
        lambda a: overlapping_out(a, "a"),
        "cuda",
        also="a",
    ),
    Bad("gemm-cuda-a-meta", "gemm", "a", lambda a: meta(a["a"]), "cuda"),
]


def _cpu_inputs_cuda_out(args: dict[str, Tensor]) -> Tensor:
    """Inputs on the CPU, `out` on the GPU (the inputs are rebuilt on the CPU)."""
    args["a"], args["b"] = args["a"].cpu(), args["b"].cpu()
    return torch.empty(M, N, device="cuda")


CUDA_CASES.append(Bad("gemm-cpu-inputs-cuda-out", "gemm", "out", _cpu_inputs_cuda_out, "cuda"))

CASES = [pytest.param(c, id=c.id) for c in CPU_CASES] + [
    pytest.param(c, id=c.id, marks=pytest.mark.cuda) for c in CUDA_CASES
]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_names_the_argument(case: Bad):
    args = good_args(case.op, case.device)
    args[case.slot or case.arg] = case.make(args)
    with pytest.raises(ERRORS) as info:
        call(case.op, args)
    message = str(info.value)
    assert "lltm_ext" in message, message  # ours, not an error from deeper down
    assert f"`{case.arg}`" in message, message
    if case.also:
        assert f"`{case.also}`" in message, message
    # Nothing was left broken: the same op runs correctly right after (on CUDA, a kernel fault or
    # a sticky error would make this raise).
    check_valid_call(case.op, case.device)


def test_the_matrix_covers_every_op():
    ops = {c.op for c in CPU_CASES + CUDA_CASES}
    assert ops == {"lltm", "relu", "sigmoid", "round_ste", "gemm"}
    assert len(CPU_CASES) + len(CUDA_CASES) >= 40
    assert {c.arg for c in CPU_CASES if c.op == "lltm"} >= {
        "input",
        "weights",
        "bias",
        "old_h",
        "old_cell",
    }


@pytest.mark.parametrize("op", ["relu", "sigmoid", "round_ste", "lltm", "gemm"])
def test_all_meta_tensors_give_meta_outputs(op):
    """All tensors on the meta device: the fake kernel's shapes and dtypes, forward and backward."""
    cpu = good_args(op, "cpu")
    args = {k: meta(v).requires_grad_() for k, v in cpu.items()}
    got = call(op, args)
    want = call(op, cpu)
    got, want = (list(t) if isinstance(t, tuple) else [t] for t in (got, want))
    for g, w in zip(got, want, strict=True):
        assert g.device.type == "meta" and g.shape == w.shape and g.dtype == w.dtype
    grads = torch.autograd.grad(got, list(args.values()), [torch.ones_like(g) for g in got])
    for g, a in zip(grads, args.values(), strict=True):
        assert g.device.type == "meta" and g.shape == a.shape


# Cases whose bad part is lost when every tensor goes to the meta device: a meta tensor mixed
# with real ones (on the meta device they are all alike).
NOT_ON_META = {c.id for c in CPU_CASES if any(c.id.endswith(s) for s in ("-meta", "-meta-int"))}


def to_meta(args: dict[str, Tensor]) -> dict[str, Tensor]:
    """`args` on the meta device: the same shapes, strides, dtypes and requires_grad, and the same
    aliasing (tensors that share memory share a meta storage, at the same offsets; a tensor passed
    twice is one meta tensor)."""
    storages: dict[int, torch.UntypedStorage] = {}
    seen: dict[int, Tensor] = {}
    out = {}
    for name, t in args.items():
        if id(t) not in seen:
            key = t.untyped_storage()._cdata
            storage = storages.setdefault(
                key, torch.UntypedStorage(t.untyped_storage().nbytes(), device="meta")
            )
            m = torch.empty(0, dtype=t.dtype, device="meta")
            m.set_(storage, t.storage_offset(), t.shape, t.stride())
            seen[id(t)] = m.requires_grad_(t.requires_grad)
        out[name] = seen[id(t)]
    return out


def error_of(op: str, args: dict[str, Tensor]) -> tuple[type, str]:
    with pytest.raises(ERRORS) as info:
        call(op, args)
    return type(info.value), str(info.value)


@pytest.mark.parametrize(
    "case", [pytest.param(c, id=c.id) for c in CPU_CASES if c.id not in NOT_ON_META]
)
def test_fake_kernels_raise_as_the_kernels_do(case: Bad):
    """The fake kernels restate the C++ checks by hand (lltm_ext/ops/_checks.py): each bad call
    on CPU tensors and the same call on meta tensors (the fake kernels' path) raise the same
    exception with the same message, the device's name aside."""
    args = good_args(case.op, "cpu")
    args[case.slot or case.arg] = case.make(args)
    cpu_type, cpu_message = error_of(case.op, args)
    meta_type, meta_message = error_of(case.op, to_meta(args))
    assert meta_type is cpu_type
    assert meta_message.replace("meta", "cpu") == cpu_message
