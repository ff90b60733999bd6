"""Collectives across the ranks of a job: all_reduce, all_gather, reduce_scatter, broadcast.

The names are StableHLO's (the broadcast is ``collective_broadcast``).

Each op records the world size it was built for (an attribute, so shapes are static). The
reference kernel hands its host arrays to the process's communicator (`set_collective_runtime`,
installed by ``omnitensor.distributed.init``); with world size 1 every collective is the
identity, which is the reference semantics the conformance suite checks. Collectives have
effects beyond their results (every rank must run them, in the same order), so the optimizer
never folds, merges, hoists or drops them (`Trait.COLLECTIVE`).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ...dtypes import ALL, FLOATING, NUMERIC
from ...errors import DTypeError, OmnitensorError, ShapeError
from ..opdef import OpView, Trait, attribute, operand, primitive
from ..types import TensorType

__all__ = [
    "REDUCTIONS",
    "AllGatherView",
    "AllReduceView",
    "CollectiveBroadcastView",
    "CollectiveRuntime",
    "ReduceScatterView",
    "collective_runtime",
    "match_all_gather",
    "match_all_reduce",
    "match_collective_broadcast",
    "match_reduce_scatter",
    "set_collective_runtime",
]

Array = np.ndarray[Any, Any]

#: The reductions `all_reduce` and `reduce_scatter` accept.
REDUCTIONS = ("sum", "mean", "max", "min")


class CollectiveRuntime(Protocol):
    """What the reference kernels need from a communicator (host numpy buffers in and out).

    ``omnitensor.backend.communicators.Communicator`` implements it; the IR layer only knows this
    protocol, so it never imports a communicator package.
    """

    @property
    def rank(self) -> int:
        """This process's rank, 0 <= rank < world_size."""

    @property
    def world_size(self) -> int:
        """How many ranks take part."""

    def all_reduce(self, x: Array, *, reduction: str) -> Array:
        """Elementwise reduction of `x` over the ranks; every rank gets the result."""

    def all_gather(self, x: Array, *, axis: int) -> Array:
        """Every rank's `x` concatenated along `axis` in rank order."""

    def reduce_scatter(self, x: Array, *, reduction: str, axis: int) -> Array:
        """`all_reduce` then this rank's block of the result along `axis`."""

    def broadcast(self, x: Array, *, root: int) -> Array:
        """Rank `root`'s `x` on every rank."""


_RUNTIME: list[CollectiveRuntime | None] = [None]


def set_collective_runtime(runtime: CollectiveRuntime | None) -> None:
    """Install the communicator the collectives' kernels use (None: single process)."""
    _RUNTIME[0] = runtime


def collective_runtime() -> CollectiveRuntime | None:
    """The installed communicator, or None in a single process."""
    return _RUNTIME[0]


def _check_world(op: str, world_size: Any) -> int:
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise OmnitensorError(
            f"{op}: attribute 'world_size' must be a positive int (got {world_size!r})", op=op
        )
    return world_size


def _check_reduction(op: str, x: TensorType, reduction: Any) -> None:
    if reduction not in REDUCTIONS:
        raise OmnitensorError(
            f"{op}: unknown reduction {reduction!r} (expected one of {', '.join(REDUCTIONS)})",
            op=op,
        )
    if reduction == "mean" and x.dtype not in FLOATING:
        raise DTypeError(
            f"{op}: reduction 'mean' needs a floating dtype (got {x.dtype}); use 'sum'",
            op=op,
            dtype=x.dtype.name,
        )


def _check_axis(op: str, x: TensorType, axis: Any) -> int:
    if isinstance(axis, bool) or not isinstance(axis, int) or not -x.ndim <= axis < x.ndim:
        raise ShapeError(
            f"{op}: axis {axis!r} is out of range for shape {x.shape} (expected an int in "
            f"[{-x.ndim}, {x.ndim}))",
            op=op,
            shapes=[x.shape],
        )
    return axis % x.ndim


def _runtime_for(op: str, world_size: int) -> CollectiveRuntime | None:
    """The communicator to run on, None for the world-size-1 identity; checks the world size."""
    runtime = _RUNTIME[0]
    actual = 1 if runtime is None else runtime.world_size
    if actual != world_size:
        remedy = ("call omnitensor.distributed.init() first" if runtime is None
                  else "record the program again in this job")
        raise OmnitensorError(
            f"{op}: recorded for world size {world_size} but this process runs in world size "
            f"{actual}; {remedy}",
            op=op,
        )
    return None if world_size == 1 else runtime


@primitive("all_reduce", traits=Trait.COLLECTIVE, dtypes=NUMERIC)
class AllReduceView(OpView):
    """Elementwise `reduction` (sum, mean, max, min) of `x` over all ranks; every rank gets it.

    World size 1 is the identity. Floating sums are taken in an unspecified order (the
    communicator's), so results may differ from a sequential sum by rounding; float16/bfloat16
    are reduced in float32 and rounded once. Integers wrap. NaN propagates. 'mean' needs a
    floating dtype. Every rank must call it with the same shape, dtype and attributes.
    """

    x = operand()
    reduction: str = attribute()
    world_size: int = attribute()

    @staticmethod
    def infer(x: TensorType, *, reduction: str, world_size: int) -> TensorType:
        _check_world("all_reduce", world_size)
        _check_reduction("all_reduce", x, reduction)
        return x

    @staticmethod
    def reference(x: Array, *, reduction: str, world_size: int) -> Array:
        runtime = _runtime_for("all_reduce", world_size)
        if runtime is None:
            return np.array(x, copy=True)
        return runtime.all_reduce(x, reduction=reduction)


@primitive("all_gather", traits=Trait.COLLECTIVE, dtypes=ALL)
class AllGatherView(OpView):
    """Every rank's `x` concatenated along `axis` in rank order (that dim grows world_size-fold).

    World size 1 is the identity. Every rank must call it with the same shape and dtype.
    """

    x = operand()
    axis: int = attribute()
    world_size: int = attribute()

    @staticmethod
    def infer(x: TensorType, *, axis: int, world_size: int) -> TensorType:
        _check_world("all_gather", world_size)
        if x.ndim == 0:
            raise ShapeError("all_gather: operand must have at least one dimension (got a 0-d "
                             "tensor); reshape it to (1,)", op="all_gather", shapes=[x.shape])
        dim = _check_axis("all_gather", x, axis)
        shape = list(x.shape)
        shape[dim] *= world_size
        return TensorType(tuple(shape), x.dtype)

    @staticmethod
    def reference(x: Array, *, axis: int, world_size: int) -> Array:
        runtime = _runtime_for("all_gather", world_size)
        if runtime is None:
            return np.array(x, copy=True)
        return runtime.all_gather(x, axis=axis % x.ndim)


@primitive("reduce_scatter", traits=Trait.COLLECTIVE, dtypes=NUMERIC)
class ReduceScatterView(OpView):
    """`all_reduce` of `x`, then rank r keeps block r of the result along `axis`.

    ``x.shape[axis]`` must be divisible by the world size; that dim shrinks world_size-fold.
    World size 1 is the identity. Rounding as `all_reduce`.
    """

    x = operand()
    reduction: str = attribute()
    axis: int = attribute()
    world_size: int = attribute()

    @staticmethod
    def infer(x: TensorType, *, reduction: str, axis: int, world_size: int) -> TensorType:
        _check_world("reduce_scatter", world_size)
        _check_reduction("reduce_scatter", x, reduction)
        if x.ndim == 0:
            raise ShapeError("reduce_scatter: operand must have at least one dimension",
                             op="reduce_scatter", shapes=[x.shape])
        dim = _check_axis("reduce_scatter", x, axis)
        if x.shape[dim] % world_size:
            raise ShapeError(
                f"reduce_scatter: dimension {dim} of {x.shape} is not divisible by the world "
                f"size (got {x.shape[dim]}, expected a multiple of {world_size})",
                op="reduce_scatter",
                shapes=[x.shape],
            )
        shape = list(x.shape)
        shape[dim] //= world_size
        return TensorType(tuple(shape), x.dtype)

    @staticmethod
    def reference(x: Array, *, reduction: str, axis: int, world_size: int) -> Array:
        runtime = _runtime_for("reduce_scatter", world_size)
        if runtime is None:
            return np.array(x, copy=True)
        return runtime.reduce_scatter(x, reduction=reduction, axis=axis % x.ndim)


@primitive("collective_broadcast", traits=Trait.COLLECTIVE, dtypes=ALL)
class CollectiveBroadcastView(OpView):
    """Rank `root`'s `x` on every rank (other ranks' values are ignored).

    World size 1 is the identity. Every rank must call it with the same shape, dtype and root.
    """

    x = operand()
    root: int = attribute(0)
    world_size: int = attribute()

    @staticmethod
    def infer(x: TensorType, *, root: int, world_size: int) -> TensorType:
        _check_world("collective_broadcast", world_size)
        if isinstance(root, bool) or not isinstance(root, int) or not 0 <= root < world_size:
            raise OmnitensorError(
                f"collective_broadcast: root {root!r} is not a rank (expected an int in "
                f"[0, {world_size}))",
                op="collective_broadcast",
            )
        return x

    @staticmethod
    def reference(x: Array, *, root: int, world_size: int) -> Array:
        runtime = _runtime_for("collective_broadcast", world_size)
        if runtime is None:
            return np.array(x, copy=True)
        return runtime.broadcast(x, root=root)


match_all_reduce = AllReduceView.match
match_all_gather = AllGatherView.match
match_reduce_scatter = ReduceScatterView.match
match_collective_broadcast = CollectiveBroadcastView.match
