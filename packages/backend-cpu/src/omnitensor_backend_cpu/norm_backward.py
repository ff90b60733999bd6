"""The backward of layer and RMS norm (the ``*_norm_backward`` composites): one pass per row.

Each row is read twice (its statistics, then dx) while it stays in cache; the parameters'
cotangents are sums over rows, kept per part of the split in float64 and added up at the end.
Rows compute in their own dtype, in the decomposition's order (float32 loops vectorize twice
as wide, and an overflowing sum gives the reference's inf and NaN).
Sizes and flags are arguments: one compiled kernel per dtype serves every shape and norm.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final

import numpy as np

from . import pool
from ._compat import jit
from .prepared import nothing
from .rowops import rows_of, vector_of

__all__ = ["prepare_norm_backward"]

Array = np.ndarray[Any, Any]

#: Elements per unit of `pool.MIN_SPLIT` work: as the forward's (`rowops`), about twice the
#: passes; a training step's (576, 128) stays on one thread (a hand-off costs ~100 us).
_ELEMENTS_PER_UNIT: Final = 3


@jit()
def _norm_backward(x: Any, g: Any, w: Any, dx: Any, sums: Any, centre: bool, weighted: bool,
                   count: Any, eps: Any) -> None:
    # Arithmetic in x's dtype (`count` and `eps` are scalars of it), in the decomposition's
    # order, so overflow and NaN land where the reference's do; sums[0] += grad * x-hat
    # (dweight) and sums[1] += grad (dbias) over these rows, in float64.
    cols = x.shape[1]
    zero = count - count
    box = np.empty(1, x.dtype)
    for r in range(x.shape[0]):
        row, grad, dst = x[r], g[r], dx[r]
        mean = zero
        if centre:
            total = zero
            for j in range(cols):
                total += row[j]
            mean = total / count
        squares = zero
        for j in range(cols):
            c = row[j] - mean
            squares += c * c
        # NOTE: 1 / sqrt in float64, rounded through `box` (x's dtype): in float32, fastmath's
        # reciprocal became an estimate whose Newton step turns rsqrt(inf) = 0 into NaN
        box[0] = 1.0 / math.sqrt(np.float64(squares / count + eps))
        rs = box[0]
        # (each sum a loop of its own: a loop with one accumulator is what LLVM vectorizes)
        along = zero  # layer norm: sum(gy x-hat); RMS norm: sum(gy x)
        level = zero  # sum(gy)
        if weighted:
            for j in range(cols):
                along += grad[j] * w[j] * (row[j] - mean) * rs if centre else \
                    grad[j] * w[j] * row[j]
            for j in range(cols):
                level += grad[j] * w[j]
        else:
            for j in range(cols):
                along += grad[j] * ((row[j] - mean) * rs) if centre else grad[j] * row[j]
            for j in range(cols):
                level += grad[j]
        weights, biases = sums[0], sums[1]
        for j in range(cols):
            weights[j] += grad[j] * ((row[j] - mean) * rs)
            biases[j] += grad[j]
        along = along / count
        if centre:
            level = level / count
            for j in range(cols):
                gy = grad[j] * w[j] if weighted else grad[j]
                dst[j] = (gy - (level + (row[j] - mean) * rs * along)) * rs
        else:
            cubed = rs * rs * rs * along
            for j in range(cols):
                gy = grad[j] * w[j] if weighted else grad[j]
                dst[j] = gy * rs - row[j] * cubed


def prepare_norm_backward(x: Array, g: Array, weight: Array | None, dx: Array,
                          dweight: Array | None, dbias: Array | None, *, eps: float,
                          centre: bool, axes: int) -> Callable[[], None]:
    """The backward's call on these arrays (dx, dweight, dbias C-contiguous, written)."""
    cols = math.prod(x.shape[x.ndim - axes:])
    if cols == 0:
        return nothing
    xs, gs = rows_of(x, cols), rows_of(g, cols)
    dst = dx.reshape(xs.shape)
    weighted = weight is not None
    if weight is not None:
        w = vector_of(weight, x.dtype, cols)
    else:  # (read, never used: read-only as a weight is, for one compiled kernel)
        w = np.zeros(cols, x.dtype)
        w.flags.writeable = False
    rows = xs.shape[0]
    work = xs.size // _ELEMENTS_PER_UNIT
    parts = pool.parts(rows, work)
    step = -(-rows // parts)
    sums = np.zeros((parts, 2, cols), np.float64)
    scalar = x.dtype.type
    count, epsilon = scalar(cols), scalar(eps)
    wanted = [(out.reshape(cols), i) for i, out in enumerate((dweight, dbias)) if out is not None]

    def part(p: int) -> None:
        lo, hi = p * step, min(rows, p * step + step)
        _norm_backward(xs[lo:hi], gs[lo:hi], w, dst[lo:hi], sums[p], centre, weighted,
                       count, epsilon)

    def each(lo: int, hi: int) -> None:
        for p in range(lo, hi):
            part(p)

    def call() -> None:
        sums.fill(0.0)
        if parts == 1:
            part(0)
        else:
            pool.parallel_for(parts, each, work=work)
        for out, i in wanted:
            out[...] = sums[:, i].sum(axis=0) if parts > 1 else sums[0, i]

    return call
