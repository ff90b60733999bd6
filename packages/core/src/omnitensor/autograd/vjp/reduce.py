"""Gradient rules of the reductions and of `cumsum`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import vjp
from ._util import mask, op

if TYPE_CHECKING:
    from ...tensor.tensor import Tensor


def _expand(g: Tensor, shape: tuple[int, ...], axes: tuple[int, ...]) -> Tensor:
    """`g` (reduced over `axes`) broadcast back to the operand's `shape`."""
    reduced = {a % len(shape) for a in axes}
    kept = tuple(d for d in range(len(shape)) if d not in reduced)
    return op("broadcast_in_dim", g, shape=shape, dims=kept)


@vjp("reduce_sum")
def _reduce_sum(g: Tensor, out: Tensor, x: Tensor, *, axes: tuple[int, ...]) -> Tensor:
    return _expand(g, x.shape, axes)


@vjp("reduce_prod")
def _reduce_prod(g: Tensor, out: Tensor, x: Tensor, *, axes: tuple[int, ...]) -> Tensor:
    # d prod / d x_i = prod / x_i; exact away from zeros (a zero operand gives NaN/inf there).
    return _expand(g * out, x.shape, axes) / x


def _extremum(g: Tensor, out: Tensor, x: Tensor, axes: tuple[int, ...]) -> Tensor:
    # Ties share the gradient evenly (PyTorch's amax/amin convention).
    hit = mask(x == _expand(out, x.shape, axes), x)
    count = _expand(op("reduce_sum", hit, axes=axes), x.shape, axes)
    return _expand(g, x.shape, axes) * hit / count


@vjp("reduce_max")
def _reduce_max(g: Tensor, out: Tensor, x: Tensor, *, axes: tuple[int, ...]) -> Tensor:
    return _extremum(g, out, x, axes)


@vjp("reduce_min")
def _reduce_min(g: Tensor, out: Tensor, x: Tensor, *, axes: tuple[int, ...]) -> Tensor:
    return _extremum(g, out, x, axes)


@vjp("cumsum")
def _cumsum(g: Tensor, out: Tensor, x: Tensor, *, axis: int, reverse: bool) -> Tensor:
    return op("cumsum", g, axis=axis, reverse=not reverse)
