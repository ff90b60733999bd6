"""Emitting decompositions: the same primitive sequences the Tensor layer records.

A composite's decomposition is written with these helpers so that it is, instruction for
instruction, what the functional recorded before composites existed (keepdims as a reshape,
scalars as 0-d constants broadcast with ``dims=()``, operands broadcast from the trailing
dims). Expanded composites therefore look exactly like traced user code.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ...builder import Builder, dense
from ...types import Value

__all__ = ["binary", "broadcast", "keep_reduce", "mean_keep", "scalar", "trailing"]


def trailing(op: str, rank: int, axes: Sequence[int]) -> tuple[int, ...]:
    """`axes` checked to be the last ``len(axes)`` dims of a rank-`rank` operand, in order.

    Raises:
        ShapeError: naming the op when they are not (composites normalize trailing axes).
    """
    from ....errors import ShapeError

    want = tuple(range(rank - len(axes), rank))
    if not axes or tuple(axes) != want:
        raise ShapeError(
            f"{op}: axes {tuple(axes)} must be the trailing dims of a rank-{rank} operand "
            f"(such as {tuple(range(rank - 1, rank))})", op=op)
    return want


def broadcast(b: Builder, v: Value, shape: tuple[int, ...]) -> Value:
    """`v` broadcast to `shape` along its trailing dims (NumPy rules); `v` itself if equal."""
    have = dense(v.type).shape
    if have == shape:
        return v
    offset = len(shape) - len(have)
    return b.emit("broadcast_in_dim", v, shape=shape, dims=tuple(range(offset, len(shape))))


def scalar(b: Builder, value: float, like: Value) -> Value:
    """A 0-d constant of `like`'s dtype."""
    return b.emit("constant", value=np.asarray(value).astype(dense(like.type).dtype.np))


def binary(b: Builder, op: str, lhs: Value | float, rhs: Value | float) -> Value:
    """``op(lhs, rhs)`` with Python scalars as 0-d constants and NumPy broadcasting."""
    like = lhs if isinstance(lhs, Value) else rhs
    assert isinstance(like, Value)
    a = lhs if isinstance(lhs, Value) else scalar(b, lhs, like)
    c = rhs if isinstance(rhs, Value) else scalar(b, rhs, like)
    sa, sc = dense(a.type).shape, dense(c.type).shape
    shape = tuple(np.broadcast_shapes(sa, sc))
    return b.emit(op, broadcast(b, a, shape), broadcast(b, c, shape))


def keep_reduce(b: Builder, op: str, x: Value, axes: tuple[int, ...]) -> Value:
    """Reduction `op` over `axes` with the reduced dims kept as size 1 (through a reshape)."""
    shape = dense(x.type).shape
    out = b.emit(op, x, axes=axes)
    return b.emit("reshape", out, shape=tuple(1 if i in axes else d for i, d in enumerate(shape)))


def mean_keep(b: Builder, x: Value, axes: tuple[int, ...]) -> Value:
    """The mean over `axes`, kept dims (sum / n; NaN for an empty reduction, as `Tensor.mean`)."""
    shape = dense(x.type).shape
    count = math.prod(shape[a] for a in axes)
    total = keep_reduce(b, "reduce_sum", x, axes)
    if count:
        return binary(b, "div", total, float(count))
    return binary(b, "mul", total, math.nan)
