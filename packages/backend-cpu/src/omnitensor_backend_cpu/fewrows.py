"""``x (M, K) @ w (N, K).T`` for 8 to a few dozen rows of x: outer products in registers.

A prompt of a few dozen tokens multiplies each weight by a few activation rows. Written as row
dot products (`quant._f32_rows`: 4 activation rows by 2 weight rows per pass over K), each pass
ends in horizontal sums, the weight streams from memory only in the first pass over a pair,
and six loads feed eight multiply-adds; a 16-token prefill's products ran at 55-80 GFLOP/s.
Here the activations are transposed once per call (``xt`` (K, M) padded to whole vectors), and
the kernel holds a tile of ``out`` in registers, 16 rows by 6 weight rows (or 8 by 12 for at
most 8 rows): for each k, two vectors of xt and six broadcast weights feed twelve
multiply-adds, with no horizontal sums, and each weight is read once. On 2 threads, 16 rows:
4864 x 896 weight 1.36 against 2.10 ms, 896 x 4864 1.21 against 1.72 ms, 896 x 896 0.41
against 0.52 ms; 32 rows 2.0 against 2.7 ms (interleaved, from memory).

What is left of N (under a whole tile) runs as row dot products.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
from llvmlite import ir
from numba import types as _types
from numba.core import cgutils as _cgutils
from numba.extending import intrinsic as _intrinsic

from . import pool
from ._compat import jit, prange
from .irblocks import LANES, VF, fmuladd, load_vector, row_pointer, splat

__all__ = ["MIN_ROWS", "product"]

# NOTE: numba's typing helpers are untyped; used through Any (see `_compat`).
types: Any = _types
cgutils: Any = _cgutils
intrinsic: Any = _intrinsic

#: Fewest rows of x for which the outer-product tiles pay (below, a vector of xt would hold
#: mostly padding; `quant.gemv`'s row dot products run instead).
MIN_ROWS: Final = 8

_I32, _I64 = ir.IntType(32), ir.IntType(64)


def _tile(vectors: int, weights: int) -> Any:
    """An intrinsic ``tile(xt, w, out, m, n)``: ``out[m:m + 8 vectors, n:n + weights]``.

    ``out[m + i, n + r] = sum_k xt[k, m + i] * w[n + r, k]`` for the rows ``m + i`` that `out`
    has (xt's padding columns are computed and dropped). xt and w are float32 and 2-D, their
    elements along the last axis contiguous; xt has at least ``m + 8 vectors`` columns.
    """
    @intrinsic  # type: ignore[untyped-decorator]
    def tile(typingctx: Any, xt: Any, w: Any, out: Any, m: Any, n: Any) -> Any:
        sig = types.void(xt, w, out, m, n)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> None:
            x_arr, w_arr, o_arr = (context.make_array(signature.args[i])(context, builder,
                                                                          args[i])
                                   for i in range(3))
            m0, n0 = (context.cast(builder, args[i], signature.args[i], types.intp)
                      for i in (3, 4))
            rows = [row_pointer(builder, w_arr, builder.add(n0, ir.Constant(_I64, r)))
                    for r in range(weights)]
            accs = [[cgutils.alloca_once_value(builder, ir.Constant(VF, None))
                     for _ in range(weights)] for _ in range(vectors)]
            with cgutils.for_range(builder, builder.extract_value(x_arr.shape, 0)) as loop:
                k = loop.index
                xrow = row_pointer(builder, x_arr, k)
                xs = [load_vector(builder, builder.gep(
                    xrow, [builder.add(m0, ir.Constant(_I64, LANES * v))]))
                    for v in range(vectors)]
                for r, row in enumerate(rows):
                    b = splat(builder, builder.load(builder.gep(row, [k])), LANES)
                    for v in range(vectors):
                        acc = accs[v][r]
                        builder.store(fmuladd(builder, xs[v], b, builder.load(acc)), acc)
            height = builder.extract_value(o_arr.shape, 0)
            for v in range(vectors):
                for lane in range(LANES):
                    i = builder.add(m0, ir.Constant(_I64, LANES * v + lane))
                    with builder.if_then(builder.icmp_signed("<", i, height)):
                        orow = row_pointer(builder, o_arr, i)
                        for r in range(weights):
                            value = builder.extract_element(builder.load(accs[v][r]),
                                                            ir.Constant(_I32, lane))
                            col = builder.add(n0, ir.Constant(_I64, r))
                            builder.store(value, builder.gep(orow, [col]))

        return sig, codegen

    return tile


#: (vectors of xt, weight rows) per tile: 12 accumulators, the 16 AVX2 registers' budget.
_WIDE: Final = (2, 6)
_NARROW: Final = (1, 12)
_tile_wide = _tile(*_WIDE)
_tile_narrow = _tile(*_NARROW)


@jit()
def _transposed(x: Any, span: int) -> Any:
    # xt (K, M rounded up to `span`), padding zeroed; written row by row (contiguous stores).
    m_rows, k = x.shape
    xt = np.zeros((k, -(-m_rows // span) * span), np.float32)
    for j in range(k):
        for i in range(m_rows):
            xt[j, i] = x[i, j]
    return xt


@jit()
def _dots(x: Any, w: Any, out: Any, lo: int, hi: int) -> None:
    m_rows, k = x.shape
    for n in range(lo, hi):
        for r in range(m_rows):
            acc = np.float32(0.0)
            for j in range(k):
                acc += x[r, j] * w[n, j]
            out[r, n] = acc


@jit(parallel=True)
def _product(x: Any, w: Any, out: Any, parts: int) -> None:
    m_rows = x.shape[0]
    n = w.shape[0]
    narrow = m_rows <= 8
    weights = _NARROW[1] if narrow else _WIDE[1]
    span = LANES * (_NARROW[0] if narrow else _WIDE[0])
    xt = _transposed(x, span)
    tiles = n // weights
    step = -(-tiles // parts)
    for t in prange(parts):
        for b in range(t * step, min(tiles, t * step + step)):
            for m in range(0, m_rows, span):
                if narrow:
                    _tile_narrow(xt, w, out, m, b * weights)
                else:
                    _tile_wide(xt, w, out, m, b * weights)
    _dots(x, w, out, tiles * weights, n)


def product(x: Any, w: Any, out: Any) -> None:
    """``out (M, N) = x (M, K) @ w (N, K).T``, float32, all C-contiguous, M >= `MIN_ROWS`."""
    n, k = w.shape
    _product(x, w, out, pool.parts(n, x.shape[0] * n * k, grain=16))
