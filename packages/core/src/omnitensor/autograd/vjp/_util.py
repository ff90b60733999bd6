"""Small helpers shared by the gradient rules."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ...tensor.tensor import Tensor


def op(op_name: str, *inputs: Tensor, **attrs: Any) -> Tensor:
    """Record one PTIR op (the same path every Tensor method takes)."""
    from ...tensor.tensor import Tensor

    return Tensor._apply(op_name, *inputs, **attrs)


def zeros(shape: Sequence[int], like: Tensor) -> Tensor:
    """Zeros of `shape` with `like`'s dtype."""
    from ...tensor.creation import full

    return full(tuple(shape), 0, like.dtype)


def scalar(value: float, like: Tensor) -> Tensor:
    """A 0-d constant with `like`'s dtype, broadcast to `like`'s shape."""
    from ...tensor.creation import full

    return full(like.shape, value, like.dtype)


def mask(cond: Tensor, like: Tensor) -> Tensor:
    """A bool `cond` as 0/1 in `like`'s dtype."""
    return cond.astype(like.dtype)


def unbroadcast(g: Tensor, shape: tuple[int, ...], dims: tuple[int, ...]) -> Tensor:
    """The transpose of ``broadcast_in_dim(x, shape=g.shape, dims=dims)`` for x of `shape`."""
    keep = set()
    for i, d in enumerate(dims):
        if shape[i] == g.shape[d]:
            keep.add(d)
    summed = tuple(d for d in range(g.ndim) if d not in keep)
    out = op("reduce_sum", g, axes=summed) if summed else g
    # The kept dims appear in increasing result order; reorder them into operand order.
    kept = sorted(keep)
    operand_order = [dims[i] for i in range(len(shape)) if dims[i] in keep]
    if operand_order != kept:
        out = op("transpose", out, perm=tuple(kept.index(d) for d in operand_order))
    return op("reshape", out, shape=shape) if out.shape != shape else out
