"""Gradient rules of the indexing ops: gathers scatter back, slices write back, sorts permute."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import vjp
from ._util import op, zeros

if TYPE_CHECKING:
    from ...tensor.tensor import Tensor


@vjp("gather")
def _gather(g: Tensor, out: Tensor, operand: Tensor, indices: Tensor, *, axis: int,
            batch_dims: int) -> tuple[Tensor, None]:
    return op("scatter_add", zeros(operand.shape, g), indices, g, axis=axis,
              batch_dims=batch_dims), None


@vjp("scatter_add")
def _scatter_add(g: Tensor, out: Tensor, operand: Tensor, indices: Tensor, updates: Tensor, *,
                 axis: int, batch_dims: int) -> tuple[Tensor, None, Tensor]:
    return g, None, op("gather", g, indices, axis=axis, batch_dims=batch_dims)


@vjp("dynamic_slice")
def _dynamic_slice(g: Tensor, out: Tensor, operand: Tensor, *starts: Tensor,
                   sizes: tuple[int, ...]) -> tuple[Tensor | None, ...]:
    # Both ops clamp the starts the same way, so the block goes back where it was read.
    back = op("dynamic_update_slice", zeros(operand.shape, g), g, *starts)
    return (back,) + (None,) * len(starts)


@vjp("dynamic_update_slice")
def _dynamic_update_slice(g: Tensor, out: Tensor, operand: Tensor, update: Tensor,
                          *starts: Tensor) -> tuple[Tensor | None, ...]:
    g_operand = op("dynamic_update_slice", g, zeros(update.shape, g), *starts)
    g_update = op("dynamic_slice", g, *starts, sizes=update.shape)
    return (g_operand, g_update) + (None,) * len(starts)


def _scatter_last(g: Tensor, indices: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Add `g` into zeros of `shape` at `indices` along the last axis (rows independent)."""
    last = len(shape) - 1
    return op("scatter_add", zeros(shape, g), indices, g, axis=last, batch_dims=last)


@vjp("sort")
def _sort(g: tuple[Tensor | None, ...], out: tuple[Tensor, ...], x: Tensor, *, axis: int,
          descending: bool) -> Tensor | None:
    g_values, indices = g[0], out[1]
    if g_values is None:
        return None
    axis = axis % x.ndim
    last = x.ndim - 1
    if axis == last:
        return _scatter_last(g_values, indices, x.shape)
    perm = tuple(d for d in range(x.ndim) if d != axis) + (axis,)
    inverse = tuple(perm.index(d) for d in range(x.ndim))
    moved = _scatter_last(op("transpose", g_values, perm=perm),
                          op("transpose", indices, perm=perm),
                          tuple(x.shape[d] for d in perm))
    return op("transpose", moved, perm=inverse)


@vjp("top_k")
def _top_k(g: tuple[Tensor | None, ...], out: tuple[Tensor, ...], x: Tensor, *, k: int
           ) -> Tensor | None:
    if g[0] is None:
        return None
    return _scatter_last(g[0], out[1], x.shape)
