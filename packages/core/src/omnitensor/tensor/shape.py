"""Shape manipulation: reshape/view, transpose/permute, squeeze, expand, flip, joins and splits.

Views of realized tensors are made by the backend without copying where it can
(`Tensor._view_or_apply`); everything else is a lazy op. NumPy and PyTorch names are both here
(`concat`/`concatenate`/`cat`, `expand_dims`/`unsqueeze`, `permute_dims`/`permute`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import dtypes as dt
from ..errors import ArgumentTypeError, ShapeError
from .math import broadcast_shapes, broadcast_to
from .reduce import normalize_axes, normalize_axis

if TYPE_CHECKING:
    from .tensor import Tensor, TensorLike

__all__ = [
    "broadcast_arrays", "cat", "clone", "concat", "concatenate", "expand", "expand_dims",
    "flatten", "flip", "moveaxis", "narrow", "permute", "permute_dims", "repeat", "reshape",
    "roll", "split", "squeeze", "stack", "swapaxes", "tile", "transpose", "unsqueeze",
    "unstack", "view",
]


def _dims(shape: tuple[Any, ...]) -> tuple[Any, ...]:
    """``f(2, 3)`` and ``f((2, 3))`` alike."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return shape


def _infer_reshape(old: tuple[int, ...], new: tuple[int, ...]) -> tuple[int, ...]:
    size = math.prod(old)
    if new.count(-1) > 1:
        raise ShapeError(f"reshape: only one -1 is allowed (got {new})", op="reshape")
    if -1 in new:
        known = math.prod(d for d in new if d != -1)
        if known == 0 or size % known:
            raise ShapeError(f"reshape: cannot reshape {old} into {new}", op="reshape")
        new = tuple(size // known if d == -1 else d for d in new)
    if math.prod(new) != size or any(d < 0 for d in new):
        raise ShapeError(f"reshape: cannot reshape {old} ({size} elements) into {new}",
                         op="reshape", shapes=[old, new])
    return new


def reshape(x: Tensor, *shape: Any, copy: bool | None = None) -> Tensor:
    """The same elements in row-major order with a new shape (one -1 is inferred).

    Accepts ``reshape(2, 3)`` and ``reshape((2, 3))``; `copy` is the Array API's flag (a lazy
    value never aliases anything the caller could write to, so both values are honoured).
    """
    dims = tuple(int(d) for d in _dims(shape))
    new = _infer_reshape(x.shape, dims)
    if new == x.shape:
        return x
    return x._view_or_apply("reshape", shape=new)


def view(x: Tensor, *shape: Any) -> Tensor:
    """PyTorch's name for `reshape` (values are immutable, so a view and a copy agree)."""
    if len(shape) == 1 and not isinstance(shape[0], (tuple, list, int)):
        raise ArgumentTypeError("view: takes a shape; use astype() to change the dtype",
                                op="view")
    return reshape(x, *shape)


def clone(x: Tensor) -> Tensor:
    """The same value in a new handle (rebinding one never changes the other)."""
    from .tensor import Tensor

    out = Tensor(x._node, x._index)
    out._grad_fn = x._grad_fn
    return out


def transpose(x: Tensor, *axes: Any) -> Tensor:
    """Reverse the axes, permute them (``transpose((1, 0, 2))``), or swap two (``transpose(0, 1)``).

    Two integer arguments are PyTorch's ``transpose(dim0, dim1)`` (a swap); on a 2-D tensor
    NumPy's ``transpose(0, 1)`` would be the identity, which nobody writes on purpose. A full
    permutation as one sequence (or three or more integers) is NumPy's meaning.
    """
    order = _dims(axes)
    if len(axes) == 2 and all(isinstance(a, int) for a in axes):
        return swapaxes(x, axes[0], axes[1])
    if not order:
        order = tuple(reversed(range(x.ndim)))
    return permute_dims(x, order)


def permute_dims(x: Tensor, axes: Sequence[int]) -> Tensor:
    """Permute the axes (`axes` lists every axis once)."""
    order = tuple(normalize_axis("permute_dims", a, x.ndim) for a in axes)
    if sorted(order) != list(range(x.ndim)):
        raise ShapeError(f"permute_dims: {tuple(axes)} is not a permutation of {x.ndim} axes",
                         op="permute_dims")
    if order == tuple(range(x.ndim)):
        return x
    return x._view_or_apply("transpose", perm=order)


def permute(x: Tensor, *dims: Any) -> Tensor:
    """PyTorch's `permute_dims`: ``x.permute(2, 0, 1)`` or ``x.permute((2, 0, 1))``."""
    return permute_dims(x, _dims(dims))


def swapaxes(x: Tensor, axis1: int, axis2: int) -> Tensor:
    """Exchange two axes."""
    a = normalize_axis("swapaxes", axis1, x.ndim)
    b = normalize_axis("swapaxes", axis2, x.ndim)
    order = list(range(x.ndim))
    order[a], order[b] = order[b], order[a]
    return permute_dims(x, order)


def moveaxis(x: Tensor, source: int | Sequence[int], destination: int | Sequence[int]
             ) -> Tensor:
    """Move axes to new positions; the others keep their order."""
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    if len(src) != len(dst):
        raise ShapeError("moveaxis: source and destination need the same length",
                         op="moveaxis")
    src = [normalize_axis("moveaxis", a, x.ndim) for a in src]
    dst = [normalize_axis("moveaxis", a, x.ndim) for a in dst]
    order = [a for a in range(x.ndim) if a not in src]
    for d, s in sorted(zip(dst, src, strict=True)):
        order.insert(d, s)
    return permute_dims(x, order)


def expand(x: Tensor, *shape: Any) -> Tensor:
    """Broadcast to `shape` (-1 keeps a dimension), as a view where possible."""
    dims = _dims(shape)
    offset = len(dims) - x.ndim
    full = tuple(
        x.shape[i - offset] if d == -1 and i >= offset else int(d) for i, d in enumerate(dims)
    )
    return broadcast_to(x, full)


def squeeze(x: Tensor, axis: int | Sequence[int] | None = None, *,
            dim: int | Sequence[int] | None = None) -> Tensor:
    """Drop size-1 axes (all of them, or those in `axis`/`dim`)."""
    if dim is not None:
        axis = dim
    axes = tuple(i for i, d in enumerate(x.shape) if d == 1) if axis is None else (
        normalize_axes("squeeze", axis, x.ndim))
    for a in axes:
        if x.shape[a] != 1:
            raise ShapeError(f"squeeze: axis {a} has size {x.shape[a]} (expected 1)",
                             op="squeeze")
    return reshape(x, tuple(d for i, d in enumerate(x.shape) if i not in axes))


def expand_dims(x: Tensor, axis: int = 0, *, dim: int | None = None) -> Tensor:
    """Insert a size-1 axis at `axis` (`dim`)."""
    if dim is not None:
        axis = dim
    axis = normalize_axis("expand_dims", axis, x.ndim + 1)
    return reshape(x, x.shape[:axis] + (1,) + x.shape[axis:])


def unsqueeze(x: Tensor, dim: int) -> Tensor:
    """PyTorch's `expand_dims`."""
    return expand_dims(x, dim)


def flip(x: Tensor, axis: int | Sequence[int] | None = None, *,
         dims: int | Sequence[int] | None = None) -> Tensor:
    """Reverse the order of elements along `axis` (all axes when None)."""
    if dims is not None:
        axis = dims
    axes = normalize_axes("flip", axis, x.ndim)
    if not axes:
        return x
    return x._view_or_apply("reverse", axes=axes)


def narrow(x: Tensor, dim: int, start: int, length: int) -> Tensor:
    """Elements ``start:start+length`` along `dim`."""
    axis = normalize_axis("narrow", dim, x.ndim)
    if start < 0:
        start += x.shape[axis]
    if not (0 <= start and length >= 0 and start + length <= x.shape[axis]):
        raise ShapeError(
            f"narrow: [{start}, {start + length}) is out of range for axis {axis} of size "
            f"{x.shape[axis]}", op="narrow")
    begin = [0] * x.ndim
    limit = list(x.shape)
    begin[axis], limit[axis] = start, start + length
    return x._view_or_apply("slice", start=tuple(begin), limit=tuple(limit),
                            stride=(1,) * x.ndim)


def flatten(x: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Merge axes `start_dim`..`end_dim` (all of them by default) into one."""
    if x.ndim == 0:
        return reshape(x, (1,))
    a = normalize_axis("flatten", start_dim, x.ndim)
    b = normalize_axis("flatten", end_dim, x.ndim)
    return reshape(x, x.shape[:a] + (-1,) + x.shape[b + 1:])


def _tensors(op: str, tensors: Any) -> list[Tensor]:
    from .tensor import Tensor, as_tensor

    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)):
        raise ArgumentTypeError(f"{op}: takes a list or tuple of tensors (got "
                                f"{type(tensors).__name__})", op=op)
    if not tensors:
        raise ShapeError(f"{op}: needs at least one tensor", op=op)
    return [as_tensor(t, fn=op, arg=f"tensors[{i}]") for i, t in enumerate(tensors)]


def concat(tensors: Sequence[TensorLike], axis: int | None = 0, *,
           dim: int | None = None) -> Tensor:
    """Join tensors along an existing axis (dtypes promoted; ``axis=None`` flattens first)."""
    from .tensor import Tensor

    parts = _tensors("concat", tensors)
    if dim is not None:
        axis = dim
    if axis is None:
        parts, axis = [flatten(t) for t in parts], 0
    target = dt.result_type(*parts)
    ndim = parts[0].ndim
    if ndim == 0:
        raise ShapeError("concat: zero-dimensional tensors cannot be concatenated; use stack",
                         op="concat")
    axis = normalize_axis("concat", axis, ndim)
    for i, t in enumerate(parts):
        if t.ndim != ndim or t.shape[:axis] + t.shape[axis + 1:] != (
                parts[0].shape[:axis] + parts[0].shape[axis + 1:]):
            raise ShapeError(f"concat: tensors[{i}] has shape {t.shape}, which does not match "
                             f"{parts[0].shape} outside axis {axis}", op="concat")
    if len(parts) == 1:
        return parts[0].astype(target)
    return Tensor._apply("concatenate", *(t.astype(target) for t in parts), axis=axis)


concatenate = concat
cat = concat


def stack(tensors: Sequence[TensorLike], axis: int = 0, *, dim: int | None = None) -> Tensor:
    """Join tensors of one shape along a new axis."""
    parts = _tensors("stack", tensors)
    if dim is not None:
        axis = dim
    for i, t in enumerate(parts):
        if t.shape != parts[0].shape:
            raise ShapeError(f"stack: tensors[{i}] has shape {t.shape} (expected "
                             f"{parts[0].shape})", op="stack")
    axis = normalize_axis("stack", axis, parts[0].ndim + 1)
    return concat([expand_dims(t, axis) for t in parts], axis=axis)


def unstack(x: Tensor, axis: int = 0) -> tuple[Tensor, ...]:
    """The slices of `x` along `axis`, each without that axis."""
    axis = normalize_axis("unstack", axis, x.ndim)
    return tuple(squeeze(narrow(x, axis, i, 1), axis) for i in range(x.shape[axis]))


def split(x: Tensor, split_size_or_sections: int | Sequence[int], axis: int = 0, *,
          dim: int | None = None) -> tuple[Tensor, ...]:
    """Pieces of `split_size_or_sections` elements along `axis`, or pieces of the listed sizes.

    The last piece of an even split may be shorter (PyTorch's `split`).
    """
    if dim is not None:
        axis = dim
    axis = normalize_axis("split", axis, x.ndim)
    n = x.shape[axis]
    if isinstance(split_size_or_sections, int):
        step = split_size_or_sections
        if step <= 0:
            raise ShapeError(f"split: size must be positive (got {step})", op="split")
        sizes = [min(step, n - s) for s in range(0, n, step)]
    else:
        sizes = [int(s) for s in split_size_or_sections]
        if sum(sizes) != n:
            raise ShapeError(f"split: sizes {sizes} do not add up to {n}", op="split")
    out, start = [], 0
    for size in sizes:
        out.append(narrow(x, axis, start, size))
        start += size
    return tuple(out)


def broadcast_arrays(*arrays: Tensor) -> list[Tensor]:
    """Every array broadcast to their common shape."""
    shape = broadcast_shapes("broadcast_arrays", *(a.shape for a in arrays))
    return [broadcast_to(a, shape) for a in arrays]


def tile(x: Tensor, repetitions: Sequence[int]) -> Tensor:
    """Repeat the whole tensor `repetitions[i]` times along axis i (NumPy's `tile`)."""
    reps = tuple(int(r) for r in repetitions)
    ndim = max(x.ndim, len(reps))
    reps = (1,) * (ndim - len(reps)) + reps
    base = reshape(x, (1,) * (ndim - x.ndim) + x.shape)
    # (r0, d0, r1, d1, ...) then merge each pair
    inter = tuple(v for r, d in zip(reps, base.shape, strict=True) for v in (1, d))
    target = tuple(v for r, d in zip(reps, base.shape, strict=True) for v in (r, d))
    out = broadcast_to(reshape(base, inter), target)
    return reshape(out, tuple(r * d for r, d in zip(reps, base.shape, strict=True)))


def repeat(x: Tensor, repeats: int, axis: int | None = None) -> Tensor:
    """Repeat each element `repeats` times along `axis` (the flattened tensor when None)."""
    if isinstance(repeats, bool) or not isinstance(repeats, int):
        from ..errors import UnsupportedError

        raise UnsupportedError("repeat: only an integer repeat count is supported (per-element "
                               "counts give a data-dependent shape)", op="repeat")
    if axis is None:
        x, axis = flatten(x), 0
    axis = normalize_axis("repeat", axis, x.ndim)
    inner = expand_dims(x, axis + 1)
    target = inner.shape[:axis + 1] + (repeats,) + inner.shape[axis + 2:]
    out = broadcast_to(inner, target)
    return reshape(out, x.shape[:axis] + (x.shape[axis] * repeats,) + x.shape[axis + 1:])


def roll(x: Tensor, shift: int | Sequence[int], axis: int | Sequence[int] | None = None
         ) -> Tensor:
    """Shift elements along `axis` cyclically (the flattened tensor when None)."""
    if axis is None:
        return reshape(roll(flatten(x), shift, 0), x.shape)
    shifts = [shift] if isinstance(shift, int) else list(shift)
    axes = [axis] if isinstance(axis, int) else list(axis)
    if len(shifts) == 1 and len(axes) > 1:
        shifts = shifts * len(axes)
    if len(shifts) != len(axes):
        raise ShapeError("roll: shift and axis need the same length", op="roll")
    out = x
    for s, a in zip(shifts, axes, strict=True):
        a = normalize_axis("roll", a, x.ndim)
        n = x.shape[a]
        if n == 0:
            continue
        s %= n
        if s:
            out = concat([narrow(out, a, n - s, s), narrow(out, a, 0, n - s)], axis=a)
    return out
