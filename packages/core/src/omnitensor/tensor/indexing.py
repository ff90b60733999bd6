"""NumPy-style indexing for tensors: `getitem` and `setitem` (which rebinds the handle).

Basic indices (ints, slices with any step, None, Ellipsis) become views or slice/reverse/reshape
ops; integer-array indices in any number of dimensions become one `gather` over the merged
indexed axes; a boolean mask realizes first (its result size depends on data), except
``x[mask] = v`` with a full-shape mask, which is a `select`. A 0-d integer tensor index is
dynamic (`dynamic_slice` / `dynamic_update_slice`), so decode loops can index by a position
without recompiling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import dtypes as dt
from ..errors import IndexOutOfRangeError, TraceError, UnsupportedError
from .graph import rebind
from .math import broadcast_shapes
from .realize import tracing

if TYPE_CHECKING:
    from .tensor import Tensor

__all__ = ["getitem", "setitem"]


@dataclass
class _Plan:
    """A key split into per-dimension basic steps and the advanced (integer-array) indices."""

    start: list[int] = field(default_factory=list)
    limit: list[int] = field(default_factory=list)
    stride: list[int] = field(default_factory=list)
    reverse: list[int] = field(default_factory=list)
    # the result's axes before any gather: ("dim", d) keeps sliced axis d, ("new",) is a None,
    # ("adv", d, k) keeps axis d for the k-th advanced index; int-indexed axes are absent
    layout: list[tuple[Any, ...]] = field(default_factory=list)
    dynamic: dict[int, Any] = field(default_factory=dict)  # dim -> 0-d tensor start
    advanced: list[Any] = field(default_factory=list)  # integer index arrays/tensors, in order
    # positions in the expanded key of advanced items (arrays and, with them, integers)
    key_positions: list[int] = field(default_factory=list)


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
        raise IndexOutOfRangeError("index: at most one Ellipsis")
    if consumed > ndim:
        raise IndexOutOfRangeError(
            f"index: too many indices ({consumed}) for a tensor of rank {ndim}")
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
    if isinstance(item, (bool, np.bool_)):
        return np.asarray(item)
    if isinstance(item, (list, tuple, np.ndarray)) and np.asarray(item).dtype == np.bool_:
        return np.asarray(item)
    return None


def _is_array_index(item: Any) -> bool:
    from .tensor import Tensor

    return isinstance(item, (list, np.ndarray)) or (isinstance(item, Tensor) and item.ndim > 0)


def _plan(x: Tensor, key: Any) -> _Plan:
    from .tensor import Tensor

    plan = _Plan()
    items = _expand(key, x.ndim)
    has_array = any(_as_mask(i) is not None or _is_array_index(i) for i in items)
    dim = 0
    for position, item in enumerate(items):
        if item is None:
            plan.layout.append(("new",))
            continue
        mask = _as_mask(item)
        if mask is not None and mask.ndim == 0:  # NumPy: a new axis of length 1 or 0
            if sum(_as_mask(i) is not None or _is_array_index(i) for i in items) > 1:
                raise UnsupportedError("index: a scalar boolean index together with other "
                                       "array indices is not supported; index in two steps")
            plan.layout.append(("new", bool(mask)))
            continue
        if mask is not None or _is_array_index(item):
            sizes = x.shape[dim : dim + (mask.ndim if mask is not None else 1)]
            if mask is not None:
                if mask.shape != sizes:
                    raise IndexOutOfRangeError(
                        f"index: boolean mask of shape {mask.shape} does not match the "
                        f"indexed dimensions {sizes}")
                arrays: list[Any] = [a.astype(np.int32) for a in np.nonzero(mask)]
            else:
                arrays = [item]
            for k, array in enumerate(arrays):
                plan.start.append(0)
                plan.limit.append(x.shape[dim + k])
                plan.stride.append(1)
                plan.layout.append(("adv", dim + k, len(plan.advanced)))
                plan.advanced.append(array)
                plan.key_positions.append(position)
            dim += len(arrays)
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
            if has_array:
                plan.layout.append(("adv", dim, len(plan.advanced)))
                plan.advanced.append(item)
                plan.key_positions.append(position)
                plan.start.append(0)
                plan.limit.append(size)
            else:
                plan.dynamic[dim] = item
                plan.start.append(0)
                plan.limit.append(1)
            plan.stride.append(1)
        elif isinstance(item, (int, np.integer)) and not isinstance(item, bool):
            index = int(item)
            if not -size <= index < size:
                raise IndexOutOfRangeError(
                    f"index: {index} is out of range for axis {dim} of size {size}", op="index")
            index %= size
            if has_array:
                plan.key_positions.append(position)
            plan.start.append(index)
            plan.limit.append(index + 1)
            plan.stride.append(1)
        elif isinstance(item, Tensor):
            raise IndexOutOfRangeError(
                f"index: a {item.dtype} tensor index of shape {item.shape} is not an index "
                "(expected integers or a boolean mask)")
        else:
            raise IndexOutOfRangeError(
                f"index: unsupported index {item!r} (expected int, slice, None, Ellipsis, an "
                "integer array or a boolean mask)")
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


def _index_array(item: Any, n: int) -> Any:
    """An integer index along an axis of size `n`, negatives wrapped (numpy array or tensor).

    Host arrays are range-checked now (IndexError); a tensor index is clamped by `gather`.
    """
    from .tensor import Tensor

    if isinstance(item, Tensor):
        if not item.dtype.is_integer:
            raise IndexOutOfRangeError(
                f"index: index tensors must be integers or bools (got {item.dtype})")
        idx = item.astype(dt.int32)
        from .math import where

        return where(idx < 0, idx + n, idx)
    array = np.asarray(item)
    if array.size == 0:
        array = array.astype(np.int64)
    if array.dtype.kind not in "iu":
        raise IndexOutOfRangeError(
            f"index: index arrays must be integers or bools (got {array.dtype})")
    if array.size and (array.min() < -n or array.max() >= n):
        bad = array[(array < -n) | (array >= n)].flat[0]
        raise IndexOutOfRangeError(
            f"index: {bad} is out of range for an axis of size {n}", op="index")
    return np.where(array < 0, array + n, array).astype(np.int64)


def _flat_index(indices: list[Any], sizes: list[int]) -> Any:
    """One index into the merged advanced axes (row-major), broadcasting the indices."""
    from .math import broadcast_to
    from .tensor import Tensor, as_tensor

    shape = broadcast_shapes("index", *(tuple(np.shape(i)) if not isinstance(i, Tensor)
                                         else i.shape for i in indices))
    strides = [math.prod(sizes[k + 1 :]) for k in range(len(sizes))]
    if not any(isinstance(i, Tensor) for i in indices):
        flat = sum((np.broadcast_to(i, shape) * s for i, s in zip(indices, strides, strict=True)),
                   np.zeros(shape, dtype=np.int64))
        return as_tensor(np.asarray(flat, dtype=np.int32))
    total: Tensor | None = None
    for i, s in zip(indices, strides, strict=True):
        term = broadcast_to(as_tensor(i).astype(dt.int32), shape) * s
        total = term if total is None else total + term
    assert total is not None
    return total


def getitem(x: Tensor, key: Any) -> Tensor:
    """``x[key]`` with NumPy's basic and advanced indexing rules.

    Integer arrays (lists, numpy arrays, integer tensors) in several dimensions broadcast
    together; when they (and any integers among them) are adjacent the indexed dimensions take
    their place, otherwise they come first. Out-of-range integers raise `IndexError`
    (`IndexOutOfRangeError`), which also ends iteration over a tensor.
    """
    from .tensor import Tensor

    plan = _plan(x, key)
    out = _basic(x, plan)
    shape: list[int] = []
    adv_axes: list[int] = []
    for entry in plan.layout:
        if entry[0] == "new":
            shape.append(1)
            continue
        if entry[0] == "adv":
            adv_axes.append(len(shape))
        shape.append(out.shape[entry[1]])
    out = out.reshape(tuple(shape))
    if not plan.advanced:
        empty = [i for i, e in enumerate(plan.layout) if e[0] == "new" and e[1:] == (False,)]
        for axis in empty:  # x[False]: the new axis has length 0
            out = out.narrow(axis, 0, 0)
        return out
    sizes = [out.shape[a] for a in adv_axes]
    indices = [_index_array(item, n) for item, n in zip(plan.advanced, sizes, strict=True)]
    flat = _flat_index(indices, sizes)
    rest = [a for a in range(out.ndim) if a not in adv_axes]
    moved = out.permute_dims(adv_axes + rest).reshape(
        (math.prod(sizes),) + tuple(out.shape[a] for a in rest))  # (merged, *rest)
    gathered = Tensor._apply("gather", moved, flat, axis=0, batch_dims=0)  # (*B, *rest)
    positions = sorted(set(plan.key_positions))
    if positions != list(range(positions[0], positions[-1] + 1)):
        return gathered  # NumPy: advanced indices split by a slice or None go first
    # adjacent advanced indices replace their dimensions where they stood
    before = next(i for i, e in enumerate(plan.layout) if e[0] == "adv")
    before = sum(1 for e in plan.layout[:before] if e[0] != "adv")
    nb = flat.ndim
    order = list(range(nb, nb + before)) + list(range(nb)) + list(
        range(nb + before, gathered.ndim))
    return gathered.permute_dims(order)


def setitem(x: Tensor, key: Any, value: Any) -> None:
    """``x[key] = value``: rebinds the handle `x` to the updated value (NumPy's rules).

    With repeated positions the last write wins, as in NumPy.
    """
    from .creation import full
    from .math import broadcast_to, where
    from .tensor import Tensor, as_tensor

    if isinstance(key, Tensor) and key.dtype.is_bool and key.shape == x.shape:
        result = where(key, value, x).astype(x.dtype)
        rebind(x, result._node, result._index)
        x._grad_fn = result._grad_fn  # the rebound value's gradient history
        return
    items = _expand(key, x.ndim)
    simple = all(
        (isinstance(i, slice) and i.step in (None, 1))
        or (isinstance(i, (int, np.integer)) and not isinstance(i, bool))
        or _is_int_tensor0(i) for i in items
    )
    update = as_tensor(value, fn="setitem", arg="value") if not isinstance(
        value, (bool, int, float)) else full((), value, x.dtype)
    update = update.astype(x.dtype)
    if simple:
        plan = _plan(x, tuple(items))
        sizes = tuple(lim - st for st, lim in zip(plan.start, plan.limit, strict=True))
        region = tuple(s for d, s in enumerate(sizes) if isinstance(items[d], slice))
        update = broadcast_to(update, region).reshape(sizes)
        starts = [plan.dynamic[d].astype(dt.int32) if d in plan.dynamic
                  else _const_index(plan.start[d]) for d in range(x.ndim)]
        result = Tensor._apply("dynamic_update_slice", x, update, *starts)
    else:
        _plan(x, tuple(items))  # range and type checks with getitem's errors
        positions = np.arange(x.size, dtype=np.int32).reshape(x.shape)[_static_key(items)]
        update = broadcast_to(update, positions.shape).reshape(-1)
        flat_pos = positions.reshape(-1)
        # numpy semantics: with repeated positions the last write wins
        _, last = np.unique(flat_pos[::-1], return_index=True)
        keep = np.sort(flat_pos.size - 1 - last).astype(np.int32)
        chosen = update[keep] if keep.size != flat_pos.size else update
        idx = as_tensor(flat_pos[keep])
        # (scatter_add adds numbers: bool values go through uint8, exact with unique positions)
        work = dt.uint8 if x.dtype == dt.bool_ else x.dtype
        zeros = full((x.size,), 0, work)
        scattered = Tensor._apply("scatter_add", zeros, idx, chosen.astype(work), axis=0,
                                  batch_dims=0).astype(x.dtype)
        mask = np.zeros(x.size, dtype=np.bool_)
        mask[flat_pos] = True
        result = where(as_tensor(mask), scattered, x.reshape(-1)).reshape(x.shape)
    rebind(x, result._node, result._index)
    x._grad_fn = result._grad_fn  # the rebound value's gradient history


def _static_key(items: list[Any]) -> tuple[Any, ...]:
    from .tensor import Tensor

    out: list[Any] = []
    for item in items:
        if isinstance(item, Tensor):
            out.append(item.numpy())
        else:
            out.append(item)
    return tuple(out)
