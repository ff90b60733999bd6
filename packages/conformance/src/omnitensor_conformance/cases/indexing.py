"""Op-specific samples of the indexing family, clamped indices included.

gather, scatter_add, dynamic_slice, dynamic_update_slice, and the multi-result sort and top_k.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from omnitensor.dtypes import DType, int32, int64, uint8
from omnitensor.ir.types import TensorType

from ..case import Arg, Sample, cases, sample


def _indices(low: int, high: int) -> Callable[[np.random.Generator, Any], Any]:
    """Integer indices in [low, high] (beyond the axis to exercise clamping)."""

    def make(rng: np.random.Generator, type: Any) -> Any:
        return rng.integers(low, high + 1, size=type.shape).astype(type.dtype.np)

    return make


def _data(dtype: DType, *shape: int) -> Arg:
    return Arg(TensorType(shape, dtype), "normal")


@cases("gather")
def _gather(dtype: DType) -> Iterator[Sample]:
    idx = Arg(TensorType((4, 3), int32), _indices(0, 6))
    yield sample("axis0", [_data(dtype, 7, 5), idx], lambda b, x, i: b.emit("gather", x, i, axis=0))
    yield sample("axis1", [_data(dtype, 3, 7), Arg(TensorType((5,), int64), _indices(0, 6))],
                 lambda b, x, i: b.emit("gather", x, i, axis=1))
    yield sample("clamped", [_data(dtype, 6, 2), Arg(TensorType((9,), int32), _indices(-3, 9))],
                 lambda b, x, i: b.emit("gather", x, i, axis=0))
    yield sample("batch_dims", [_data(dtype, 2, 6, 3), Arg(TensorType((2, 4), uint8),
                                                           _indices(0, 5))],
                 lambda b, x, i: b.emit("gather", x, i, axis=1, batch_dims=1))
    yield sample("embedding", [_data(dtype, 100, 16), Arg(TensorType((2, 9), int32),
                                                          _indices(0, 99))],
                 lambda b, x, i: b.emit("gather", x, i, axis=0))


@cases("scatter_add")
def _scatter_add(dtype: DType) -> Iterator[Sample]:
    yield sample("duplicates", [_data(dtype, 7, 5), Arg(TensorType((12,), int32), _indices(0, 6)),
                                _data(dtype, 12, 5)],
                 lambda b, x, i, u: b.emit("scatter_add", x, i, u, axis=0), check="nmse")
    yield sample("clamped", [_data(dtype, 4, 6), Arg(TensorType((5,), int32), _indices(-2, 8)),
                             _data(dtype, 4, 5)],
                 lambda b, x, i, u: b.emit("scatter_add", x, i, u, axis=1), check="nmse")
    yield sample("batch_dims", [_data(dtype, 2, 6, 3), Arg(TensorType((2, 4), int32),
                                                           _indices(0, 5)),
                                _data(dtype, 2, 4, 3)],
                 lambda b, x, i, u: b.emit("scatter_add", x, i, u, axis=1, batch_dims=1),
                 check="nmse")


def _start(value_low: int, value_high: int, dtype: DType = int32) -> Arg:
    return Arg(TensorType((), dtype), _indices(value_low, value_high))


@cases("dynamic_slice")
def _dynamic_slice(dtype: DType) -> Iterator[Sample]:
    yield sample("inside", [_data(dtype, 8, 9), _start(0, 4), _start(0, 3, int64)],
                 lambda b, x, i, j: b.emit("dynamic_slice", x, i, j, sizes=(3, 5)))
    yield sample("clamped", [_data(dtype, 8, 9), _start(-5, -1), _start(7, 20)],
                 lambda b, x, i, j: b.emit("dynamic_slice", x, i, j, sizes=(3, 5)))
    yield sample("empty", [_data(dtype, 4), _start(0, 4)],
                 lambda b, x, i: b.emit("dynamic_slice", x, i, sizes=(0,)))


@cases("dynamic_update_slice")
def _dynamic_update_slice(dtype: DType) -> Iterator[Sample]:
    dus = "dynamic_update_slice"
    yield sample("inside", [_data(dtype, 8, 9), _data(dtype, 3, 5), _start(0, 5), _start(0, 4)],
                 lambda b, x, u, i, j: b.emit(dus, x, u, i, j))
    yield sample("clamped", [_data(dtype, 8, 9), _data(dtype, 3, 5), _start(-4, -1),
                             _start(6, 30)],
                 lambda b, x, u, i, j: b.emit(dus, x, u, i, j))
    yield sample("kv_cache", [_data(dtype, 2, 16, 4), _data(dtype, 2, 1, 4), _start(0, 0),
                              _start(0, 15), _start(0, 0)],
                 lambda b, x, u, i, j, k: b.emit(dus, x, u, i, j, k))


@cases("sort")
def _sort(dtype: DType) -> Iterator[Sample]:
    for descending in (False, True):
        tag = "desc" if descending else "asc"
        yield sample(f"{tag}_last", [_data(dtype, 5, 17)], lambda b, x, d=descending: b.emit_multi(
            "sort", x, axis=-1, descending=d))
        yield sample(f"{tag}_ties", [Arg(TensorType((6, 20), dtype), "small")],
                     lambda b, x, d=descending: b.emit_multi("sort", x, axis=1, descending=d))
        yield sample(f"{tag}_edges", [Arg(TensorType((3, 40), dtype), "edges")],
                     lambda b, x, d=descending: b.emit_multi("sort", x, axis=1, descending=d))
    yield sample("axis0", [_data(dtype, 9, 4)], lambda b, x: b.emit_multi("sort", x, axis=0))
    yield sample("long", [_data(dtype, 5000)], lambda b, x: b.emit_multi("sort", x))


@cases("top_k")
def _top_k(dtype: DType) -> Iterator[Sample]:
    yield sample("k3", [_data(dtype, 4, 17)], lambda b, x: b.emit_multi("top_k", x, k=3))
    yield sample("ties", [Arg(TensorType((6, 20), dtype), "small")],
                 lambda b, x: b.emit_multi("top_k", x, k=5))
    yield sample("edges", [Arg(TensorType((2, 40), dtype), "edges")],
                 lambda b, x: b.emit_multi("top_k", x, k=8))
    yield sample("k0", [_data(dtype, 3, 4)], lambda b, x: b.emit_multi("top_k", x, k=0))
    yield sample("all", [_data(dtype, 9)], lambda b, x: b.emit_multi("top_k", x, k=9))
