"""NumPy-style indexing for tensors: `__getitem__` and `__setitem__` (which rebinds the handle).

Basic indices (ints, slices with any step, None, Ellipsis) become views or slice/reverse/reshape
ops; one integer-array index becomes a `gather`; a boolean mask realizes first (its result size
depends on data), except ``x[mask] = v`` with a full-shape mask, which is a `select`. A 0-d
integer tensor index is dynamic (`dynamic_slice` / `dynamic_update_slice`), so decode loops can
index by a position without recompiling.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import dtypes as dt
from ..errors import ShapeError, TraceError, UnsupportedError
from .realize import tracing

if TYPE_CHECKING:
    from .tensor import Tensor

__all__ = ["TensorIndexing"]


@dataclass
class _Plan:
    """A key split into per-dimension basic steps and at most one advanced index."""

    start: list[int] = field(default_factory=list)
    limit: list[int] = field(default_factory=list)
    stride: list[int] = field(default_factory=list)
    reverse: list[int] = field(default_factory=list)
    # the result's axes before any gather: ("dim", d) keeps sliced axis d, ("new",) is a None,
    # ("adv", d, span) keeps axes d..d+span-1 for the advanced index; int-indexed axes are absent
    layout: list[tuple[Any, ...]] = field(default_factory=list)
    dynamic: dict[int, Any] = field(default_factory=dict)  # dim -> 0-d tensor start
    advanced: Any = None  # (index array/tensor, span)
    int_dims: list[int] = field(default_factory=list)  # axes indexed by an integer


def _is_int_tensor0(item: Any) -> bool:
    from .tensor import Tensor

    return isinstance(item, Tensor) and item.ndim == 0 and item.dtype.is_integer


def _expand(key: Any, ndim: int) -> list[Any]:
    items = list(key) if isinstance(key, tuple) else [key]
    consumed = 0
    for item in items:
        if item is None or item is Ellipsis:
            continue
        mask = _as_mask(item)
        consumed += mask.ndim if mask is not None else 1
    if sum(item is Ellipsis for item in items) > 1:
        raise ShapeError("index: at most one Ellipsis")
    if consumed > ndim:
        raise ShapeError(f"index: too many indices ({consumed}) for a tensor of rank {ndim}")
    fill = [slice(None)] * (ndim - consumed)
    if any(item is Ellipsis for item in items):
        at = next(i for i, item in enumerate(items) if item is Ellipsis)
        return items[:at] + fill + items[at + 1 :]
    return items + fill


def _as_mask(item: Any) -> np.ndarray[Any, Any] | None:
    """The boolean mask `item` stands for (realizing a mask tensor), or None."""
    from .tensor import Tensor

    if isinstance(item, Tensor) and item.dtype.is_bool:
        if tracing.get() is not None:
            raise TraceError(
                "index: a boolean mask gives a data-dependent shape, which omnitensor.compile "
                "cannot trace; use omnitensor.where(mask, x, 0) instead"
            )
        return item.numpy()
    if isinstance(item, (list, np.ndarray)) and np.asarray(item).dtype == np.bool_:
        return np.asarray(item)
    return None


def _plan(x: Tensor, key: Any) -> _Plan:
    from .tensor import Tensor

    plan = _Plan()
    dim = 0
    for item in _expand(key, x.ndim):
        if item is None:
            plan.layout.append(("new",))
            continue
        mask = _as_mask(item)
        if mask is not None or isinstance(item, (list, np.ndarray)) or (
            isinstance(item, Tensor) and item.ndim > 0
        ):
            if plan.advanced is not None:
                raise UnsupportedError(
                    "index: only one integer-array or mask index per subscript is supported; "
                    "index in two steps"
                )
            span = mask.ndim if mask is not None else 1
            sizes = x.shape[dim : dim + span]
            if mask is not None:
                if mask.shape != sizes:
                    raise ShapeError(f"index: mask of shape {mask.shape} does not match {sizes}")
                index: Any = np.ravel_multi_index(np.nonzero(mask), sizes).astype(np.int32)
            else:
                index = item
            for d in range(dim, dim + span):
                plan.start.append(0)
                plan.limit.append(x.shape[d])
                plan.stride.append(1)
            plan.advanced = (index, span)
            plan.layout.append(("adv", dim, span))
            dim += span
            continue
        size = x.shape[dim]
        if isinstance(item, slice):
            start, stop, step = item.indices(size)
            count = len(range(start, stop, step))
            if step < 0:
                plan.reverse.append(dim)
                start, step = size - 1 - start, -step
            plan.start.append(start)
            plan.limit.append(start + (count - 1) * step + 1 if count else start)
            plan.stride.append(step)
            plan.layout.append(("dim", dim))
        elif _is_int_tensor0(item):
            plan.int_dims.append(dim)
            plan.dynamic[dim] = item
            plan.start.append(0)
            plan.limit.append(1)
            plan.stride.append(1)
        elif isinstance(item, (int, np.integer)):
            index = int(item)
            if not -size <= index < size:
                raise ShapeError(f"index: {index} is out of range for axis {dim} of size {size}")
            index %= size
            plan.int_dims.append(dim)
            plan.start.append(index)
            plan.limit.append(index + 1)
            plan.stride.append(1)
        else:
            raise ShapeError(f"index: unsupported index {item!r} (expected int, slice, None, "
                             "Ellipsis, an integer array or a boolean mask)")
        dim += 1
    return plan


def _basic(x: Tensor, plan: _Plan) -> Tensor:
    from .tensor import Tensor

    out = x
    if plan.reverse:
        out = out.flip(plan.reverse)
    if plan.dynamic:
        starts = [
            plan.dynamic[d].astype(dt.int32) if d in plan.dynamic
            else _const_index(plan.start[d]) for d in range(x.ndim)
        ]
        sizes = tuple(1 if d in plan.dynamic else x.shape[d] for d in range(x.ndim))
        out = Tensor._apply("dynamic_slice", out, *starts, sizes=sizes)
    if (plan.start, plan.limit, plan.stride) != ([0] * x.ndim, list(out.shape), [1] * x.ndim):
        out = out._view_or_apply("slice", start=tuple(plan.start), limit=tuple(plan.limit),
                                 stride=tuple(plan.stride))
    return out


def _const_index(value: int) -> Tensor:
    from .tensor import Tensor

    return Tensor._apply("constant", value=np.asarray(value, dtype=np.int32))


def _gather(x: Tensor, position: int, index: Any, span: int) -> Tensor:
    from .tensor import Tensor, as_tensor

    if span > 1:  # a mask over several axes: merge them and index the merged axis
        x = x.reshape(x.shape[:position] + (-1,) + x.shape[position + span :])
    n = x.shape[position]
    idx = as_tensor(index)
    if not idx.dtype.is_integer:
        raise ShapeError(f"index: index arrays must be integers (got {idx.dtype})")
    if isinstance(index, np.ndarray | list):
        array = np.asarray(index)
        if array.size and (array.min() < -n or array.max() >= n):
            raise ShapeError(f"index: indices out of range for axis of size {n}")
    idx = idx.astype(dt.int32)
    from .math import where

    idx = where(idx < 0, idx + n, idx)  # NOTE: gather clamps; negative indices wrap like numpy
    return Tensor._apply("gather", x, idx, axis=position, batch_dims=0)


class TensorIndexing:
    """`__getitem__` / `__setitem__` of `Tensor` (mixed into it)."""

    __slots__ = ()

    def __getitem__(self, key: Any) -> Tensor:
        me: Tensor = self  # type: ignore[assignment]
        plan = _plan(me, key)
        out = _basic(me, plan)
        shape: list[int] = []
        position = -1
        for entry in plan.layout:
            if entry[0] == "dim":
                shape.append(out.shape[entry[1]])
            elif entry[0] == "new":
                shape.append(1)
            else:
                position = len(shape)
                shape.extend(out.shape[entry[1] : entry[1] + entry[2]])
        out = out.reshape(tuple(shape))
        if plan.advanced is None:
            return out
        index, span = plan.advanced
        gathered = _gather(out, position, index, span)
        adv_dim = next(e[1] for e in plan.layout if e[0] == "adv")
        advanced_dims = sorted(plan.int_dims + list(range(adv_dim, adv_dim + span)))
        if advanced_dims != list(range(advanced_dims[0], advanced_dims[-1] + 1)):
            # NumPy: advanced indices (ints count as such) split by a slice put the indexed
            # dimensions first.
            count = gathered.ndim - out.ndim + 1
            order = list(range(position, position + count)) + [
                d for d in range(gathered.ndim) if not position <= d < position + count]
            gathered = gathered.permute(*order)
        return gathered

    def __setitem__(self, key: Any, value: Any) -> None:
        from .creation import full
        from .math import broadcast_to, where
        from .tensor import Tensor, as_tensor

        me: Tensor = self  # type: ignore[assignment]
        if isinstance(key, Tensor) and key.dtype.is_bool and key.shape == me.shape:
            result = where(key, value, me).astype(me.dtype)
            me._node, me._index = result._node, result._index
            me._grad_fn = result._grad_fn  # the rebound value's gradient history
            return
        items = _expand(key, me.ndim)
        simple = all(
            (isinstance(i, slice) and i.step in (None, 1)) or isinstance(i, (int, np.integer))
            or _is_int_tensor0(i) for i in items
        )
        update = as_tensor(value) if not isinstance(value, (bool, int, float)) else full(
            (), value, me.dtype)
        update = update.astype(me.dtype)
        if simple:
            plan = _plan(me, tuple(items))
            sizes = tuple(lim - st for st, lim in zip(plan.start, plan.limit, strict=True))
            region = tuple(s for d, s in enumerate(sizes)
                           if isinstance(items[d], slice))
            update = broadcast_to(update, region).reshape(sizes)
            starts = [plan.dynamic[d].astype(dt.int32) if d in plan.dynamic
                      else _const_index(plan.start[d]) for d in range(me.ndim)]
            result = Tensor._apply("dynamic_update_slice", me, update, *starts)
        else:
            positions = np.arange(me.size, dtype=np.int32).reshape(me.shape)[
                _static_key(items)]
            update = broadcast_to(update, positions.shape).reshape(-1)
            flat_pos = positions.reshape(-1)
            # numpy semantics: with repeated positions the last write wins
            _, last = np.unique(flat_pos[::-1], return_index=True)
            keep = np.sort(flat_pos.size - 1 - last).astype(np.int32)
            chosen = update[keep] if keep.size != flat_pos.size else update
            idx = as_tensor(flat_pos[keep])
            zeros = full((me.size,), 0, me.dtype)
            scattered = Tensor._apply("scatter_add", zeros, idx, chosen, axis=0, batch_dims=0)
            mask = np.zeros(me.size, dtype=np.bool_)
            mask[flat_pos] = True
            result = where(as_tensor(mask), scattered, me.reshape(-1)).reshape(me.shape)
        me._node, me._index = result._node, result._index
        me._grad_fn = result._grad_fn  # the rebound value's gradient history


def _static_key(items: list[Any]) -> tuple[Any, ...]:
    from .tensor import Tensor

    out: list[Any] = []
    for item in items:
        if isinstance(item, Tensor):
            out.append(item.numpy())
        else:
            out.append(item)
    return tuple(out)
