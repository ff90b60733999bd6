"""``x (M, K) @ w (N, K).T`` for 8 to a few dozen rows of x: outer products in registers.

A prompt of a few dozen tokens multiplies each weight by a few activation rows. Written as row
dot products (`quant._f32_rows`: 4 activation rows by 2 weight rows per pass over K), each pass
ends in horizontal sums, the weight streams from memory only in the first pass over a pair,
and six loads feed eight multiply-adds; a 16-token prefill's products ran at 55-80 GFLOP/s.
Here the activations are transposed once per call (``xt`` (K, M) padded to whole vectors), and
the kernel holds a tile of ``out`` in registers, 16 rows by 6 weight rows: for each k, two
vectors of xt and six broadcast weights feed twelve multiply-adds, with no horizontal sums,
and each weight is read once. On 2 threads, 16 rows:
4864 x 896 weight 1.36 against 2.10 ms, 896 x 4864 1.21 against 1.72 ms, 896 x 896 0.41
against 0.52 ms; 32 rows 2.0 against 2.7 ms (interleaved, from memory).

What is left of N (under a whole tile) runs as `quant`'s row dot products.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
from llvmlite import ir
from numba import types as _types
from numba.core import cgutils as _cgutils
from numba.extending import intrinsic as _intrinsic

from ._compat import jit
from .irblocks import (
    LANES,
    VF,
    fmuladd,
    intrinsic_args,
    lane_totals,
    load_vector,
    row_pointer,
    splat,
)

__all__ = ["MIN_ROWS", "WEIGHTS", "row_dot", "tiles", "transposed"]

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
            (x_arr, w_arr, o_arr), (m0, n0) = intrinsic_args(context, builder, signature,
                                                             args, 3)
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
            # Rows past the end of `out` (xt's padding) are stored to a scratch row instead:
            # a select, not a branch per lane.
            height = builder.extract_value(o_arr.shape, 0)
            scratch = cgutils.alloca_once(builder, ir.FloatType(), size=weights)
            for v in range(vectors):
                sums = [builder.load(acc) for acc in accs[v]]
                for lane in range(LANES):
                    i = builder.add(m0, ir.Constant(_I64, LANES * v + lane))
                    inside = builder.icmp_signed("<", i, height)
                    orow = row_pointer(builder, o_arr, builder.select(inside, i, m0))
                    for r in range(weights):
                        value = builder.extract_element(sums[r], ir.Constant(_I32, lane))
                        col = builder.gep(orow, [builder.add(n0, ir.Constant(_I64, r))])
                        spare = builder.gep(scratch, [ir.Constant(_I64, r)])
                        builder.store(value, builder.select(inside, col, spare))

        return sig, codegen

    return tile


#: 8-float accumulators of `row_dot`, each taking every fourth vector of the row.
_DOT_WAYS: Final = 4


@intrinsic  # type: ignore[untyped-decorator]
def row_dot(typingctx: Any, x: Any, w: Any, m: Any, n: Any) -> Any:
    """``row_dot(x, w, m, n)``: ``sum_k x[m, k] * w[n, k]`` over float32 2-D x and w.

    Their rows' elements contiguous, K = x's second extent (w's at least as long). Why not a
    plain loop: where numba's loops vectorize 16 floats wide (`_compat._wide_vectors`), the
    one-row products (a decode's matrix-vector products, which stream their weight) ran
    slower on 512-bit vectors: 24 distinct 9728 x 896 weights on 2 threads, 26.2 against
    30.3 GB/s with 8-float ones. Here the vectors are 8 floats wide whatever LLVM prefers:
    four accumulators, 32 weights a pass, the rest of K one at a time.
    """
    if not all(isinstance(a, types.Array) and a.ndim == 2 and a.dtype == types.float32
               for a in (x, w)):
        return None
    sig = types.float32(x, w, m, n)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        (x_arr, w_arr), (m0, n0) = intrinsic_args(context, builder, signature, args, 2)
        k_count = builder.extract_value(x_arr.shape, 1)
        xrow, wrow = row_pointer(builder, x_arr, m0), row_pointer(builder, w_arr, n0)
        step = LANES * _DOT_WAYS
        passes = builder.sdiv(k_count, ir.Constant(_I64, step))
        accs = [cgutils.alloca_once_value(builder, ir.Constant(VF, None))
                for _ in range(_DOT_WAYS)]
        with cgutils.for_range(builder, passes) as loop:
            base = builder.mul(loop.index, ir.Constant(_I64, step))
            for way, acc in enumerate(accs):
                at = builder.add(base, ir.Constant(_I64, LANES * way))
                product = fmuladd(builder, load_vector(builder, builder.gep(xrow, [at])),
                                  load_vector(builder, builder.gep(wrow, [at])),
                                  builder.load(acc))
                builder.store(product, acc)
        vec = builder.load(accs[0])
        for acc in accs[1:]:
            vec = builder.fadd(vec, builder.load(acc))
        total = cgutils.alloca_once_value(builder, lane_totals(builder, [vec])[0])
        done = builder.mul(passes, ir.Constant(_I64, step))
        with cgutils.for_range_slice(builder, done, k_count, ir.Constant(_I64, 1)) as (k, _):
            product = builder.fmul(builder.load(builder.gep(xrow, [k])),
                                   builder.load(builder.gep(wrow, [k])))
            builder.store(builder.fadd(builder.load(total), product), total)
        return builder.load(total)

    return sig, codegen


#: (vectors of xt, weight rows) per tile: twelve accumulators, within AVX2's 16 registers.
#: (One tile shape and no parallel region of its own: each costs a second or more of numba
#: compilation on a cold cache; `quant`'s parallel entry runs these.)
VECTORS: Final = 2
WEIGHTS: Final = 6
_tile_16x6 = _tile(VECTORS, WEIGHTS)


def transposed(x: Any) -> Any:
    """The transpose of x (M, K), (K, M rounded up to whole tiles), the padding zeroed.

    (By numpy: a numba loop for it cost a second of compilation on a cold cache.)
    """
    m_rows, k = x.shape
    span = LANES * VECTORS
    xt = np.zeros((k, -(-m_rows // span) * span), np.float32)
    xt[:, :m_rows] = x.T
    return xt


@jit()
def tiles(xt: Any, w: Any, out: Any, lo: int, hi: int) -> int:
    """``out[:, lo:n] = x @ w[lo:n].T`` for the whole tiles from `lo` on; returns n.

    xt is `transposed` (x); the rows ``n .. hi - 1`` (fewer than `WEIGHTS`) are the caller's.
    """
    m_rows = out.shape[0]
    n = lo
    while n + WEIGHTS <= hi:
        for m in range(0, m_rows, LANES * VECTORS):
            _tile_16x6(xt, w, out, m, n)
        n += WEIGHTS
    return n
