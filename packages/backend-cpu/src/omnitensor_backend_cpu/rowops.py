"""Row kernels of the composites over the trailing axis: softmax, log_softmax, layer and RMS norm.

A row at a time, so a row stays in cache: one read and one write of memory in all. Operands are
2-D C-contiguous (rows, cols) views (callers reshape, copying only strided inputs); a norm's
weight and bias are (cols,) vectors. Sizes and flags are arguments, so one compiled kernel per
dtype serves every shape. float32 rows use float32 arithmetic with `mathlib`'s vectorizable exp
and float64 sums; float64 rows use ``math``.

Large calls are split into blocks of rows run on `pool`'s threads.
"""

from __future__ import annotations

import math
from typing import Any, Final

import numpy as np

from . import pool
from ._compat import jit
from .mathlib import exp32f

__all__ = ["cross_entropy", "layer_norm", "log_softmax", "rms_norm", "softmax"]

Array = np.ndarray[Any, Any]

#: Lanes of the max reduction (two AVX-512 registers of float32).
_LANES: Final = 32

#: Lanes of the float32 sums (one AVX-512 register, two AVX2 registers).
_SUM_LANES: Final = 16


@jit(inline=True)
def _row_max32(x: Any, lanes: Any) -> Any:
    # NOTE: `v if v > m else m` per lane is a vmaxps; as one scalar reduction LLVM would not
    # vectorize it without `nnan`. A NaN is skipped here but reaches the sum through exp, so the
    # row still becomes NaN, as in the reference.
    n = x.shape[0]
    lanes[:] = -np.inf  # NOTE: scratch of _LANES floats from the caller (no allocation per row)
    body = n - n % _LANES
    for start in range(0, body, _LANES):
        for j in range(_LANES):
            v = x[start + j]
            lanes[j] = v if v > lanes[j] else lanes[j]
    m = np.float32(-np.inf)
    for j in range(_LANES):
        m = lanes[j] if lanes[j] > m else m
    for j in range(body, n):
        m = x[j] if x[j] > m else m
    return m


@jit(inline=True)
def _exp_lanes(x: Any, m: Any, out: Any, lanes: Any, lo: int, hi: int, store: bool) -> None:
    # lanes[j] += exp(x[i] - m) for i in [lo, hi), hi - lo a multiple of _SUM_LANES.
    if store:
        for start in range(lo, hi, _SUM_LANES):
            for j in range(_SUM_LANES):
                e = exp32f(x[start + j] - m)
                out[start + j] = e
                lanes[j] += e
    else:
        for start in range(lo, hi, _SUM_LANES):
            for j in range(_SUM_LANES):
                lanes[j] += exp32f(x[start + j] - m)


@jit(inline=True)
def _exp_sum32(x: Any, m: Any, out: Any, store: bool, lanes: Any) -> float:
    # NOTE: explicit float32 lanes (one vector register's worth) over blocks of a fixed 256
    # elements, folded into a float64 total after each block. A scalar float32 accumulator,
    # even with reassociation allowed, kept LLVM from vectorizing the loop around exp, and so
    # did a block loop whose bound was a min() (softmax 4096x4096: 27 and 42 ms of CPU against
    # 16 ms); the float64 fold keeps long rows accurate.
    n = x.shape[0]
    lanes[:_SUM_LANES] = 0.0  # scratch from the caller, as in `_row_max32`
    total = 0.0
    full = n // 256
    for block in range(full):
        _exp_lanes(x, m, out, lanes, block * 256, block * 256 + 256, store)
        for j in range(_SUM_LANES):
            total += np.float64(lanes[j])
            lanes[j] = 0.0
    body = n - n % _SUM_LANES
    _exp_lanes(x, m, out, lanes, full * 256, body, store)
    for j in range(_SUM_LANES):
        total += np.float64(lanes[j])
    for j in range(body, n):
        e = exp32f(x[j] - m)
        if store:
            out[j] = e
        total += np.float64(e)
    return total


@jit()
def _softmax32(x: Any, out: Any, log: bool) -> None:
    lanes = np.empty(_LANES, np.float32)
    for r in range(x.shape[0]):
        row, dst = x[r], out[r]
        m = _row_max32(row, lanes)
        if log:
            lse = np.float32(math.log(_exp_sum32(row, m, dst, False, lanes)))
            for j in range(row.shape[0]):
                dst[j] = (row[j] - m) - lse
        else:
            # NOTE: the exponentials are stored and scaled in place: the row is in L1 by then,
            # so the second pass costs a multiply, where recomputing exp cost 40 % more.
            inv = np.float32(1.0) / np.float32(_exp_sum32(row, m, dst, True, lanes))
            for j in range(row.shape[0]):
                dst[j] = dst[j] * inv


@jit()
def _softmax64(x: Any, out: Any, log: bool) -> None:
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


@jit(inline=True)
def _moment32(x: Any, shift: Any, square: bool, lanes: Any) -> float:
    """sum(x - shift) or sum((x - shift)**2) in float32 lanes folded into float64 per 256."""
    n = x.shape[0]
    lanes[:_SUM_LANES] = 0.0
    total = 0.0
    full = n // 256
    body = n - n % _SUM_LANES
    for block in range(full + 1):
        lo = block * 256
        hi = lo + 256 if block < full else body
        if square:
            for start in range(lo, hi, _SUM_LANES):
                for j in range(_SUM_LANES):
                    c = x[start + j] - shift
                    lanes[j] += c * c
        else:
            for start in range(lo, hi, _SUM_LANES):
                for j in range(_SUM_LANES):
                    lanes[j] += x[start + j]
        for j in range(_SUM_LANES):
            total += np.float64(lanes[j])
            lanes[j] = 0.0
    for j in range(body, n):
        c = x[j] - shift
        total += np.float64(c * c if square else x[j])
    return total


@jit()
def _norm32(x: Any, w: Any, b: Any, out: Any, centre: bool, flags: int, eps: float) -> None:
    # flags: 1 weighted, 2 biased. Layer norm (`centre`) subtracts the mean first; RMS norm
    # does not. Sums in float64 (see `_moment32`), the mean and variance rounded to float32 as
    # the reference does.
    cols = x.shape[1]
    n = np.float32(cols)
    lanes = np.empty(_SUM_LANES, np.float32)
    for r in range(x.shape[0]):
        row, dst = x[r], out[r]
        mean = np.float32(0.0)
        if centre:
            mean = np.float32(_moment32(row, mean, False, lanes)) / n
        var = np.float32(_moment32(row, mean, True, lanes)) / n
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


def _rows(x: Array, cols: int) -> Array:
    return (x if x.flags.c_contiguous else np.ascontiguousarray(x)).reshape(-1, cols)


def softmax(x: Array, out: Array, *, log: bool = False) -> None:
    """Softmax (or log-softmax) of `x` over its last axis into the C-contiguous `out`."""
    if x.size == 0:
        return
    cols = x.shape[-1] if x.ndim else 1
    xs, dst = _rows(x, cols), out.reshape(-1, cols)
    kernel = _softmax32 if x.dtype == np.float32 else _softmax64
    pool.parallel_for(xs.shape[0], lambda lo, hi: kernel(xs[lo:hi], dst[lo:hi], log),
                      work=xs.size)


def log_softmax(x: Array, out: Array) -> None:
    """Log-softmax of `x` over its last axis into `out`."""
    softmax(x, out, log=True)


def _norm(x: Array, weight: Array | None, bias: Array | None, out: Array, eps: float,
          centre: bool, axes: int) -> None:
    if x.size == 0:
        return
    cols = math.prod(x.shape[x.ndim - axes:])
    xs = _rows(x, cols)
    dst = out.reshape(xs.shape)
    flags = (weight is not None) | (bias is not None) << 1
    w = _vector(weight, x.dtype, cols) if weight is not None else xs[0]
    b = _vector(bias, x.dtype, cols) if bias is not None else xs[0]
    kernel = _norm32 if x.dtype == np.float32 else _norm64
    if xs.size < pool.MIN_SPLIT:  # (a decode step's (1, 896): no split, no closure)
        kernel(xs, w, b, dst, centre, flags, eps)
        return
    pool.parallel_for(xs.shape[0], lambda lo, hi: kernel(xs[lo:hi], w, b, dst[lo:hi], centre,
                                                         flags, eps), work=xs.size)


def _vector(values: Array, dtype: Any, cols: int) -> Array:
    """`values` as a C-contiguous vector of `cols` elements of `dtype` (a view when it is)."""
    if values.dtype == dtype and values.flags.c_contiguous:
        return values.reshape(cols)
    return np.ascontiguousarray(values, dtype).reshape(cols)


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
    lanes = np.empty(_LANES, np.float32)
    for r in range(x.shape[0]):
        t = target[r]
        if t == ignore:
            out[r] = 0.0
            continue
        row = x[r]
        m = _row_max32(row, lanes)
        lse = np.float32(math.log(_exp_sum32(row, m, row, False, lanes)))
        picked = np.float32(0.0)
        total = 0.0
        finite = True
        for start in range(0, cols, 256):
            part = np.float32(0.0)
            for j in range(start, min(start + 256, cols)):
                lp = (row[j] - m) - lse
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
    xs = _rows(x, cols)
    ts = np.ascontiguousarray(target, np.int32).reshape(-1)
    dst = out.reshape(-1)
    kernel = _xent32 if x.dtype == np.float32 else _xent64
    pool.parallel_for(xs.shape[0], lambda lo, hi: kernel(
        xs[lo:hi], ts[lo:hi], dst[lo:hi], ignore_index, label_smoothing), work=xs.size)
