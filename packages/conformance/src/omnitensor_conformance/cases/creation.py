"""Op-specific samples of the creation family: constant, iota, rng (bit-exact everywhere)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from omnitensor.dtypes import DType, uint32
from omnitensor.ir.types import TensorType

from .. import values
from ..case import Arg, Sample, cases, sample


@cases("constant")
def _constant(dtype: DType) -> Iterator[Sample]:
    edges = values.edge_values(dtype)
    grid = np.random.default_rng(7).permutation(edges)
    yield sample("edges", [], lambda b: b.emit("constant", value=grid), check="exact")
    yield sample("scalar", [], lambda b: b.emit("constant", value=edges[-1:].reshape(())),
                 check="exact")
    # a constant feeding an op: folded or not, the result must not change
    yield sample("feeding_add", [TensorType(edges.shape, dtype)] if not dtype.is_bool else [],
                 (lambda b, x: b.emit("add", x, b.emit("constant", value=grid)))
                 if not dtype.is_bool else (lambda b: b.emit("constant", value=grid)))


@cases("iota")
def _iota(dtype: DType) -> Iterator[Sample]:
    yield sample("rows", [], lambda b: b.emit("iota", shape=(4, 7), dimension=0, dtype=dtype))
    yield sample("cols", [], lambda b: b.emit("iota", shape=(4, 7), dimension=1, dtype=dtype))
    yield sample("long", [], lambda b: b.emit("iota", shape=(3000,), dimension=0, dtype=dtype))
    yield sample("empty", [], lambda b: b.emit("iota", shape=(0, 3), dimension=1, dtype=dtype))


def _key(rng: np.random.Generator, type: Any) -> Any:
    return rng.integers(0, 2**32, size=(2,), dtype=np.uint32)


@cases("rng")
def _rng(dtype: DType) -> Iterator[Sample]:
    key = Arg(TensorType((2,), uint32), _key)
    dists = ("bits",) if dtype == uint32 else ("uniform", "normal")
    for dist in dists:
        yield sample(f"{dist}", [key], lambda b, k, d=dist: b.emit(
            "rng", k, shape=(33, 17), dtype=dtype, distribution=d))
        yield sample(f"{dist}_stream", [key], lambda b, k, d=dist: b.emit(
            "rng", k, shape=(64,), dtype=dtype, distribution=d, stream=3))
        yield sample(f"{dist}_scalar", [key], lambda b, k, d=dist: b.emit(
            "rng", k, shape=(), dtype=dtype, distribution=d))
