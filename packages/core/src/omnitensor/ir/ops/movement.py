"""Movement ops: reshape, broadcast_in_dim, transpose, slice, concatenate, pad, reverse.

They rearrange elements without arithmetic. Those marked `Trait.VIEW` can be a strided view of
their operand, and their reference kernels return numpy views where numpy does. Negative-step
slicing, squeeze/unsqueeze and numpy-style broadcasting are the tensor layer's business.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...dtypes import ALL
from ...errors import DTypeError, ShapeError
from ..opdef import OpView, Trait, attribute, operand, primitive
from ..types import TensorType
from . import _checks

__all__ = [
    "BroadcastInDimView",
    "ConcatenateView",
    "PadView",
    "ReshapeView",
    "ReverseView",
    "SliceView",
    "TransposeView",
    "match_broadcast_in_dim",
    "match_concatenate",
    "match_pad",
    "match_reshape",
    "match_reverse",
    "match_slice",
    "match_transpose",
]

Array = np.ndarray[Any, Any]
_VIEW = Trait.MOVEMENT | Trait.VIEW


@primitive("reshape", traits=_VIEW, dtypes=ALL)
class ReshapeView(OpView):
    """Row-major reshape of `x` to `shape`, which must hold the same number of elements.

    `shape` is explicit (no ``-1``: the tensor layer resolves it). Zero-size shapes reshape to
    any zero-size shape. A backend may return a view when the operand's strides allow it.
    """

    x = operand()
    shape: tuple[int, ...] = attribute()

    @staticmethod
    def infer(x: TensorType, *, shape: tuple[int, ...]) -> TensorType:
        out = _checks.shape_attr("reshape", shape)
        if math.prod(out) != x.size:
            raise ShapeError(
                f"reshape: element counts differ (got {x.shape} with {x.size} elements, expected "
                f"a shape with {x.size} elements, not {out})",
                op="reshape",
                shapes=[x.shape, out],
            )
        return TensorType(out, x.dtype)

    @staticmethod
    def reference(x: Array, *, shape: tuple[int, ...]) -> Array:
        return np.reshape(x, shape)  # a view whenever numpy can make one


@primitive("broadcast_in_dim", traits=_VIEW, dtypes=ALL)
class BroadcastInDimView(OpView):
    """Broadcast `x` to `shape`, StableHLO style: operand dim ``i`` becomes result dim ``dims[i]``.

    `dims` has one unique entry per operand dimension, each in ``[0, len(shape))``; the size of
    operand dim ``i`` must be 1 (it is repeated) or equal to ``shape[dims[i]]``. Result dims not
    named in `dims` are new. `dims` need not be increasing (a permutation then happens too).
    """

    x = operand()
    shape: tuple[int, ...] = attribute()
    dims: tuple[int, ...] = attribute()

    @staticmethod
    def infer(x: TensorType, *, shape: tuple[int, ...], dims: tuple[int, ...]) -> TensorType:
        op = "broadcast_in_dim"
        out = _checks.shape_attr(op, shape)
        mapping = _checks.int_tuple(op, "dims", dims, x.shape)
        if len(set(mapping)) != len(mapping) or any(not 0 <= d < len(out) for d in mapping):
            raise ShapeError(
                f"{op}: dims must be unique result dimensions (got dims {mapping} for result "
                f"shape {out}, expected entries in [0, {len(out)}))",
                op=op,
                shapes=[x.shape, out],
            )
        for i, d in enumerate(mapping):
            if x.shape[i] not in (1, out[d]):
                raise ShapeError(
                    f"{op}: cannot broadcast {x.shape} to {out} with dims {mapping} (operand dim "
                    f"{i} has size {x.shape[i]}, expected 1 or {out[d]})",
                    op=op,
                    shapes=[x.shape, out],
                )
        return TensorType(out, x.dtype)

    @staticmethod
    def reference(x: Array, *, shape: tuple[int, ...], dims: tuple[int, ...]) -> Array:
        if x.flags.c_contiguous and x.size:
            # the view made directly (0.3 us against ~3 through transpose, reshape and
            # broadcast_to: a training step makes ~40 of them per call)
            strides = [0] * len(shape)
            for i, d in enumerate(dims):
                if x.shape[i] != 1:
                    strides[d] = x.strides[i]
            view = np.ndarray(shape, x.dtype, x, 0, tuple(strides))
            view.flags.writeable = False
            return view
        order = sorted(range(x.ndim), key=lambda i: dims[i])
        expanded = [1] * len(shape)
        for i in order:
            expanded[dims[i]] = x.shape[i]
        # (operand dims in result order) -> (1s inserted at the new dims) -> broadcast: all views
        return np.broadcast_to(x.transpose(order).reshape(expanded), shape)


@primitive("transpose", traits=_VIEW, dtypes=ALL)
class TransposeView(OpView):
    """Permute the dimensions of `x`: result dim ``i`` is operand dim ``perm[i]``.

    `perm` must be a permutation of ``range(ndim)`` (a 0-d operand takes ``()``).
    """

    x = operand()
    perm: tuple[int, ...] = attribute()

    @staticmethod
    def infer(x: TensorType, *, perm: tuple[int, ...]) -> TensorType:
        order = _checks.int_tuple("transpose", "perm", perm, x.shape)
        if sorted(order) != list(range(x.ndim)):
            raise ShapeError(
                f"transpose: perm is not a permutation (got {order} for shape {x.shape}, "
                f"expected a permutation of {tuple(range(x.ndim))})",
                op="transpose",
                shapes=[x.shape],
            )
        return TensorType(tuple(x.shape[p] for p in order), x.dtype)

    @staticmethod
    def reference(x: Array, *, perm: tuple[int, ...]) -> Array:
        return x.transpose(perm)


@primitive("slice", traits=_VIEW, dtypes=ALL)
class SliceView(OpView):
    """Strided slice ``x[start[i]:limit[i]:stride[i], ...]`` with one entry per dimension.

    Requires ``0 <= start[i] <= limit[i] <= x.shape[i]`` and ``stride[i] >= 1``; result dim
    ``i`` is ``ceil((limit[i] - start[i]) / stride[i])`` (0 when start == limit). Negative
    indices and steps are not PTIR: the tensor layer normalizes them (a negative step becomes
    a slice plus `reverse`).
    """

    x = operand()
    start: tuple[int, ...] = attribute()
    limit: tuple[int, ...] = attribute()
    stride: tuple[int, ...] = attribute()

    @staticmethod
    def infer(x: TensorType, *, start: tuple[int, ...], limit: tuple[int, ...],
              stride: tuple[int, ...]) -> TensorType:
        lo = _checks.int_tuple("slice", "start", start, x.shape)
        hi = _checks.int_tuple("slice", "limit", limit, x.shape)
        step = _checks.int_tuple("slice", "stride", stride, x.shape)
        out = []
        for i, (a, b, s, d) in enumerate(zip(lo, hi, step, x.shape, strict=True)):
            if s < 1:
                raise ShapeError(
                    f"slice: stride must be >= 1 (got stride {step} for shape {x.shape}); "
                    f"express negative steps with reverse",
                    op="slice",
                    shapes=[x.shape],
                )
            if not 0 <= a <= b <= d:
                raise ShapeError(
                    f"slice: bounds out of range in dim {i} (got start {lo}, limit {hi} for "
                    f"shape {x.shape}, expected 0 <= start <= limit <= size)",
                    op="slice",
                    shapes=[x.shape],
                )
            out.append(-(-(b - a) // s))
        return TensorType(tuple(out), x.dtype)

    @staticmethod
    def reference(x: Array, *, start: tuple[int, ...], limit: tuple[int, ...],
                  stride: tuple[int, ...]) -> Array:
        index = tuple(slice(a, b, s) for a, b, s in zip(start, limit, stride, strict=True))
        return x[index]  # basic slicing: a view


@primitive("concatenate", traits=Trait.MOVEMENT, dtypes=ALL)
class ConcatenateView(OpView):
    """Join `xs` along `axis`; every operand has the same dtype, rank and other dimensions.

    At least one operand; zero-size operands are allowed (they contribute nothing). `axis` may
    be negative (counted from the end).
    """

    xs = operand(variadic=True)
    axis: int = attribute()

    @staticmethod
    def infer(xs: tuple[TensorType, ...], *, axis: int) -> TensorType:
        op = "concatenate"
        first = xs[0]
        if first.ndim == 0:
            raise ShapeError(f"{op}: cannot concatenate 0-d operands (got ())", op=op,
                             shapes=[x.shape for x in xs])
        ax = _checks.axis(op, first, axis)
        total = 0
        for x in xs:
            if x.dtype != first.dtype:
                raise DTypeError(
                    f"{op}: operand dtypes differ (got {first.dtype} and {x.dtype}, expected "
                    f"equal dtypes; insert a convert)",
                    op=op,
                    dtype=x.dtype.name,
                )
            same_rank = x.ndim == first.ndim
            if not same_rank or any(
                a != b for i, (a, b) in enumerate(zip(x.shape, first.shape, strict=True)) if i != ax
            ):
                raise ShapeError(
                    f"{op}: shapes differ outside axis {ax} (got {first.shape} and {x.shape}, "
                    f"expected equal sizes in every other dimension)",
                    op=op,
                    shapes=[t.shape for t in xs],
                )
            total += x.shape[ax]
        shape = list(first.shape)
        shape[ax] = total
        return TensorType(tuple(shape), first.dtype)

    @staticmethod
    def reference(xs: tuple[Array, ...], *, axis: int) -> Array:
        return np.concatenate(xs, axis=axis)


def _pad_dim(size: int, low: int, high: int, interior: int) -> int:
    return low + high + size + max(size - 1, 0) * interior


@primitive("pad", traits=Trait.MOVEMENT, dtypes=ALL)
class PadView(OpView):
    """Pad `x` with the 0-d `padding_value`: `low`/`high` at the ends, `interior` between elements.

    Per dimension the result size is ``low + high + size + max(size - 1, 0) * interior``, which
    must be >= 0. ``interior >= 0``. Negative `low`/`high` crop that many elements from the
    (interior-padded) edge, as in StableHLO; cropping may reach into padding on the other side
    (``pad([1, 2, 3], low=-5, high=4)`` is two padding values).
    """

    x = operand()
    padding_value = operand()
    low: tuple[int, ...] = attribute()
    high: tuple[int, ...] = attribute()
    interior: tuple[int, ...] = attribute()

    @staticmethod
    def infer(x: TensorType, padding_value: TensorType, *, low: tuple[int, ...],
              high: tuple[int, ...], interior: tuple[int, ...]) -> TensorType:
        if padding_value.shape != ():
            raise ShapeError(
                f"pad: padding_value must be 0-d (got {padding_value.shape}, expected ())",
                op="pad",
                shapes=[x.shape, padding_value.shape],
            )
        if padding_value.dtype != x.dtype:
            raise DTypeError(
                f"pad: padding_value dtype differs (got {padding_value.dtype}, expected "
                f"{x.dtype}); insert a convert",
                op="pad",
                dtype=padding_value.dtype.name,
            )
        lo = _checks.int_tuple("pad", "low", low, x.shape)
        hi = _checks.int_tuple("pad", "high", high, x.shape)
        inner = _checks.int_tuple("pad", "interior", interior, x.shape)
        if any(v < 0 for v in inner):
            raise ShapeError(
                f"pad: interior padding must be >= 0 (got {inner} for shape {x.shape})",
                op="pad",
                shapes=[x.shape],
            )
        out = tuple(_pad_dim(*args) for args in zip(x.shape, lo, hi, inner, strict=True))
        if any(d < 0 for d in out):
            raise ShapeError(
                f"pad: negative result size (got shape {x.shape} with low {lo}, high {hi}, "
                f"interior {inner} -> {out}, expected sizes >= 0)",
                op="pad",
                shapes=[x.shape],
            )
        return TensorType(out, x.dtype)

    @staticmethod
    def reference(x: Array, padding_value: Array, *, low: tuple[int, ...],
                  high: tuple[int, ...], interior: tuple[int, ...]) -> Array:
        # Pad by the positive amounts first, then crop by the negative ones.
        grown = tuple(
            _pad_dim(d, max(lo, 0), max(hi, 0), i)
            for d, lo, hi, i in zip(x.shape, low, high, interior, strict=True)
        )
        full = np.full(grown, padding_value, dtype=x.dtype)
        place = tuple(slice(max(lo, 0), g - max(hi, 0), i + 1)
                      for lo, hi, i, g in zip(low, high, interior, grown, strict=True))
        full[place] = x
        crop = tuple(slice(max(-lo, 0), g - max(-hi, 0))
                     for lo, hi, g in zip(low, high, grown, strict=True))
        return full[crop]


@primitive("reverse", traits=_VIEW, dtypes=ALL)
class ReverseView(OpView):
    """Reverse the order of elements of `x` along each of `axes` (unique; may be negative)."""

    x = operand()
    axes: tuple[int, ...] = attribute()

    @staticmethod
    def infer(x: TensorType, *, axes: tuple[int, ...]) -> TensorType:
        _checks.axes("reverse", x, axes)
        return x

    @staticmethod
    def reference(x: Array, *, axes: tuple[int, ...]) -> Array:
        return np.flip(x, axis=axes)  # a view with negative strides


match_reshape = ReshapeView.match
match_broadcast_in_dim = BroadcastInDimView.match
match_transpose = TransposeView.match
match_slice = SliceView.match
match_concatenate = ConcatenateView.match
match_pad = PadView.match
match_reverse = ReverseView.match
