"""Private attribute checks shared by the movement, reduce and creation op families.

They validate attribute *values* (tuples of ints, permutations, axes) and raise the house errors
naming the op; shape rules proper live in each op's `infer` or in `ir.rules`.
"""

from __future__ import annotations

from typing import Any

from ...errors import OmnitensorError, ShapeError
from ..types import TensorType

__all__: list[str] = []


def int_tuple(op: str, what: str, value: Any, per_dim: tuple[int, ...] | None = None) -> tuple[
        int, ...]:
    """`value` as a tuple of Python ints, with one entry per dimension of `per_dim` when given.

    Raises:
        OmnitensorError: when `value` is not a tuple/list of ints.
        ShapeError: when `per_dim` is given and the lengths differ.
    """
    if not isinstance(value, (tuple, list)) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise OmnitensorError(
            f"{op}: attribute {what!r} must be a tuple of ints (got {value!r})", op=op
        )
    out = tuple(int(v) for v in value)
    if per_dim is not None and len(out) != len(per_dim):
        raise ShapeError(
            f"{op}: attribute {what!r} has {len(out)} entries (got {out} for shape {per_dim}, "
            f"expected {len(per_dim)}, one per dimension)",
            op=op,
            shapes=[per_dim],
        )
    return out


def int_scalar(op: str, what: str, value: Any) -> int:
    """`value` as a Python int (bools rejected).

    Raises:
        OmnitensorError: when `value` is not an int.
    """
    if not isinstance(value, int) or isinstance(value, bool):
        raise OmnitensorError(f"{op}: attribute {what!r} must be an int (got {value!r})", op=op)
    return int(value)


def shape_attr(op: str, value: Any) -> tuple[int, ...]:
    """A result-shape attribute: a tuple of non-negative ints.

    Raises:
        OmnitensorError: when `value` is not a tuple of ints.
        ShapeError: for a negative dimension.
    """
    shape = int_tuple(op, "shape", value)
    if any(d < 0 for d in shape):
        raise ShapeError(
            f"{op}: negative dimension in shape (got {shape}, expected sizes >= 0)", op=op
        )
    return shape


def axis(op: str, x: TensorType, value: Any) -> int:
    """A single axis of `x`, in ``[-ndim, ndim)``, made non-negative.

    Raises:
        ShapeError: naming the op, the axis and the shape.
    """
    ax = int_scalar(op, "axis", value)
    if not -x.ndim <= ax < x.ndim:
        raise ShapeError(
            f"{op}: axis {ax} is out of range (got shape {x.shape}, expected an axis in "
            f"[{-x.ndim}, {x.ndim}))",
            op=op,
            shapes=[x.shape],
        )
    return ax % x.ndim


def axes(op: str, x: TensorType, value: Any) -> tuple[int, ...]:
    """Unique axes of `x`, each in ``[-ndim, ndim)``, made non-negative and sorted.

    Raises:
        ShapeError: for an out-of-range or repeated axis, naming the op and the shape.
    """
    raw = int_tuple(op, "axes", value)
    out = tuple(sorted(axis(op, x, a) for a in raw))
    if len(set(out)) != len(out):
        raise ShapeError(
            f"{op}: repeated axes (got {raw} for shape {x.shape}, expected unique axes)",
            op=op,
            shapes=[x.shape],
        )
    return out
