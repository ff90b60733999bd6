"""Indexing ops: gather, scatter_add, dynamic_slice, dynamic_update_slice, sort and top_k.

They read or write at data-dependent positions. Out-of-range positions are clamped, never an
error or undefined: the tensor layer wraps negative Python-style indices before it records
these ops. Static slicing lives in `ops.movement`; argmax-style reductions in `ops.reduce`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...dtypes import ALL, INTEGER, NUMERIC, int32
from ...errors import DTypeError, OmnitensorError, ShapeError
from ..opdef import OpView, Trait, attribute, primitive
from ..opdef import operand as _operand  # the field below is named `operand`, as in StableHLO
from ..types import TensorType

__all__ = [
    "DynamicSliceView",
    "DynamicUpdateSliceView",
    "GatherView",
    "ScatterAddView",
    "SortView",
    "TopKView",
    "match_dynamic_slice",
    "match_dynamic_update_slice",
    "match_gather",
    "match_scatter_add",
    "match_sort",
    "match_top_k",
]

Array = np.ndarray[Any, Any]


def _int(op: str, what: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise OmnitensorError(f"{op}: attribute {what!r} must be an int (got {value!r})", op=op)
    return int(value)


def _axis(op: str, ndim: int, axis: Any) -> int:
    axis = _int(op, "axis", axis)
    if not -ndim <= axis < ndim:
        raise ShapeError(
            f"{op}: axis {axis} is out of range (got rank {ndim}, expected an axis in "
            f"[{-ndim}, {ndim}))",
            op=op,
        )
    return int(axis) % ndim


# --- gather / scatter_add -----------------------------------------------------------------------


def _gather_shape(
    op: str, operand: TensorType, indices: TensorType, axis: Any, batch_dims: Any
) -> tuple[int, tuple[int, ...]]:
    """(normalized axis, result shape) of a tf.gather-style gather; raises ShapeError."""
    if operand.ndim == 0:
        raise ShapeError(f"{op}: operand must have rank >= 1 (got shape {operand.shape})", op=op)
    axis = _axis(op, operand.ndim, axis)
    batch_dims = _int(op, "batch_dims", batch_dims)
    if not 0 <= batch_dims <= min(axis, indices.ndim):
        raise ShapeError(
            f"{op}: batch_dims {batch_dims} is out of range (got axis {axis} and indices rank "
            f"{indices.ndim}, expected 0 <= batch_dims <= min(axis, indices rank))",
            op=op,
        )
    if operand.shape[:batch_dims] != indices.shape[:batch_dims]:
        raise ShapeError(
            f"{op}: leading batch dims differ (got operand {operand.shape} and indices "
            f"{indices.shape}, expected equal first {batch_dims} dims)",
            op=op,
            shapes=[operand.shape, indices.shape],
        )
    shape = operand.shape[:axis] + indices.shape[batch_dims:] + operand.shape[axis + 1 :]
    if operand.shape[axis] == 0 and math.prod(shape) > 0:
        raise ShapeError(
            f"{op}: cannot index an empty axis {axis} (got operand {operand.shape} with "
            f"indices {indices.shape})",
            op=op,
            shapes=[operand.shape, indices.shape],
        )
    return axis, shape


def _gather_layout(
    operand_shape: tuple[int, ...], indices: Array, axis: int, batch_dims: int
) -> tuple[tuple[int, int, int, int], Array]:
    """Collapse to (B, P, n, Q) operand blocks and clamped (B, I) indices."""
    b = math.prod(operand_shape[:batch_dims])
    p = math.prod(operand_shape[batch_dims:axis])
    n = operand_shape[axis]
    q = math.prod(operand_shape[axis + 1 :])
    i = math.prod(indices.shape[batch_dims:])
    clamped = np.clip(indices.astype(np.int64), 0, max(n - 1, 0)).reshape(b, i)
    return (b, p, n, q), clamped


@primitive("gather", traits=Trait.INDEXING, dtypes=ALL)
class GatherView(OpView):
    """Take slices of `operand` along `axis` at `indices` (tf.gather with ``batch_dims``).

    ``out[b..., p..., i..., q...] = operand[b..., p..., indices[b..., i...], q...]``: the result
    shape is ``operand.shape[:axis] + indices.shape[batch_dims:] + operand.shape[axis+1:]``.
    The first `batch_dims` dims of operand and indices must match, and ``axis >= batch_dims``.
    Out-of-range indices are clamped to ``[0, n - 1]`` (n = ``operand.shape[axis]``); negative
    indices therefore read element 0 (the tensor layer wraps Python-style negatives first).
    Differentiable in `operand` (its gradient is `scatter_add`), not in `indices`.
    """

    operand = _operand()
    indices = _operand(dtypes=INTEGER)
    axis: int = attribute()
    batch_dims: int = attribute(0)

    @staticmethod
    def infer(
        operand: TensorType, indices: TensorType, *, axis: int, batch_dims: int
    ) -> TensorType:
        """The shape/dtype rule (see the class docstring)."""
        return TensorType(
            _gather_shape("gather", operand, indices, axis, batch_dims)[1], operand.dtype
        )

    @staticmethod
    def reference(operand: Array, indices: Array, *, axis: int, batch_dims: int) -> Array:
        """The numpy reference kernel."""
        axis = axis % operand.ndim
        (b, p, n, q), idx = _gather_layout(operand.shape, indices, axis, batch_dims)
        blocks = operand.reshape(b, p, n, q).transpose(0, 2, 1, 3)  # (B, n, P, Q)
        picked = blocks[np.arange(b)[:, None], idx]  # (B, I, P, Q)
        out = picked.transpose(0, 2, 1, 3)  # (B, P, I, Q)
        shape = operand.shape[:axis] + indices.shape[batch_dims:] + operand.shape[axis + 1 :]
        return np.ascontiguousarray(out).reshape(shape)


@primitive("scatter_add", traits=Trait.INDEXING, dtypes=NUMERIC)
class ScatterAddView(OpView):
    """A copy of `operand` with `updates` added at the positions `gather` would read.

    The transpose of `gather` with the same `axis`/`batch_dims`: `updates` has the shape that
    ``gather(operand, indices)`` returns, and ``out[..., indices[...], ...] += updates[...]``.
    Duplicate indices accumulate. Out-of-range indices are clamped to ``[0, n - 1]``, exactly
    as in `gather`. float16/bfloat16 accumulate in float32 and round once; integers wrap. The
    order in which duplicates are added is unspecified, so float results may differ in the last
    bits between backends. Differentiable in `operand` and `updates`, not in `indices`.
    """

    operand = _operand()
    indices = _operand(dtypes=INTEGER)
    updates = _operand()
    axis: int = attribute()
    batch_dims: int = attribute(0)

    @staticmethod
    def infer(
        operand: TensorType, indices: TensorType, updates: TensorType, *, axis: int, batch_dims: int
    ) -> TensorType:
        """The shape/dtype rule (see the class docstring)."""
        _, shape = _gather_shape("scatter_add", operand, indices, axis, batch_dims)
        if updates.dtype != operand.dtype:
            raise DTypeError(
                f"scatter_add: updates dtype differs from operand (got {updates.dtype}, expected "
                f"{operand.dtype}; insert a convert)",
                op="scatter_add",
                dtype=updates.dtype.name,
            )
        if updates.shape != shape:
            raise ShapeError(
                f"scatter_add: updates shape does not match the gathered shape (got "
                f"{updates.shape}, expected {shape} for operand {operand.shape} and indices "
                f"{indices.shape})",
                op="scatter_add",
                shapes=[operand.shape, indices.shape, updates.shape],
            )
        return operand

    @staticmethod
    def reference(
        operand: Array, indices: Array, updates: Array, *, axis: int, batch_dims: int
    ) -> Array:
        """The numpy reference kernel."""
        axis = axis % operand.ndim
        (b, p, n, q), idx = _gather_layout(operand.shape, indices, axis, batch_dims)
        dtype = operand.dtype
        work = np.float32 if dtype.itemsize == 2 and dtype.kind not in "iub" else dtype
        out = operand.astype(work).reshape(b, p, n, q).transpose(0, 2, 1, 3).copy()  # (B,n,P,Q)
        i = idx.shape[1]
        upd = updates.astype(work).reshape(b, p, i, q).transpose(0, 2, 1, 3)  # (B, I, P, Q)
        if upd.size:
            # NOTE: duplicates summed by sorting, not `np.add.at` (which adds one (P, Q) block
            # per index in a slow loop: 1.1 ms for an embedding gradient of 576 x 128)
            keys = (np.arange(b)[:, None] * n + idx).reshape(-1)
            order = np.argsort(keys, kind="stable")
            keys = keys[order]
            starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
            sums = np.add.reduceat(upd.reshape(b * i, p, q)[order], starts, axis=0)
            out.reshape(b * n, p, q)[keys[starts]] += sums
        return np.ascontiguousarray(out.transpose(0, 2, 1, 3)).reshape(operand.shape).astype(dtype)


# --- dynamic_slice / dynamic_update_slice -------------------------------------------------------


def _check_starts(op: str, operand: TensorType, starts: Sequence[TensorType]) -> None:
    if len(starts) != operand.ndim:
        raise ShapeError(
            f"{op}: one start index per dimension (got {len(starts)} for operand "
            f"{operand.shape}, expected {operand.ndim})",
            op=op,
            shapes=[operand.shape],
        )
    for k, start in enumerate(starts):
        if start.shape != ():
            raise ShapeError(
                f"{op}: start index {k} must be a 0-d tensor (got shape {start.shape})", op=op
            )


def _clamped_starts(
    shape: tuple[int, ...], sizes: Sequence[int], starts: Sequence[Array]
) -> tuple[slice, ...]:
    """StableHLO's clamp: each start to ``[0, dim - size]``."""
    out = []
    for dim, size, start in zip(shape, sizes, starts, strict=True):
        begin = int(np.clip(np.asarray(start).astype(np.int64), 0, dim - size))
        out.append(slice(begin, begin + size))
    return tuple(out)


@primitive("dynamic_slice", traits=Trait.INDEXING, dtypes=ALL)
class DynamicSliceView(OpView):
    """The block of `operand` of shape `sizes` starting at runtime positions `start_indices`.

    One 0-d integer start index per dimension (any integer dtypes). As in StableHLO, each start
    is clamped to ``[0, dim - size]``, so the block always lies inside the operand (a start
    past the end reads the last `size` elements; a negative start reads from 0).
    Differentiable in `operand` (gradient: `dynamic_update_slice` into zeros).
    """

    operand = _operand()
    start_indices = _operand(variadic=True, dtypes=INTEGER, min_count=0)
    sizes: tuple[int, ...] = attribute()

    @staticmethod
    def infer(
        operand: TensorType, start_indices: tuple[TensorType, ...], *, sizes: tuple[int, ...]
    ) -> TensorType:
        """The shape/dtype rule (see the class docstring)."""
        _check_starts("dynamic_slice", operand, start_indices)
        ok = isinstance(sizes, tuple) and all(
            isinstance(s, int) and not isinstance(s, bool) for s in sizes
        )
        if not ok or len(sizes) != operand.ndim:
            raise ShapeError(
                f"dynamic_slice: sizes must be one int per dimension (got {sizes!r} for operand "
                f"{operand.shape})",
                op="dynamic_slice",
            )
        if any(not 0 <= s <= d for s, d in zip(sizes, operand.shape, strict=True)):
            raise ShapeError(
                f"dynamic_slice: sizes exceed the operand (got sizes {sizes} for operand "
                f"{operand.shape}, expected 0 <= size <= dim)",
                op="dynamic_slice",
                shapes=[operand.shape],
            )
        return TensorType(sizes, operand.dtype)

    @staticmethod
    def reference(
        operand: Array, start_indices: tuple[Array, ...], *, sizes: tuple[int, ...]
    ) -> Array:
        """The numpy reference kernel."""
        return operand[_clamped_starts(operand.shape, sizes, start_indices)].copy()


@primitive("dynamic_update_slice", traits=Trait.INDEXING, dtypes=ALL)
class DynamicUpdateSliceView(OpView):
    """A copy of `operand` with the block `update` written at runtime `start_indices`.

    `update` has `operand`'s rank and dtype and fits inside it. One 0-d integer start index per
    dimension, each clamped to ``[0, dim - update_dim]`` as in StableHLO, so the whole update
    is always written. Used for in-place KV-cache writes (a backend may update a donated
    operand in place). Differentiable in `operand` and `update`.
    """

    operand = _operand()
    update = _operand()
    start_indices = _operand(variadic=True, dtypes=INTEGER, min_count=0)

    @staticmethod
    def infer(
        operand: TensorType, update: TensorType, start_indices: tuple[TensorType, ...]
    ) -> TensorType:
        """The shape/dtype rule (see the class docstring)."""
        op = "dynamic_update_slice"
        _check_starts(op, operand, start_indices)
        if update.dtype != operand.dtype:
            raise DTypeError(
                f"{op}: update dtype differs from operand (got {update.dtype}, expected "
                f"{operand.dtype}; insert a convert)",
                op=op,
                dtype=update.dtype.name,
            )
        if update.ndim != operand.ndim or any(
            u > d for u, d in zip(update.shape, operand.shape, strict=True)
        ):
            raise ShapeError(
                f"{op}: update does not fit in the operand (got update {update.shape} and "
                f"operand {operand.shape}, expected the same rank and update dims <= operand dims)",
                op=op,
                shapes=[operand.shape, update.shape],
            )
        return operand

    @staticmethod
    def reference(operand: Array, update: Array, start_indices: tuple[Array, ...]) -> Array:
        """The numpy reference kernel."""
        out = operand.copy()
        out[_clamped_starts(operand.shape, update.shape, start_indices)] = update
        return out


# --- sort / top_k -------------------------------------------------------------------------------


def _stable_order(x: Array, axis: int, descending: bool) -> Array:
    """Stable argsort along `axis`, NaN largest; ties keep their original (ascending) order."""
    if x.dtype.itemsize == 2 and x.dtype.kind not in "iub":
        # float16/bfloat16 (numpy kind "V" for ml_dtypes) -> float32 is exact and keeps the order;
        # numpy's own NaN-last float sort then applies.
        x = x.astype(np.float32)
    if not descending:
        return np.argsort(x, axis=axis, kind="stable")  # numpy already sorts NaN last
    # Sorting the reversed array ascending and reversing the result gives a descending order in
    # which equal keys keep increasing original indices, and NaN (last ascending) comes first.
    n = x.shape[axis]
    flipped = np.argsort(np.flip(x, axis=axis), axis=axis, kind="stable")
    order: Array = (n - 1) - np.flip(flipped, axis=axis)
    return order


@primitive("sort", traits=Trait.MULTI_RESULT, dtypes=NUMERIC)
class SortView(OpView):
    """Stable sort of `x` along `axis`: returns ``(values, indices)``, indices int32.

    ``values = take_along_axis(x, indices, axis)``. Stable: equal keys keep their original order
    (in both directions, so ``descending=True`` is not the reverse of an ascending sort when
    there are ties). NaN sorts as the largest value: last ascending, first descending; NaNs
    keep their original order among themselves. -0.0 and 0.0 compare equal (stable order).
    Differentiable in `x` through `values`; `indices` has no gradient.
    """

    x = _operand()
    axis: int = attribute(-1)
    descending: bool = attribute(False)

    @staticmethod
    def infer(x: TensorType, *, axis: int, descending: bool) -> tuple[TensorType, TensorType]:
        """The shape/dtype rule (see the class docstring)."""
        if x.ndim == 0:
            raise ShapeError(f"sort: operand must have rank >= 1 (got shape {x.shape})", op="sort")
        _axis("sort", x.ndim, axis)
        if not isinstance(descending, bool):
            raise OmnitensorError(
                f"sort: attribute 'descending' must be a bool (got {descending!r})", op="sort"
            )
        return x, TensorType(x.shape, int32)

    @staticmethod
    def reference(x: Array, *, axis: int, descending: bool) -> tuple[Array, Array]:
        """The numpy reference kernel."""
        order = _stable_order(x, axis % x.ndim, descending)
        return np.take_along_axis(x, order, axis=axis), order.astype(np.int32)


@primitive("top_k", traits=Trait.MULTI_RESULT, dtypes=NUMERIC)
class TopKView(OpView):
    """The `k` largest entries along the last axis: ``(values, indices)``, indices int32.

    Values are in descending order; ties keep the lower index first; NaN counts as the largest
    value (NaNs first, by index). ``0 <= k <= x.shape[-1]``; the result shape is
    ``x.shape[:-1] + (k,)``. Differentiable in `x` through `values`; `indices` has no gradient.
    """

    x = _operand()
    k: int = attribute()

    @staticmethod
    def infer(x: TensorType, *, k: int) -> tuple[TensorType, TensorType]:
        """The shape/dtype rule (see the class docstring)."""
        k = _int("top_k", "k", k)
        if x.ndim == 0 or not 0 <= k <= x.shape[-1]:
            raise ShapeError(
                f"top_k: k out of range (got k={k} for shape {x.shape}, expected rank >= 1 and "
                f"0 <= k <= last dim)",
                op="top_k",
                shapes=[x.shape],
            )
        shape = x.shape[:-1] + (k,)
        return TensorType(shape, x.dtype), TensorType(shape, int32)

    @staticmethod
    def reference(x: Array, *, k: int) -> tuple[Array, Array]:
        """The numpy reference kernel."""
        order = _stable_order(x, x.ndim - 1, True)[..., :k]
        return np.take_along_axis(x, order, axis=-1), order.astype(np.int32)


match_gather = GatherView.match
match_scatter_add = ScatterAddView.match
match_dynamic_slice = DynamicSliceView.match
match_dynamic_update_slice = DynamicUpdateSliceView.match
match_sort = SortView.match
match_top_k = TopKView.match
