"""Which kernels a call runs, at what precision, and why: ``lltm_ext.explain(op, *args)``.

The planners that pick a call's kernels (the sequence's kernel families, the cell's fused or cuBLAS
path) run in C++ at every call, from the device, the dtype, the shape and the ``LLTM_EXT_*``
settings (:func:`lltm_ext.settings`, docs/settings.md). ``explain`` asks the same planners about
a call without running it, and, with ``run=True`` (or for ops without a planner of their own),
also runs the call once, forward and backward, under the profiler and lists the kernels that
ran::

    >>> x, w, b = torch.randn(50, 8, 64), torch.randn(768, 320), torch.randn(768)
    >>> print(lltm_ext.explain("lltm_sequence", x.cuda(), w.cuda(), b.cuda()))
    lltm_sequence on cuda:0, float32, T=50 B=8 I=64 S=256: cluster
      ...

``lltm-ext plan`` prints the same from the command line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from lltm_ext.ops._autocast import autocast_dtype

__all__ = ["Explanation", "explain"]


@dataclasses.dataclass
class Explanation:
    """What a call runs. ``path``: the kernel family the planner picked (``cpu`` on the CPU);
    ``detail``: its shape; ``precision``: what the products and the state are computed in;
    ``weight_gradient`` and ``input_products`` (lltm_sequence's float32 products outside the
    time loop at full precision: x W_i^T and d input = dG W_i): where those run;
    ``kernels``: the lltm_ext kernels the plan launches (names as the profiler shows them);
    ``notes``: the planner's reasons, each rule it took or passed over (with the
    docs/decisions.md anchor of its figures); ``ran``: with ``run=True``, the kernels that did
    run, forward and backward (CUDA: lltm_ext's and cuBLAS's, in order of first launch)."""

    op: str
    device: str
    dtype: str
    shape: dict[str, int]
    path: str
    detail: str
    precision: str
    product: str = ""
    weight_gradient: str = ""
    input_products: str = ""
    kernels: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    ran: list[str] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The fields as a dict (JSON-ready): what ``lltm-ext plan --json`` prints."""
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        shape = " ".join(f"{k}={v}" for k, v in self.shape.items())
        lines = [f"{self.op} on {self.device}, {self.dtype}, {shape}: {self.path}"]
        lines.append(f"  how: {self.detail}")
        lines.append(f"  precision: {self.precision}")
        if self.product:
            lines.append(f"  recurrent product: {self.product}")
        if self.weight_gradient:
            lines.append(f"  weight gradient: {self.weight_gradient}")
        if self.input_products:
            lines.append(f"  input products: {self.input_products}")
        if self.kernels:
            lines.append(f"  kernels: {', '.join(self.kernels)}")
        if self.ran is not None:
            lines.append(f"  ran: {', '.join(self.ran) if self.ran else '(no CUDA kernel)'}")
        if self.notes:
            lines.append("  why:")
            lines += [f"    - {note}" for note in self.notes]
        return "\n".join(lines)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _precision(dtype: torch.dtype, tf32: bool) -> str:
    """What the products and sums of a call in `dtype` are computed in (tf32: float32's products
    may use TF32, as torch's matmul precision "high" or "medium" allows)."""
    if dtype in (torch.float16, torch.bfloat16):
        return f"{_dtype_name(dtype)} storage; products and gate math in float32 (float32 sums)"
    if dtype == torch.float32:
        return (
            "float32, products in TF32 (torch's float32 matmul precision allows it)"
            if tf32
            else "float32 (torch's default float32 matmul precision: no TF32)"
        )
    return f"{_dtype_name(dtype)} throughout"


def _sequence(
    input: Tensor,
    weights: Tensor,
    bias: Tensor,
    state: tuple[Tensor, Tensor] | None = None,
    *,
    batch_first: bool = False,
    tf32: bool = False,
) -> tuple[Explanation, Callable[[], Any]]:
    from lltm_ext._extension import load_extension
    from lltm_ext.ops.lltm_sequence import lltm_sequence

    x = input.transpose(0, 1) if batch_first else input
    # Under autocast a float32 state keeps float32; on the CPU its products run in the autocast
    # dtype (each rounded to it), on CUDA's cuBLAS path too (float32 sums); elsewhere on CUDA,
    # where they are large, the products outside the time loop do, else all in TF32 on operands
    # rounded to that dtype (the operator's autocast kernel); a state in that dtype runs in it.
    lower = autocast_dtype(x)
    state_dtype = x.dtype if state is None else state[1].dtype
    autocast_tf32 = lower is not None and torch.promote_types(state_dtype, lower) == torch.float32
    if lower is not None and not autocast_tf32:
        x, weights = x.to(lower), weights.to(lower)
    extension = load_extension("lltm_sequence")
    plan = extension._explain(x, weights, bias.requires_grad, tf32 or autocast_tf32)
    mixed = autocast_tf32 and extension._autocast_mixed(x, weights)
    if mixed == "cublas" and lower is not None and plan["path"] != "cublas":
        # The mixed call on the cuBLAS path where float32's plan is another: the half type's plan
        # (its rule for that path, and its step products) is what runs.
        plan = extension._explain(x.to(lower), weights.to(lower), bias.requires_grad, False)
    if mixed == "cpu" and lower is not None:
        plan = {
            **plan,
            "detail": "the mixed time loop in C++: every product in "
            f"{_dtype_name(lower)} on lltm_ext's CPU GEMM (h rounded to it per step), added up "
            "in float32 gates; the cell's gate pass in float32",
            "weight_gradient": f"lltm_ext's CPU GEMM: {_dtype_name(lower)} products of dG "
            "(rounded to it) with h and x, and a column sum",
        }
    elif mixed and lower is not None:
        # The mixed call's d W: a product in the autocast dtype (float32 sums) of dG rounded to it.
        plan = {
            **plan,
            "weight_gradient": f"cuBLAS's {_dtype_name(lower)} products of dG (rounded to it) "
            "with h and x, and a column sum",
            "kernels": [k for k in plan["kernels"] if not k.startswith("weight_grad")],
        }
    steps, batch, features = x.shape
    found = Explanation(
        op="lltm_sequence",
        device=plan["device"],
        dtype=_dtype_name(x.dtype),
        shape={"T": steps, "B": batch, "I": features, "S": weights.shape[0] // 3},
        path=plan["path"],
        detail=plan["detail"],
        precision=(
            f"float32 state; products in {_dtype_name(lower)} (each rounded to it; autocast)"
            if mixed == "cpu" and lower is not None
            else f"float32 state; products in {_dtype_name(lower)} (float32 sums; autocast)"
            if mixed and lower is not None and plan["path"] == "cublas"
            else f"float32 state; the products outside the time loop in {_dtype_name(lower)} "
            "(float32 sums), the steps' in TF32 (autocast)"
            if mixed and lower is not None
            else f"float32 state; products in {'TF32' if plan.get('tf32') else 'float32'} on the "
            f"operands rounded to {_dtype_name(lower)} (autocast)"
            if autocast_tf32 and lower is not None
            else "float32, products in TF32 (the call's tf32=True)"
            if tf32 and plan.get("tf32")
            else _precision(x.dtype, bool(plan.get("tf32", False)))
        ),
        product=plan.get("product", ""),
        weight_gradient=plan.get("weight_gradient", ""),
        input_products=plan.get("input_products", ""),
        kernels=list(plan["kernels"]),
        notes=list(plan["notes"]),
    )
    return found, lambda: lltm_sequence(
        input, weights, bias, state, batch_first=batch_first, tf32=tf32
    )


def _cell(
    input: Tensor, weights: Tensor, bias: Tensor, old_h: Tensor, old_cell: Tensor
) -> tuple[Explanation, Callable[[], Any]]:
    from lltm_ext._extension import load_extension
    from lltm_ext.ops.lltm import lltm

    plan = load_extension("lltm")._explain(input, weights)
    found = Explanation(
        op="lltm",
        device=plan["device"],
        dtype=_dtype_name(input.dtype),
        shape={"B": input.shape[0], "I": input.shape[1], "S": weights.shape[0] // 3},
        path=plan["path"],
        detail=plan["detail"],
        precision=_precision(
            input.dtype,
            plan["path"] == "cublas"
            and input.dtype == torch.float32
            and torch.backends.cuda.matmul.allow_tf32,
        ),
        kernels=list(plan["kernels"]),
        notes=list(plan["notes"]),
    )
    return found, lambda: lltm(input, weights, bias, old_h, old_cell)


def _gemm(a: Tensor, b: Tensor) -> tuple[Explanation, Callable[[], Any]]:
    from lltm_ext.ops.gemm import gemm

    tf32 = a.dtype == torch.float32 and a.is_cuda and torch.backends.cuda.matmul.allow_tf32
    precision = (
        f"{_dtype_name(a.dtype)} inputs, float32 sums"
        if a.dtype in (torch.float16, torch.bfloat16)
        else _precision(a.dtype, tf32)
    )
    found = Explanation(
        op="gemm",
        device=str(a.device),
        dtype=_dtype_name(a.dtype),
        shape={"M": a.shape[0], "K": a.shape[1], "N": b.shape[1]},
        path="cuda" if a.is_cuda else "cpu",
        detail="the kernel the shape, layouts and dtype pick (see `ran`); docs/gemm_notes.md",
        precision=precision,
        notes=["gemm's planner runs inside the call: the kernels are the ones that ran"],
    )
    return found, lambda: gemm(a, b)


def _elementwise(op: str) -> Callable[..., tuple[Explanation, Callable[[], Any]]]:
    def plan(x: Tensor) -> tuple[Explanation, Callable[[], Any]]:
        from lltm_ext.ops import MODULES

        fn = getattr(MODULES[op], op)
        found = Explanation(
            op=op,
            device=str(x.device),
            dtype=_dtype_name(x.dtype),
            shape={"numel": x.numel()},
            path="cuda" if x.is_cuda else "cpu",
            detail="one vectorized element-wise pass each way (docs/kernel_notes.md)",
            precision=_dtype_name(x.dtype)
            + (
                " storage, computed in float32"
                if x.dtype in (torch.float16, torch.bfloat16)
                else ""
            ),
        )
        return found, lambda: fn(x)

    return plan


_PLANS: dict[str, Callable[..., tuple[Explanation, Callable[[], Any]]]] = {
    "lltm_sequence": _sequence,
    "lltm": _cell,
    "gemm": _gemm,
    "relu": _elementwise("relu"),
    "sigmoid": _elementwise("sigmoid"),
    "round_ste": _elementwise("round_ste"),
}


def _ran(call: Callable[[], Any]) -> list[str]:
    """The CUDA kernels one call launches, forward and backward (where its output has a grad_fn),
    in order of first launch."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        out = call()
        first = out[0] if isinstance(out, tuple) else out
        if isinstance(first, Tensor) and first.grad_fn is not None:
            first.float().sum().backward()
        torch.cuda.synchronize()
    names: list[str] = []
    for event in prof.events():
        name = _short(event.name)
        if event.device_type == torch.autograd.DeviceType.CUDA and name not in names:
            names.append(name)
    return names


def _short(kernel: str) -> str:
    """A kernel's name without its return type, namespaces, template arguments and parameters:
    'void lltm_ext::lltm::(anonymous namespace)::small_forward_kernel<float, 64, 1, 2>(float*, ...)'
    -> 'small_forward_kernel'."""
    name = kernel.removeprefix("void ").replace("(anonymous namespace)::", "")
    cut = min((i for i in (name.find("<"), name.find("(")) if i > 0), default=len(name))
    base = name[:cut].rsplit("::", 1)[-1].strip()
    if base in ("Kernel", "Kernel2") and name[cut : cut + 1] == "<":  # CUTLASS: the kernel's type
        base = name[cut + 1 :].split(">", 1)[0].split(",", 1)[0].split("::")[-1]
    return base or kernel


def explain(
    op: str | Callable[..., Any], *args: Any, run: bool = False, **kwargs: Any
) -> Explanation:
    """What ``op(*args, **kwargs)`` runs, at what precision, and why.

    Args:
        op: ``"lltm_sequence"``, ``"lltm"``, ``"gemm"``, ``"relu"``, ``"sigmoid"``,
            ``"round_ste"``, or the function itself (``lltm_ext.lltm_sequence``, ...).
        *args, **kwargs: the call's arguments, as the function takes them (tensors on the device
            and in the dtype of the call to explain).
        run: also run the call once (forward, and backward where its output needs a gradient)
            under the profiler and list, in ``ran``, the CUDA kernels that ran. Always done for
            ops whose planner runs inside the call (gemm, the element-wise ops) on CUDA.

    Returns:
        An :class:`Explanation`; ``str()`` of it reads as a short report.
    """
    name = op if isinstance(op, str) else getattr(op, "__name__", str(op))
    if name not in _PLANS:
        raise ValueError(f"lltm_ext.explain: `op` must be one of {sorted(_PLANS)}, got {name!r}")
    found, call = _PLANS[name](*args, **kwargs)
    if found.device.startswith("cuda") and (run or name not in ("lltm_sequence", "lltm")):
        found.ran = _ran(call)
    elif name == "gemm":  # the CPU GEMM's planner says which path its last call took
        from lltm_ext._extension import load_extension

        call()
        path, transposed, parts, bf16_dot, amx = load_extension("gemm")._cpu_last_run()
        extra = [f"{parts} parts"] + ["as C^T = B^T A^T"] * transposed
        extra += ["AVX-512 BF16"] * bf16_dot + ["AMX tiles"] * amx
        found.ran = [f"the CPU kernels' {path} path ({', '.join(extra)}; docs/gemm_cpu.md)"]
    return found
