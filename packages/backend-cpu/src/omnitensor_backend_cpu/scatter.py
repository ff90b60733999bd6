"""``scatter_add`` (the transpose of ``gather``: an embedding's gradient) as one compiled pass.

The reference kernel sums duplicate indices by sorting them (0.29 ms for a character model's
576 x 128 embedding gradient into 14 rows, in a 13 ms training step); here each update row is
added into its destination row in index order, one pass over the updates. Layout as in the
reference: operand ``(B, P, N, Q)`` around the indexed axis N, indices ``(B, I)``, updates
``(B, P, I, Q)``; out-of-range indices are clamped, as ``gather`` clamps.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._compat import jit

__all__ = ["scatter_add"]

Array = np.ndarray[Any, Any]


@jit(fastmath=False)
def _scatter_add(out: Any, idx: Any, upd: Any) -> None:
    n = out.shape[2]
    for b in range(out.shape[0]):
        for i in range(idx.shape[1]):
            row = min(max(idx[b, i], 0), n - 1)
            for p in range(out.shape[1]):
                for q in range(out.shape[3]):
                    out[b, p, row, q] += upd[b, p, i, q]


def scatter_add(operand: Array, indices: Array, updates: Array, out: Array, axis: int,
                batch_dims: int) -> None:
    """``out = operand`` with `updates` added at the rows `indices` pick along `axis`.

    `out` is C-contiguous with `operand`'s shape and dtype (float32 or float64, as `updates`).
    """
    shape = operand.shape
    axis %= len(shape)
    b = math.prod(shape[:batch_dims])
    p = math.prod(shape[batch_dims:axis])
    q = math.prod(shape[axis + 1:])
    np.copyto(out, operand)
    idx = np.ascontiguousarray(indices, dtype=np.int64).reshape(b, -1)
    upd = np.ascontiguousarray(updates).reshape(b, p, idx.shape[1], q)
    _scatter_add(out.reshape(b, p, shape[axis], q), idx, upd)
