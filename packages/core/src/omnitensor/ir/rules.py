"""Reusable shape/dtype rules for op declarations (JAX's `standard_*` shape rules).

Every rule takes the op name first so that its errors read
``"<op>: <problem> (got ..., expected ...)"``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..dtypes import DType
from ..errors import DTypeError, ShapeError
from .types import TensorType

__all__ = [
    "check_axis",
    "drop_axes",
    "normalize_axes",
    "same_as_operand",
    "same_types",
]


def same_as_operand(x: TensorType) -> TensorType:
    """The result has the operand's type (unary elementwise ops)."""
    return x


def same_types(op: str, *types: TensorType, names: Sequence[str] = ()) -> TensorType:
    """All operands must share one shape and one dtype (binary elementwise ops).

    Broadcasting is explicit in PTIR (`broadcast_in_dim`): the tensor layer inserts it.

    Raises:
        ShapeError: when shapes differ, naming both.
        DTypeError: when dtypes differ, naming both.
    """
    first = types[0]
    for t in types[1:]:
        if t.shape != first.shape:
            raise ShapeError(
                f"{op}: operand shapes differ (got {first.shape} and {t.shape}, expected equal "
                f"shapes; broadcast explicitly with broadcast_in_dim)",
                op=op,
                shapes=[x.shape for x in types],
            )
        if t.dtype != first.dtype:
            raise DTypeError(
                f"{op}: operand dtypes differ (got {first.dtype} and {t.dtype}, expected equal "
                f"dtypes; insert a convert)",
                op=op,
                dtype=t.dtype.name,
            )
    return first


def check_axis(op: str, ndim: int, axis: int, *, inclusive: bool = False) -> int:
    """`axis` in ``[-ndim, ndim)`` (``[-ndim-1, ndim]`` when `inclusive`), made non-negative."""
    hi = ndim + 1 if inclusive else ndim
    if not -hi <= axis < hi:
        raise ShapeError(f"{op}: axis {axis} is out of range for rank {ndim}", op=op)
    return axis % hi if hi else 0


def normalize_axes(op: str, x: TensorType, axes: Sequence[int]) -> tuple[int, ...]:
    """Axes made non-negative, checked in range and unique, sorted."""
    out = tuple(sorted(check_axis(op, x.ndim, a) for a in axes))
    if len(set(out)) != len(out):
        raise ShapeError(f"{op}: repeated axes (got {tuple(axes)})", op=op)
    return out


def drop_axes(shape: tuple[int, ...], axes: Sequence[int]) -> tuple[int, ...]:
    """`shape` without the dimensions in `axes` (which must be normalized)."""
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def check_dtype(op: str, what: str, dtype: DType, allowed: Sequence[DType]) -> None:
    """Raise DTypeError unless `dtype` is in `allowed`."""
    if dtype not in allowed:
        raise DTypeError(
            f"{op}: {what} has dtype {dtype} "
            f"(expected one of {', '.join(d.name for d in allowed)})",
            op=op,
            dtype=dtype.name,
        )
