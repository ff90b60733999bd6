"""Gradient rules of the collectives (the loss is the sum of every rank's loss).

all_reduce(sum)'s gradient is all_reduce(sum) of the cotangents, all_gather's is reduce_scatter
and reduce_scatter's is all_gather (Megatron's and JAX's transposes); max/min send the summed
cotangent to the ranks that hold the extremum, shared evenly between ties.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...ir.ops.collective import collective_runtime
from . import vjp
from ._util import mask, op

if TYPE_CHECKING:
    from ...tensor.tensor import Tensor


@vjp("all_reduce")
def _all_reduce(g: Tensor, out: Tensor, x: Tensor, *, reduction: str, world_size: int
                ) -> Tensor:
    total = op("all_reduce", g, reduction="sum", world_size=world_size)
    if reduction == "sum":
        return total
    if reduction == "mean":
        return total / float(world_size)
    # max/min: the ranks whose x equals the result share the cotangent (ties evenly).
    hit = mask(x == out, x)
    count = op("all_reduce", hit, reduction="sum", world_size=world_size)
    return total * hit / count


@vjp("all_gather")
def _all_gather(g: Tensor, out: Tensor, x: Tensor, *, axis: int, world_size: int) -> Tensor:
    return op("reduce_scatter", g, reduction="sum", axis=axis, world_size=world_size)


@vjp("reduce_scatter")
def _reduce_scatter(g: Tensor, out: Tensor, x: Tensor, *, reduction: str, axis: int,
                    world_size: int) -> Tensor:
    gathered = op("all_gather", g, axis=axis, world_size=world_size)
    if reduction == "sum":
        return gathered
    if reduction == "mean":
        return gathered / float(world_size)
    full = op("all_reduce", x, reduction=reduction, world_size=world_size)
    hit = mask(x == full, x)
    count = op("all_reduce", hit, reduction="sum", world_size=world_size)
    return gathered * hit / count


@vjp("collective_broadcast")
def _collective_broadcast(g: Tensor, out: Tensor, x: Tensor, *, root: int, world_size: int
                          ) -> Tensor:
    # Only the root's x reaches the outputs: it receives every rank's cotangent, others zero.
    runtime = collective_runtime()
    rank = 0 if runtime is None else runtime.rank
    total = op("all_reduce", g, reduction="sum", world_size=world_size)
    return total if rank == root else total * 0.0
