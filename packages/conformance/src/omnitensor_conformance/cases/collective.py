"""Samples of the collectives in a single process: at world size 1 each is the identity.

The multi-rank meaning of every collective is tested under ``mpiexec`` by the communicator
distributions (``packages/comm-mpi/tests``); here a backend shows that it runs the ops (through
its lowering or the reference fallback) and keeps them in the program.
"""

from __future__ import annotations

from collections.abc import Iterator

from omnitensor.dtypes import DType
from omnitensor.ir.types import TensorType

from ..case import Arg, Sample, cases, sample


def _reductions(dtype: DType) -> tuple[str, ...]:
    return ("sum", "mean", "max", "min") if dtype.is_floating else ("sum", "max", "min")


@cases("all_reduce")
def _all_reduce(dtype: DType) -> Iterator[Sample]:
    for reduction in _reductions(dtype):
        yield sample(reduction, [TensorType((3, 5), dtype)], lambda b, x, r=reduction: b.emit(
            "all_reduce", x, reduction=r, world_size=1))
    yield sample("edges", [Arg(TensorType((40, 7), dtype), "edges")],
                 lambda b, x: b.emit("all_reduce", x, reduction="sum", world_size=1))
    yield sample("scalar", [TensorType((), dtype)],
                 lambda b, x: b.emit("all_reduce", x, reduction="max", world_size=1))


@cases("reduce_scatter")
def _reduce_scatter(dtype: DType) -> Iterator[Sample]:
    for axis in (0, 1, -1):
        yield sample(f"axis{axis}", [TensorType((4, 6), dtype)], lambda b, x, a=axis: b.emit(
            "reduce_scatter", x, reduction="sum", axis=a, world_size=1))


@cases("all_gather")
def _all_gather(dtype: DType) -> Iterator[Sample]:
    for axis in (0, 1):
        yield sample(f"axis{axis}", [TensorType((3, 4), dtype)], lambda b, x, a=axis: b.emit(
            "all_gather", x, axis=a, world_size=1))
    yield sample("edges", [Arg(TensorType((9, 5), dtype), "edges")],
                 lambda b, x: b.emit("all_gather", x, axis=0, world_size=1))


@cases("collective_broadcast")
def _broadcast(dtype: DType) -> Iterator[Sample]:
    yield sample("root0", [TensorType((2, 3, 4), dtype)],
                 lambda b, x: b.emit("collective_broadcast", x, root=0, world_size=1))
    yield sample("edges", [Arg(TensorType((40, 7), dtype), "edges")],
                 lambda b, x: b.emit("collective_broadcast", x, world_size=1))
