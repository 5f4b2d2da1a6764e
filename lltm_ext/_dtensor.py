"""DTensor sharding rules for lltm_ext's operators, so that they run on DTensors (a tensor
parallel plan, ``distribute_tensor`` inputs, FSDP2's sharded parameters used outside the model's
forward) instead of failing with "does not have a sharding strategy registered".

For each operator, the placements it can compute locally, per mesh dimension (DTensor
redistributes the inputs to the cheapest of them):

- everything replicated;
- LLTM cell and sequence: split along the batch (the cell's dim 0; the sequence's input, output
  and saved tensors along dim 1, its states along dim 0) with the weights and bias replicated;
  the backward's weight and bias gradients are then partial sums. Splitting the state (the gates'
  rows) is not offered: every step needs the whole previous h;
- element-wise ops: any split, the same for input and output; their backward is linear in the
  incoming gradient, so a partial gradient stays partial;
- GEMM ``a @ b``: rows of a, columns of b, or the inner dimension (a partial sum), as for
  ``torch.mm``.

``register()`` installs them (once); ``lltm_ext.distributed`` calls it when imported. Importing
``torch.distributed.tensor`` costs about a second, so ``import lltm_ext`` alone does not.
"""

from __future__ import annotations

import functools
from typing import Any


@functools.cache
def register() -> bool:
    """Register the sharding rules with DTensor; False where torch has no DTensor."""
    import torch
    import torch.distributed as dist

    if not dist.is_available():
        return False
    from torch.distributed.tensor import Partial, Replicate, Shard
    from torch.distributed.tensor.experimental import register_sharding

    import lltm_ext.ops  # noqa: F401  (loads every operator)

    ops = torch.ops.lltm_ext

    R, P = Replicate(), Partial()

    def ndim(spec: Any) -> int:
        return len(spec.shape)

    def elementwise(x: Any) -> list:
        rules: list = [([R], [R])]
        rules += [([Shard(d)], [Shard(d)]) for d in range(ndim(x))]
        return rules

    def elementwise_backward(grad: Any, saved: Any) -> list:
        rules: list = [([R], [R, R]), ([P], [P, R])]
        rules += [([Shard(d)], [Shard(d), Shard(d)]) for d in range(ndim(grad))]
        return rules

    def gemm(a: Any, b: Any) -> list:
        return [
            ([R], [R, R]),
            ([Shard(0)], [Shard(0), R]),
            ([Shard(1)], [R, Shard(1)]),
            ([P], [Shard(1), Shard(0)]),
            ([P], [P, R]),
            ([P], [R, P]),
        ]

    b0, b1 = Shard(0), Shard(1)

    def lltm_forward(input: Any, weights: Any, bias: Any, old_h: Any, old_cell: Any) -> list:
        # -> (new_h, new_cell, gates, X)
        return [([R] * 4, [R] * 5), ([b0] * 4, [b0, R, R, b0, b0])]

    def lltm(input: Any, weights: Any, bias: Any, old_h: Any, old_cell: Any) -> list:
        # -> (new_h, new_cell)
        return [([R] * 2, [R] * 5), ([b0] * 2, [b0, R, R, b0, b0])]

    def lltm_backward(
        grad_h: Any, grad_cell: Any, new_cell: Any, gates: Any, X: Any, weights: Any
    ) -> list:
        # -> (d_X, d_weights, d_bias, d_old_cell)
        return [([R] * 4, [R] * 6), ([b0, P, P, b0], [b0, b0, b0, b0, b0, R])]

    def given(placements: list, args: tuple) -> list:
        # An argument that is None (an optional state or gradient: zeros) has no placement.
        return [None if a is None else p for p, a in zip(placements, args, strict=True)]

    def flags(args: tuple, tensors: int) -> list:
        # A placement of None for each non-tensor argument the call passed (output_mask, tf32).
        return [None] * (len(args) - tensors)

    def lltm_sequence_forward(*args: Any) -> list:
        # (input, weights, bias, h0, c0[, tf32]) -> (output, h_n, c_n, cells, gates)
        tensors = (args + (None, None))[:5]
        rest = flags(args, 5)
        return [
            ([R] * 5, given([R] * 5, tensors) + rest),
            ([b1, b0, b0, b1, b1], given([b1, R, R, b0, b0], tensors) + rest),
        ]

    def lltm_sequence(*args: Any) -> list:
        # (input, weights, bias, h0, c0[, tf32]) -> (output, h_n, c_n)
        tensors = (args + (None, None))[:5]
        rest = flags(args, 5)
        return [
            ([R] * 3, given([R] * 5, tensors) + rest),
            ([b1, b0, b0], given([b1, R, R, b0, b0], tensors) + rest),
        ]

    def lltm_sequence_backward(*args: Any) -> list:
        # (grad_output, grad_h_n, grad_c_n, input, weights, bias, h0, output, cells, gates[,
        #  output_mask[, tf32]]) -> (d_input, d_weights, d_bias, d_h0, d_c0), None where not wanted
        tensors = args[:10]
        rest = flags(args, 10)
        return [
            ([R] * 5, given([R] * 10, tensors) + rest),
            ([b1, P, P, b0, b0], given([b1, b0, b0, b1, R, R, b0, b1, b1, b1], tensors) + rest),
        ]

    rules = {
        "relu_forward": elementwise,
        "sigmoid_forward": elementwise,
        "round_ste_forward": elementwise,
        "relu_backward": elementwise_backward,
        "sigmoid_backward": elementwise_backward,
        "gemm": gemm,
        "lltm_forward": lltm_forward,
        "lltm": lltm,
        "lltm_backward": lltm_backward,
        "lltm_sequence_forward": lltm_sequence_forward,
        "lltm_sequence": lltm_sequence,
        "lltm_sequence_backward": lltm_sequence_backward,
    }
    for name, rule in rules.items():
        if hasattr(ops, name):  # a build of some ops only (LLTM_EXT_OPS) lacks the others
            register_sharding(getattr(ops, name).default)(rule)
    return True
