"""Integer dot products: int8 weight rows against activation rows quantized to int16 per block.

Why: a decode step streams every weight once per token, and the float kernel spends more time
widening each int8 weight to float32 and scaling it than memory takes to deliver it (11-14 GB/s
on one core of a cache-resident weight, against 18-25 GB/s here). ggml quantizes the activation
to int8 per block and multiplies integers; so do we, but to **int16** (scale ``amax / 32767``
per block): the products still map to one multiply-add of 16-bit pairs into 32-bit lanes
(x86 ``vpmaddwd``, AArch64 ``smlal``), and the activation keeps 15 bits instead of 7, so the
result stays within float32 rounding of the dequantize-then-multiply reference instead of
ggml's ~1e-2 relative error. Bounds: |q| <= 128 and |x| <= 32767, so a 32-element block sums
to at most 32 * 128 * 32767 < 2**31.

From four activation rows, one-byte weights in blocks of 32 go four blocks a vector
(`interleave_groups`); a row's sums are added up together with the other rows' (`lane_totals`).

The block loop is written in LLVM IR (`_dot_kernel`) because numba types a product of two
int32 scalars as int64, and 64-bit lanes never become ``vpmaddwd``; the IR is target-neutral
(sign-extend, multiply, add even and odd lanes), and LLVM picks the instruction, but for the
sums of several pair products on AVX-512 VNNI, written as ``vpdpwssd`` (`irblocks.pair_dot_add`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Final

import numpy as np
from llvmlite import ir
from numba import types as _types
from numba.core import cgutils as _cgutils
from numba.extending import intrinsic as _intrinsic
from numba.extending import overload as _overload

from . import pool
from ._compat import jit, prange
from .intpairs import PREFETCH_BYTES, pair16x8
from .irblocks import (
    every_other,
    halves_added,
    host_lanes,
    lane_totals,
    load_quants,
    pair_dot_add,
    prefetch,
    splat,
    widen_half,
)

__all__ = ["SHIFTS", "quantize_rows", "row_scales", "run"]

Array = np.ndarray[Any, Any]

#: log2 of the sub-block sizes with an integer kernel (one weight scale per 16 or 32 elements).
SHIFTS: Final = (4, 5)

# NOTE: numba's typing helpers are untyped; used through Any (see `_compat`).
types: Any = _types
cgutils: Any = _cgutils
intrinsic: Any = _intrinsic
overload: Any = _overload

_I8, _I16, _I32, _F32 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.FloatType()
_LANES: Final = 8
#: Blocks of 32 one-byte weights multiplied as one by the kernels of several rows (`grouped`):
#: a group's 128 bytes are two lines, and each vector of pair sums holds 4 lanes of each block.
GROUP: Final = 4
#: Float sums per activation row in the one-row kernels over int8 weights (`_dot_kernel`).
_ONE_ROW_WAYS: Final = 2

#: Bytes ahead of the block being read that each block prefetches in its weight row (rows are
#: contiguous, so this runs on into the next rows). The hardware prefetcher alone kept too few
#: lines in flight: a 4864 x 896 int8 product from DRAM on 2 threads took 202-231 us without,
#: 164-190 us with 1-8 KB ahead (interleaved medians, 28-30 against 21-24 GB/s).
_PREFETCH_BYTES: Final = PREFETCH_BYTES


def _lane_sixteens(builder: Any, plane: Any, bit: int) -> Any:
    """16 where bit `bit` (0..7) of each 16-bit lane of `plane` is set, else 0."""
    at = ir.VectorType(_I16, 16)
    if bit < 4:
        plane = builder.shl(plane, ir.Constant(at, [4 - bit] * 16))
    elif bit > 4:
        plane = builder.lshr(plane, ir.Constant(at, [bit - 4] * 16))
    return builder.and_(plane, ir.Constant(at, [16] * 16))


def _byte(builder: Any, column: Any, nibbles: bool) -> Any:
    """The byte offset of weight `column` in its row (two weights a byte with `nibbles`)."""
    return builder.ashr(column, ir.Constant(column.type, 1)) if nibbles else column


def _dot_kernel(shift: int, rows: int, ways: int = 1, grouped: bool = False) -> Any:
    """An intrinsic ``dot(qs, n, xq, m, d, xd, highs)`` for sub-blocks of ``1 << shift``.

    For each activation row ``r`` in ``m .. m + rows - 1``: ``sum_b d[n, b] * xd[r, b] *
    sum_{j in b} qs[n, j] * xq[r, j]`` over C-contiguous int8 `qs` (N, K), int16 `xq` (M, K)
    with weight row n's float32 scales `d` (K >> shift,) and `xd` (M, K >> shift); a float32,
    or a tuple of `rows` of them. Each weight block is loaded and widened once for all the rows.

    A uint8 `qs` (N, K / 2) holds two weights 0..15 per byte (sub-blocks of 32 only): in each
    block of 32, byte i holds weight i (low nibble) and weight 16 + i (high nibble).
    With such nibbles, `highs` (N, K / 8) uint8 may hold a fifth bit per weight, inverted
    (`quant_more.five_bit_pack`'s plane, K a multiple of 128): the weight is then
    ``nibble - 16 * bit``, in -16..15. Else `highs` is None.

    `ways`: float sums per row over int8 weights, taking the blocks of a line in turn.

    `grouped` (int8 weights, blocks of 32, several rows): x in `interleave_groups`' layout, and
    each `GROUP` blocks multiplied as one (see `interleave_groups`).
    """
    size = 1 << shift

    @intrinsic  # type: ignore[untyped-decorator]
    def dot(typingctx: Any, qs: Any, n: Any, xq: Any, m: Any, d: Any, xd: Any,
            highs: Any) -> Any:
        nibbles = isinstance(qs, types.Array) and qs.dtype == types.uint8 and size == 32
        five = not isinstance(highs, types.NoneType)
        if five and not (nibbles and isinstance(highs, types.Array) and highs.ndim == 2
                         and highs.layout == "C" and highs.dtype == types.uint8):
            return None
        arrays = ((qs, types.uint8 if nibbles else types.int8), (xq, types.int16),
                  (xd, types.float32))
        if not all(isinstance(a, types.Array) and a.ndim == 2 and a.layout == "C"
                   and a.dtype == t for a, t in arrays):
            return None
        factored = isinstance(d, types.BaseTuple)
        if factored:  # (levels (N, B) int8 or uint8, supers (N, B >> (8 - shift)) float32)
            if not (len(d) == 2 and isinstance(d[0], types.Array) and d[0].ndim == 2
                    and d[0].layout == "C" and d[0].dtype in (types.int8, types.uint8)
                    and isinstance(d[1], types.Array) and d[1].ndim == 2
                    and d[1].layout == "C" and d[1].dtype == types.float32):
                return None
        elif not (isinstance(d, types.Array) and d.ndim == 1 and d.layout == "C"
                  and d.dtype == types.float32):
            return None
        result = types.float32 if rows == 1 else types.UniTuple(types.float32, rows)
        sig = result(qs, n, xq, m, d, xd, highs)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            q_arr, x_arr, xd_arr = (
                context.make_array(signature.args[i])(context, builder, args[i])
                for i in (0, 2, 5))
            row = context.cast(builder, args[1], signature.args[1], types.intp)
            col = context.cast(builder, args[3], signature.args[3], types.intp)
            k = builder.extract_value(x_arr.shape, 1)
            blocks = builder.ashr(k, ir.Constant(k.type, shift))
            q_row = builder.gep(q_arr.data, [builder.mul(row, builder.extract_value(q_arr.shape,
                                                                                    1))])
            if five:
                h_arr = context.make_array(signature.args[6])(context, builder, args[6])
                h_row = builder.gep(h_arr.data, [builder.mul(row, builder.extract_value(
                    h_arr.shape, 1))])
            if factored:
                l_arr, s_arr = (context.make_array(t)(context, builder, builder.extract_value(
                    args[4], i)) for i, t in enumerate(signature.args[4]))
                l_row, s_row = (builder.gep(a.data, [builder.mul(row, builder.extract_value(
                    a.shape, 1))]) for a in (l_arr, s_arr))
                signed = signature.args[4][0].dtype == types.int8
            else:
                d_row = context.make_array(signature.args[4])(context, builder, args[4]).data

            def weight_scales(first: Any, count: int) -> Any:
                # the float32 scales of blocks first .. first + count - 1 (factored: widened
                # here, all in one super-block of 256 weights: a line never straddles two)
                kind = ir.VectorType(_F32, count) if count > 1 else _F32
                if not factored:
                    return builder.load(builder.bitcast(builder.gep(d_row, [first]),
                                                        kind.as_pointer()), align=4)
                raw = builder.load(builder.bitcast(builder.gep(l_row, [first]), (
                    ir.VectorType(_I8, count) if count > 1 else _I8).as_pointer()), align=1)
                values = (builder.sitofp if signed else builder.uitofp)(raw, kind)
                sup = builder.load(builder.gep(s_row, [builder.ashr(
                    first, ir.Constant(first.type, 8 - shift))]))
                return builder.fmul(values, splat(builder, sup, count) if count > 1 else sup)

            x_rows, xd_rows = [], []
            for r in range(rows):
                at = builder.add(col, ir.Constant(col.type, r))
                x_rows.append(builder.gep(x_arr.data, [builder.mul(at, k)]))
                xd_rows.append(builder.gep(xd_arr.data, [builder.mul(at, blocks)]))
            # NOTE: for several activation rows, a 32-weight int8 block's 16 pair sums stay 16
            # float lanes where the CPU has 16-float vectors, instead of being folded to 8
            # first: a fold less a block and row (16-row Q8_0 products on 2 threads, weights
            # from memory, against 8 lanes, alternating processes: 9728 x 896 1.06-1.09
            # against 1.23-1.30 ms; 896 x 4864 0.72-0.73 against 0.68-0.69, its rows of x
            # come from L2 either way). One row kept 8 (0.15-0.17 against 0.13-0.16 ms for
            # 9728 x 896); nibbles and 16-weight blocks give 8 lanes anyway.
            lanes = host_lanes() if size == 32 and not nibbles and rows > 1 else _LANES
            if grouped and (nibbles or size != 32 or rows == 1):
                raise TypeError("intdot: groups take int8 blocks of 32 and several rows")
            vf = ir.VectorType(_F32, lanes)
            wide = ir.VectorType(_I32, size)
            # NOTE: an int8 row's blocks add into `ways` sums in turn (by their place in the
            # line): with one, the chain of float adds (one a block) bound a one-row product
            # by the add's latency. One row, one thread, interleaved in one process: Q6_K
            # (four blocks a line) 14.1 against 11.2 G weights/s, Q8_0 25.1 against 22.2 (896
            # x 4864) and 15.4 against 14.1 (4864 x 896). Nibbles: level or slower (16.2
            # against 16.7 for Q5_0), their pairs do more work between the adds: one sum.
            chains = 1 if nibbles else ways
            sums = [[cgutils.alloca_once_value(builder, ir.Constant(vf, None))
                     for _ in range(chains)] for _ in x_rows]

            def accs(way: int) -> list[Any]:
                return [row_sums[way % chains] for row_sums in sums]

            def spread(vector: Any, picks: list[int]) -> Any:
                # the float32 lanes [vector[i] for i in picks]: scales spread over products
                return builder.shuffle_vector(vector, ir.Constant(vector.type, ir.Undefined),
                                              ir.Constant(ir.VectorType(_I32, len(picks)), picks))

            def block(b: Any, ahead: bool, scales: list[tuple[Any, int]] | None = None,
                      way: int = 0) -> None:
                at = builder.shl(b, ir.Constant(b.type, shift))
                q = load_quants(builder, q_row, at, size, nibbles)
                qw = builder.zext(q, wide) if nibbles else builder.sext(q, wide)
                if ahead:
                    prefetch(builder, builder.gep(q_row, [
                        builder.add(_byte(builder, at, nibbles),
                                    ir.Constant(at.type, _PREFETCH_BYTES))]))
                dq = None if scales else weight_scales(b, 1)
                for r, (x_row, xd_row, acc) in enumerate(zip(x_rows, xd_rows, accs(way),
                                                             strict=True)):
                    x = builder.load(builder.bitcast(builder.gep(x_row, [at]),
                                                     ir.VectorType(_I16, size).as_pointer()),
                                     align=2)
                    p = builder.mul(qw, builder.sext(x, wide))
                    # even + odd lanes: the pattern of a 16-bit pair multiply-add (vpmaddwd)
                    s = halves_added(builder, builder.add(every_other(builder, p, 0),
                                                          every_other(builder, p, 1)), lanes)
                    if scales:
                        vector, lane = scales[r]
                        scale = spread(vector, [lane] * lanes)
                    else:
                        scale = splat(builder, builder.fmul(
                            dq, builder.load(builder.gep(xd_row, [b]))), lanes)
                    term = builder.fmul(builder.sitofp(s, vf), scale, flags=["contract"])
                    builder.store(builder.fadd(builder.load(acc), term, flags=["contract"]), acc)

            def pair(first: Any, spreads: list[Any], plane: Any = None, bit: int = 0) -> None:
                # 4-bit blocks `first` and `first + 1` (one 32-byte load) against x in the
                # layout `interleave_pairs` gave it; `spreads` holds each row's two block scales
                # as (s0 x 4, s1 x 4). With a `plane` (16 lanes of the line's fifth bits), each
                # lane's four weights take theirs from bits `bit` .. `bit + 3`
                at = builder.shl(first, ir.Constant(first.type, shift))
                i16x16 = ir.VectorType(_I16, 16)
                raw = builder.load(builder.bitcast(builder.gep(q_row, [_byte(builder, at, True)]),
                                                   i16x16.as_pointer()), align=1)
                nibble = ir.Constant(i16x16, [15] * 16)
                quants = [builder.and_(raw, nibble),  # weight 2j of lane j's block
                          builder.and_(builder.lshr(raw, ir.Constant(i16x16, [8] * 16)), nibble),
                          builder.and_(builder.lshr(raw, ir.Constant(i16x16, [4] * 16)), nibble),
                          builder.lshr(raw, ir.Constant(i16x16, [12] * 16))]
                if plane is not None:  # (nibbles 0..15 are the same as signed 16-bit lanes)
                    quants = [builder.sub(q, _lane_sixteens(builder, plane, bit + part))
                              for part, q in enumerate(quants)]
                for x_row, acc, scale in zip(x_rows, accs(0), spreads, strict=True):
                    s = None
                    for part, qw in enumerate(quants):
                        x = builder.load(builder.bitcast(
                            builder.gep(x_row, [builder.add(at, ir.Constant(at.type, 16 * part))]),
                            i16x16.as_pointer()), align=2)
                        s = pair_dot_add(builder, s, qw, x)
                    term = builder.fmul(builder.sitofp(s, vf), scale, flags=["contract"])
                    builder.store(builder.fadd(builder.load(acc), term, flags=["contract"]), acc)

            def block_group(first: Any, products: list[Any]) -> None:
                # int8 blocks `first` .. `first + GROUP - 1` (one load) against x in
                # `interleave_groups`' layout: each chunk holds lanes / GROUP pair sums of
                # every block, so the group takes one conversion and one scaling a row
                at = builder.shl(first, ir.Constant(first.type, shift))
                raw = builder.load(builder.bitcast(builder.gep(q_row, [at]), ir.VectorType(
                    _I8, GROUP * size).as_pointer()), align=1)
                per = 2 * lanes // GROUP  # elements of each block in a chunk
                wide16 = ir.VectorType(_I16, 2 * lanes)
                chunk = ir.VectorType(_I32, 2 * lanes)
                weights = [builder.sext(builder.shuffle_vector(raw, raw, ir.Constant(
                    chunk, [g * size + c + i for g in range(GROUP) for i in range(per)])),
                    wide16) for c in range(0, size, per)]
                for x_row, acc, scale in zip(x_rows, accs(0), products, strict=True):
                    s = None
                    for c, w in enumerate(weights):
                        x = builder.load(builder.bitcast(builder.gep(x_row, [builder.add(
                            at, ir.Constant(at.type, 2 * lanes * c))]), wide16.as_pointer()),
                            align=2)
                        s = pair_dot_add(builder, s, w, x)
                    spread_scale = spread(scale, [g for g in range(GROUP)
                                                  for _ in range(lanes // GROUP)])
                    term = builder.fmul(builder.sitofp(s, vf), spread_scale, flags=["contract"])
                    builder.store(builder.fadd(builder.load(acc), term, flags=["contract"]), acc)

            def scale_products(first: Any, count: int) -> list[Any]:
                # the weight scales of `count` blocks times each row's, one vector multiply a row
                line = ir.VectorType(_F32, count)
                dq = weight_scales(first, count)
                return [builder.fmul(dq, builder.load(builder.bitcast(
                    builder.gep(xd_row, [first]), line.as_pointer()), align=4))
                    for xd_row in xd_rows]

            # NOTE: the blocks of one 64-byte line of weights at a time, with one prefetch and
            # one vector multiply of the scales a row (the rest, if the row does not end on a
            # line, a block at a time): per 4-bit block one prefetch and two scalar operations
            # fewer. A 4864 x 896 product, same process, interleaved medians against a block at
            # a time: Q6_K 0.96x / 0.94x / 0.91x the time at 1, 4 and 16 rows, Q8_0 level, the
            # same bits (each row still adds its blocks in order). 4-bit weights go by pairs of
            # blocks (`pair`): a 4864 x 896 Q4_K product 0.76x / 0.78x / 0.80x the time at 1, 4
            # and 16 rows, 896 x 4864 0.72x / 0.86x / 0.92x (same process, interleaved medians)
            per_line = 64 // (size // 2 if nibbles else size)
            if grouped:  # GROUP blocks a pass, one prefetch a line
                per_line = GROUP
            lines = builder.ashr(blocks, ir.Constant(blocks.type, per_line.bit_length() - 1))
            with cgutils.for_range(builder, lines) as loop:
                first = builder.mul(loop.index, ir.Constant(blocks.type, per_line))
                for line in range(0, per_line * (size // 2 if nibbles else size), 64):
                    prefetch(builder, builder.gep(q_row, [builder.add(_byte(
                        builder, builder.shl(first, ir.Constant(first.type, shift)), nibbles),
                        ir.Constant(first.type, _PREFETCH_BYTES + line))]))
                products = scale_products(first, per_line)
                plane = None
                if five:  # the line's 128 fifth bits: lane j's byte holds 4 for each pair
                    at = builder.shl(loop.index, ir.Constant(loop.index.type, 4))
                    prefetch(builder, builder.gep(h_row, [builder.add(
                        at, ir.Constant(at.type, _PREFETCH_BYTES // 4))]))
                    plane = builder.zext(builder.load(builder.bitcast(
                        builder.gep(h_row, [at]), ir.VectorType(_I8, 16).as_pointer()),
                        align=1), ir.VectorType(_I16, 16))
                if nibbles:
                    for u in range(0, per_line, 2):
                        pair(builder.add(first, ir.Constant(first.type, u)),
                             [spread(p, [u] * 4 + [u + 1] * 4) for p in products], plane,
                             2 * u)
                elif grouped:
                    block_group(first, products)
                else:
                    for u in range(per_line):
                        block(builder.add(first, ir.Constant(first.type, u)), False,
                              [(p, u) for p in products], u)
            done = builder.mul(lines, ir.Constant(blocks.type, per_line))
            if nibbles:  # a last pair, in the interleaved layout too
                two = ir.Constant(blocks.type, 2)
                with builder.if_then(builder.icmp_signed(">=", builder.sub(blocks, done), two)):
                    pair(done, [spread(p, [0] * 4 + [1] * 4) for p in scale_products(done, 2)])
                last_pair = builder.and_(builder.sub(blocks, done), two)
                done = builder.add(done, last_pair)
            with cgutils.for_range_slice(builder, done, blocks,
                                         ir.Constant(blocks.type, 1)) as (b, _):
                block(b, True)
            totals = []
            for row_sums in sums:
                total = builder.load(row_sums[0])
                for other in row_sums[1:]:
                    total = builder.fadd(total, builder.load(other))
                totals.append(total)
            values = lane_totals(builder, totals)
            if rows == 1:
                return values[0]
            return context.make_tuple(builder, signature.return_type, values)

        return sig, codegen

    return dot


_dot16 = _dot_kernel(4, 1, _ONE_ROW_WAYS)
_dot32 = _dot_kernel(5, 1, _ONE_ROW_WAYS)
_dot16x4 = _dot_kernel(4, 4)
_dot32x4 = _dot_kernel(5, 4)
_dot16x8 = _dot_kernel(4, 8)
_dot32x8 = _dot_kernel(5, 8)
_grouped32x4 = _dot_kernel(5, 4, grouped=True)
_grouped32x8 = _dot_kernel(5, 8, grouped=True)



@jit()
def quantize_rows(x: Any, xq: Any, xd: Any, shift: int) -> bool:
    """Quantize x (M, K) float32 per block of ``1 << shift`` into xq int16 and scales xd.

    Returns False (leaving the outputs partly written) when x holds a NaN or an infinity,
    which the caller then multiplies in float32 so that they propagate as the reference does.
    """
    m_rows, k = x.shape
    size = 1 << shift
    for m in range(m_rows):
        for b in range(k >> shift):
            amax = np.float32(0.0)
            probe = np.float32(0.0)  # NaN once a NaN or an infinity was seen (v * 0)
            for j in range(b * size, b * size + size):
                amax = max(amax, abs(x[m, j]))  # (max drops a NaN: hence the probe)
                probe += x[m, j] * np.float32(0.0)
            if not (amax < np.float32(np.inf) and probe == np.float32(0.0)):
                return False
            scale = amax / np.float32(32767.0)
            xd[m, b] = scale
            inv = np.float32(32767.0) / amax if amax > 0 else np.float32(0.0)
            for j in range(b * size, b * size + size):
                xq[m, j] = np.int16(np.rint(x[m, j] * inv))
    return True


@jit(inline=True)
def store4(out: Any, offsets: Any, xsum: Any, m: int, n: int, a0: Any, a1: Any, a2: Any,
           a3: Any) -> None:
    """Out[m..m+3, n] = the four rows' sums less weight row n's `offsets` times `xsum`."""
    for b in range(offsets.shape[0]):
        a0 -= xsum[m, b] * offsets[b]
        a1 -= xsum[m + 1, b] * offsets[b]
        a2 -= xsum[m + 2, b] * offsets[b]
        a3 -= xsum[m + 3, b] * offsets[b]
    out[m, n] = a0
    out[m + 1, n] = a1
    out[m + 2, n] = a2
    out[m + 3, n] = a3


@intrinsic  # type: ignore[untyped-decorator]
def _widen_halves(typingctx: Any, d: Any, n: Any, buf: Any) -> Any:
    """``buf[:] = float32(d[n])`` for half bits `d` (N, B) uint16: 8 per vector conversion."""
    if not (isinstance(d, types.Array) and d.ndim == 2 and d.layout == "C"
            and d.dtype == types.uint16 and isinstance(buf, types.Array) and buf.ndim == 1
            and buf.layout == "C" and buf.dtype == types.float32):
        return None
    sig = types.void(d, n, buf)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> None:
        d_arr, b_arr = (context.make_array(signature.args[i])(context, builder, args[i])
                        for i in (0, 2))
        row = context.cast(builder, args[1], signature.args[1], types.intp)
        width = builder.extract_value(d_arr.shape, 1)
        src = builder.gep(d_arr.data, [builder.mul(row, width)])
        vectors = builder.lshr(width, ir.Constant(width.type, 3))
        halves, floats = ir.VectorType(ir.HalfType(), _LANES), ir.VectorType(_F32, _LANES)
        with cgutils.for_range(builder, vectors) as loop:
            at = builder.shl(loop.index, ir.Constant(width.type, 3))
            bits = builder.load(builder.bitcast(builder.gep(src, [at]), halves.as_pointer()),
                                align=2)
            builder.store(builder.fpext(bits, floats),
                          builder.bitcast(builder.gep(b_arr.data, [at]), floats.as_pointer()),
                          align=4)
        done = builder.shl(vectors, ir.Constant(width.type, 3))
        with cgutils.for_range_slice(builder, done, width, ir.Constant(width.type, 1)) as (b, _):
            value = widen_half(builder, builder.load(builder.gep(src, [b])))
            builder.store(value, builder.gep(b_arr.data, [b]))

    return sig, codegen


@intrinsic  # type: ignore[untyped-decorator]
def _widen_levels(typingctx: Any, levels: Any, supers: Any, n: Any, buf: Any) -> Any:
    """``buf[b] = supers[n, b // per] * float32(levels[n, b])``, 8 sub-blocks per vector.

    `levels` (N, B) int8 or uint8, `supers` (N, S) float32, B / S = per a multiple of 8.
    Why IR: as a numba loop (a short inner loop per super-block) it stayed scalar, 1.4 ns a
    sub-block (a Q4_K product took 2.2x as long as with float32 scales, one thread).
    """
    if not (isinstance(levels, types.Array) and levels.ndim == 2 and levels.layout == "C"
            and levels.dtype in (types.int8, types.uint8)
            and isinstance(supers, types.Array) and supers.ndim == 2 and supers.layout == "C"
            and supers.dtype == types.float32 and isinstance(buf, types.Array)
            and buf.ndim == 1 and buf.layout == "C" and buf.dtype == types.float32):
        return None
    signed = levels.dtype == types.int8
    sig = types.void(levels, supers, n, buf)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> None:
        l_arr, s_arr, b_arr = (context.make_array(signature.args[i])(context, builder, args[i])
                               for i in (0, 1, 3))
        row = context.cast(builder, args[2], signature.args[2], types.intp)
        width = builder.extract_value(l_arr.shape, 1)
        count = builder.extract_value(s_arr.shape, 1)
        vectors = builder.sdiv(builder.lshr(width, ir.Constant(width.type, 3)), count)
        l_row = builder.gep(l_arr.data, [builder.mul(row, width)])
        s_row = builder.gep(s_arr.data, [builder.mul(row, count)])
        i8x8, f32x8 = ir.VectorType(_I8, _LANES), ir.VectorType(_F32, _LANES)
        with cgutils.for_range(builder, count) as outer:
            scale = splat(builder, builder.load(builder.gep(s_row, [outer.index])), _LANES)
            first = builder.mul(outer.index, vectors)
            with cgutils.for_range(builder, vectors) as inner:
                at = builder.shl(builder.add(first, inner.index), ir.Constant(width.type, 3))
                raw = builder.load(builder.bitcast(builder.gep(l_row, [at]), i8x8.as_pointer()),
                                   align=1)
                values = (builder.sitofp if signed else builder.uitofp)(raw, f32x8)
                builder.store(builder.fmul(values, scale), builder.bitcast(
                    builder.gep(b_arr.data, [at]), f32x8.as_pointer()), align=4)

    return sig, codegen


def row_scales(d: Array | tuple[Array, Array], n: int, buf: Array) -> Array:
    """Weight row n's scales (or offsets) as float32 (compiled code only: see its overload).

    `d` is float32 (N, B) values, uint16 (N, B) half bits, or factored (levels (N, B)
    integers, supers (N, S) float32), worth ``supers[n, b // (B / S)] * levels[n, b]`` (the K
    formats' super-block scale times a sub-block's 6- or 8-bit one: the float32 product their
    dequantizer forms). `buf` holds B float32 for the last two.
    """
    raise NotImplementedError


def _kernel_scales(d: Array | tuple[Array, Array], n: int, buf: Array) -> Any:
    """What the dot kernels take for weight row n's scales (compiled code only)."""
    raise NotImplementedError


@overload(_kernel_scales, inline="always")  # type: ignore[untyped-decorator]
def _kernel_scales_impl(d: Any, n: Any, buf: Any) -> Any:
    # NOTE: factored scales (a byte a sub-block and a float32 per 256 weights, as the K formats
    # hold them: Q4_K 4.75 bits a weight with its offsets, not 6; Q6_K 8.6, not 10) go to the
    # kernels whole, which widen a line's in registers (widened a row at a time into `buf`
    # first, a one-row Q4_K product took 1.2x as long as with float32 scales)
    if isinstance(d, types.BaseTuple):
        def whole(d: Any, n: Any, buf: Any) -> Any:
            return d
        return whole

    def row(d: Any, n: Any, buf: Any) -> Any:
        return row_scales(d, n, buf)
    return row


@overload(row_scales, inline="always")  # type: ignore[untyped-decorator]
def _row_scales_impl(d: Any, n: Any, buf: Any) -> Any:
    if isinstance(d, types.BaseTuple):
        def factored(d: Any, n: Any, buf: Any) -> Any:
            levels, supers = d
            _widen_levels(levels, supers, n, buf)
            return buf
        return factored

    # NOTE: half bits are widened a row at a time into `buf`, 8 per vector instruction: one
    # scalar conversion per block inside the dot kernel made a 4864 x 896 product 35 % slower,
    # and a scalar loop here 16-row products 4-7 % slower.
    if d.dtype == types.uint16:
        def widen(d: Any, n: Any, buf: Any) -> Any:
            _widen_halves(d, n, buf)
            return buf
        return widen

    def view(d: Any, n: Any, buf: Any) -> Any:
        return d[n]
    return view


@jit(inline=True)
def _pair_span(xq: Any, xd: Any, qs: Any, d: Any, mins: Any, xsum: Any, out: Any, lo: int,
               hi: int) -> None:
    """Out[:, lo:hi] two weight rows and eight activation rows a pass (`intpairs`).

    For one-byte weights with plain scales in blocks of 16; ``hi - lo`` even and the
    activation rows a multiple of 8.
    """
    bufs = np.empty((2, xd.shape[1]), np.float32)
    mbufs = np.empty((2, xsum.shape[1]), np.float32)
    for n in range(lo, hi - 1, 2):
        s0, s1 = row_scales(d, n, bufs[0]), row_scales(d, n + 1, bufs[1])
        o0, o1 = row_scales(mins, n, mbufs[0]), row_scales(mins, n + 1, mbufs[1])
        for m in range(0, xq.shape[0] - 7, 8):
            r = pair16x8(qs, n, xq, m, s0, s1, xd)
            store4(out, o0, xsum, m, n, r[0], r[1], r[2], r[3])
            store4(out, o0, xsum, m + 4, n, r[4], r[5], r[6], r[7])
            store4(out, o1, xsum, m, n + 1, r[8], r[9], r[10], r[11])
            store4(out, o1, xsum, m + 4, n + 1, r[12], r[13], r[14], r[15])


@jit(inline=True)
def _rows(xq: Any, xd: Any, qs: Any, d: Any, mins: Any, xsum: Any, out: Any, lo: int, hi: int,
          shift: int, highs: Any = None) -> None:
    m_rows = xq.shape[0]
    buf = np.empty(xd.shape[1], np.float32)
    mbuf = np.empty(xsum.shape[1], np.float32)
    for n in range(lo, hi):
        scales = _kernel_scales(d, n, buf)
        offsets = row_scales(mins, n, mbuf)
        m = 0
        # NOTE: eight activation rows per pass over the weight row, each block loaded and
        # widened once for them: a 16-token prefill's Q8_0 products ran 4-6 % faster than
        # with four (9728 x 896: 1.19-1.20 against 1.26 ms on 2 threads, interleaved); sixteen
        # were slower again (their sums no longer stay in registers)
        while m + 8 <= m_rows:
            if shift == 5:
                a0, a1, a2, a3, a4, a5, a6, a7 = _dot32x8(qs, n, xq, m, scales, xd, highs)
            else:
                a0, a1, a2, a3, a4, a5, a6, a7 = _dot16x8(qs, n, xq, m, scales, xd, None)
            store4(out, offsets, xsum, m, n, a0, a1, a2, a3)
            store4(out, offsets, xsum, m + 4, n, a4, a5, a6, a7)
            m += 8
        while m + 4 <= m_rows:
            if shift == 5:
                a0, a1, a2, a3 = _dot32x4(qs, n, xq, m, scales, xd, highs)
            else:
                a0, a1, a2, a3 = _dot16x4(qs, n, xq, m, scales, xd, None)
            store4(out, offsets, xsum, m, n, a0, a1, a2, a3)
            m += 4
        while m < m_rows:
            acc = (_dot32(qs, n, xq, m, scales, xd, highs) if shift == 5
                   else _dot16(qs, n, xq, m, scales, xd, None))
            for b in range(offsets.shape[0]):
                acc -= xsum[m, b] * offsets[b]
            out[m, n] = acc
            m += 1


@jit()
def interleave_pairs(xq: Any) -> None:
    """Reorder each row's whole groups of 64 (two blocks of 32) for the 4-bit kernel's pairs.

    The kernel reads two blocks of 4-bit weights as 16 lanes of 16 bits: lane j of block h
    holds its weights 2j, 16 + 2j, 2j + 1 and 17 + 2j in its four nibbles, and a mask or shift
    of the lanes gives each nibble's 16 weights (8 a block) at once, with no widening shuffle
    per block. The group's x becomes those four vectors' partners: x[2j], x[2j + 1],
    x[16 + 2j], x[17 + 2j] for block 0 then block 1 each. A last block of 32 stays as it is.

    A call, not inlined: inside the ``parallel=True`` products numba turned the group's copy
    into a parallel loop of its own, one per group (the split products took 1.7x as long).
    """
    group = np.empty(64, np.int16)
    for m in range(xq.shape[0]):
        for base in range(0, xq.shape[1] - 63, 64):
            for j in range(64):
                group[j] = xq[m, base + j]
            for h in range(2):
                for j in range(8):
                    at = base + h * 8 + j
                    xq[m, at] = group[h * 32 + 2 * j]
                    xq[m, at + 16] = group[h * 32 + 2 * j + 1]
                    xq[m, at + 32] = group[h * 32 + 16 + 2 * j]
                    xq[m, at + 48] = group[h * 32 + 17 + 2 * j]


@intrinsic  # type: ignore[untyped-decorator]
def _interleave_group(typingctx: Any, xq: Any, m: Any, base: Any, lanes: Any) -> Any:
    """Row m's `GROUP` blocks of 32 from column `base` of int16 `xq` reordered in place.

    One vector load, shuffle and store (no scratch buffer); `lanes` must be a literal.
    """
    if not (isinstance(xq, types.Array) and xq.ndim == 2 and xq.layout == "C"
            and xq.dtype == types.int16 and isinstance(lanes, types.IntegerLiteral)):
        return None
    width = lanes.literal_value
    per = 2 * width // GROUP
    span = GROUP * 32
    picks = [g * 32 + c + i for c in range(0, 32, per) for g in range(GROUP) for i in range(per)]
    sig = types.void(xq, m, base, lanes)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> None:
        arr = context.make_array(signature.args[0])(context, builder, args[0])
        row, col = (context.cast(builder, args[i], signature.args[i], types.intp)
                    for i in (1, 2))
        at = builder.add(builder.mul(row, builder.extract_value(arr.shape, 1)), col)
        ptr = builder.bitcast(builder.gep(arr.data, [at]), ir.VectorType(_I16, span).as_pointer())
        group = builder.load(ptr, align=2)
        builder.store(builder.shuffle_vector(group, group, ir.Constant(
            ir.VectorType(_I32, span), picks)), ptr, align=2)

    return sig, codegen


@jit()
def interleave_groups(xq: Any, lanes: int) -> None:
    """Reorder each row's whole groups of `GROUP` blocks of 32 for `_dot_kernel`'s groups.

    With L = `lanes` (the CPU's float32 lanes, 8 or 16) and P = 2 L / GROUP, chunk c of a
    group (2 L values) holds x[c P .. c P + P - 1] of each of its blocks in turn: against the
    weights' bytes in that order, a 16-bit pair multiply-add gives L / GROUP lanes to each
    block, and the chunks add up lane by lane into one vector of all the group's sums. The
    blocks past the last whole group stay as they are.
    """
    span = GROUP * 32
    for m in range(xq.shape[0]):
        for base in range(0, xq.shape[1] - span + 1, span):
            if lanes == 16:
                _interleave_group(xq, m, base, 16)
            else:
                _interleave_group(xq, m, base, 8)


@jit(inline=True)
def _quantize(x: Any, shift: int, offsets: int, pairs: bool = False
              ) -> tuple[Any, Any, Any, bool]:
    """(xq, xd, xsum, finite): x quantized per sub-block, with the sums of its sub-blocks.

    With `offsets` (the weight's offsets per sub-block: 0, or K >> shift) xsum holds the exact
    integer sum of each quantized sub-block times its scale, so that an offset meets the same
    x as the products: (q - m) x rounds as a whole, not q x alone.
    """
    m_rows, k = x.shape
    xq = np.empty((m_rows, k), np.int16)
    xd = np.empty((m_rows, k >> shift), np.float32)
    xsum = np.empty((m_rows, offsets), np.float32)
    if not quantize_rows(x, xq, xd, shift):
        return xq, xd, xsum, False
    size = 1 << shift
    for m in range(m_rows):
        for b in range(offsets):
            total = np.int32(0)
            for j in range(b * size, b * size + size):
                total += np.int32(xq[m, j])
            xsum[m, b] = np.float32(total) * xd[m, b]
    if pairs:  # (after the sums: a group mixes its two blocks)
        interleave_pairs(xq)
    return xq, xd, xsum, True


@jit()
def _product32(x: Any, qs: Any, d: Any, mins: Any, out: Any, highs: Any, offsets: int) -> bool:
    xq, xd, xsum, finite = _quantize(x, 5, offsets, qs.shape[1] < x.shape[1])
    if finite:
        _rows(xq, xd, qs, d, mins, xsum, out, 0, qs.shape[0], 5, highs)
    return bool(finite)


@jit()
def _product16(x: Any, qs: Any, d: Any, mins: Any, out: Any, offsets: int) -> bool:
    xq, xd, xsum, finite = _quantize(x, 4, offsets)
    if finite:
        _rows(xq, xd, qs, d, mins, xsum, out, 0, qs.shape[0], 4)
    return bool(finite)


@jit(parallel=True)
def _product32_split(x: Any, qs: Any, d: Any, mins: Any, out: Any, parts: int,
                     highs: Any, offsets: int) -> bool:
    xq, xd, xsum, finite = _quantize(x, 5, offsets, qs.shape[1] < x.shape[1])
    if finite:
        n = qs.shape[0]
        step = -(-n // parts)
        for t in prange(parts):
            _rows(xq, xd, qs, d, mins, xsum, out, t * step, min(n, t * step + step), 5, highs)
    return bool(finite)


@jit(parallel=True)
def _product16_split(x: Any, qs: Any, d: Any, mins: Any, out: Any, parts: int,
                     offsets: int) -> bool:
    xq, xd, xsum, finite = _quantize(x, 4, offsets)
    if finite:
        n = qs.shape[0]
        step = -(-n // parts)
        for t in prange(parts):
            _rows(xq, xd, qs, d, mins, xsum, out, t * step, min(n, t * step + step), 4)
    return bool(finite)


@jit(inline=True)
def _grouped_rows(xq: Any, xd: Any, qs: Any, d: Any, mins: Any, xsum: Any, out: Any, lo: int,
                 hi: int) -> None:
    # at least four activation rows; a last 1-3 are done again with the rows before them
    m_rows = xq.shape[0]
    buf = np.empty(xd.shape[1], np.float32)
    mbuf = np.empty(xsum.shape[1], np.float32)
    for n in range(lo, hi):
        scales = row_scales(d, n, buf)
        offsets = row_scales(mins, n, mbuf)
        m = 0
        while m + 8 <= m_rows:
            a0, a1, a2, a3, a4, a5, a6, a7 = _grouped32x8(qs, n, xq, m, scales, xd, None)
            store4(out, offsets, xsum, m, n, a0, a1, a2, a3)
            store4(out, offsets, xsum, m + 4, n, a4, a5, a6, a7)
            m += 8
        while m < m_rows:  # fours; a last 1-3 rows with the rows before them (rewritten)
            m = min(m, m_rows - 4)
            a0, a1, a2, a3 = _grouped32x4(qs, n, xq, m, scales, xd, None)
            store4(out, offsets, xsum, m, n, a0, a1, a2, a3)
            m += 4


# NOTE: `GROUP` blocks a vector for four or more rows: per row and group four 16-bit
# multiply-adds, three integer adds, one conversion, one spread of the scales and one scaling,
# where a block at a time took a multiply-add, a conversion, a spread and a scaling each.
# Two blocks a vector first: Q8_0 by 16 rows, 2 threads, one process each, interleaved: 9728 x
# 896 1.30-1.33 against 1.54-1.83 ms, 896 x 4864 0.85-1.06 against 1.01-1.03 for two weight
# rows a pass. Four: llvm-mca (Ice Lake server model) on the 8-row loop 24.4 against 19.7
# multiply-adds a cycle; a 16-token prefill of the 0.5B model 89-91 against 106-108 ms (llama.cpp
# 99-101 and 101-116 in the same runs). An entry of its own (as `_paired_split`), so that a
# decode step's one-row products never pay for its compilation.
@jit(parallel=True)
def _grouped_split(x: Any, qs: Any, d: Any, mins: Any, out: Any, parts: int, offsets: int,
                  lanes: int) -> bool:
    xq, xd, xsum, finite = _quantize(x, 5, offsets)
    if finite:
        interleave_groups(xq, lanes)
        n = qs.shape[0]
        step = -(-n // parts)
        for t in prange(parts):
            _grouped_rows(xq, xd, qs, d, mins, xsum, out, t * step, min(n, t * step + step))
    return bool(finite)


# NOTE: an entry of its own, compiled only for products that take the pairs: inside the
# products above (a second specialization of them), a first 16-token Q8_0 prompt on a 0.5B
# model compiled 5-7 s longer (8.5-10.8 against 3.4 s), and a SmolLM2 chat prompt, whose rows
# are too short for pairs, 4.6 s longer
@jit(parallel=True)
def _paired_split(x: Any, qs: Any, d: Any, mins: Any, out: Any, parts: int,
                  offsets: int) -> bool:
    xq, xd, xsum, finite = _quantize(x, 4, offsets)
    if finite:
        n = qs.shape[0]
        step = -(-(n // 2) // parts) * 2
        for t in prange(parts):
            _pair_span(xq, xd, qs, d, mins, xsum, out, min(n, t * step),
                       min(n, t * step + step))
    return bool(finite)


#: Fewest elements a row for which `prepare` multiplies two weight rows a pass, from 8
#: activation rows (blocks of 16): where eight int16 activation rows (32 KB) no longer fit in
#: L1 beside the weights. Measured on Q8_0 before its halves: weights from memory, 2 threads,
#: alternating processes, against one row a pass: 896 x 4864 by 16 rows 0.58-0.59 against
#: 0.69-0.70 ms, by 8 rows 0.32 against 0.35, by 4 0.19 against 0.18; 9728 x 896 by 16 rows
#: 1.07-1.10 against 1.04, by 4 0.41 against 0.31.
_PAIR_MIN_K: Final = 2048


def run(x: Array, qs: Array, d: Array | tuple[Array, Array], mins: Array | tuple[Array, Array],
        out: Array, shift: int, highs: Array | None = None) -> bool:
    """Out (M, N) = x (M, K) float32 times the weight, by integer dot products.

    One compiled call quantizes x per sub-block (`quantize_rows`) and multiplies, split over
    threads when it pays (a decode step makes ~170 of these calls: a second call per product
    cost more than the quantization). `qs` is int8 (N, K), or uint8 (N, K / 2) 4-bit weights
    (`quant.Packed.nibbles`, shift 5) with, for 5-bit weights, their plane of fifth bits
    `highs` (`quant.Packed.highs`); `d` the scales and `mins` the offsets per sub-block, or
    (N, 0), each as `row_scales` takes them.

    Returns:
        False, with nothing written, when x holds a NaN or an infinity.
    """
    return bool(prepare(x, qs, d, mins, out, shift, highs)())


def prepare(x: Array, qs: Array, d: Array | tuple[Array, Array],
            mins: Array | tuple[Array, Array], out: Array, shift: int,
            highs: Array | None = None) -> Callable[[], bool]:
    """`run`'s compiled call on these arrays (C-contiguous x), made once.

    The call returns False, with nothing written, when x holds a NaN or an infinity.
    """
    n, k = qs.shape[0], x.shape[1]
    if highs is not None and (k % 128 or highs.shape != (n, k // 8) or shift != 5):
        raise ValueError(f"5-bit weights need K a multiple of 128 and a plane of (N, K / 8) "
                         f"bytes: K {k}, plane {highs.shape}")
    parts = pool.parts(n, x.shape[0] * n * k, grain=16)
    offsets = (mins[0] if isinstance(mins, tuple) else mins).shape[1]
    plain = qs.dtype == np.int8 and highs is None and not isinstance(d, tuple)
    if plain and shift == 5 and x.shape[0] >= 4:
        # one-byte weights in blocks of 32 with plain scales: two blocks a vector (`halves`)
        return functools.partial(_grouped_split, x, qs, d, mins, out, parts, offsets,
                                 host_lanes())
    if plain and x.shape[0] % 8 == 0 and n % 2 == 0 and k >= _PAIR_MIN_K:
        # one-byte weights in blocks of 16, long rows: two weight rows a pass (`intpairs`)
        return functools.partial(_paired_split, x, qs, d, mins, out, parts, offsets)
    if shift == 4:
        if parts > 1:
            return functools.partial(_product16_split, x, qs, d, mins, out, parts, offsets)
        return functools.partial(_product16, x, qs, d, mins, out, offsets)
    if parts > 1:
        return functools.partial(_product32_split, x, qs, d, mins, out, parts, highs, offsets)
    return functools.partial(_product32, x, qs, d, mins, out, highs, offsets)
