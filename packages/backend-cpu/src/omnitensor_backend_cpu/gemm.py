"""Float32 matrix products on the host's full vector width, where BLAS's kernels are narrower.

``out (M, N) = a (M, K) @ bt (N, K).T``, the shape of every ``x @ W.T`` of a prefill, an
encoder batch and a training step. numpy's OpenBLAS picks its kernels by CPU type, and where
the environment pins an older one (``OPENBLAS_CORETYPE=Haswell``) or OpenBLAS does not know the
CPU, it runs 8-float (AVX2) kernels on a CPU with 16-float registers: half its speed (a
512 x 896 by 896 x 4864 product at 250 GFLOP/s on 2 Zen 5 cores, 430-440 with its AVX-512
kernels). omnitensor never overrides that choice; it multiplies with its own kernels instead,
which numba compiles for the host.

The design is the classic one (BLIS, OpenBLAS): the activations ``a`` are packed into panels of
`SPAN` rows, (K, SPAN) each, contiguous, so a tile streams its panel from L1/L2 in order; a tile
holds ``out[t * SPAN : +SPAN, n : n + WEIGHTS]`` in registers (2 vectors x 12 weight rows = 24
of the 32 vector registers) and, for each k, loads two vectors of the panel and broadcasts
twelve weights (AVX-512's embedded broadcast, no shuffle), 24 multiply-adds. bt is read in
place through its strides (``W`` as stored, or a transposed view: the broadcasts need no
contiguity), so no weight is copied. Tiles run in blocks of `BLOCK_TILES` panels so a weight
strip, read from memory once per block, stays in L1 across them.

Measured on one Zen 5 core (interleaved medians, panels packed): 210-250 GFLOP/s for
128..1024 rows by 384..4864 (the core's peak is ~240); two threads 400-450.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import numpy as np
from llvmlite import ir
from numba import types as _types
from numba.core import cgutils as _cgutils
from numba.extending import intrinsic as _intrinsic

from . import pool, threads
from ._compat import jit, prange
from .irblocks import fmuladd, intrinsic_args, load_vector, prefetch, splat
from .mathlib import gelu_erf32f, gelu_tanh32f, silu32f

__all__ = ["ACTIVATIONS", "EPILOGUE_BIAS", "EPILOGUE_RESIDUAL",
           "EPILOGUE_RESIDUAL_FIRST", "FEW_ROWS", "MIN_WORK", "NO_BIAS", "NO_RESIDUAL",
           "SPAN", "activate", "column_share", "few", "few_tiles", "gemm",
           "multiply_tile", "pack", "pack_rows", "suits", "tile_rows", "tiles",
           "tiles_onto"]

# NOTE: numba's typing helpers are untyped; used through Any (see `_compat`).
types: Any = _types
cgutils: Any = _cgutils
intrinsic: Any = _intrinsic

_I64, _F32 = ir.IntType(64), ir.FloatType()

#: Floats per vector (one AVX-512 register), vectors and weight rows per tile.
LANES: Final = 16
VECTORS: Final = 2
WEIGHTS: Final = 12
#: Activation rows per panel.
SPAN: Final = LANES * VECTORS
#: Panels per block (see the module's docstring): 4 panels of 32 rows by K = 896 are 458 KB.
BLOCK_TILES: Final = 4
#: Most rows of a, and the panel width, of `few`'s products; its tiles' weight rows.
FEW_ROWS: Final = LANES
FEW_WEIGHTS: Final = 16

#: Floats of a 64-byte cache line (the tiles that prefetch take one of 16 rows per k).
_LINE: Final = 16

#: Panels per thread from which `gemm` splits a product by rows rather than by columns.
_ROW_SPLIT_PANELS: Final = 4


def _tile(weights: int, vectors: int = VECTORS, prefetch_next: bool = False) -> Any:
    """An intrinsic ``tile(panels, bt, out, t, n)`` for `weights` weight rows from n.

    ``out[t * span + i, n + r] = sum_k panels[t * K + k, i] * bt[n + r, k]`` for ``i <
    span`` (``LANES * vectors``: the panels' width) and ``r < weights``, K = bt's second
    extent; rows past the end of `out` (a last panel's padding) are computed and dropped.
    panels is (T * K, span) float32, C-contiguous; bt any strides; out's rows contiguous
    (unit column stride) from 4 weight rows (the tiles store rows as vectors). `flags` (see
    `EPILOGUE_BIAS`) add ``bias[n + r]`` and ``residual[t * span + i, n + r]`` to each result
    before it is stored, in the program's order. `prefetch_next`: at each k, one prefetch of
    the line of k in one of the next tile's rows (row k mod 16 of the 16 after n): every line
    the next tile reads, once (see `_few_full`).
    """
    vf = ir.VectorType(_F32, LANES)
    span = LANES * vectors

    @intrinsic  # type: ignore[untyped-decorator]
    def tile(typingctx: Any, panels: Any, bt: Any, out: Any, bias: Any, residual: Any,
             t: Any, n: Any, flags: Any) -> Any:
        sig = types.void(panels, bt, out, bias, residual, t, n, flags)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> None:
            (p_arr, b_arr, o_arr, bias_arr, r_arr), (t0, n0, flags) = intrinsic_args(
                context, builder, signature, args, 5)
            k_count = builder.extract_value(b_arr.shape, 1)
            b_rows, b_cols = (builder.extract_value(b_arr.strides, i) for i in (0, 1))
            b_base = builder.ptrtoint(b_arr.data, _I64)
            rows = [builder.add(b_base, builder.mul(builder.add(n0, ir.Constant(_I64, r)),
                                                    b_rows)) for r in range(weights)]
            panel = builder.gep(p_arr.data, [builder.mul(builder.mul(t0, k_count),
                                                         ir.Constant(_I64, span))])
            accs = [[cgutils.alloca_once_value(builder, ir.Constant(vf, None))
                     for _ in range(weights)] for _ in range(vectors)]

            bases = _row_bases(weights)
            stride = builder.sdiv(b_rows, ir.Constant(_I64, 4))  # (bt's row stride, floats)

            def step(k: Any) -> None:
                line = builder.gep(panel, [builder.mul(k, ir.Constant(_I64, span))])
                xs = [load_vector(builder, builder.gep(line, [ir.Constant(_I64, LANES * v)]),
                                  LANES) for v in range(vectors)]
                offset = builder.mul(k, b_cols)
                starts = {g: builder.inttoptr(builder.add(rows[g], offset), _F32.as_pointer())
                          for g in set(g for g, _ in bases)}
                for r, (g, times) in enumerate(bases):
                    at = builder.gep(starts[g], [builder.mul(stride, ir.Constant(_I64, times))])
                    b = splat(builder, builder.load(at, align=4), LANES)
                    for v in range(vectors):
                        acc = accs[v][r]
                        builder.store(fmuladd(builder, xs[v], b, builder.load(acc)), acc)

            if prefetch_next:
                # bt's row n + weights + r, r = k % 16, at column k - r (a line's first float)
                first = builder.add(b_base, builder.mul(
                    builder.add(n0, ir.Constant(_I64, weights)), b_rows))
            with cgutils.for_range(builder, k_count) as loop:
                k = loop.index
                if prefetch_next:
                    r = builder.and_(k, ir.Constant(_I64, _LINE - 1))
                    at = builder.add(builder.add(first, builder.mul(r, b_rows)),
                                     builder.mul(builder.sub(k, r), b_cols))
                    prefetch(builder, builder.inttoptr(at, _F32.as_pointer()))
                step(k)
            m0 = builder.mul(t0, ir.Constant(_I64, span))
            store = _store_lanes if weights < 4 else _store_rows
            # (two copies of the stores: the one without addends as before them, since the
            # selects and loads of the other cost 5-10 % of a product with K = 128)
            plain = builder.icmp_signed("==", flags, ir.Constant(_I64, 0))
            with builder.if_else(plain) as (without, with_addends):
                with without:
                    store(builder, o_arr, accs, m0, n0, None)
                with with_addends:
                    store(builder, o_arr, accs, m0, n0,
                          _Addends(builder, bias_arr, r_arr, flags, n0, weights))

        return sig, codegen

    return tile


def _row_bases(weights: int) -> list[tuple[int, int]]:
    """Per weight row r of a tile, (g, m) with r = g + m, m in {0, 1, 2, 4, 8}: few bases g.

    At each k a tile reads one float of each of its weight rows. Addressed as ``row g's
    float k + m row strides`` the loads take x86's scaled index (``[base + stride * m]``,
    the stride's multiples held in registers): a 12-row tile advances four bases per k,
    where a pointer per row advanced by an add each (eleven adds, on the ports the
    multiply-adds use) ran the tile loop 3-4 % slower (one thread, 832 rows by 384 to
    1536). Greedy: each row not yet reached becomes a base for the rows it reaches.
    """
    plan: dict[int, tuple[int, int]] = {}
    for r in range(weights):
        if r not in plan:
            for times in (0, 1, 2, 4, 8):
                if r + times < weights and r + times not in plan:
                    plan[r + times] = (r, times)
    return [plan[r] for r in range(weights)]


#: `tiles_onto`'s flags: add a bias (one value per column of out), add a residual (out's
#: shape), add the residual before the bias (the program's order, for the same rounding).
EPILOGUE_BIAS: Final = 1
EPILOGUE_RESIDUAL: Final = 2
EPILOGUE_RESIDUAL_FIRST: Final = 4


class _Addends:
    """What a tile adds to its results before storing them (`EPILOGUE_BIAS` and the rest).

    The bias is read once per tile, as one vector of the tile's columns (zero past them); the
    residual row by row, beside each stored piece (a row of zeros is read where there is
    none, or past out's last row: no branch per row). Each addition is selected by the flags
    (an added 0 would turn -0.0 into 0.0); a product with no addends at all takes the plain
    stores instead (see `_tile`).
    """

    def __init__(self, builder: Any, bias_arr: Any, r_arr: Any, flags: Any, n0: Any,
                 weights: int) -> None:
        self.builder = builder
        zero = ir.Constant(_I64, 0)
        self.has_bias = builder.icmp_signed(
            "!=", builder.and_(flags, ir.Constant(_I64, EPILOGUE_BIAS)), zero)
        self.has_residual = builder.icmp_signed(
            "!=", builder.and_(flags, ir.Constant(_I64, EPILOGUE_RESIDUAL)), zero)
        self.residual_first = builder.icmp_signed(
            "!=", builder.and_(flags, ir.Constant(_I64, EPILOGUE_RESIDUAL_FIRST)), zero)
        vf = ir.VectorType(_F32, LANES)
        bias = cgutils.alloca_once_value(builder, ir.Constant(vf, None))
        with builder.if_then(self.has_bias):
            values = ir.Constant(vf, None)
            for r in range(weights):
                at = builder.gep(bias_arr.data, [builder.add(n0, ir.Constant(_I64, r))])
                values = builder.insert_element(values, builder.load(at, align=4),
                                                ir.Constant(ir.IntType(32), r))
            builder.store(values, bias)
        self.bias = builder.load(bias)
        zeros = cgutils.alloca_once(builder, _F32, size=LANES)
        builder.store(ir.Constant(vf, None), builder.bitcast(zeros, vf.as_pointer()), align=4)
        self._zeros = builder.ptrtoint(zeros, _I64)
        self._base = builder.add(builder.ptrtoint(r_arr.data, _I64),
                                 builder.mul(n0, ir.Constant(_I64, 4)))
        self._stride = builder.extract_value(r_arr.strides, 0)

    def _maybe(self, flag: Any, value: Any, addend: Any) -> Any:
        builder = self.builder
        return builder.select(flag, builder.fadd(value, addend), value)

    def row(self, i: Any, inside: Any) -> Any:
        """The address of residual row `i` at column n0 (a scratch row of zeros outside)."""
        builder = self.builder
        at = builder.add(self._base, builder.mul(i, self._stride))
        return builder.select(builder.and_(inside, self.has_residual), at, self._zeros)

    def added(self, values: Any, start: int, row_at: Any) -> Any:
        """`values`: results of the tile's columns [start, start + size) in one row.

        `row_at`: `row`'s address of that row. The sums come back with the bias and the
        residual added in the flags' order.
        """
        builder = self.builder
        kind = values.type
        size = kind.count if isinstance(kind, ir.VectorType) else 1
        at = builder.add(row_at, ir.Constant(_I64, 4 * start))
        # (a row of zeros is read where there is no residual: the load needs no branch)
        residual = builder.load(builder.inttoptr(at, kind.as_pointer()), align=4)
        if size == 1:
            bias = builder.extract_element(self.bias, ir.Constant(ir.IntType(32), start))
        else:
            bias = builder.shuffle_vector(
                self.bias, self.bias, ir.Constant(ir.VectorType(ir.IntType(32), size),
                                                  list(range(start, start + size))))
        early = builder.and_(self.has_residual, self.residual_first)
        late = builder.and_(self.has_residual, builder.not_(self.residual_first))
        first = self._maybe(early, values, residual)
        return self._maybe(late, self._maybe(self.has_bias, first, bias), residual)


def _store_lanes(builder: Any, o_arr: Any, accs: Any, m0: Any, n0: Any,
                 addends: _Addends | None) -> None:
    # Lane i of accs[v][r] is out[m0 + LANES * v + i, n0 + r], stored one by one (the tiles
    # of fewer than 4 weight rows); rows past the end of `out` go to a scratch row instead: a
    # select, not a branch per lane.
    weights = len(accs[0])
    height = builder.extract_value(o_arr.shape, 0)
    o_rows, o_cols = (builder.extract_value(o_arr.strides, i) for i in (0, 1))
    base = builder.ptrtoint(o_arr.data, _I64)
    scratch = cgutils.alloca_once(builder, _F32, size=weights)
    scratch_at = builder.ptrtoint(scratch, _I64)
    for v, column in enumerate(accs):
        sums = [builder.load(acc) for acc in column]
        for lane in range(LANES):
            i = builder.add(m0, ir.Constant(_I64, LANES * v + lane))
            inside = builder.icmp_signed("<", i, height)
            row = builder.add(base, builder.mul(i, o_rows))
            row_at = None if addends is None else addends.row(i, inside)
            for r in range(weights):
                value = builder.extract_element(sums[r], ir.Constant(ir.IntType(32), lane))
                if addends is not None:
                    value = addends.added(value, r, row_at)
                col = builder.add(row, builder.mul(builder.add(n0, ir.Constant(_I64, r)),
                                                   o_cols))
                spare = builder.add(scratch_at, ir.Constant(_I64, 4 * r))
                at = builder.select(inside, col, spare)
                builder.store(value, builder.inttoptr(at, _F32.as_pointer()), align=4)


def _transposed(builder: Any, vectors: list[Any]) -> list[Any]:
    """The 16 x 16 transpose of `vectors` (16 of 16 floats): four stages of 2-input shuffles.

    Stage b swaps, between vectors j and j + b (j & b == 0), the lanes L & b of j with the
    lanes L - b of j + b (AVX-512: one ``vpermt2ps`` each).
    """
    rows = list(vectors)
    lanes = range(LANES)
    b = 1
    while b < LANES:
        low = ir.Constant(ir.VectorType(ir.IntType(32), LANES),
                          [LANES + lane - b if lane & b else lane for lane in lanes])
        high = ir.Constant(ir.VectorType(ir.IntType(32), LANES),
                           [LANES + lane if lane & b else lane + b for lane in lanes])
        for j in range(LANES):
            if j & b == 0:
                rows[j], rows[j + b] = (builder.shuffle_vector(rows[j], rows[j + b], low),
                                        builder.shuffle_vector(rows[j], rows[j + b], high))
        b *= 2
    return rows


def _store_rows(builder: Any, o_arr: Any, accs: Any, m0: Any, n0: Any,
                addends: _Addends | None) -> None:
    # out's rows are contiguous along n (checked by `tiles`): transpose each vector's 16 rows
    # x `weights` columns in registers and store each row's `weights` floats as vectors of 8
    # and 4 (a 12-wide tile's stores went from 384 lane extracts and scalar stores to 96
    # shuffles and 48 stores; the lane stores, kept as a second path for strided rows, had
    # made the tiles' code 3-4x larger, and a parallel region around them took seconds more
    # to compile). Rows past the end of `out` are stored to a scratch row.
    weights = len(accs[0])
    height = builder.extract_value(o_arr.shape, 0)
    o_rows = builder.extract_value(o_arr.strides, 0)
    base = builder.ptrtoint(builder.gep(o_arr.data, [n0]), _I64)
    scratch = builder.ptrtoint(cgutils.alloca_once(builder, _F32, size=LANES), _I64)
    zero = ir.Constant(ir.VectorType(_F32, LANES), None)
    pieces, at = [], 0
    for size in (8, 4, 2, 1):
        while weights - at >= size:
            pieces.append((at, size))
            at += size
    for v, column in enumerate(accs):
        rows = _transposed(builder, [builder.load(acc) for acc in column]
                           + [zero] * (LANES - weights))
        for lane, row_values in enumerate(rows):
            i = builder.add(m0, ir.Constant(_I64, LANES * v + lane))
            inside = builder.icmp_signed("<", i, height)
            address = builder.select(inside, builder.add(base, builder.mul(i, o_rows)),
                                     scratch)
            row_at = None if addends is None else addends.row(i, inside)
            for start, size in pieces:
                piece = builder.shuffle_vector(
                    row_values, row_values,
                    ir.Constant(ir.VectorType(ir.IntType(32), size),
                                list(range(start, start + size))))
                if addends is not None:
                    piece = addends.added(piece, start, row_at)
                ptr = builder.inttoptr(builder.add(address, ir.Constant(_I64, 4 * start)),
                                       ir.VectorType(_F32, size).as_pointer())
                builder.store(piece, ptr, align=4)


@intrinsic  # type: ignore[untyped-decorator]
def _pack_block(typingctx: Any, a: Any, panels: Any, row: Any, k: Any, line: Any,
                lane: Any) -> Any:
    """``panels[line + j, lane + i] = a[row + i, k + j]`` for i, j < `LANES`.

    a's rows contiguous (unit column stride), panels C-contiguous: 16 row loads, a transpose
    in registers (`_transposed`), 16 stores, where the scalar copy wrote every float to its own
    panel line (a 576 x 512 a packed in 128 us against ~45).
    """
    sig = types.void(a, panels, row, k, line, lane)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> None:
        (a_arr, p_arr), (row0, k0, line0, lane0) = intrinsic_args(context, builder, signature,
                                                                  args, 2)
        a_stride = builder.extract_value(a_arr.strides, 0)
        start = builder.add(builder.ptrtoint(a_arr.data, _I64),
                            builder.mul(k0, ir.Constant(_I64, 4)))
        loads = []
        for i in range(LANES):
            at = builder.add(start, builder.mul(builder.add(row0, ir.Constant(_I64, i)),
                                                a_stride))
            loads.append(load_vector(builder, builder.inttoptr(at, _F32.as_pointer()), LANES))
        width = builder.extract_value(p_arr.shape, 1)
        for j, column in enumerate(_transposed(builder, loads)):
            index = builder.add(builder.mul(builder.add(line0, ir.Constant(_I64, j)), width),
                                lane0)
            ptr = builder.bitcast(builder.gep(p_arr.data, [index]),
                                  ir.VectorType(_F32, LANES).as_pointer())
            builder.store(column, ptr, align=4)

    return sig, codegen


_tile_full = _tile(WEIGHTS)
_tile_4 = _tile(4)
_tile_one = _tile(1)
#: The tiles of `FEW_ROWS`-row panels (`few`): 16 weight rows in 16 accumulators, then 4, 1.
#: A few rows of activations barely reuse the weights, which stream from memory: the tiles
#: read 16 rows of them at once, 16 short streams the hardware prefetcher ramps up on too late
#: (24 distinct 9728 x 896 weights by 16 rows, 2 threads: 15-16 GB/s, 26-28 from L3).
#: Each 16-row tile prefetches the next tile's lines as it reads its own: 23-24 GB/s (1.45-1.5
#: against 2.1-2.2 ms a product; from L3, and compiling, as fast as without).
_few_full = _tile(FEW_WEIGHTS, 1, prefetch_next=True)
_few_4 = _tile(4, 1)
_few_one = _tile(1, 1)


@jit()
def pack_rows(a: Any, panels: Any, t_lo: int, t_hi: int) -> None:
    """Panels [t_lo, t_hi) of a (M, K): ``panels[t * K + k, i] = a[t * span + i, k]``.

    span is the panels' width (`SPAN`, or `FEW_ROWS` for `few`).

    Zero past a's last row. (Compiled code may call it: attention packs its weights.)
    """
    m_rows, k_count = a.shape
    span = panels.shape[1]
    if a.strides[0] < a.strides[1]:  # a transposed view (``dY.T @ X``): along its columns
        # NOTE: k outer, so dY is read row after row (a stream); one panel at a time walks
        # down dY's columns, and where dY was just written by another core (the backward
        # pass) that walk took 0.6 ms for a (576, 512) dY against 0.23 ms
        for k in range(k_count):
            for t in range(t_lo, t_hi):
                rows = min(span, m_rows - t * span)
                line = panels[t * k_count + k]
                for i in range(rows):
                    line[i] = a[t * span + i, k]
                for i in range(rows, span):
                    line[i] = np.float32(0.0)
        return
    rows_contiguous = a.strides[1] == a.itemsize
    for t in range(t_lo, t_hi):
        base = t * k_count
        for lane in range(0, span, LANES):  # (span: a multiple of LANES)
            first = t * span + lane
            k = 0
            if rows_contiguous and first + LANES <= m_rows:
                while k + LANES <= k_count:
                    _pack_block(a, panels, first, k, base + k, lane)
                    k += LANES
            for i in range(LANES):
                row = first + i
                if row < m_rows:
                    for kk in range(k, k_count):
                        panels[base + kk, lane + i] = a[row, kk]
                else:
                    for kk in range(k, k_count):
                        panels[base + kk, lane + i] = np.float32(0.0)


#: `tiles_onto`'s bias and residual where there is none (read-only, as the real ones are
#: passed: one compiled kernel for both).
NO_BIAS: Final = np.zeros(0, np.float32)
NO_RESIDUAL: Final = np.zeros((0, 0), np.float32)
NO_BIAS.flags.writeable = NO_RESIDUAL.flags.writeable = False


@jit()
def tiles(panels: Any, bt: Any, out: Any, t_lo: int, t_hi: int, n_lo: int,
          n_hi: int) -> None:
    """``out`` rows of panels [t_lo, t_hi) by columns [n_lo, n_hi) (bt's rows), on this thread.

    `tiles_onto` without addends.
    """
    tiles_onto(panels, bt, out, NO_BIAS, NO_RESIDUAL, 0, 0, t_lo, t_hi, n_lo, n_hi)


@jit()
def tiles_onto(panels: Any, bt: Any, out: Any, bias: Any, residual: Any, flags: int,
               activation: int, t_lo: int, t_hi: int, n_lo: int, n_hi: int) -> None:
    """`tiles`, the results stored with addends (`EPILOGUE_BIAS`...), then activated.

    The `activation` (an `ACTIVATIONS` code, 0 none) runs on each block's rows right after
    the block's tiles, while they are in this core's cache.

    A block of `BLOCK_TILES` panels at a time: each weight strip is read once per block.
    out's elements (and the residual's) must be contiguous along its rows (unit column
    stride): the tiles load and store vectors.
    """
    if out.strides[1] != out.itemsize and out.shape[1] > 1:
        raise ValueError("gemm.tiles: out's rows must be contiguous")
    for block in range(t_lo, t_hi, BLOCK_TILES):
        end = min(t_hi, block + BLOCK_TILES)
        n = n_lo
        while n + WEIGHTS <= n_hi:
            for t in range(block, end):
                _tile_full(panels, bt, out, bias, residual, t, n, flags)
            n += WEIGHTS
        # fewer than a tile's weight rows left (8 or 4 for most widths: 896, 512, 128)
        while n + 4 <= n_hi:
            for t in range(block, end):
                _tile_4(panels, bt, out, bias, residual, t, n, flags)
            n += 4
        while n < n_hi:
            for t in range(block, end):
                _tile_one(panels, bt, out, bias, residual, t, n, flags)
            n += 1
        if activation:
            activate(out, block * panels.shape[1], min(out.shape[0], end * panels.shape[1]),
                     n_lo, n_hi, activation)


#: `gemm`'s activations after the addends, by name: the composites' float32 forms in
#: `mathlib`, as the fused kernels compute them (the same bits).
ACTIVATIONS: Final = {"gelu": 1, "gelu_tanh": 2, "silu": 3}


@jit()
def activate(out: Any, r_lo: int, r_hi: int, n_lo: int, n_hi: int, activation: int) -> None:
    """``out[r_lo:r_hi, n_lo:n_hi] = f(...)`` in place, f by its `ACTIVATIONS` code."""
    for i in range(r_lo, r_hi):
        row = out[i, n_lo:n_hi]
        if activation == 1:
            for j in range(row.shape[0]):
                row[j] = gelu_erf32f(row[j])
        elif activation == 2:
            for j in range(row.shape[0]):
                row[j] = gelu_tanh32f(row[j])
        else:
            for j in range(row.shape[0]):
                row[j] = silu32f(row[j])


#: Fewest multiply-adds (M * N * K) for which a product runs here: below, numpy's matmul on
#: one thread (packing and a parallel region cost more than the wider kernels gain). Every
#: product BLAS would split over threads (`threads.BLAS_PARALLEL_FLOPS`) runs here.
MIN_WORK: Final = 1 << 21


def suits(m_rows: int, n: int, k_count: int) -> bool:
    """Whether a float32 product of this size runs here rather than in BLAS."""
    return m_rows * n * k_count >= MIN_WORK and threads.wide_products()


def pack(a: np.ndarray) -> np.ndarray:
    """The panels of a (M, K) float32: (T * K, SPAN), T = M / SPAN rounded up, zero-padded."""
    m_rows, k_count = a.shape
    count = -(-m_rows // SPAN)
    panels = np.empty((count * k_count, SPAN), np.float32)
    pack_rows(a, panels, 0, count)
    return panels


def gemm(a: np.ndarray, bt: np.ndarray, out: np.ndarray,
         addends: Sequence[np.ndarray] = (), activation: str | None = None) -> None:
    """``out = a @ bt.T``: a (M, K), bt (N, K), out (M, N), float32, any strides.

    Then ``out += addend`` for each of `addends` in order: a bias (N,), or a residual (M, N)
    (one whose rows repeat, row stride 0, is a bias too). A bias and a residual, in either
    order, are added as each tile is stored: a linear layer's bias and the residual
    connection after it cost no pass over out of their own; any others are added after.
    Then `activation` (a key of `ACTIVATIONS`), each block of rows as soon as its tiles are
    stored, in cache (a feed-forward's GELU: no pass over out from memory).
    """
    (m_rows, k_count), n = a.shape, bt.shape[0]
    if (bt.shape[1] != k_count or out.shape != (m_rows, n)
            or (addends and any(x.shape not in ((n,), (m_rows, n)) for x in addends))):
        # the compiled kernels index without bounds checks: a wrong buffer would be overrun
        raise ValueError(f"gemm of a {a.shape} by bt {bt.shape}.T into out {out.shape} "
                         f"(addends {[x.shape for x in addends]}): shapes do not match")
    if out.strides[1] != out.itemsize and n > 1:  # the tiles store rows as vectors
        dense = np.empty(out.shape, np.float32)
        gemm(a, bt, dense, addends, activation)
        out[...] = dense
        return
    flags, bias, residual, later = _epilogue(addends) if addends else _NONE
    act = 0 if activation is None else ACTIVATIONS[activation]
    # (the activation comes after every add: where some are left for after the tiles, or the
    # tiles add up partial sums, after them)
    inside = 0 if later else act
    count = -(-m_rows // SPAN)
    parts = pool.parts(n, m_rows * n * k_count, grain=WEIGHTS)
    if parts <= 1:
        panels = np.empty((count * k_count, SPAN), np.float32)
        pack_rows(a, panels, 0, count)
        tiles_onto(panels, bt, out, bias, residual, flags, inside, 0, count, 0, n)
        for addend in later:
            np.add(out, addend, out=out)
        if act and not inside:
            activate(out, 0, m_rows, 0, n, act)
        return
    # a transposed (a weight gradient dY.T @ X): the sum over tokens splits, each thread
    # reading the rows of dY and X it wrote (see `_split`)
    by = (_BY_TOKENS if a.strides[0] < a.strides[1] and k_count >= _MIN_TOKENS * parts
          else _BY_ROWS if count >= _ROW_SPLIT_PANELS * parts else _BY_COLUMNS)
    share = -(-k_count // parts) if by == _BY_TOKENS else k_count
    panels = np.empty(((parts if by == _BY_TOKENS else 1) * count * share, SPAN), np.float32)
    sums = np.empty((parts - 1 if by == _BY_TOKENS else 0, m_rows, n), np.float32)
    if by == _BY_COLUMNS:  # few panels: packed here (small), then the columns split
        pack_rows(a, panels, 0, count)
    # (split over the sum's terms, the addends come after the partial sums)
    tokens = by == _BY_TOKENS
    _split(a, bt, out, panels, sums, parts, by, bias, residual, 0 if tokens else flags,
           0 if tokens else inside)
    for partial in sums:
        np.add(out, partial, out=out)
    for addend in (addends if tokens else later):
        np.add(out, addend, out=out)
    if act and (tokens or not inside):
        activate(out, 0, m_rows, 0, n, act)


#: `_epilogue` of no addends.
_NONE: Final = (0, NO_BIAS, NO_RESIDUAL, ())


def _epilogue(addends: Sequence[np.ndarray]) -> tuple[int, np.ndarray, np.ndarray,
                                                       Sequence[np.ndarray]]:
    """The tiles' flags, bias and residual for `addends`, and the addends left after them.

    The tiles take the first two when one is a bias and the other a residual, or the first
    alone; each as they read it (float32, rows contiguous, read-only).
    """
    biases = [x.ndim == 1 or (x.shape[0] > 1 and x.strides[0] == 0) for x in addends]
    take = 2 if len(addends) >= 2 and biases[0] != biases[1] else min(1, len(addends))
    flags, bias, residual = 0, NO_BIAS, NO_RESIDUAL
    for x, is_bias in zip(addends[:take], biases[:take], strict=True):
        if is_bias:
            flags |= EPILOGUE_BIAS
            bias = _read_only(x if x.ndim == 1 else x[0])
        else:
            flags |= EPILOGUE_RESIDUAL
            residual = _read_only(x)
    if take == 2 and not biases[0]:
        flags |= EPILOGUE_RESIDUAL_FIRST
    return flags, bias, residual, addends[take:]


def _read_only(values: np.ndarray) -> np.ndarray:
    # (C-contiguous: one compiled kernel for every call)
    if values.dtype != np.float32 or not values.flags.c_contiguous:
        values = np.ascontiguousarray(values, np.float32)
    view = values.view()
    view.flags.writeable = False
    return view


#: How `_split` shares a product among threads: panels of a's rows, bt's rows (out's
#: columns), or the sum's terms (tokens, for a transposed a).
_BY_ROWS: Final = 0
_BY_COLUMNS: Final = 1
_BY_TOKENS: Final = 2
#: Fewest terms of the sum per thread for which a transposed a's product splits them.
_MIN_TOKENS: Final = 64


# NOTE: the threads are numba's OpenMP workers (a parallel region), not `pool`'s: those
# workers spin for a while after every region, and the prefill's other kernels run in such
# regions; a product on the pool's threads right after one ran at half speed (a 128 x 896 by
# 896 x 9728 product: 212 against 412 GFLOP/s). One loop, one call of `pack_rows` and of
# `tiles` in it: each call site in a parallel region compiles the kernel it calls again (3.9 s
# for `tiles`, on a cold cache, against 0.9 s alone).
@jit(parallel=True)
def _split(a: Any, bt: Any, out: Any, panels: Any, sums: Any, parts: int, by: int,
           bias: Any, residual: Any, flags: int, activation: int) -> None:
    n, k_count = bt.shape
    count = -(-a.shape[0] // SPAN)
    for p in prange(parts):
        t_lo, t_hi, n_lo, n_hi, k_lo, k_hi = 0, count, 0, n, 0, k_count
        if by == _BY_ROWS:
            # many panels: each thread packs its own and multiplies them by all of bt (bt is
            # read by every thread, the panels stay in their thread's cache)
            share = -(-count // parts)
            t_lo, t_hi = min(count, p * share), min(count, p * share + share)
        elif by == _BY_COLUMNS:
            n_lo, n_hi = column_share(n, parts, p)
        else:
            # a weight gradient dY.T @ X: each thread sums over its share of the tokens into
            # its own (M, N) (out, or one of `sums`, added after), reading only the rows of
            # dY and X its share of the elementwise kernels before wrote: the other
            # thread's, read from the other core's cache, made a (576, 512) dY's product
            # 0.6 ms against 0.23 ms for the same data warm in both
            share = -(-k_count // parts)
            k_lo, k_hi = min(k_count, p * share), min(k_count, p * share + share)
        # (each thread's panels where a whole share's would start: the last share is short)
        start = p * count * (-(-k_count // parts)) if by == _BY_TOKENS else 0
        mine = panels[start:start + count * (k_hi - k_lo)] if by == _BY_TOKENS else panels
        if by != _BY_COLUMNS:
            pack_rows(a[:, k_lo:k_hi], mine, t_lo, t_hi)
        tiles_onto(mine, bt[:, k_lo:k_hi], out if p == 0 or by != _BY_TOKENS else sums[p - 1],
                   bias, residual, flags, activation, t_lo, t_hi, n_lo, n_hi)


def few(a: np.ndarray, bt: np.ndarray, out: np.ndarray) -> None:
    """`gemm` for at most `FEW_ROWS` rows of a: one panel of 16 rows, tiles of 16 x 16.

    A prompt of a few tokens (8 to 16): 16-row tiles of 16 weight rows (one vector load and
    16 broadcasts for 16 multiply-adds per k) beat both `gemm`'s 32-row panels (half of them
    padding) and `fewrows`' 8-float tiles: a 16-row product by a 9728 x 896 weight 0.97 against
    1.28 ms (fewrows) from memory, 2 threads; by 896 x 4864 0.47 against 0.65 ms.
    """
    (m_rows, k_count), n = a.shape, bt.shape[0]
    if (m_rows > FEW_ROWS or bt.shape[1] != k_count or out.shape != (m_rows, n)
            or (out.strides[1] != out.itemsize and n > 1)):
        raise ValueError(f"gemm.few of a {a.shape} by bt {bt.shape}.T into out {out.shape}: "
                         f"at most {FEW_ROWS} rows, matching shapes, out's rows contiguous")
    panels = np.empty((k_count, FEW_ROWS), np.float32)
    pack_rows(a, panels, 0, 1)
    parts = pool.parts(n, m_rows * n * k_count, grain=FEW_WEIGHTS)
    if parts > 1:
        _few_split(panels, bt, out, parts)
    else:
        few_tiles(panels, bt, out, 0, n)


@jit()
def few_tiles(panels: Any, bt: Any, out: Any, n_lo: int, n_hi: int) -> None:
    """`few`'s columns [n_lo, n_hi) on this thread (out's rows contiguous, as for `tiles`)."""
    if out.strides[1] != out.itemsize and out.shape[1] > 1:
        raise ValueError("gemm.few_tiles: out's rows must be contiguous")
    n = n_lo
    while n + FEW_WEIGHTS <= n_hi:
        _few_full(panels, bt, out, NO_BIAS, NO_RESIDUAL, 0, n, 0)
        n += FEW_WEIGHTS
    while n + 4 <= n_hi:
        _few_4(panels, bt, out, NO_BIAS, NO_RESIDUAL, 0, n, 0)
        n += 4
    while n < n_hi:
        _few_one(panels, bt, out, NO_BIAS, NO_RESIDUAL, 0, n, 0)
        n += 1


@jit(parallel=True)
def _few_split(panels: Any, bt: Any, out: Any, parts: int) -> None:
    n = bt.shape[0]
    share = -(-n // parts)
    step = -(-share // FEW_WEIGHTS) * FEW_WEIGHTS
    for p in prange(parts):
        few_tiles(panels, bt, out, min(n, p * step), min(n, p * step + step))


@jit(inline=True)
def column_share(n: int, parts: int, p: int) -> tuple[int, int]:
    """Columns [lo, hi) of part `p` of `parts`: whole tiles of `WEIGHTS`, the last short."""
    share = -(-n // parts)
    step = -(-share // WEIGHTS) * WEIGHTS
    return min(n, p * step), min(n, p * step + step)


@jit(inline=True)
def multiply_tile(panels: Any, tile: Any, out: Any, start: int, end: int) -> None:
    """``out[:, start:end]`` from a's panels and a widened weight tile (its first rows)."""
    count = panels.shape[0] // max(tile.shape[1], 1)
    tiles(panels, tile[: end - start], out[:, start:end], 0, count, 0, end - start)


@jit(inline=True)
def tile_rows(k_count: int) -> int:
    """Weight rows a thread widens at a time (quantized or 16-bit weights): in its L2."""
    return max(WEIGHTS, (1 << 19) // (4 * max(k_count, 1)) // WEIGHTS * WEIGHTS)
