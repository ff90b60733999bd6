"""Gradient rules of the movement ops: each is the op's transpose (a linear map)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import vjp
from ._util import op, unbroadcast, zeros

if TYPE_CHECKING:
    from ...tensor.tensor import Tensor


@vjp("reshape")
def _reshape(g: Tensor, out: Tensor, x: Tensor, *, shape: tuple[int, ...]) -> Tensor:
    return op("reshape", g, shape=x.shape)


@vjp("broadcast_in_dim")
def _broadcast_in_dim(g: Tensor, out: Tensor, x: Tensor, *, shape: tuple[int, ...],
                      dims: tuple[int, ...]) -> Tensor:
    return unbroadcast(g, x.shape, dims)


@vjp("transpose")
def _transpose(g: Tensor, out: Tensor, x: Tensor, *, perm: tuple[int, ...]) -> Tensor:
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return op("transpose", g, perm=tuple(inverse))


@vjp("slice")
def _slice(g: Tensor, out: Tensor, x: Tensor, *, start: tuple[int, ...], limit: tuple[int, ...],
           stride: tuple[int, ...]) -> Tensor:
    # Scatter the slice back with a pad: `start` zeros before, `stride - 1` between elements,
    # and whatever is left of the operand after the last taken element.
    high = tuple(
        n - (s + (o - 1) * st + 1) if o > 0 else n - s
        for n, s, st, o in zip(x.shape, start, stride, g.shape, strict=True)
    )
    low = tuple(start)
    if any(o == 0 for o in g.shape):
        return zeros(x.shape, g)
    return op("pad", g, zeros((), g), low=low, high=high,
              interior=tuple(st - 1 for st in stride))


@vjp("concatenate")
def _concatenate(g: Tensor, out: Tensor, *xs: Tensor, axis: int) -> tuple[Tensor, ...]:
    axis = axis % g.ndim
    grads = []
    offset = 0
    for x in xs:
        begin = [0] * g.ndim
        end = list(g.shape)
        begin[axis], end[axis] = offset, offset + x.shape[axis]
        offset += x.shape[axis]
        grads.append(op("slice", g, start=tuple(begin), limit=tuple(end), stride=(1,) * g.ndim))
    return tuple(grads)


@vjp("pad")
def _pad(g: Tensor, out: Tensor, x: Tensor, padding_value: Tensor, *, low: tuple[int, ...],
         high: tuple[int, ...], interior: tuple[int, ...]) -> tuple[Tensor, Tensor]:
    # Undo the edges with the opposite pad (negative pads crop, positive ones restore cropped
    # elements as zeros), then take every (interior + 1)-th element.
    spread = op("pad", g, zeros((), g), low=tuple(-v for v in low),
                high=tuple(-v for v in high), interior=(0,) * g.ndim)
    gx = op("slice", spread, start=(0,) * g.ndim, limit=spread.shape,
            stride=tuple(i + 1 for i in interior))
    all_axes = tuple(range(g.ndim))
    g_value = op("reduce_sum", g, axes=all_axes) - op("reduce_sum", gx, axes=all_axes)
    return gx, g_value


@vjp("reverse")
def _reverse(g: Tensor, out: Tensor, x: Tensor, *, axes: tuple[int, ...]) -> Tensor:
    return op("reverse", g, axes=axes)
