"""`qmatmul` over 16-bit float weights (``f16``, ``bf16``) read as they are stored.

A float16/bfloat16 matrix is never widened to a float32 copy: each element is widened as it is
read (bfloat16 by a shift and a bit-cast; float16 by the CPU's conversion instruction, F16C on
x86, through an LLVM intrinsic) and reduced against the activation rows, so decode (a few
activation rows) streams the weight once at 2 bytes per element; prefill widens a tile of rows
at a time and multiplies it with BLAS. On a CPU without half conversion (`HALF_CONVERSION`),
float16 rows are converted with integer operations into a small buffer first (`_widen`).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Final

import numpy as np

from . import gemm, pool
from ._compat import HALF_CONVERSION, f32_from_bits, f32_from_half, jit, prange

__all__ = ["FORMATS", "HALF_CONVERSION", "qmatmul", "row_flags", "widen"]

Array = np.ndarray[Any, Any]

#: The formats of `omnitensor.ir.types.HALF_FORMATS` this module runs.
FORMATS: Final = frozenset({"f16", "bf16"})

#: Most activation rows handled by row reductions; more go through widened tiles and BLAS.
ROWS_MAX: Final = 4
#: Float32 bytes of a widened tile multiplied by BLAS (large: see `quant._TILE_BYTES`).
TILE_BYTES: Final = 1 << 22


@jit(inline=True)
def _widen(h: Any, bits: Any, out: Any, is_f16: bool, fix: bool) -> None:
    # `bits` is `out` viewed as int32; int32 arithmetic throughout (unsigned operands would be
    # widened to 64-bit lanes). bfloat16 is the top half of a float32. IEEE half -> float32:
    # sign, exponent and mantissa move into place and the exponent is rebased by 127 - 15,
    # exact for normal halves; zeros, subnormals, inf and NaN (rows flagged by `_row_flags`)
    # are redone in a second pass. NOTE: a reduction in the first loop to find them would cost
    # more than the conversion itself.
    k = h.shape[0]
    if not is_f16:
        for j in range(k):
            bits[j] = np.int32(h[j]) << 16
        return
    for j in range(k):
        x = np.int32(h[j])
        bits[j] = ((x & 0x8000) << 16) | (((x & 0x7FFF) << 13) + (112 << 23))
    if fix:
        tiny = np.float32(2.0**-24)
        for j in range(k):
            x = np.int32(h[j])
            e = x & 0x7C00
            if e == 0:  # zero or subnormal: m * 2**-24
                v = np.float32(x & 0x3FF) * tiny
                out[j] = -v if (x & 0x8000) != 0 else v
            elif e == 0x7C00:  # inf or NaN
                bits[j] = ((x & 0x8000) << 16) | 0x7F800000 | ((x & 0x3FF) << 13)


@jit()
def _rows(x: Any, w: Any, flags: Any, out: Any, lo: int, hi: int, is_f16: bool) -> None:
    m_rows, k = x.shape
    row = np.empty(k, np.float32)
    bits = row.view(np.int32)
    for n in range(lo, hi):
        _widen(w[n], bits, row, is_f16, flags[n] != 0)
        for m in range(m_rows):
            acc = np.float32(0.0)
            for j in range(k):
                acc += x[m, j] * row[j]
            out[m, n] = acc


@jit(inline=True)
def _rows_direct(x: Any, w: Any, out: Any, lo: int, hi: int, is_f16: bool) -> None:
    m_rows, k = x.shape
    for n in range(lo, hi):
        for m in range(m_rows):
            acc = np.float32(0.0)
            if is_f16:
                for j in range(k):
                    acc += x[m, j] * f32_from_half(w[n, j])
            else:
                for j in range(k):
                    acc += x[m, j] * f32_from_bits(np.int32(w[n, j]) << 16)
            out[m, n] = acc


@jit()
def _direct(x: Any, w: Any, out: Any, is_f16: bool) -> None:
    _rows_direct(x, w, out, 0, w.shape[0], is_f16)


@jit(parallel=True)
def _direct_split(x: Any, w: Any, out: Any, is_f16: bool, parts: int) -> None:
    # the decode path: numba's spinning workers, not `pool.parallel_for` (see `pool`)
    n = w.shape[0]
    step = -(-n // parts)
    for t in prange(parts):
        _rows_direct(x, w, out, t * step, min(n, t * step + step), is_f16)


@jit()
def _tile_direct(w: Any, tile: Any, lo: int, hi: int, is_f16: bool) -> None:
    k = w.shape[1]
    for n in range(lo, hi):
        if is_f16:
            for j in range(k):
                tile[n - lo, j] = f32_from_half(w[n, j])
        else:
            for j in range(k):
                tile[n - lo, j] = f32_from_bits(np.int32(w[n, j]) << 16)


@jit()
def _tile(w: Any, flags: Any, tile: Any, lo: int, hi: int, is_f16: bool) -> None:
    for n in range(lo, hi):
        _widen(w[n], tile[n - lo].view(np.int32), tile[n - lo], is_f16, flags[n] != 0)


_NO_FLAGS: Final = np.zeros(0, np.uint8)


@jit(parallel=True)
def _wide_split(panels: Any, w: Any, flags: Any, out: Any, is_f16: bool, parts: int) -> None:
    # `gemm`'s tiles on the widened weight, a tile per thread at a time (as `quant`'s);
    # without flags (empty) by the conversion instruction
    n, k = w.shape
    rows = gemm.tile_rows(k)
    for p in prange(parts):
        lo, hi = gemm.column_share(n, parts, p)
        tile = np.empty((rows, k), np.float32)
        for start in range(lo, hi, rows):
            end = min(hi, start + rows)
            if flags.shape[0] == 0:
                _tile_direct(w, tile, start, end, is_f16)
            else:
                _tile(w, flags, tile, start, end, is_f16)
            gemm.multiply_tile(panels, tile, out, start, end)


def _row_flags(w: Array, format: str) -> Array:
    """uint8 [N]: rows of a float16 matrix holding zeros, subnormals, inf or NaN."""
    if format != "f16":
        return np.zeros(w.shape[0], np.uint8)
    exponent = w & np.uint16(0x7C00)
    flags: Array = ((exponent == 0) | (exponent == 0x7C00)).any(axis=1).astype(np.uint8)
    return flags


# NOTE: keyed by id(buffer) with a weak reference proving it is the same array, as `quant`'s
# repacked weights; only read-only buffers are cached.
_FLAGS: dict[int, tuple[weakref.ref[Array], Array]] = {}
_LOCK = threading.Lock()


def _forget(key: int) -> None:
    with _LOCK:
        _FLAGS.pop(key, None)


def row_flags(blocks: Array, format: str) -> Array:
    """`_row_flags` of a weight's bytes, computed once per read-only buffer."""
    key = id(blocks)
    entry = _FLAGS.get(key)
    if entry is not None and entry[0]() is blocks:
        return entry[1]
    flags = _row_flags(blocks.view(np.uint16), format)
    if not blocks.flags.writeable:
        with _LOCK:
            _FLAGS[key] = (weakref.ref(blocks, lambda _: _forget(key)), flags)
    return flags


def widen(w: Array, format: str, *, hardware: bool = HALF_CONVERSION) -> Array:
    """float32 (N, K) values of 16-bit weights `w` (uint16 [N, K]); tests and tiles use it.

    `hardware` picks the conversion instruction (where the CPU has one) or integer arithmetic.
    """
    out = np.empty(w.shape, np.float32)
    if hardware:
        _tile_direct(w, out, 0, w.shape[0], format == "f16")
    else:
        _tile(w, _row_flags(w, format), out, 0, w.shape[0], format == "f16")
    return out


def qmatmul(x: Array, blocks: Array, format: str, out: Array, *,
            hardware: bool = HALF_CONVERSION) -> None:
    """Out (M, N) = x (M, K) float32 @ widen(w).T, w the (N, 2K) bytes of `format`."""
    n = blocks.shape[0]
    direct = hardware or format == "bf16"
    flags = None if direct else row_flags(blocks, format)
    w = blocks.view(np.uint16)  # (N, K); ggml stores both formats little-endian
    k = w.shape[1]
    is_f16 = format == "f16"
    if x.shape[0] <= ROWS_MAX:
        if direct:
            parts = pool.parts(n, x.shape[0] * n * k, grain=16)
            if parts > 1:
                _direct_split(x, w, out, is_f16, parts)
            else:
                _direct(x, w, out, is_f16)
        else:
            pool.parallel_for(n, lambda lo, hi: _rows(x, w, flags, out, lo, hi, is_f16),
                              work=(n * k) >> (24 - 17), grain=16)
        return
    if x.dtype == np.float32 and gemm.suits(x.shape[0], n, k):
        _wide_split(gemm.pack(x), w, _NO_FLAGS if flags is None else flags, out, is_f16,
                    pool.parts(n, x.shape[0] * n * k, grain=gemm.WEIGHTS))
        return
    rows = max(16, min(n, TILE_BYTES // (4 * k)))
    tile = np.empty((rows, k), np.float32)
    for lo in range(0, n, rows):
        hi = min(lo + rows, n)
        if direct:
            _tile_direct(w, tile, lo, hi, is_f16)
        else:
            _tile(w, flags, tile, lo, hi, is_f16)
        np.matmul(x, tile[: hi - lo].T, out=out[:, lo:hi])
