"""Reductions: sum, prod, max/min, mean, var/std, all/any, argmax/argmin, cumsum.

Every reduction takes NumPy's ``axis=``/``keepdims=`` and PyTorch's ``dim=``/``keepdim=``
spellings (one of each pair); they are `Tensor` methods and top-level functions alike.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import dtypes as dt
from ..errors import ArgumentTypeError, IndexOutOfRangeError, ShapeError

if TYPE_CHECKING:
    from .tensor import Tensor, TensorLike

__all__ = [
    "all", "amax", "amin", "any", "argmax", "argmin", "count_nonzero", "cumsum",
    "logsumexp", "max", "mean", "min", "prod", "std", "sum", "var",
]

Axis = int | Sequence[int] | None


def normalize_axis(op: str, axis: int, ndim: int) -> int:
    """`axis` in ``[0, ndim)`` (negative counts from the end); a 0-d tensor has axis 0 or -1."""
    if isinstance(axis, bool) or not isinstance(axis, int):
        try:
            axis = int(axis.__index__())
        except AttributeError:
            raise ArgumentTypeError(f"{op}: axis must be an integer (got {axis!r})",
                                    op=op) from None
    bound = builtins.max(ndim, 1)
    if not -bound <= axis < bound:  # NumPy's AxisError is both a ValueError and an IndexError
        raise IndexOutOfRangeError(f"{op}: axis {axis} is out of range for rank {ndim}", op=op)
    return axis % bound


def normalize_axes(op: str, axis: Axis, ndim: int) -> tuple[int, ...]:
    """Sorted, distinct axes of `axis` (every axis when None)."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = tuple(sorted(normalize_axis(op, a, ndim) for a in axes))
    if len(set(out)) != len(out):
        raise ShapeError(f"{op}: repeated axis in {axes}", op=op)
    return out


def pick(op: str, axis: Any, dim: Any, keepdims: Any, keepdim: Any) -> tuple[Any, bool]:
    """Merge the NumPy (``axis``, ``keepdims``) and PyTorch (``dim``, ``keepdim``) spellings."""
    if axis is not None and dim is not None:
        raise ArgumentTypeError(f"{op}: pass axis= or dim=, not both", op=op)
    if keepdims is not None and keepdim is not None:
        raise ArgumentTypeError(f"{op}: pass keepdims= or keepdim=, not both", op=op)
    keep = keepdims if keepdims is not None else keepdim
    return (axis if dim is None else dim), bool(keep)


def _input(op: str, x: TensorLike) -> Tensor:
    from .tensor import as_tensor

    return as_tensor(x, fn=op, arg="x")


def _reduce(op: str, prim: str, x: Tensor, axis: Axis, keepdims: bool) -> Tensor:
    from .tensor import Tensor

    axes = normalize_axes(op, axis, x.ndim)
    out = Tensor._apply(prim, x, axes=axes)
    if keepdims:
        out = out.reshape(tuple(1 if i in axes else d for i, d in enumerate(x.shape)))
    return out


def sum(x: TensorLike, axis: Axis = None, keepdims: bool | None = None, *,  # noqa: A001
        dim: Axis = None, keepdim: bool | None = None, dtype: Any = None) -> Tensor:
    """Sum over `axis` (all axes when None).

    Bools and integers narrower than int32 sum as int32; `dtype` converts first.
    """
    t = _input("sum", x)
    axis, keep = pick("sum", axis, dim, keepdims, keepdim)
    if dtype is not None:
        t = t.astype(dtype)
    elif t.dtype.is_bool or (t.dtype.is_integer and t.dtype.bits < 32):
        t = t.astype(dt.int32 if t.dtype.kind != "u" else dt.uint32)
    return _reduce("sum", "reduce_sum", t, axis, keep)


def prod(x: TensorLike, axis: Axis = None, keepdims: bool | None = None, *,
         dim: Axis = None, keepdim: bool | None = None, dtype: Any = None) -> Tensor:
    """Product over `axis` (bools and narrow integers as int32)."""
    t = _input("prod", x)
    axis, keep = pick("prod", axis, dim, keepdims, keepdim)
    if dtype is not None:
        t = t.astype(dtype)
    elif t.dtype.is_bool or (t.dtype.is_integer and t.dtype.bits < 32):
        t = t.astype(dt.int32 if t.dtype.kind != "u" else dt.uint32)
    return _reduce("prod", "reduce_prod", t, axis, keep)


def max(x: TensorLike, axis: Axis = None, keepdims: bool | None = None, *,  # noqa: A001
        dim: Axis = None, keepdim: bool | None = None) -> Tensor:
    """Maximum over `axis` (NaN propagates)."""
    t = _input("max", x)
    axis, keep = pick("max", axis, dim, keepdims, keepdim)
    _nonempty("max", t, axis)
    return _reduce("max", "reduce_max", t, axis, keep)


def min(x: TensorLike, axis: Axis = None, keepdims: bool | None = None, *,  # noqa: A001
        dim: Axis = None, keepdim: bool | None = None) -> Tensor:
    """Minimum over `axis` (NaN propagates)."""
    t = _input("min", x)
    axis, keep = pick("min", axis, dim, keepdims, keepdim)
    _nonempty("min", t, axis)
    return _reduce("min", "reduce_min", t, axis, keep)


amax = max
amin = min


def _nonempty(op: str, x: Tensor, axis: Axis) -> None:
    axes = normalize_axes(op, axis, x.ndim)
    if builtins.any(x.shape[a] == 0 for a in axes) or (x.ndim == 0 and x.size == 0):
        raise ShapeError(f"{op}: zero-size reduction has no identity (shape {x.shape})", op=op)


def mean(x: TensorLike, axis: Axis = None, keepdims: bool | None = None, *,
         dim: Axis = None, keepdim: bool | None = None, dtype: Any = None) -> Tensor:
    """Arithmetic mean over `axis`; integers give the default float dtype."""
    t = _input("mean", x)
    axis, keep = pick("mean", axis, dim, keepdims, keepdim)
    if dtype is not None:
        t = t.astype(dtype)
    elif not t.dtype.is_floating:
        t = t.astype(dt.default_float)
    count = math.prod(t.shape[a] for a in normalize_axes("mean", axis, t.ndim))
    return _reduce("mean", "reduce_sum", t, axis, keep) / float(count) if count else (
        _reduce("mean", "reduce_sum", t, axis, keep) * math.nan)


def var(x: TensorLike, axis: Axis = None, keepdims: bool | None = None, *,
        dim: Axis = None, keepdim: bool | None = None, correction: float | None = None,
        unbiased: bool | None = None, ddof: float | None = None) -> Tensor:
    """Variance over `axis`: sum((x - mean)**2) / (N - correction).

    Args:
        x: input (integers convert to the default float).
        axis: axes to reduce (`dim` is the PyTorch spelling).
        keepdims: keep reduced axes with size 1 (`keepdim`).
        correction: degrees of freedom subtracted from N (the Array API's name). NumPy's
            `ddof` and PyTorch's ``unbiased=True`` (correction 1) are accepted too. The
            default is 0 (the population variance, as NumPy and the Array API).
        dim: PyTorch's name for `axis`.
        keepdim: PyTorch's name for `keepdims`.
        unbiased: PyTorch's flag for ``correction=1``.
        ddof: NumPy's name for `correction`.
    """
    t = _input("var", x)
    axis, keep = pick("var", axis, dim, keepdims, keepdim)
    given = [c for c in (correction, ddof, None if unbiased is None else float(unbiased))
             if c is not None]
    if len(given) > 1:
        raise ArgumentTypeError("var: pass one of correction=, ddof= or unbiased=", op="var")
    corr = float(given[0]) if given else 0.0
    if not t.dtype.is_floating:
        t = t.astype(dt.default_float)
    axes = normalize_axes("var", axis, t.ndim)
    count = math.prod(t.shape[a] for a in axes)
    centered = t - mean(t, axes, keepdims=True)
    total = _reduce("var", "reduce_sum", centered * centered, axes, keep)
    return total / float(count - corr) if count - corr > 0 else total * math.nan


def std(x: TensorLike, axis: Axis = None, keepdims: bool | None = None, *,
        dim: Axis = None, keepdim: bool | None = None, correction: float | None = None,
        unbiased: bool | None = None, ddof: float | None = None) -> Tensor:
    """Standard deviation over `axis`: the square root of `var` (same arguments)."""
    return var(x, axis, keepdims, dim=dim, keepdim=keepdim, correction=correction,
               unbiased=unbiased, ddof=ddof).sqrt()


def all(x: TensorLike, axis: Axis = None, keepdims: bool | None = None, *,  # noqa: A001
        dim: Axis = None, keepdim: bool | None = None) -> Tensor:
    """True where every element along `axis` is nonzero."""
    t = _input("all", x)
    axis, keep = pick("all", axis, dim, keepdims, keepdim)
    b = t if t.dtype.is_bool else t != 0
    return _reduce("all", "reduce_min", b.astype(dt.uint8), axis, keep).astype(dt.bool_)


def any(x: TensorLike, axis: Axis = None, keepdims: bool | None = None, *,  # noqa: A001
        dim: Axis = None, keepdim: bool | None = None) -> Tensor:
    """True where some element along `axis` is nonzero."""
    t = _input("any", x)
    axis, keep = pick("any", axis, dim, keepdims, keepdim)
    b = t if t.dtype.is_bool else t != 0
    return _reduce("any", "reduce_max", b.astype(dt.uint8), axis, keep).astype(dt.bool_)


def count_nonzero(x: TensorLike, axis: Axis = None, keepdims: bool | None = None, *,
                  dim: Axis = None, keepdim: bool | None = None) -> Tensor:
    """Number of nonzero elements along `axis` (int32)."""
    t = _input("count_nonzero", x)
    axis, keep = pick("count_nonzero", axis, dim, keepdims, keepdim)
    b = t if t.dtype.is_bool else t != 0
    return _reduce("count_nonzero", "reduce_sum", b.astype(dt.int32), axis, keep)


def logsumexp(x: TensorLike, axis: Axis = None, keepdims: bool | None = None, *,
              dim: Axis = None, keepdim: bool | None = None) -> Tensor:
    """log(sum(exp(x))) over `axis`, computed without overflow."""
    from .math import isinf, where

    t = _input("logsumexp", x)
    axis, keep = pick("logsumexp", axis, dim, keepdims, keepdim)
    if not t.dtype.is_floating:
        t = t.astype(dt.default_float)
    hi = max(t, axis, keepdims=True)
    hi = where(isinf(hi), 0.0, hi)
    out = sum((t - hi).exp(), axis, keepdims=True).log() + hi
    return out if keep else out.squeeze(normalize_axes("logsumexp", axis, t.ndim))


def _arg(op: str, x: TensorLike, axis: int | None, dim: int | None, keepdims: bool | None,
         keepdim: bool | None) -> Tensor:
    from .tensor import Tensor

    t = _input(op, x)
    axis, keep = pick(op, axis, dim, keepdims, keepdim)
    if t.size == 0:
        raise ShapeError(f"{op}: attempt to take {op} of an empty tensor", op=op)
    if axis is None:
        out = Tensor._apply(op, t.reshape(-1), axis=0)
        return out.reshape((1,) * t.ndim) if keep else out
    axis = normalize_axis(op, axis, t.ndim)
    out = Tensor._apply(op, t, axis=axis)
    return out.unsqueeze(axis) if keep else out


def argmax(x: TensorLike, axis: int | None = None, keepdims: bool | None = None, *,
           dim: int | None = None, keepdim: bool | None = None) -> Tensor:
    """Index (int32) of the first maximum along `axis` (of the flattened tensor when None)."""
    return _arg("argmax", x, axis, dim, keepdims, keepdim)


def argmin(x: TensorLike, axis: int | None = None, keepdims: bool | None = None, *,
           dim: int | None = None, keepdim: bool | None = None) -> Tensor:
    """Index (int32) of the first minimum along `axis` (of the flattened tensor when None)."""
    return _arg("argmin", x, axis, dim, keepdims, keepdim)


def cumsum(x: TensorLike, axis: int | None = None, *, dim: int | None = None,
           dtype: Any = None, include_initial: bool = False) -> Tensor:
    """Inclusive running sum along `axis` (a 1-D input needs no axis).

    Args:
        x: input.
        axis: the axis to run along (`dim` is the PyTorch spelling).
        dim: PyTorch's name for `axis`.
        dtype: convert to this dtype first.
        include_initial: start with a zero (the result is one longer along `axis`).
    """
    from .tensor import Tensor

    t = _input("cumsum", x)
    axis, _ = pick("cumsum", axis, dim, None, None)
    if axis is None:
        if t.ndim != 1:
            raise ShapeError(f"cumsum: axis is required for a {t.ndim}-d tensor", op="cumsum")
        axis = 0
    if dtype is not None:
        t = t.astype(dtype)
    elif t.dtype.is_bool or (t.dtype.is_integer and t.dtype.bits < 32):
        t = t.astype(dt.int32 if t.dtype.kind != "u" else dt.uint32)
    axis = normalize_axis("cumsum", axis, t.ndim)
    out = Tensor._apply("cumsum", t, axis=axis)
    if include_initial:
        from .shape import concat

        zero_shape = t.shape[:axis] + (1,) + t.shape[axis + 1:]
        from .creation import zeros

        out = concat([zeros(zero_shape, dtype=t.dtype), out], axis=axis)
    return out

