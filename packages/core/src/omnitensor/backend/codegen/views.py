"""View/stride arithmetic: affine views of numbered buffer slots, and the movement ops as views.

A `View` says where each element of a tensor lives in a flat slot: element (i...) is at
``offset + sum(i * strides)`` (element units, strides may be 0 or negative). transpose,
broadcast_in_dim, slice, reverse and reshapes of dense views are new views of the same slot,
never copies.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from omnitensor.dtypes import DType
from omnitensor.errors import UnsupportedError

__all__ = ["VIEW_OPS", "View", "merge_dims", "reduce_params", "row_major", "view_op", "words"]

#: The movement ops a view expresses (a reshape only of a dense view).
VIEW_OPS: Final = ("transpose", "broadcast_in_dim", "slice", "reverse", "reshape")


def row_major(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major element strides of `shape`."""
    strides, acc = [], 1
    for dim in reversed(shape):
        strides.append(acc)
        acc *= dim
    return tuple(reversed(strides))


def words(values: Sequence[int], size: int = 8) -> list[int]:
    """`values` as ints padded with zeros to `size` parameter words."""
    return [int(v) for v in values] + [0] * (size - len(values))


@dataclass(frozen=True)
class View:
    """An affine view of slot `slot`: element (i...) lives at offset + sum(i * strides)."""

    slot: int
    dtype: DType
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0

    def is_dense(self) -> bool:
        """Row-major without gaps (size-1 dims ignored), starting anywhere."""
        want = row_major(self.shape)
        return all(s == w for s, w, d in zip(self.strides, want, self.shape, strict=True) if d != 1)


def view_op(op: str, x: View, attrs: Mapping[str, Any], shape: tuple[int, ...]) -> View | None:
    """The view `op` makes of `x`, or None when it is not affine (a reshape of a strided view)."""
    if op == "transpose":
        return View(x.slot, x.dtype, shape, tuple(x.strides[p] for p in attrs["perm"]), x.offset)
    if op == "broadcast_in_dim":
        spread = [0] * len(shape)
        for i, d in enumerate(attrs["dims"]):
            spread[d] = x.strides[i] if x.shape[i] == shape[d] else 0
        return View(x.slot, x.dtype, shape, tuple(spread), x.offset)
    if op == "slice":
        offset = x.offset + sum(s * st for s, st in zip(attrs["start"], x.strides, strict=True))
        stepped = tuple(st * k for st, k in zip(x.strides, attrs["stride"], strict=True))
        return View(x.slot, x.dtype, shape, stepped, offset)
    if op == "reverse":
        flipped, offset = list(x.strides), x.offset
        for a in attrs["axes"]:
            a %= len(x.shape)
            if x.shape[a] > 0:
                offset += (x.shape[a] - 1) * flipped[a]
            flipped[a] = -flipped[a]
        return View(x.slot, x.dtype, shape, tuple(flipped), offset)
    if op == "reshape":
        return View(x.slot, x.dtype, shape, row_major(shape), x.offset) if x.is_dense() else None
    raise UnsupportedError(f"{op} is not a view op (expected one of {', '.join(VIEW_OPS)})",
                           op=op)


def merge_dims(view: View, groups: Sequence[Sequence[int]]
               ) -> tuple[list[int], list[int]] | None:
    """(sizes, strides) of `view` with each group of consecutive dims merged, or None."""
    sizes, strides = [], []
    for group in groups:
        dims = [d for d in group if view.shape[d] != 1]
        size = math.prod(view.shape[d] for d in group)
        if not dims:
            sizes.append(size)
            strides.append(0)
            continue
        for a, b in zip(dims, dims[1:], strict=False):
            if view.strides[a] != view.strides[b] * view.shape[b]:
                return None
        sizes.append(size)
        strides.append(view.strides[dims[-1]])
    return sizes, strides


def reduce_params(x: View, axes: Sequence[int], rank_words: int = 8) -> list[int]:
    """Parameters of a reduction of `x` over `axes`, one output per kept element.

    Layout: [outputs, reduced count, kept rank, reduced rank, x offset, kept shape, kept
    strides, reduced shape, reduced strides] (each shape/stride block `rank_words` long).
    """
    rank = len(x.shape)
    red = sorted(a % rank for a in axes) if rank else []
    kept = [d for d in range(rank) if d not in red]
    return [math.prod(x.shape[d] for d in kept), math.prod(x.shape[d] for d in red), len(kept),
            len(red), x.offset, *words([x.shape[d] for d in kept], rank_words),
            *words([x.strides[d] for d in kept], rank_words),
            *words([x.shape[d] for d in red], rank_words),
            *words([x.strides[d] for d in red], rank_words)]
