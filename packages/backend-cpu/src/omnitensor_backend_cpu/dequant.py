"""Repacked quantized weights (`quant.Packed`) dequantized to float32 rows, a block at a time.

Why IR: written as numba loops (``out[r, j] = float32(qs[n, j]) * scale - offset``), the
conversion stayed scalar: numba cannot tell LLVM that `out` and `qs` never overlap, so the
vectorizers kept one ``cvtsi2ss`` per weight, ~1.7 cycles each (a 4864 x 896 Q8_0 weight took
2.5 ms on one thread, whether its tiles fit L2 or not). `_block_kernel` loads a sub-block's
weights as one vector, converts, scales and stores them as vectors.

Used where many activation rows multiply one weight (`quant.qmatmul` from `BLAS_MIN_ROWS`
rows): the dequantized tiles go to BLAS.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import types as _types
from numba.extending import intrinsic as _intrinsic

from ._compat import jit
from .intdot import row_scales
from .irblocks import load_quants, splat

__all__ = ["dequantize_rows", "rows16", "rows32"]

# NOTE: numba's typing helpers are untyped; used through Any (see `_compat`).
types: Any = _types
intrinsic: Any = _intrinsic

Array = np.ndarray[Any, Any]

_F32, _I8, _I32 = ir.FloatType(), ir.IntType(8), ir.IntType(32)


def _block_kernel(shift: int) -> Any:
    """An intrinsic ``block(qs, n, b, out, r, scale, offset, highs)``, sub-blocks ``1 << shift``.

    Writes ``out[r, j] = q[n, j] * scale - offset`` for the sub-block's columns j, where q is
    int8 `qs` (N, K), or uint8 `qs` (N, K / 2) holding two weights 0..15 per byte (sub-blocks
    of 32 only: in each block, byte i holds weight i in its low nibble and 16 + i in its high
    one, `quant.nibble_pack`'s layout), less 16 where the weight's inverted fifth bit in
    `highs` (N, K / 8) is set (`fivebit`'s plane; None for 4-bit nibbles and int8 quants).
    `out` is C-contiguous float32 (rows, K).
    """
    size = 1 << shift

    @intrinsic  # type: ignore[untyped-decorator]
    def block(typingctx: Any, qs: Any, n: Any, b: Any, out: Any, r: Any, scale: Any,
              offset: Any, highs: Any) -> Any:
        nibbles = isinstance(qs, types.Array) and qs.dtype == types.uint8 and size == 32
        five = not isinstance(highs, types.NoneType)
        arrays = ((qs, types.uint8 if nibbles else types.int8), (out, types.float32),
                  *(((highs, types.uint8),) if five else ()))
        if five and not nibbles:
            return None
        if not all(isinstance(a, types.Array) and a.ndim == 2 and a.layout == "C"
                   and a.dtype == t for a, t in arrays):
            return None
        sig = types.void(qs, n, b, out, r, types.float32, types.float32, highs)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> None:
            q_arr, o_arr = (context.make_array(signature.args[i])(context, builder, args[i])
                            for i in (0, 3))
            row, blk, out_row = (context.cast(builder, args[i], signature.args[i], types.intp)
                                 for i in (1, 2, 4))
            scale = context.cast(builder, args[5], signature.args[5], types.float32)
            offset = context.cast(builder, args[6], signature.args[6], types.float32)
            start = builder.shl(blk, ir.Constant(blk.type, shift))
            k = builder.extract_value(o_arr.shape, 1)
            q_cols = builder.extract_value(q_arr.shape, 1)
            q = load_quants(builder, builder.gep(q_arr.data, [builder.mul(row, q_cols)]), start,
                            size, nibbles)
            to_float = builder.uitofp if nibbles and not five else builder.sitofp
            if five:
                h_arr = context.make_array(signature.args[7])(context, builder, args[7])
                h_row = builder.gep(h_arr.data, [builder.mul(row, builder.extract_value(
                    h_arr.shape, 1))])
                q = builder.sub(q, _block_sixteens(builder, h_row, blk))
            values = to_float(q, ir.VectorType(_F32, size))
            scaled = builder.fsub(builder.fmul(values, splat(builder, scale, size)),
                                  splat(builder, offset, size))
            o_at = builder.add(builder.mul(out_row, k), start)
            builder.store(scaled, builder.bitcast(builder.gep(o_arr.data, [o_at]),
                                                  ir.VectorType(_F32, size).as_pointer()),
                          align=4)

        return sig, codegen

    return block


def _block_sixteens(builder: Any, h_row: Any, block: Any) -> Any:
    """<32 x i8>: 16 for each weight of `block` whose inverted fifth bit is set, else 0.

    In `fivebit`'s plane, weight e of block c of a line sits in byte ``16 line + 8 (c % 2) +
    (e % 16) // 2`` at bit ``4 (c // 2) + e % 2 + 2 (e // 16)``.
    """
    i8x8, i8x32 = ir.VectorType(_I8, 8), ir.VectorType(_I8, 32)
    c = builder.and_(block, ir.Constant(block.type, 3))
    start = builder.add(builder.shl(builder.ashr(block, ir.Constant(block.type, 2)),
                                    ir.Constant(block.type, 4)),
                        builder.shl(builder.and_(c, ir.Constant(c.type, 1)),
                                    ir.Constant(c.type, 3)))
    bytes8 = builder.load(builder.bitcast(builder.gep(h_row, [start]), i8x8.as_pointer()),
                          align=1)
    lanes = builder.shuffle_vector(bytes8, bytes8, ir.Constant(
        ir.VectorType(_I32, 32), [(e % 16) // 2 for e in range(32)]))
    pair_bit = builder.trunc(builder.shl(builder.lshr(c, ir.Constant(c.type, 1)),
                                         ir.Constant(c.type, 2)), _I8)
    shifts = builder.add(ir.Constant(i8x32, [e % 2 + 2 * (e // 16) for e in range(32)]),
                         splat(builder, pair_bit, 32))
    bits = builder.and_(builder.lshr(lanes, shifts), ir.Constant(i8x32, [1] * 32))
    return builder.shl(bits, ir.Constant(i8x32, [4] * 32))


_block16 = _block_kernel(4)
_block32 = _block_kernel(5)


@jit(inline=True)
def _rows(qs: Any, d: Any, mins: Any, lo: int, out: Any, first: int, last: int,
          shift: int, offsets: int, highs: Any = None) -> None:
    blocks = out.shape[1] >> shift
    buf = np.empty(blocks, np.float32)
    mbuf = np.empty(offsets, np.float32)
    zero = np.float32(0.0)
    for r in range(first, last):
        n = lo + r
        scales = row_scales(d, n, buf)
        row_offsets = row_scales(mins, n, mbuf)
        for b in range(blocks):
            offset = row_offsets[b] if offsets else zero
            if shift == 5:
                _block32(qs, n, b, out, r, scales[b], offset, highs)
            else:
                _block16(qs, n, b, out, r, scales[b], offset, None)


@jit()
def rows32(qs: Any, d: Any, mins: Any, lo: int, out: Any, first: int, last: int,
            offsets: int, highs: Any) -> None:
    """`dequantize_rows` for sub-blocks of 32 (compiled code may call it)."""
    _rows(qs, d, mins, lo, out, first, last, 5, offsets, highs)


@jit()
def rows16(qs: Any, d: Any, mins: Any, lo: int, out: Any, first: int, last: int,
            offsets: int) -> None:
    """`dequantize_rows` for sub-blocks of 16 (compiled code may call it)."""
    _rows(qs, d, mins, lo, out, first, last, 4, offsets)


def dequantize_rows(qs: Array, d: Array | tuple[Array, Array],
                    mins: Array | tuple[Array, Array], lo: int, out: Array, first: int,
                    last: int, shift: int, highs: Array | None = None) -> None:
    """Out[r] = weight row ``lo + r`` dequantized, for r in [first, last).

    `qs`, `d` and `shift` as in `quant.Packed` (int8 quants, or uint8 nibbles for sub-blocks
    of 32, with `highs` for 5-bit weights); `d` the scales and `mins` the offsets per
    sub-block, or (N, 0), each as `intdot.row_scales` takes them.
    """
    offsets = (mins[0] if isinstance(mins, tuple) else mins).shape[1]
    if shift == 5:
        rows32(qs, d, mins, lo, out, first, last, offsets, highs)
    else:
        rows16(qs, d, mins, lo, out, first, last, offsets)
