"""Helpers shared by the functionals: raw PTIR ops and dtype-aware constants."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..dtypes import DType
from ..tensor.tensor import Tensor


def op(op_name: str, *inputs: Tensor, **attrs: Any) -> Tensor:
    """Record one PTIR op."""
    return Tensor._apply(op_name, *inputs, **attrs)


def lowest(dtype: DType) -> float:
    """A large negative finite value of `dtype`, for masked logits.

    exp() of it underflows to exactly 0, while a fully masked row stays finite (no NaN).
    """
    import ml_dtypes

    info: Any = ml_dtypes.finfo(dtype.np)  # type: ignore[no-untyped-call]
    return float(info.min) * 0.5


def strided_slice(x: Tensor, start: Sequence[int], limit: Sequence[int],
                  stride: Sequence[int]) -> Tensor:
    """``x[start:limit:stride]`` per dimension."""
    return op("slice", x, start=tuple(start), limit=tuple(limit), stride=tuple(stride))


def pad(x: Tensor, low: Sequence[int], high: Sequence[int], value: float = 0.0) -> Tensor:
    """`x` padded with a constant."""
    if not any(low) and not any(high):
        return x
    fill = op("constant", value=np.asarray(value, dtype=x.dtype.np))
    return op("pad", x, fill, low=tuple(low), high=tuple(high), interior=(0,) * x.ndim)


def pair(value: int | Sequence[int], what: str, fn: str) -> tuple[int, int]:
    """An int or a pair as a pair."""
    if isinstance(value, int):
        return (value, value)
    out = tuple(int(v) for v in value)
    if len(out) != 2:
        from ..errors import ShapeError

        raise ShapeError(f"{fn}: {what} must be an int or a pair (got {value!r})", op=fn)
    return (out[0], out[1])
