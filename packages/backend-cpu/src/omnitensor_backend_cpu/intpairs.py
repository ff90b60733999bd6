"""`intdot`'s integer products, two int8 weight rows at a time, for several activation rows.

`intdot`'s kernel passes over one weight row with up to eight activation rows: each int16
activation block is loaded once per weight row. A short prompt's down projection (16 rows by
4864) reads its activation rows (156 KB) from L2 for every weight row and is bound by that
traffic; its gate and up projections by the loads and conversions per block. Here each pass
multiplies every loaded activation block by two weight rows (16 sums in 16 registers for eight
rows: the 32 of AVX-512 hold them), which halves the activation traffic and loads.

Only for one-byte weights in blocks of 16 with plain float32 scales per block (Q2_K and Q3_K as
`quant_more` unpacks them). One-byte weights in blocks of 32 (Q8_0, IQ4_NL, IQ4_XS) take
`intdot`'s halves instead, which measured faster at every length; the others (nibbles, a
fifth bit plane, factored K-format scales) keep `intdot`'s kernel (`intdot.prepare` chooses).
"""

from __future__ import annotations

from typing import Any, Final

from llvmlite import ir
from numba import types as _types
from numba.core import cgutils as _cgutils
from numba.extending import intrinsic as _intrinsic

from .irblocks import every_other, halves_added, host_lanes, lane_totals, prefetch, splat

__all__ = ["PREFETCH_BYTES", "pair16x8"]

# NOTE: numba's typing helpers are untyped; used through Any (see `_compat`).
types: Any = _types
cgutils: Any = _cgutils
intrinsic: Any = _intrinsic

_I8, _I16, _I32, _F32 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.FloatType()

#: Bytes ahead of the line being read that each line prefetches in both weight rows (as
#: `intdot` does: the hardware prefetcher alone keeps too few lines in flight).
PREFETCH_BYTES: Final = 2048


def _pair_kernel(shift: int, rows: int) -> Any:
    """An intrinsic ``dot2(qs, n, xq, m, d0, d1, xd)``: weight rows n and n + 1 by x rows m..

    ``sum_b d[b] * xd[r, b] * sum_{j in b} qs[w, j] * xq[r, j]`` for w in (n, n + 1) (scales
    `d0`, `d1`: float32 (K >> shift,)) and r in ``m .. m + rows - 1``; int8 `qs` (N, K), int16
    `xq` (M, K), float32 `xd` (M, K >> shift), all C-contiguous. Returns the `rows` sums of
    weight row n, then those of n + 1.
    """
    size = 1 << shift

    @intrinsic  # type: ignore[untyped-decorator]
    def dot2(typingctx: Any, qs: Any, n: Any, xq: Any, m: Any, d0: Any, d1: Any,
             xd: Any) -> Any:
        arrays = ((qs, types.int8, 2), (xq, types.int16, 2), (d0, types.float32, 1),
                  (d1, types.float32, 1), (xd, types.float32, 2))
        if not all(isinstance(a, types.Array) and a.ndim == dims and a.layout == "C"
                   and a.dtype == t for a, t, dims in arrays):
            return None
        sig = types.UniTuple(types.float32, 2 * rows)(qs, n, xq, m, d0, d1, xd)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            q_arr, x_arr, d0_arr, d1_arr, xd_arr = (
                context.make_array(signature.args[i])(context, builder, args[i])
                for i in (0, 2, 4, 5, 6))
            row = context.cast(builder, args[1], signature.args[1], types.intp)
            col = context.cast(builder, args[3], signature.args[3], types.intp)
            k = builder.extract_value(x_arr.shape, 1)
            blocks = builder.ashr(k, ir.Constant(k.type, shift))
            one = ir.Constant(k.type, 1)
            q_rows = [builder.gep(q_arr.data, [builder.mul(at, k)])
                      for at in (row, builder.add(row, one))]
            d_rows = [d0_arr.data, d1_arr.data]
            x_rows, xd_rows = [], []
            for r in range(rows):
                at = builder.add(col, ir.Constant(col.type, r))
                x_rows.append(builder.gep(x_arr.data, [builder.mul(at, k)]))
                xd_rows.append(builder.gep(xd_arr.data, [builder.mul(at, blocks)]))
            lanes = min(host_lanes(), size // 2)
            vf, wide = ir.VectorType(_F32, lanes), ir.VectorType(_I32, size)
            sums = [[cgutils.alloca_once_value(builder, ir.Constant(vf, None)) for _ in range(2)]
                    for _ in range(rows)]

            def block(b: Any, scale: Any) -> None:
                # block b of both weight rows against every x row; scale(r, w): its float32
                at = builder.shl(b, ir.Constant(b.type, shift))
                weights = [builder.sext(builder.load(builder.bitcast(
                    builder.gep(q_row, [at]), ir.VectorType(_I8, size).as_pointer()), align=1),
                    wide) for q_row in q_rows]
                for r, x_row in enumerate(x_rows):
                    x = builder.sext(builder.load(builder.bitcast(
                        builder.gep(x_row, [at]), ir.VectorType(_I16, size).as_pointer()),
                        align=2), wide)
                    for w, q in enumerate(weights):
                        # even + odd lanes: a 16-bit pair multiply-add (vpmaddwd)
                        p = builder.mul(q, x)
                        s = halves_added(builder, builder.add(every_other(builder, p, 0),
                                                              every_other(builder, p, 1)), lanes)
                        acc = sums[r][w]
                        term = builder.fmul(builder.sitofp(s, vf), splat(builder, scale(r, w),
                                                                         lanes))
                        builder.store(builder.fadd(builder.load(acc), term, flags=["contract"]),
                                      acc)

            # the blocks of one 64-byte line of each weight row at a time: one prefetch a row
            # and the line's scale products as vectors, then a block at a time for the rest
            per_line = 64 // size
            line_t = ir.VectorType(_F32, per_line)
            lines = builder.ashr(blocks, ir.Constant(blocks.type, per_line.bit_length() - 1))
            with cgutils.for_range(builder, lines) as loop:
                first = builder.mul(loop.index, ir.Constant(blocks.type, per_line))
                start = builder.shl(first, ir.Constant(first.type, shift))
                for q_row in q_rows:
                    prefetch(builder, builder.gep(q_row, [builder.add(
                        start, ir.Constant(start.type, PREFETCH_BYTES))]))

                def line(array: Any) -> Any:
                    return builder.load(builder.bitcast(builder.gep(array, [first]),
                                                        line_t.as_pointer()), align=4)

                products = [[builder.fmul(line(d_row), line(xd_row)) for d_row in d_rows]
                            for xd_row in xd_rows]
                for u in range(per_line):
                    lane = ir.Constant(_I32, u)
                    block(builder.add(first, ir.Constant(first.type, u)),
                          lambda r, w, lane=lane: builder.extract_element(products[r][w], lane))
            done = builder.mul(lines, ir.Constant(blocks.type, per_line))
            with cgutils.for_range_slice(builder, done, blocks, one) as (b, _):
                block(b, lambda r, w: builder.fmul(builder.load(builder.gep(d_rows[w], [b])),
                                                   builder.load(builder.gep(xd_rows[r], [b]))))
            values = lane_totals(builder, [builder.load(sums[r][w]) for w in range(2)
                                           for r in range(rows)])
            return context.make_tuple(builder, signature.return_type, values)

        return sig, codegen

    return dot2


#: The kernel for blocks of 16 and 8 activation rows.
pair16x8 = _pair_kernel(4, 8)
