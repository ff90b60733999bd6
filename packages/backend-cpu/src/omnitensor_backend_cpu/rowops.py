"""Row kernels of the composites over the trailing axis: softmax, log_softmax, layer and RMS norm.

A row at a time, so a row stays in cache: one read and one write of memory in all. Operands are
2-D C-contiguous (rows, cols) views (callers reshape, copying only strided inputs); a norm's
weight and bias are (cols,) vectors. Sizes and flags are arguments, so one compiled kernel per
dtype serves every shape. float32 rows use float32 arithmetic with `mathlib`'s vectorizable exp
and float64 sums; float64 rows use ``math``.

Large calls are split into blocks of rows run on `pool`'s threads.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, Final

import numpy as np

from . import pool
from ._compat import jit, prange
from .mathlib import softmax_weight32f
from .prepared import nothing

__all__ = ["cross_entropy", "layer_norm", "log_softmax", "prepare_norm", "rms_norm", "rows_of",
           "softmax", "vector_of"]

Array = np.ndarray[Any, Any]

@jit(inline=True)
def _row_max32(x: Any) -> Any:
    # NOTE: eight running maxima, each `v if v > m else m` (a NaN is skipped; it still reaches
    # the sum through exp, so the row becomes NaN as in the reference). One running maximum is
    # a chain of dependent scalar maxss: LLVM vectorizes a max reduction only when told there
    # are no NaNs (never here), and 4096 x 4096 took 18.2 ms on one core, the bulk of a
    # softmax; eight independent ones, 3.9 ms (the order of a max does not change it).
    n = x.shape[0]
    m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = np.float32(-np.inf)
    j = 0
    while j + 8 <= n:
        v = x[j]
        m0 = v if v > m0 else m0
        v = x[j + 1]
        m1 = v if v > m1 else m1
        v = x[j + 2]
        m2 = v if v > m2 else m2
        v = x[j + 3]
        m3 = v if v > m3 else m3
        v = x[j + 4]
        m4 = v if v > m4 else m4
        v = x[j + 5]
        m5 = v if v > m5 else m5
        v = x[j + 6]
        m6 = v if v > m6 else m6
        v = x[j + 7]
        m7 = v if v > m7 else m7
        j += 8
    m0 = m1 if m1 > m0 else m0
    m2 = m3 if m3 > m2 else m2
    m4 = m5 if m5 > m4 else m4
    m6 = m7 if m7 > m6 else m6
    m0 = m2 if m2 > m0 else m0
    m4 = m6 if m6 > m4 else m4
    m = m4 if m4 > m0 else m0
    while j < n:
        v = x[j]
        m = v if v > m else m
        j += 1
    return m


@jit(inline=True)
def _sum32(x: Any, shift: Any, mode: int) -> float:
    """sum(x), sum((x - shift)**2) or sum(exp(x - shift)) (`mode` 0, 1, 2) of a float32 row.

    float32 partial sums over blocks of 256, each a plain accumulator that LLVM vectorizes
    (reassociation is allowed), folded into a float64 total so long rows stay accurate.

    NOTE: each block is a slice indexed from 0. Indexed as ``x[j]`` for j in ``range(lo, hi)``
    the loops stayed scalar (numba cannot tell such a j is never negative, and the wraparound
    it adds for negative indices blocks vectorization): 4096 x 4096 summed in 14.9 against
    1.8 ms, and layer norm, RMS norm and softmax spent most of their time there.
    """
    n = x.shape[0]
    total = 0.0
    for lo in range(0, n, 256):
        block = x[lo:min(lo + 256, n)]
        part = np.float32(0.0)
        if mode == 0:
            for j in range(block.shape[0]):
                part += block[j]
        elif mode == 1:
            for j in range(block.shape[0]):
                c = block[j] - shift
                part += c * c
        else:
            for j in range(block.shape[0]):
                part += softmax_weight32f(block[j] - shift)
        total += np.float64(part)
    return total


@jit(inline=True)
def _softmax_row32(row: Any, dst: Any, same: bool) -> None:
    """`dst` = softmax(`row`); `same`: `dst` is `row` (in place).

    NOTE: every loop reads and writes one array, or two that LLVM may assume apart. Given a row
    and a destination at the same address, its runtime overlap check fails and the loop around
    exp runs scalar (a 4096-wide softmax in place took 4x as long), hence the `same` variant.
    The exponentials are stored and scaled in place: the row is in L1 by then, so the second
    pass costs a multiply, where recomputing exp cost 40 % more.
    """
    m = _row_max32(row)
    if same:
        for j in range(dst.shape[0]):
            dst[j] = softmax_weight32f(dst[j] - m)
    else:
        for j in range(dst.shape[0]):
            dst[j] = softmax_weight32f(row[j] - m)
    inv = np.float32(1.0) / np.float32(_sum32(dst, m, 0))
    for j in range(dst.shape[0]):
        dst[j] = dst[j] * inv


#: Longest rows `_softmax32` takes as short: three plain loops, the sum in float32. The long
#: rows' blocks and float64 total cost more than the row itself there: an attention
#: backward's (64, 4, 9, 9) softmax took 117 us that way, 25 us this way, bit for bit equal.
_SHORT_ROW: Final = 32


@jit()
def _softmax_short32(x: Any, out: Any) -> None:
    # (its own function: as a branch of `_softmax32`'s row loop it ran 3x slower)
    for r in range(x.shape[0]):
        row, dst = x[r], out[r]
        m = _row_max32(row)
        total = np.float32(0.0)
        for j in range(dst.shape[0]):
            e = softmax_weight32f(row[j] - m)
            dst[j] = e
            total += e
        inv = np.float32(1.0) / total
        for j in range(dst.shape[0]):
            dst[j] *= inv


@jit()
def _softmax32(x: Any, out: Any, log: bool, same: bool) -> None:
    if not log and x.shape[1] <= _SHORT_ROW:
        _softmax_short32(x, out)
        return
    for r in range(x.shape[0]):
        row, dst = x[r], out[r]
        if not log:
            _softmax_row32(row, dst, same)
            continue
        m = _row_max32(row)
        lse = np.float32(math.log(_sum32(row, m, 2)))
        if same:
            for j in range(dst.shape[0]):
                dst[j] = (dst[j] - m) - lse
        else:
            for j in range(dst.shape[0]):
                dst[j] = (row[j] - m) - lse


@jit()
def _softmax64(x: Any, out: Any, log: bool, same: bool) -> None:
    for r in range(x.shape[0]):
        row, dst = x[r], out[r]
        m = -np.inf
        nan = False
        for j in range(row.shape[0]):
            v = row[j]
            nan |= v != v
            m = v if v > m else m
        if nan:
            m = np.nan
        total = 0.0
        for j in range(row.shape[0]):
            e = math.exp(row[j] - m)
            if not log:
                dst[j] = e
            total += e
        if log:
            lse = math.log(total)
            for j in range(row.shape[0]):
                dst[j] = (row[j] - m) - lse
        else:
            for j in range(row.shape[0]):
                dst[j] = dst[j] / total


@jit()
def _norm32(x: Any, w: Any, b: Any, out: Any, centre: bool, flags: int, eps: float) -> None:
    # flags: 1 weighted, 2 biased. Layer norm (`centre`) subtracts the mean first; RMS norm
    # does not. Sums in float64 (see `_sum32`), the mean and variance rounded to float32 as
    # the reference does.
    cols = x.shape[1]
    n = np.float32(cols)
    for r in range(x.shape[0]):
        row, dst = x[r], out[r]
        mean = np.float32(0.0)
        if centre:
            mean = np.float32(_sum32(row, mean, 0)) / n
        var = np.float32(_sum32(row, mean, 1)) / n
        scale = np.float32(1.0 / math.sqrt(np.float64(var + np.float32(eps))))
        if flags == 3:
            for j in range(cols):
                dst[j] = ((row[j] - mean) * scale) * w[j] + b[j]
        elif flags == 1:
            for j in range(cols):
                dst[j] = ((row[j] - mean) * scale) * w[j]
        elif flags == 2:
            for j in range(cols):
                dst[j] = ((row[j] - mean) * scale) + b[j]
        else:
            for j in range(cols):
                dst[j] = (row[j] - mean) * scale


@jit(parallel=True)
def _norm32_parts(parts: int, step: int, x: Any, w: Any, b: Any, out: Any, centre: bool,
                  flags: int, eps: float) -> None:
    # `_norm32` on `parts` blocks of `step` rows, on numba's OpenMP workers (see
    # `pool.worker_ranges`)
    n = x.shape[0]
    for p in prange(parts):
        lo = min(n, p * step)
        hi = min(n, lo + step)
        _norm32(x[lo:hi], w, b, out[lo:hi], centre, flags, eps)


@jit()
def _norm64(x: Any, w: Any, b: Any, out: Any, centre: bool, flags: int, eps: float) -> None:
    cols = x.shape[1]
    for r in range(x.shape[0]):
        row, dst = x[r], out[r]
        mean = 0.0
        if centre:
            for j in range(cols):
                mean += row[j]
            mean /= cols
        squares = 0.0
        for j in range(cols):
            c = row[j] - mean
            squares += c * c
        scale = 1.0 / math.sqrt(squares / cols + eps)
        for j in range(cols):
            y = (row[j] - mean) * scale
            y = y * w[j] if flags & 1 else y
            dst[j] = y + b[j] if flags & 2 else y


def rows_of(x: Array, cols: int) -> Array:
    """`x` as C-contiguous rows of `cols`, viewed read-only.

    A plan's inputs are read-only (handed-out buffers) and its intermediates writable; numba
    compiles a kernel once per flag, so a norm that read both (a model's first norm reads an
    input) compiled twice on a cold cache (1.8 s). The kernels read x through a read-only view.
    """
    rows = (x if x.flags.c_contiguous else np.ascontiguousarray(x)).reshape(-1, cols)
    rows.flags.writeable = False
    return rows


def softmax(x: Array, out: Array, *, log: bool = False) -> None:
    """Softmax (or log-softmax) of `x` over its last axis into the C-contiguous `out`."""
    if x.size == 0:
        return
    cols = x.shape[-1] if x.ndim else 1
    xs, dst = rows_of(x, cols), out.reshape(-1, cols)
    kernel = _softmax32 if x.dtype == np.float32 else _softmax64
    same = _address(xs) == _address(dst)
    pool.parallel_for(xs.shape[0], lambda lo, hi: kernel(xs[lo:hi], dst[lo:hi], log, same),
                      work=xs.size)


def _address(a: Array) -> int:
    return int(a.__array_interface__["data"][0])


def log_softmax(x: Array, out: Array) -> None:
    """Log-softmax of `x` over its last axis into `out`."""
    softmax(x, out, log=True)


#: Elements of a norm per unit of `pool.MIN_SPLIT` work: a few additions each, too cheap for a
#: hand-off to the pool (~100 us) to pay below ~700 thousand. A layer norm over (32, 28, 384)
#: took 175 us on one thread against 221 on two, over (512, 896) 207 against 238, and over
#: (64, 28, 384) 295 against 287 us.
_NORM_ELEMENTS_PER_UNIT: Final = 5


def _norm(x: Array, weight: Array | None, bias: Array | None, out: Array, eps: float,
          centre: bool, axes: int) -> None:
    call, _ = prepare_norm(x, weight, bias, out, eps, centre, axes)
    call()


def prepare_norm(x: Array, weight: Array | None, bias: Array | None, out: Array, eps: float,
                 centre: bool, axes: int) -> tuple[Callable[[], None], bool]:
    """A layer or RMS norm's kernel call on these arrays, and whether it may be called again.

    Reusable when every array it reads is a view of the one given (no copy was made): the same
    arrays later give the same call, whatever they hold then (`kernel_step` keeps it).
    """
    if x.size == 0:
        return nothing, True
    cols = math.prod(x.shape[x.ndim - axes:])
    reusable = x.flags.c_contiguous and all(
        v is None or (v.dtype == x.dtype and v.flags.c_contiguous) for v in (weight, bias))
    xs = rows_of(x, cols)
    dst = out.reshape(xs.shape)
    flags = (weight is not None) | (bias is not None) << 1
    w = vector_of(weight, x.dtype, cols) if weight is not None else xs[0]
    b = vector_of(bias, x.dtype, cols) if bias is not None else xs[0]
    kernel = _norm32 if x.dtype == np.float32 else _norm64
    work = xs.size // _NORM_ELEMENTS_PER_UNIT
    ranges = pool.worker_ranges(xs.shape[0], work) if x.dtype == np.float32 else None
    if ranges is not None:
        return functools.partial(_norm32_parts, *ranges, xs, w, b, dst, centre, flags,
                                 eps), reusable
    if work < pool.MIN_SPLIT:  # (a decode step's (1, 896): no split)
        return functools.partial(kernel, xs, w, b, dst, centre, flags, eps), reusable
    return functools.partial(pool.parallel_for, xs.shape[0], lambda lo, hi: kernel(
        xs[lo:hi], w, b, dst[lo:hi], centre, flags, eps), work=work), reusable



def vector_of(values: Array, dtype: Any, cols: int) -> Array:
    """`values` as a read-only C-contiguous vector of `cols` elements of `dtype`.

    A view when it is one already; read-only, as `_rows`, for one compiled kernel per dtype.
    """
    if values.dtype != dtype or not values.flags.c_contiguous:
        values = np.ascontiguousarray(values, dtype)
    vector = values.reshape(cols)
    vector.flags.writeable = False
    return vector


def layer_norm(x: Array, weight: Array | None, bias: Array | None, out: Array, eps: float,
               axes: int = 1) -> None:
    """Layer norm of `x` over its trailing `axes` into `out`.

    `weight` and `bias` hold one value per normalized element (any shape of that size, e.g.
    the trailing shape or a broadcast of it); None leaves them out.
    """
    _norm(x, weight, bias, out, eps, True, axes)


def rms_norm(x: Array, weight: Array | None, out: Array, eps: float, axes: int = 1) -> None:
    """RMS norm of `x` over its trailing `axes` (weight as in `layer_norm`), into `out`."""
    _norm(x, weight, None, out, eps, False, axes)


@jit()
def _xent32(x: Any, target: Any, out: Any, ignore: int, smoothing: float) -> None:
    # NOTE: log-probabilities lp = (x - m) - log(sum(exp(x - m))) in float32 as the
    # decomposition rounds them; a non-finite lp anywhere makes the row NaN there (-inf * 0).
    cols = x.shape[1]
    keep = np.float32(1.0 - smoothing)
    share = np.float32(smoothing)
    for r in range(x.shape[0]):
        t = target[r]
        if t == ignore:
            out[r] = 0.0
            continue
        row = x[r]
        m = _row_max32(row)
        lse = np.float32(math.log(_sum32(row, m, 2)))
        picked = np.float32(0.0)
        total = 0.0
        finite = True
        for start in range(0, cols, 256):
            block = row[start:min(start + 256, cols)]  # (indexed from 0: see `_sum32`)
            part = np.float32(0.0)
            for j in range(block.shape[0]):
                lp = (block[j] - m) - lse
                finite &= abs(lp) < np.float32(np.inf)
                part += lp
            total += np.float64(part)
        if 0 <= t < cols:
            picked = (row[t] - m) - lse
        loss = -picked
        if smoothing != 0.0:
            loss = loss * keep - (np.float32(total) / np.float32(cols)) * share
        out[r] = loss if finite else np.nan


@jit()
def _xent64(x: Any, target: Any, out: Any, ignore: int, smoothing: float) -> None:
    cols = x.shape[1]
    for r in range(x.shape[0]):
        t = target[r]
        if t == ignore:
            out[r] = 0.0
            continue
        row = x[r]
        m = -np.inf
        for j in range(cols):
            m = row[j] if row[j] > m else m
        total = 0.0
        for j in range(cols):
            total += math.exp(row[j] - m)
        lse = math.log(total)
        sum_lp = 0.0
        finite = True
        for j in range(cols):
            lp = (row[j] - m) - lse
            finite &= abs(lp) < np.inf
            sum_lp += lp
        picked = (row[t] - m) - lse if 0 <= t < cols else 0.0
        loss = -picked
        if smoothing != 0.0:
            loss = loss * (1.0 - smoothing) - (sum_lp / cols) * smoothing
        out[r] = loss if finite else np.nan


def cross_entropy(x: Array, target: Array, out: Array, *, ignore_index: int,
                  label_smoothing: float) -> None:
    """Per-row cross-entropy of logits `x` (..., C) against int32 classes `target` (...).

    Into `out` (...); see the `cross_entropy` composite for the definition (ignored rows 0,
    out-of-range targets pick nothing, non-finite log-probabilities give NaN).
    """
    if out.size == 0:
        return
    cols = x.shape[-1]
    xs = rows_of(x, cols)
    ts = np.ascontiguousarray(target, np.int32).reshape(-1)
    dst = out.reshape(-1)
    kernel = _xent32 if x.dtype == np.float32 else _xent64
    pool.parallel_for(xs.shape[0], lambda lo, hi: kernel(
        xs[lo:hi], ts[lo:hi], dst[lo:hi], ignore_index, label_smoothing), work=xs.size)
