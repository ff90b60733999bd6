"""Reductions: reduce_sum/max/min/prod over axes, argmax/argmin along an axis, cumsum.

float16/bfloat16 sums and products accumulate in float32 (`dtypes.accumulator`) and round once;
integer arithmetic wraps. Mean, variance and logsumexp are composites (functionals).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...dtypes import BOOL, NUMERIC, accumulator, as_dtype, int32
from ...errors import OmnitensorError, ShapeError
from .. import rules
from ..opdef import OpView, Trait, attribute, operand, primitive
from ..types import TensorType
from . import _checks

__all__ = [
    "ArgmaxView",
    "ArgminView",
    "CumsumView",
    "ReduceMaxView",
    "ReduceMinView",
    "ReduceProdView",
    "ReduceSumView",
    "ReduceView",
    "match_argmax",
    "match_argmin",
    "match_cumsum",
    "match_reduce_max",
    "match_reduce_min",
    "match_reduce_prod",
    "match_reduce_sum",
]

Array = np.ndarray[Any, Any]


def _wide(x: Array) -> Array:
    """`x` in its accumulator dtype (float32 for float16/bfloat16; itself otherwise)."""
    return x.astype(accumulator(as_dtype(x.dtype)).np, copy=False)


class ReduceView(OpView):
    """Base of the ``reduce_*`` ops: operand `x`, unique `axes` (may be negative) removed."""

    x = operand()
    axes: tuple[int, ...] = attribute()


def _reduce_infer(name: str) -> Any:
    def infer(x: TensorType, *, axes: tuple[int, ...]) -> TensorType:
        normalized = _checks.axes(name, x, axes)
        return TensorType(rules.drop_axes(x.shape, normalized), x.dtype)

    return staticmethod(infer)


def _extreme_identity(x: Array, largest: bool) -> Any:
    """Identity of max (`largest`=False gives min's): -inf/int-min/False, or +inf/int-max/True."""
    if x.dtype.kind == "b":
        return largest
    if x.dtype.kind in "iu":
        info = np.iinfo(x.dtype)
        return info.max if largest else info.min
    return np.inf if largest else -np.inf


@primitive("reduce_sum", traits=Trait.REDUCTION, dtypes=NUMERIC)
class ReduceSumView(ReduceView):
    """Sum of `x` over `axes`; the reduced axes are removed.

    float16/bfloat16 accumulate in float32 and round once; integers wrap; NaN propagates and
    inf + -inf gives NaN. An empty reduction gives 0. Summation order is unspecified, so float
    results may differ from the reference within the conformance tolerance.
    """

    infer = _reduce_infer("reduce_sum")

    @staticmethod
    def reference(x: Array, *, axes: tuple[int, ...]) -> Array:
        wide = _wide(x)
        return np.asarray(np.sum(wide, axis=axes, dtype=wide.dtype)).astype(x.dtype)


@primitive("reduce_prod", traits=Trait.REDUCTION, dtypes=NUMERIC)
class ReduceProdView(ReduceView):
    """Product of `x` over `axes`; the reduced axes are removed.

    float16/bfloat16 accumulate in float32 and round once; integers wrap; NaN propagates and
    0 * inf gives NaN. An empty reduction gives 1.
    """

    infer = _reduce_infer("reduce_prod")

    @staticmethod
    def reference(x: Array, *, axes: tuple[int, ...]) -> Array:
        wide = _wide(x)
        return np.asarray(np.prod(wide, axis=axes, dtype=wide.dtype)).astype(x.dtype)


@primitive("reduce_max", traits=Trait.REDUCTION, dtypes=NUMERIC + BOOL)
class ReduceMaxView(ReduceView):
    """Maximum of `x` over `axes`; the reduced axes are removed.

    NaN propagates (any NaN in a reduced slice gives NaN). An empty reduction gives the
    identity: -inf for floats, the minimum integer, False for bool (max of bool is `or`).
    Which of -0.0 and 0.0 a tie returns is unspecified (they compare equal).
    """

    infer = _reduce_infer("reduce_max")

    @staticmethod
    def reference(x: Array, *, axes: tuple[int, ...]) -> Array:
        wide = _wide(x)  # exact for max: float32 holds every float16/bfloat16
        out = np.max(wide, axis=axes, initial=_extreme_identity(x, largest=False))
        return np.asarray(out).astype(x.dtype)


@primitive("reduce_min", traits=Trait.REDUCTION, dtypes=NUMERIC + BOOL)
class ReduceMinView(ReduceView):
    """Minimum of `x` over `axes`; the reduced axes are removed.

    NaN propagates (any NaN in a reduced slice gives NaN). An empty reduction gives the
    identity: +inf for floats, the maximum integer, True for bool (min of bool is `and`).
    Which of -0.0 and 0.0 a tie returns is unspecified (they compare equal).
    """

    infer = _reduce_infer("reduce_min")

    @staticmethod
    def reference(x: Array, *, axes: tuple[int, ...]) -> Array:
        wide = _wide(x)
        out = np.min(wide, axis=axes, initial=_extreme_identity(x, largest=True))
        return np.asarray(out).astype(x.dtype)


def _arg_infer(op: str, x: TensorType, axis: int) -> TensorType:
    ax = _checks.axis(op, x, axis)
    if x.shape[ax] == 0:
        raise ShapeError(
            f"{op}: cannot take {op} of an empty axis (got shape {x.shape}, axis {axis}, "
            f"expected a non-empty axis)",
            op=op,
            shapes=[x.shape],
        )
    return TensorType(rules.drop_axes(x.shape, (ax,)), int32)


@primitive("argmax", traits=Trait.NON_DIFFERENTIABLE, dtypes=NUMERIC)
class ArgmaxView(OpView):
    """Index (int32) of the largest element of `x` along `axis`, which is removed.

    Ties give the first index. A NaN counts as larger than everything: the first NaN wins (as
    numpy). The axis must not be empty (a ShapeError when recorded).
    """

    x = operand()
    axis: int = attribute()

    @staticmethod
    def infer(x: TensorType, *, axis: int) -> TensorType:
        return _arg_infer("argmax", x, axis)

    @staticmethod
    def reference(x: Array, *, axis: int) -> Array:
        return np.asarray(np.argmax(_wide(x), axis=axis)).astype(np.int32)


@primitive("argmin", traits=Trait.NON_DIFFERENTIABLE, dtypes=NUMERIC)
class ArgminView(OpView):
    """Index (int32) of the smallest element of `x` along `axis`, which is removed.

    Ties give the first index. A NaN counts as smaller than everything: the first NaN wins (as
    numpy). The axis must not be empty (a ShapeError when recorded).
    """

    x = operand()
    axis: int = attribute()

    @staticmethod
    def infer(x: TensorType, *, axis: int) -> TensorType:
        return _arg_infer("argmin", x, axis)

    @staticmethod
    def reference(x: Array, *, axis: int) -> Array:
        return np.asarray(np.argmin(_wide(x), axis=axis)).astype(np.int32)


@primitive("cumsum", dtypes=NUMERIC)
class CumsumView(OpView):
    """Inclusive running sum of `x` along `axis` (from the end when `reverse`); same type as `x`.

    ``out[..., i, ...] = sum(x[..., :i+1, ...])`` (``x[..., i:, ...]`` when `reverse`).
    float16/bfloat16 accumulate in float32 and round each output once (not the running sum);
    integers wrap; NaN propagates to every later element.
    """

    x = operand()
    axis: int = attribute()
    reverse: bool = attribute(default=False)

    @staticmethod
    def infer(x: TensorType, *, axis: int, reverse: bool) -> TensorType:
        _checks.axis("cumsum", x, axis)
        if not isinstance(reverse, bool):
            raise OmnitensorError(
                f"cumsum: attribute 'reverse' must be a bool (got {reverse!r})", op="cumsum"
            )
        return x

    @staticmethod
    def reference(x: Array, *, axis: int, reverse: bool) -> Array:
        wide = _wide(x)
        if reverse:
            wide = np.flip(wide, axis=axis)
        out = np.cumsum(wide, axis=axis, dtype=wide.dtype)
        if reverse:
            out = np.flip(out, axis=axis)
        return out.astype(x.dtype)


match_reduce_sum = ReduceSumView.match
match_reduce_prod = ReduceProdView.match
match_reduce_max = ReduceMaxView.match
match_reduce_min = ReduceMinView.match
match_argmax = ArgmaxView.match
match_argmin = ArgminView.match
match_cumsum = CumsumView.match
