"""Checks that make a multi-process run (DDP, FSDP2) of a model fail clearly and at once, on every
rank, instead of hanging, aborting in a collective or training on garbage.

``check_model(model)`` (a collective: call it on every rank, after moving the model to its device
and before wrapping it in DDP or ``fully_shard``) gathers every rank's parameter names, shapes,
dtypes and devices, and raises the same ``RuntimeError`` on every rank when

- the backend cannot communicate a tensor of this rank's model (NCCL and a tensor on the CPU), or
- the ranks built different models (e.g. an ``LLTMSequence`` with another ``state_size`` on one
  rank): DDP reports that only as a size mismatch of ``params[i]``, and FSDP2 not at all (its
  all-gathers then disagree in size, and gloo aborts the process).

``model_problems`` is the decision alone, on the gathered descriptions (no process group needed).

Importing this module also registers lltm_ext's operators with DTensor (``lltm_ext._dtensor``):
batch-split LLTM cells and sequences, any split of the element-wise ops, row / column / inner
splits of the GEMM, so the ops take DTensors (``distribute_tensor``, tensor parallel plans,
FSDP2's sharded parameters outside the model's forward).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch.distributed as dist
from torch import nn

from lltm_ext import _dtensor

__all__ = ["TensorInfo", "check_model", "describe_model", "model_problems"]

_dtensor.register()

# Backends that communicate CUDA tensors only: a CPU tensor there fails deep in the collective.
_CUDA_ONLY_BACKENDS = ("nccl",)


@dataclass(frozen=True)
class TensorInfo:
    """A parameter or buffer as ranks compare it: its name in the model, shape, dtype, device
    type, and the module that owns it (``LLTMSequence(2, 32)``)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    device: str
    owner: str


def describe_model(model: nn.Module) -> list[TensorInfo]:
    """This rank's parameters and buffers, in the model's order."""
    infos = []
    for module_name, module in model.named_modules():
        owner = f"{type(module).__name__}({module.extra_repr()})"
        tensors = list(module.named_parameters(recurse=False))
        tensors += list(module.named_buffers(recurse=False))
        for name, t in tensors:
            infos.append(
                TensorInfo(
                    name=f"{module_name}.{name}" if module_name else name,
                    shape=tuple(t.shape),
                    dtype=str(t.dtype).removeprefix("torch."),
                    device=t.device.type,
                    owner=owner,
                )
            )
    return infos


def _serves_cpu(backend: str) -> bool:
    """Whether `backend` ("gloo", "nccl", "cpu:gloo,cuda:nccl", ...) communicates CPU tensors."""
    backend = backend.lower()
    if ":" in backend:
        return any(part.split(":", 1)[0] == "cpu" for part in backend.split(","))
    return backend not in _CUDA_ONLY_BACKENDS


def model_problems(models: Sequence[Sequence[TensorInfo]], backend: str) -> list[str]:
    """What is wrong with a run whose rank r has the model ``models[r]`` (from
    :func:`describe_model`) under `backend` ("gloo", "nccl", "cpu:gloo,cuda:nccl", ...): one
    sentence per problem, none when the run can train."""
    problems = []
    if not _serves_cpu(backend):
        for rank, infos in enumerate(models):
            off = [i for i in infos if i.device != "cuda"]
            if off:
                listed = ", ".join(f"`{i.name}` ({i.device})" for i in off[:3])
                more = f" and {len(off) - 3} more" if len(off) > 3 else ""
                problems.append(
                    f"rank {rank} has {len(off)} of its {len(infos)} model tensors off the GPU "
                    f"({listed}{more}), but the process group's backend, {backend}, communicates "
                    "CUDA tensors only: move the model to the rank's GPU before wrapping it "
                    "(model.to(torch.device('cuda', local_rank))), or train on the CPU with gloo."
                )
    reference = models[0] if models else []
    for rank, infos in enumerate(models[1:], start=1):
        if len(infos) != len(reference):
            problems.append(
                f"rank {rank}'s model has {len(infos)} parameters and buffers, rank 0's has "
                f"{len(reference)}: every rank must build the same model."
            )
            continue
        differences = []
        for mine, theirs in zip(infos, reference, strict=True):
            if (mine.name, mine.shape, mine.dtype) != (theirs.name, theirs.shape, theirs.dtype):
                owners = (
                    f" ({mine.owner} on rank {rank}, {theirs.owner} on rank 0)"
                    if mine.owner != theirs.owner
                    else ""
                )
                differences.append(
                    f"rank {rank}'s `{mine.name}` is {mine.dtype} {list(mine.shape)}, rank 0's "
                    f"`{theirs.name}` {theirs.dtype} {list(theirs.shape)}{owners}"
                )
        if differences:
            more = f"; and {len(differences) - 3} more" if len(differences) > 3 else ""
            problems.append(
                f"rank {rank}'s model differs from rank 0's: "
                + "; ".join(differences[:3])
                + more
                + ". Every rank must build the same model."
            )
    return problems


def check_model(model: nn.Module, group: dist.ProcessGroup | None = None) -> None:
    """Raise ``RuntimeError`` on every rank of `group` (default: the world) if the ranks' models
    differ or sit where the backend cannot reach them (:func:`model_problems`). A collective:
    every rank must call it."""
    infos = describe_model(model)
    gathered: list[list[TensorInfo] | None] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, infos, group=group)
    backend = str(dist.get_backend(group))
    problems = model_problems([g or [] for g in gathered], backend)
    if problems:
        rank = dist.get_rank(group)
        raise RuntimeError(
            f"lltm_ext.distributed.check_model (rank {rank} of {len(gathered)}): "
            + " ".join(problems)
        )
