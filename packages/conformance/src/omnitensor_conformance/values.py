"""Seeded input data for conformance cases: ordinary values and the edges backends get wrong.

Every fill is a function ``(rng, type) -> array`` of exactly the type's shape and dtype, so a case
regenerates its inputs from its seed alone (no data files). Edge fills hold NaN, ±inf, -0.0,
subnormals, overflow boundaries and integer extremes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from omnitensor.dtypes import DType
from omnitensor.errors import OmnitensorError
from omnitensor.ir.types import QTensorType, TensorType

__all__ = ["FILLS", "edge_values", "fill", "register_fill"]

Array = np.ndarray[Any, Any]
FillFn = Callable[[np.random.Generator, Any], Array]


def edge_values(dtype: DType) -> Array:
    """The special values of `dtype` (a 1-d array of that dtype, NaN included for floats)."""
    if dtype.is_bool:
        return np.array([False, True])
    if dtype.is_integer:
        info = np.iinfo(dtype.np)
        vals = {0, 1, 2, 3, 7, 100 % (int(info.max) + 1), int(info.max), int(info.max) - 1}
        if dtype.kind == "i":
            vals |= {-1, -2, -7, int(info.min), int(info.min) + 1}
        return np.array(sorted(vals), dtype=dtype.np)
    with np.errstate(all="ignore"):
        big = float(_finfo_max(dtype))
        tiny = float(_finfo_tiny(dtype))
        raw = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 3.0, 1e-3, -7.25, 88.5, -88.5,
               1e4, -1e4, big, -big, tiny, -tiny, tiny / 4, math.inf, -math.inf, math.nan]
        return np.array(raw, dtype=np.float64).astype(dtype.np)


def _finfo(dtype: DType) -> Any:
    # ml_dtypes.finfo knows bfloat16 and defers to numpy for the standard types.
    import ml_dtypes

    return ml_dtypes.finfo(dtype.np)  # type: ignore[no-untyped-call]


def _finfo_max(dtype: DType) -> Any:
    return _finfo(dtype).max


def _finfo_tiny(dtype: DType) -> Any:
    return _finfo(dtype).smallest_normal


def _dense(type: Any) -> TensorType:
    if not isinstance(type, TensorType):
        raise OmnitensorError(f"conformance: this fill needs a dense tensor type (got {type})")
    return type


def _normal(rng: np.random.Generator, type: Any) -> Array:
    """Standard normal floats; small integers (both signs where signed); random bools."""
    t = _dense(type)
    dtype = t.dtype
    if dtype.is_bool:
        return rng.random(t.shape) < 0.5
    if dtype.is_integer:
        lo = 0 if dtype.kind == "u" else -100
        return rng.integers(lo, 101, size=t.shape).astype(dtype.np)
    return rng.standard_normal(t.shape).astype(dtype.np)


def _positive(rng: np.random.Generator, type: Any) -> Array:
    """Values in [0.5, 4) for floats, [1, 100] for integers (domains like log/sqrt/div)."""
    t = _dense(type)
    if t.dtype.is_bool:
        return np.ones(t.shape, bool)
    if t.dtype.is_integer:
        return rng.integers(1, 101, size=t.shape).astype(t.dtype.np)
    return rng.uniform(0.5, 4.0, size=t.shape).astype(t.dtype.np)


def _small(rng: np.random.Generator, type: Any) -> Array:
    """Values in [-1, 1) for floats, [0, 4) for integers (exponents, products, near-one)."""
    t = _dense(type)
    if t.dtype.is_bool:
        return rng.random(t.shape) < 0.5
    if t.dtype.is_integer:
        return rng.integers(0, 4, size=t.shape).astype(t.dtype.np)
    return rng.uniform(-1.0, 1.0, size=t.shape).astype(t.dtype.np)


def _near_one(rng: np.random.Generator, type: Any) -> Array:
    """Floats in [0.9, 1.1) (long products that neither overflow nor vanish); ints 1 or -1."""
    t = _dense(type)
    if t.dtype.is_bool:
        return np.ones(t.shape, bool)
    if t.dtype.is_integer:
        ones = np.ones(t.shape, t.dtype.np)
        if t.dtype.kind == "i":
            ones[rng.random(t.shape) < 0.5] = -1
        return ones
    return rng.uniform(0.9, 1.1, size=t.shape).astype(t.dtype.np)


def _full(rng: np.random.Generator, type: Any) -> Array:
    """Uniform over the whole integer range; floats with random exponents (overflow edges)."""
    t = _dense(type)
    if t.dtype.is_bool:
        return rng.random(t.shape) < 0.5
    if t.dtype.is_integer:
        info = np.iinfo(t.dtype.np)
        return rng.integers(int(info.min), int(info.max), size=t.shape, endpoint=True,
                            dtype=t.dtype.np)
    exponent = rng.uniform(-8, 8, size=t.shape)
    sign = np.where(rng.random(t.shape) < 0.5, -1.0, 1.0)
    with np.errstate(all="ignore"):
        return (sign * 10.0**exponent).astype(t.dtype.np)


def _edges(rng: np.random.Generator, type: Any) -> Array:
    """Edge values in random order (cycled to fill the shape)."""
    t = _dense(type)
    pool = edge_values(t.dtype)
    picks = rng.integers(0, len(pool), size=t.size)
    return pool[picks].reshape(t.shape)


def _bytes(rng: np.random.Generator, type: Any) -> Array:
    """Random storage bytes (quantized blocks: scales are fixed up by the quant cases)."""
    shape = type.storage_shape if isinstance(type, QTensorType) else _dense(type).shape
    return rng.integers(0, 256, size=shape, dtype=np.uint8)


def edge_grid(position: int, sizes: tuple[int, ...]) -> FillFn:
    """A fill for operand `position` of an op whose operands' edge pools have `sizes`.

    Together the operands cover every combination of edge values (NaN with inf, -0.0 with
    0.0, INT_MIN with -1 ...).

    The shape must be ``(prod(sizes),)``.
    """

    def make(rng: np.random.Generator, type: Any) -> Array:
        t = _dense(type)
        pool = edge_values(t.dtype)
        inner = math.prod(sizes[position + 1 :])
        index = np.arange(math.prod(sizes)) // inner % sizes[position]
        return pool[index].reshape(t.shape)

    return make


FILLS: dict[str, FillFn] = {
    "normal": _normal,
    "positive": _positive,
    "small": _small,
    "near_one": _near_one,
    "full": _full,
    "edges": _edges,
    "bytes": _bytes,
}


def register_fill(name: str, fn: FillFn) -> None:
    """Add a named fill (for case sources that want to refer to it by name)."""
    FILLS[name] = fn


def fill(rng: np.random.Generator, type: Any, how: str | FillFn) -> Array:
    """One input array for `type`, made by the fill `how` (a name or a callable).

    Raises:
        OmnitensorError: for an unknown fill name, or a fill that returns a wrong array.
    """
    if isinstance(how, str):
        if how not in FILLS:
            raise OmnitensorError(
                f"conformance: unknown fill {how!r} (expected one of {', '.join(FILLS)})"
            )
        how = FILLS[how]
    out = np.array(how(rng, type), order="C")  # a fresh C-ordered array (0-d stays 0-d)
    if isinstance(type, QTensorType):
        shape, dtype = type.storage_shape, np.dtype(np.uint8)
    else:
        shape, dtype = type.shape, type.dtype.np
    if out.shape != shape or out.dtype != dtype:
        raise OmnitensorError(
            f"conformance: fill returned {out.dtype}{list(out.shape)} (expected "
            f"{dtype}{list(shape)})"
        )
    return out
