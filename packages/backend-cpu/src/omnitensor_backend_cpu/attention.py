"""Fused scaled-dot-product attention and rotary embedding kernels.

Prefill and encoder attention (`GEMM_MIN_QUERIES` query rows or more; a causal prompt of more
than `CAUSAL_ROWS_MAX`) runs as two products around one fused kernel that scales, soft-caps and
masks the scores and takes their softmax in place: in float32 on `gemm`'s tiles, 32 queries at
a time with the scores laid out a row per key (`_by_key32`), and a causal block reads only the
keys its last query sees; otherwise as batched BLAS products with a row kernel between them
(`_sdpa_gemm`). Decode attention (and
a short prompt's) runs one (batch entry, kv head, query row) per task, for
all the query heads that share the kv head: the scores against every key, the softmax and the
weighted sum of values, block by block of keys so that each block is read from memory once for
all those heads, without copying the KV cache (keys and values are read where they lie, in any
layout). A soft cap (``softcap * tanh(s / softcap)``) applies to the scaled
scores before the mask. Keys the causal rule, the cache length or a boolean mask exclude get
the lowest float as their score, as in the decomposition (so a row with no key left averages
every value, as the reference does). Grouped-query heads read their shared KV head
(``h // (Hq / Hkv)``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, Final

import numpy as np

from . import attnblocks, gemm, pool, threads
from ._compat import jit, prange
from .irblocks import LANES
from .mathlib import softmax_weight32f, tanh32f
from .prepared import nothing
from .rowops import _row_max32, _softmax_row32

__all__ = ["prepare_rotary", "prepare_sdpa", "rotary", "sdpa"]

Array = np.ndarray[Any, Any]


@jit(inline=True)
def _key_limit(qpos: Any, t: int, causal: bool, kvlen: int, s_len: int) -> int:
    """Keys from this index on are excluded for query row `t` (causal rule, cache length)."""
    limit = s_len
    if causal:
        limit = min(limit, qpos[t] + 1)
    if kvlen >= 0:
        limit = min(limit, kvlen)
    return limit


@jit(inline=True)
def _normalize64(row: Any, m: float, nan: bool) -> None:
    """`row` becomes its softmax in place, given its maximum `m` (all NaN when `nan`)."""
    m = np.nan if nan else m
    total = 0.0
    for s in range(row.shape[0]):
        e = math.exp(row[s] - m)
        row[s] = e
        total += e
    for s in range(row.shape[0]):
        row[s] = row[s] / total


@jit(inline=True)
def _head64(q: Any, k: Any, v: Any, add: Any, keep: Any, qpos: Any, causal: bool, kvlen: int,
            scale: float, softcap: float, has_add: bool, has_keep: bool, b: int, h: int, kh: int,
            out: Any, scores: Any) -> None:
    t_len, d_len = q.shape[2], q.shape[3]
    s_len, dv_len = k.shape[2], v.shape[3]
    lowest = np.finfo(np.float64).min
    for t in range(t_len):
        limit = _key_limit(qpos, t, causal, kvlen, s_len)
        m = -np.inf
        nan = False
        for s in range(s_len):
            ok = s < limit
            if has_keep:
                ok = ok and keep[b, h, t, s]
            if ok:
                acc = 0.0
                for d in range(d_len):
                    acc += q[b, h, t, d] * k[b, kh, s, d]
                value = acc * scale
                if softcap > 0:
                    value = softcap * math.tanh(value * (1.0 / softcap))
                if has_add:
                    value = value + add[b, h, t, s]
            else:
                value = lowest
            scores[s] = value
            nan |= value != value
            m = value if value > m else m
        _normalize64(scores, m, nan)
        for d in range(dv_len):
            out[b, h, t, d] = 0.0
        for s in range(s_len):
            p = scores[s]
            for d in range(dv_len):
                out[b, h, t, d] += p * v[b, kh, s, d]


#: Keys per block of the grouped decode kernel: a block of keys (and of values) is read from
#: memory once and from L1 by each query head of its kv head (64 x 64 floats: 16 KB).
_BLOCK: Final = 64


@jit(inline=True)
def _vector_rows(a: Any, b: Any) -> bool:
    """Whether `attnblocks` may read rows of `a` and `b` (contiguous, a multiple of 8 long)."""
    return bool(a.shape[-1] % LANES == 0 and a.strides[-1] == a.itemsize
                and b.strides[-1] == b.itemsize)


@jit()
def _dots(query: Any, keys: Any, row: Any, s0: int, s1: int) -> None:
    """Row[s] = query . keys[s] for s in [s0, s1).

    Eight keys at a time in `attnblocks` where the rows allow it, else four keys per pass over
    the query.
    """
    d_len = query.shape[0]
    s = s0
    if _vector_rows(query, keys) and row.strides[0] == row.itemsize:
        while s + LANES <= s1:
            attnblocks.dots8(query, keys, row, s)
            s += LANES
    while s + 4 <= s1:
        k0, k1, k2, k3 = keys[s], keys[s + 1], keys[s + 2], keys[s + 3]
        a0 = a1 = a2 = a3 = np.float32(0.0)
        for d in range(d_len):
            x = query[d]
            a0 += x * k0[d]
            a1 += x * k1[d]
            a2 += x * k2[d]
            a3 += x * k3[d]
        row[s], row[s + 1], row[s + 2], row[s + 3] = a0, a1, a2, a3
        s += 4
    while s < s1:
        key = keys[s]
        acc = np.float32(0.0)
        for d in range(d_len):
            acc += query[d] * key[d]
        row[s] = acc
        s += 1


@jit()
def _weigh(row: Any, values: Any, dst: Any, s0: int, s1: int) -> None:
    """Dst += row[s] * values[s] for s in [s0, s1).

    `dst` held in registers by `attnblocks` where the rows allow it, else four values per pass
    over dst.
    """
    if _vector_rows(dst, values):
        attnblocks.weigh(row, values, dst, s0, s1)
        return
    dv_len = dst.shape[0]
    s = s0
    while s + 4 <= s1:
        p0, p1, p2, p3 = row[s], row[s + 1], row[s + 2], row[s + 3]
        v0, v1, v2, v3 = values[s], values[s + 1], values[s + 2], values[s + 3]
        for d in range(dv_len):
            dst[d] += (p0 * v0[d] + p1 * v1[d]) + (p2 * v2[d] + p3 * v3[d])
        s += 4
    while s < s1:
        p, value = row[s], values[s]
        for d in range(dv_len):
            dst[d] += p * value[d]
        s += 1


@jit()
def _weights(row: Any, n: int, add_row: Any, keep_row: Any, scale: float, softcap: float,
             has_add: bool, has_keep: bool) -> int:
    """Raw scores row[:n] become softmax weights over the keys [0, end) in place; returns end.

    The scores are scaled and soft-capped, and masked keys get the lowest float, as in the
    decomposition; a NaN score makes every weight NaN. Keys from n on (the causal rule, the
    cache length) are the lowest float there too: they weigh exactly 0 unless no key is left
    (every score the lowest or -inf), and then they count as the decomposition counts them
    (e**0 = 1 each, end = the row's full length).
    """
    lowest = np.float32(np.finfo(np.float32).min)
    sc = np.float32(scale)
    cap = np.float32(softcap)
    inv_cap = np.float32(1.0 / softcap) if softcap > 0 else np.float32(0.0)
    for s in range(n):
        value = row[s] * sc
        if softcap > 0:
            value = cap * tanh32f(value * inv_cap)
        if has_add:
            value = value + add_row[s]
        if has_keep and not keep_row[s]:
            value = lowest
        row[s] = value
    m = _row_max32(row[:n])  # (apart: a running max in the loop above kept it scalar)
    end = n
    if not m > lowest:
        m, end = lowest, row.shape[0]
        for s in range(n, end):
            row[s] = lowest
    total = np.float32(0.0)
    for s in range(end):
        e = softmax_weight32f(row[s] - m)
        row[s] = e
        total += e
    inv = np.float32(1.0) / total
    for s in range(end):
        row[s] *= inv
    return end


# NOTE: the grouped kernel's parts are plain calls, not inlined at numba's level: inlined into
# both the serial and the OpenMP entry points they took 13 and 29 s to compile on a cold cache,
# and ran no faster.
@jit(inline=True)
def _group32(q: Any, k: Any, v: Any, add: Any, keep: Any, qpos: Any, causal: bool, kvlen: int,
             scale: float, softcap: float, has_add: bool, has_keep: bool, b: int, kh: int,
             t: int, h_lo: int, h_hi: int, out: Any, scores: Any, ends: Any) -> None:
    # query row t of heads [h_lo, h_hi), which share kv head kh: each block of keys, then of
    # values, is read from memory once for all of them (not once per query head)
    keys, values = k[b, kh], v[b, kh]
    n = max(_key_limit(qpos, t, causal, kvlen, keys.shape[0]), 0)
    for s0 in range(0, n, _BLOCK):
        for h in range(h_lo, h_hi):
            _dots(q[b, h, t], keys, scores[h - h_lo], s0, min(s0 + _BLOCK, n))
    last = 0
    for h in range(h_lo, h_hi):
        end = _weights(scores[h - h_lo], n, add[b, h, t], keep[b, h, t], scale, softcap,
                       has_add, has_keep)
        ends[h - h_lo] = end
        last = max(last, end)
        dst = out[b, h, t]
        for d in range(dst.shape[0]):
            dst[d] = 0.0
    for s0 in range(0, last, _BLOCK):
        for h in range(h_lo, h_hi):
            if s0 < ends[h - h_lo]:
                _weigh(scores[h - h_lo], values, out[b, h, t], s0,
                       min(s0 + _BLOCK, ends[h - h_lo]))


@jit()
def _sdpa32(q: Any, k: Any, v: Any, add: Any, keep: Any, qpos: Any, causal: bool, kvlen: int,
            scale: float, softcap: float, has_add: bool, has_keep: bool, out: Any, chunks: int,
            lo: int, hi: int) -> None:
    # task = (batch entry, kv head, query row, chunk of the kv head's query heads)
    n_kv, t_len = k.shape[1], q.shape[2]
    g = q.shape[1] // n_kv
    width = -(-g // chunks)
    scores = np.empty((width, k.shape[2]), np.float32)
    ends = np.empty(width, np.int64)
    for task in range(lo, hi):
        c = task % chunks
        t = task // chunks % t_len
        kh = task // (chunks * t_len) % n_kv
        b = task // (chunks * t_len * n_kv)
        h_lo = kh * g + c * width
        h_hi = min(h_lo + width, kh * g + g)
        if h_lo < h_hi:
            _group32(q, k, v, add, keep, qpos, causal, kvlen, scale, softcap, has_add,
                     has_keep, b, kh, t, h_lo, h_hi, out, scores, ends)


#: Most query rows for which a split per-row attention runs on numba's OpenMP workers (decode
#: over a long cache, between the OpenMP matrix-vector products). Other calls split over
#: `pool`: OpenMP workers share the cores with the BLAS threads that a training step's products
#: leave spinning, and a (64, 4, 9, 32) attention took 8 ms that way against 0.3 ms alone.
#: Where `threads.wide_products`, BLAS never runs on more than one thread and the products
#: run on the OpenMP workers (`gemm`): every split per-row attention runs there too (a
#: training step's (64, 4, 9, 32) one took 0.75 ms on the pool, beside the spinning workers).
_SPLIT_MAX_QUERIES: Final = 4


@jit(parallel=True)
def _sdpa32_split(q: Any, k: Any, v: Any, add: Any, keep: Any, qpos: Any, causal: bool,
                  kvlen: int, scale: float, softcap: float, has_add: bool, has_keep: bool,
                  out: Any, chunks: int, parts: int) -> None:
    # decode over a long cache: tasks split over numba's OpenMP workers (see `pool`), which
    # the step's matrix-vector products keep spinning
    tasks = q.shape[0] * k.shape[1] * q.shape[2] * chunks
    step = -(-tasks // parts)
    for part in prange(parts):
        _sdpa32(q, k, v, add, keep, qpos, causal, kvlen, scale, softcap, has_add, has_keep,
                out, chunks, part * step, min(tasks, part * step + step))


#: Most keys a query row reads (the causal rule and the cache length applied) for which a
#: prompt's attention (2 query rows or more) runs on `_short32`, one task per (batch entry,
#: query head) and plain loops LLVM vectorizes, rather than per query row on the grouped
#: kernels above, whose key blocks pay off over long rows only: a training step's (64, 4, 9,
#: 32) causal attention took 740 against 360 us on one thread.
_SHORT_KEYS: Final = 32


#: |q| x |k| x head size from which `_short32` sums a task's scores in order: near the float
#: limits the order of a sum decides whether it overflows, and the reference's (BLAS: in
#: order) is the one to match; below, the vectorized sums differ from it by rounding only.
_IN_ORDER_FROM: Final = 1e36


@jit()
def _abs_max32(x: Any, rows: int) -> Any:
    """The largest |x| in the first `rows` rows of 2-D `x` (NaN skipped; 0 if none larger).

    Eight running maxima: one is a chain of dependent scalar maxima, 4 cycles an element,
    which LLVM does not vectorize (`rowops._row_max32`).
    """
    m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = np.float32(0.0)
    width = x.shape[1]
    for i in range(rows):
        line = x[i]
        j = 0
        while j + 8 <= width:
            a0, a1, a2, a3 = abs(line[j]), abs(line[j + 1]), abs(line[j + 2]), abs(line[j + 3])
            a4, a5, a6, a7 = (abs(line[j + 4]), abs(line[j + 5]), abs(line[j + 6]),
                              abs(line[j + 7]))
            m0, m1 = (a0 if a0 > m0 else m0), (a1 if a1 > m1 else m1)
            m2, m3 = (a2 if a2 > m2 else m2), (a3 if a3 > m3 else m3)
            m4, m5 = (a4 if a4 > m4 else m4), (a5 if a5 > m5 else m5)
            m6, m7 = (a6 if a6 > m6 else m6), (a7 if a7 > m7 else m7)
            j += 8
        for jj in range(j, width):
            a = abs(line[jj])
            m0 = a if a > m0 else m0
    m0, m1, m2, m3 = max(m0, m4), max(m1, m5), max(m2, m6), max(m3, m7)
    return max(max(m0, m2), max(m1, m3))


@jit(fastmath=frozenset({"contract"}))
def _dot_in_order(x: Any, y: Any) -> Any:
    acc = np.float32(0.0)
    for d in range(x.shape[0]):
        acc += x[d] * y[d]
    return acc


@jit()
def _short32(q: Any, k: Any, v: Any, add: Any, keep: Any, qpos: Any, causal: bool, kvlen: int,
             scale: float, softcap: float, has_add: bool, has_keep: bool, out: Any, lo: int,
             hi: int) -> None:
    # task = (batch entry, query head): its queries, and the keys and values its rows can
    # read, copied contiguous first (heads viewed out of (B, T, H, D) are strided arrays to
    # numba, whose loops over them stayed scalar: 2.3x slower), then each query row's
    # scores, `_weights`, weighted values
    n_h, t_len, d_len = q.shape[1], q.shape[2], q.shape[3]
    s_len, dv_len = k.shape[2], v.shape[3]
    groups = n_h // k.shape[1]
    used = s_len if kvlen < 0 else min(s_len, kvlen)
    row = np.empty(s_len, np.float32)
    queries = np.empty((t_len, d_len), np.float32)
    keys = np.empty((used, d_len), np.float32)
    values = np.empty((used, dv_len), np.float32)
    total = np.empty(dv_len, np.float32)
    for task in range(lo, hi):
        b, h = task // n_h, task % n_h
        kh = h // groups
        for t in range(t_len):
            for d in range(d_len):
                queries[t, d] = q[b, h, t, d]
        for s in range(used):
            for d in range(d_len):
                keys[s, d] = k[b, kh, s, d]
            for d in range(dv_len):
                values[s, d] = v[b, kh, s, d]
        q_max, k_max = _abs_max32(queries, t_len), _abs_max32(keys, used)
        # (NaN compares false: it is not a maximum, and propagates in any order)
        in_order = np.float64(q_max) * np.float64(k_max) * d_len >= _IN_ORDER_FROM
        for t in range(t_len):
            n = max(_key_limit(qpos, t, causal, kvlen, s_len), 0)
            query = queries[t]
            if in_order:
                for s in range(n):
                    row[s] = _dot_in_order(query, keys[s])
            else:
                for s in range(n):
                    key = keys[s]
                    acc = np.float32(0.0)
                    for d in range(d_len):
                        acc += query[d] * key[d]
                    row[s] = acc
            end = _weights(row, n, add[b, h, t], keep[b, h, t], scale, softcap, has_add,
                           has_keep)
            for d in range(dv_len):
                total[d] = np.float32(0.0)
            for s in range(min(end, used)):
                p, value = row[s], values[s]
                for d in range(dv_len):
                    total[d] += p * value[d]
            for s in range(used, end):  # (a row with no key left weighs every key, see above)
                p = row[s]
                for d in range(dv_len):
                    total[d] += p * v[b, kh, s, d]
            dst = out[b, h, t]
            for d in range(dv_len):
                dst[d] = total[d]


@jit(parallel=True)
def _short32_split(q: Any, k: Any, v: Any, add: Any, keep: Any, qpos: Any, causal: bool,
                   kvlen: int, scale: float, softcap: float, has_add: bool, has_keep: bool,
                   out: Any, parts: int) -> None:
    tasks = q.shape[0] * q.shape[1]
    step = -(-tasks // parts)
    for part in prange(parts):
        _short32(q, k, v, add, keep, qpos, causal, kvlen, scale, softcap, has_add, has_keep,
                 out, part * step, min(tasks, part * step + step))


@jit()
def _sdpa64(q: Any, k: Any, v: Any, add: Any, keep: Any, qpos: Any, causal: bool, kvlen: int,
            scale: float, softcap: float, has_add: bool, has_keep: bool, out: Any, lo: int,
            hi: int) -> None:
    n_h = q.shape[1]
    groups = n_h // k.shape[1]
    scores = np.empty(k.shape[2], np.float64)
    for task in range(lo, hi):
        b, h = task // n_h, task % n_h
        _head64(q, k, v, add, keep, qpos, causal, kvlen, scale, softcap, has_add, has_keep, b,
                h, h // groups, out, scores)


#: Query rows from which attention runs as two BLAS products around a fused mask-and-softmax
#: row kernel (prefill, encoders) instead of the per-row kernel above (decode).
GEMM_MIN_QUERIES: Final = 16

#: Causal attention (a prompt's prefill) of at most this many query rows runs per row, when
#: the per-row kernel's tasks are large enough (`_ROW_TASK_MIN`): it skips the keys past each
#: row's position, which the products compute and then mask. One sequence, 20 to 64 rows, 3 to
#: 32 query heads grouped by 1 to 8, it ran level or faster (14 heads on 2 kv heads, 37 rows:
#: 258 against 313 us; 64 rows: 424 against 466), and 1.1-1.4x slower from 128 rows; a prompt
#: that short does not compile the products' mask kernel on a cold cache (3 s). (The float32
#: products on `gemm`'s tiles, which skip those keys too, ran 14 heads on 2 kv heads of 64 in
#: 37 against 78 us at 16 rows, 77 against 173 at 64; but they cost a 16-token prompt's first
#: run 6 s more on a cold cache, the decode's first-run budget.)
CAUSAL_ROWS_MAX: Final = 64

#: Query values (grouped heads x head size) a per-row task reads from which the per-row kernel
#: serves causal prompts: with 64 sequences of 4 heads of 32 the products ran 1.3-1.6x faster.
_ROW_TASK_MIN: Final = 64


def _by_products(q: Array, k: Array, causal: bool) -> bool:
    """Whether attention over `q` runs as products (`_sdpa_gemm`), not per query row."""
    t_len = q.shape[2]
    if t_len < GEMM_MIN_QUERIES:
        return False
    task = q.shape[1] // k.shape[1] * q.shape[3]
    return not (causal and t_len <= CAUSAL_ROWS_MAX and task >= _ROW_TASK_MIN)


@jit(inline=True)
def _scaled(scores: Any, n: int, scale: float, softcap: float, sc: Any, cap: Any,
            inv_cap: Any) -> None:
    """``scores[:n]`` scaled in place, then soft-capped (``cap * tanh(x / cap)``) where asked.

    `sc`, `cap` and `inv_cap` are the float32 scale, cap and 1 / cap.
    """
    if softcap > 0:
        for s in range(n):
            scores[s] = cap * tanh32f(scores[s] * sc * inv_cap)
    elif scale != 1.0:
        for s in range(n):
            scores[s] = scores[s] * sc


@jit()
def _mask_softmax32(scores: Any, add: Any, keep: Any, qpos: Any, causal: bool, kvlen: int,
                    scale: float, softcap: float, has_add: bool, has_keep: bool, b_lo: int,
                    b_hi: int, h_lo: int, h_hi: int) -> None:
    # scores (B, H, T, S) in place, batch entries [b_lo, b_hi) x heads [h_lo, h_hi): scale,
    # soft cap, masks, then softmax over S per row.
    t_len, s_len = scores.shape[2], scores.shape[3]
    lowest = np.float32(np.finfo(np.float32).min)
    sc = np.float32(scale)
    cap = np.float32(softcap)
    inv_cap = np.float32(1.0 / softcap) if softcap > 0 else np.float32(0.0)
    for b in range(b_lo, b_hi):
        for h in range(h_lo, h_hi):
            for t in range(t_len):
                row = scores[b, h, t]
                limit = _key_limit(qpos, t, causal, kvlen, s_len)
                _scaled(row, s_len, scale, softcap, sc, cap, inv_cap)
                if has_add:
                    add_row = add[b, h, t]
                    for s in range(s_len):
                        row[s] = row[s] + add_row[s]
                for s in range(max(limit, 0), s_len):
                    row[s] = lowest
                if has_keep:
                    keep_row = keep[b, h, t]
                    for s in range(s_len):
                        row[s] = row[s] if keep_row[s] else lowest
                _softmax_row32(row, row, True)


@jit()
def _mask_softmax64(scores: Any, add: Any, keep: Any, qpos: Any, causal: bool, kvlen: int,
                    scale: float, softcap: float, has_add: bool, has_keep: bool, b_lo: int,
                    b_hi: int, h_lo: int, h_hi: int) -> None:
    t_len, s_len = scores.shape[2], scores.shape[3]
    lowest = np.finfo(np.float64).min
    for b in range(b_lo, b_hi):
        for h in range(h_lo, h_hi):
            for t in range(t_len):
                row = scores[b, h, t]
                limit = _key_limit(qpos, t, causal, kvlen, s_len)
                m = -np.inf
                nan = False
                add_row, keep_row = add[b, h, t], keep[b, h, t]
                for s in range(s_len):
                    value = row[s] * scale
                    if softcap > 0:
                        value = softcap * math.tanh(value * (1.0 / softcap))
                    if has_add:
                        value = value + add_row[s]
                    if s >= limit or (has_keep and not keep_row[s]):
                        value = lowest
                    row[s] = value
                    nan |= value != value
                    m = value if value > m else m
                _normalize64(row, m, nan)


def _on_tiles(q: Array, out: Array) -> bool:
    """Whether products of `q` run on `gemm`'s tiles (float32; rows of `out` contiguous)."""
    return bool(q.dtype == np.float32 and out.strides[-1] == out.itemsize
                and threads.wide_products())


def _sdpa_gemm(q: Array, k: Array, v: Array, out: Array, args: tuple[Any, ...]) -> None:
    """Scores by BLAS products, masks and softmax fused in place, then P V.

    (Float32 beside `gemm`'s tiles: `_sdpa_tiles` instead.) Query heads sharing a kv head are
    stacked into one product per (batch, kv head) pair.
    Keys and values are read where they lie: numpy's matmul hands a strided (S, D) matrix whose
    rows are contiguous to BLAS with its leading dimension, so a (B, S, H, D) cache seen as
    (B, H, S, D) is not copied (the copies cost more than both products at encoder sizes).

    The pairs are split over the pool's threads by batch entry (by kv head when the batch is
    smaller than the thread count), each thread running single-threaded BLAS on its own pairs:
    one product per pair is small (2 * 128 * 128 * 64 flops for an encoder head), and a small
    product split over two BLAS threads on a busy machine waits for the descheduled one (the
    whole batch took 3.7 s that way against 0.1 s here).
    """
    n_b, n_h, t_len, d = q.shape
    n_kv, s_len, dv = k.shape[1], k.shape[2], v.shape[3]
    g = n_h // n_kv
    if _on_tiles(q, out):
        parts = pool.parts(n_b * n_kv, n_b * n_h * t_len * s_len * max(d, dv) >> 3)
        _sdpa_tiles(q, k, v, out, *args, parts)
        return
    # NOTE: stacking the query heads of a kv head (g > 1) needs a C-contiguous q, so without a
    # soft cap that copy is also where the scale is applied (T x D values, not T x S scores).
    # With one query head per kv head (an encoder) q is read where it lies and the mask kernel
    # scales each score row in the pass it makes anyway: the strided copy cost more (an
    # encoder layer's attention, (32, 12, 28, 32) with a padding mask: 2.56 against 3.17 ms).
    scale, softcap = args[5], args[6]
    if softcap == 0.0 and scale != 1.0 and g > 1:
        qs = np.multiply(q, q.dtype.type(scale), out=np.empty(q.shape, q.dtype))
        args = (*args[:5], 1.0, *args[6:])
    elif g > 1 and not q.flags.c_contiguous:
        qs = np.ascontiguousarray(q)
    else:
        qs = q
    qs = qs.reshape(n_b, n_kv, g * t_len, d)
    outs = out.reshape(n_b, n_kv, g * t_len, dv)
    scores = np.empty((n_b, n_kv, g * t_len, s_len), q.dtype)
    grid = scores.reshape(n_b, n_h, t_len, s_len)  # (B, Hq, T, S), the kernel's indexing
    kernel = _mask_softmax32 if q.dtype == np.float32 else _mask_softmax64
    threads.blas_for(2.0 * g * t_len * s_len * max(d, dv))  # one pair's product: one thread
    keys = np.swapaxes(k, -1, -2)
    work = scores.size * max(d, 8) >> 3  # (multiply-adds; a hand-off costs 50-150 us)
    by_batch = n_b >= pool.parts(n_b * n_kv, work)

    def body(lo: int, hi: int) -> None:
        part = (slice(lo, hi),) if by_batch else (slice(None), slice(lo, hi))
        rows = (lo, hi, 0, n_h) if by_batch else (0, n_b, lo * g, hi * g)
        np.matmul(qs[part], keys[part], out=scores[part])
        kernel(grid, *args, *rows)
        np.matmul(scores[part], v[part], out=outs[part])

    pool.parallel_for(n_b if by_batch else n_kv, body, work=work)


@jit(parallel=True)
def _sdpa_tiles(q: Any, k: Any, v: Any, out: Any, add: Any, keep: Any, qpos: Any,
                causal: bool, kvlen: int, scale: float, softcap: float, has_add: bool,
                has_keep: bool, parts: int) -> None:
    # One task per (batch entry, kv head), split over numba's workers (see `_sdpa_gemm`):
    # its keys packed once as `gemm`'s panels, then `_by_key32` for each block of query rows
    n_b, n_kv, s_len, d = k.shape
    span = gemm.SPAN
    count = -(-s_len // span)
    tasks = n_b * n_kv
    step = -(-tasks // parts)
    for part in prange(parts):
        keys = np.empty((count * d, span), np.float32)
        scores = np.zeros((s_len, span), np.float32)  # (columns past a block's stay finite)
        limits = np.empty(span, np.int64)
        lanes = np.empty((2, span), np.float32)
        for task in range(part * step, min(tasks, part * step + step)):
            _by_key32(q, k, v, out, add, keep, qpos, causal, kvlen, scale, softcap, has_add,
                      has_keep, task // n_kv, task % n_kv, keys, scores, limits, lanes)


@jit()
def _by_key32(q: Any, k: Any, v: Any, out: Any, add: Any, keep: Any, qpos: Any, causal: bool,
              kvlen: int, scale: float, softcap: float, has_add: bool, has_keep: bool, b: int,
              kv: int, keys: Any, scores: Any, limits: Any, lanes: Any) -> None:
    """Attention of the query heads of kv head `kv` of batch entry `b`, `SPAN` queries a pass.

    The scores come out transposed, a row per key and a column per query (`gemm`'s tiles with
    the keys' panels as the rows and the queries as the weights): the softmax of each query
    is then down a column, every step `SPAN` queries wide (`_softmax_by_key32`), and that
    (keys, queries) block is already the panel of the weights by values (the second
    product's rows). A row per query had put each softmax in loops as short as the keys (26
    for a 32-sentence MiniLM batch), which LLVM runs scalar, and needed the weights packed
    again for the second product: an encoder layer's attention took 1.63 ms on one thread,
    two thirds of it there.
    """
    n_h, t_len = q.shape[1], q.shape[2]
    s_len, dv = k.shape[2], v.shape[3]
    g = n_h // k.shape[1]
    span = gemm.SPAN
    gemm.pack_rows(k[b, kv], keys, 0, -(-s_len // span))
    values = v[b, kv].T
    for h in range(kv * g, kv * g + g):
        for t0 in range(0, t_len, span):
            width = min(span, t_len - t0)
            used = _keys_seen(qpos, causal, kvlen, s_len, has_add or has_keep, t0, width)
            block = scores[:used]
            # (two phases around one call of the tiles: a second call site compiles them
            # again, ~5 s more on a cold cache)
            for phase in range(2):
                if phase == 0:  # the scores, a row per key (the panels of the keys used)
                    panels, bt, dst = keys, q[b, h, t0:t0 + width], block[:, :width]
                    panel_count, columns = -(-used // span), width
                else:  # the weights by the values, a row per query (the block: one panel)
                    _softmax_by_key32(block, add, keep, qpos, causal, kvlen, scale, softcap,
                                      has_add, has_keep, b, h, t0, width, limits, lanes)
                    panels, bt = block, values[:, :used]
                    dst, panel_count, columns = out[b, h, t0:t0 + width, :dv], 1, dv
                gemm.tiles(panels, bt, dst, 0, panel_count, 0, columns)


@jit(inline=True)
def _keys_seen(qpos: Any, causal: bool, kvlen: int, s_len: int, masked: bool, t0: int,
               width: int) -> int:
    """The keys queries [t0, t0 + width) read: past the last one's causal limit none does.

    Those keys weigh exactly 0 in every row that sees a key at all (a causal prompt's block of
    32 queries reads ~half the keys on average). A row that sees none averages every key, as
    the reference does: where a row may (a mask, a limit of 0), all are read.
    """
    if not causal or masked:
        return s_len
    lowest, highest = s_len, 0
    for t in range(t0, t0 + width):
        limit = _key_limit(qpos, t, causal, kvlen, s_len)
        lowest, highest = min(lowest, limit), max(highest, limit)
    return highest if lowest >= 1 else s_len


@jit()
def _softmax_by_key32(w: Any, add: Any, keep: Any, qpos: Any, causal: bool, kvlen: int,
                      scale: float, softcap: float, has_add: bool, has_keep: bool, b: int,
                      h: int, t0: int, width: int, limits: Any, lanes: Any) -> None:
    """Column i of `w` (keys, `SPAN`): query t0 + i's scores become its softmax weights.

    As `_mask_softmax32` computes each row (scale, soft cap, the additive mask, the lowest
    float past the causal limit or where the mask drops the key, then the softmax), but
    `SPAN` queries at a time, each of its loops over the queries a constant `SPAN` wide.
    Columns from `width` on are set to 0 (their products are computed and dropped).
    A mask that is one value per key (a padding mask broadcast over the queries) is read
    once per key; any other, per element.
    """
    s_len = w.shape[0]
    n = w.shape[1]  # (`SPAN`, read at run time: loops of a constant 32 were unrolled scalar)
    lowest = np.float32(np.finfo(np.float32).min)
    sc = np.float32(scale)
    cap = np.float32(softcap)
    inv_cap = np.float32(1.0 / softcap) if softcap > 0 else np.float32(0.0)
    for i in range(n):
        t = t0 + min(i, width - 1)
        limits[i] = _key_limit(qpos, t, causal, kvlen, s_len) if i < width else s_len
    add_by_key = add.strides[2] == 0
    keep_by_key = keep.strides[2] == 0
    top, total = lanes[0], lanes[1]
    for i in range(n):
        top[i] = -np.inf
        total[i] = np.float32(0.0)
    for s in range(s_len):
        line = w[s]
        _scaled(line, n, scale, softcap, sc, cap, inv_cap)
        if has_add:
            if add_by_key:
                extra = add[b, h, t0, s]
                for i in range(n):
                    line[i] = line[i] + extra
            else:
                for i in range(width):
                    line[i] = line[i] + add[b, h, t0 + i, s]
        kept = not has_keep or not keep_by_key or keep[b, h, t0, s]
        for i in range(n):
            x = line[i] if kept and s < limits[i] else lowest
            line[i] = x if i < width else np.float32(0.0)
        if has_keep and not keep_by_key:
            for i in range(width):
                if not keep[b, h, t0 + i, s]:
                    line[i] = lowest
        for i in range(n):  # (NaN skipped: it reaches the sum through exp)
            x = line[i]
            top[i] = x if x > top[i] else top[i]
    for s in range(s_len):
        line = w[s]
        for i in range(n):
            e = softmax_weight32f(line[i] - top[i])
            line[i] = e
            total[i] += e
    for i in range(n):
        total[i] = np.float32(1.0) / total[i]
    for s in range(s_len):
        line = w[s]
        for i in range(n):
            line[i] = line[i] * total[i]


def _full(mask: Array | None, shape: tuple[int, ...], dtype: Any) -> tuple[Array, bool]:
    """`mask` broadcast to `shape` (a strided view, no copy), or a stand-in of that shape."""
    if mask is None:
        return _stand_in(shape, np.dtype(dtype)), False
    return np.broadcast_to(np.asarray(mask, dtype), shape), True


@functools.lru_cache(maxsize=64)
def _stand_in(shape: tuple[int, ...], dtype: np.dtype[Any]) -> Array:
    """A read-only zero of `shape` (made once per shape: `broadcast_to` costs ~4 us a call)."""
    return np.broadcast_to(np.zeros((1,) * len(shape), dtype), shape)


def sdpa(q: Array, k: Array, v: Array, out: Array, *, scale: float,
         mask: Array | None = None, q_positions: Array | None = None,
         kv_length: int | None = None, causal: bool = False, softcap: float = 0.0) -> None:
    """``out = softmax(q k^T * scale + mask) v`` per head, GQA-aware, into `out`.

    Args:
        q: (B, Hq, T, D) float32/float64, any strides.
        k: (B, Hkv, S, D); Hq is a multiple of Hkv.
        v: (B, Hkv, S, Dv).
        out: (B, Hq, T, Dv), written.
        scale: the score scale.
        mask: boolean (True attends) or additive float mask broadcastable to (B, Hq, T, S).
        q_positions: (T,) absolute query positions (causal); default ``S - T + i``.
        kv_length: keys at positions >= kv_length are excluded (a fixed-capacity cache).
        causal: query i sees keys at positions <= its own.
        softcap: > 0: the scaled scores become ``softcap * tanh(scores / softcap)`` before the
            mask is added (Gemma 2's logit soft-capping).
    """
    prepare_sdpa(q, k, v, out, scale=scale, causal=causal, softcap=softcap)(
        mask, q_positions, kv_length)


#: ``call(mask, q_positions, kv_length)``: `sdpa` on the arrays it was prepared for.
Attend = Callable[[Array | None, Array | None, Any], None]


def prepare_sdpa(q: Array, k: Array, v: Array, out: Array, *, scale: float, causal: bool,
                 softcap: float = 0.0) -> Attend:
    """`sdpa` on these arrays, prepared once: what depends on their shapes is decided here.

    The mask, the query positions and the cache length change from run to run (a decode
    step's), so the call takes them. Reused while q, k, v and `out` are the same objects (see
    `prepared`): a decode step calls attention 24-40 times a token around a kernel of a few
    microseconds.
    """
    if out.size == 0:
        return lambda mask, q_positions, kv_length: None
    n_b, n_h, t_len, _ = q.shape
    s_len = k.shape[2]
    shape = (n_b, n_h, t_len, s_len)
    # (BLAS's products write `out` as one matrix per (batch, kv head): C-contiguous only)
    products = (t_len >= GEMM_MIN_QUERIES and (out.flags.c_contiguous or _on_tiles(q, out))
                and _by_products(q, k, causal))
    no_add, no_keep = _full(None, shape, q.dtype)[0], _full(None, shape, np.bool_)[0]
    scale, softcap = float(scale), float(softcap)
    # float32: one task per (batch entry, kv head, query row), its kv head's query heads cut
    # into chunks when there are fewer such tasks than threads
    groups = n_b * k.shape[1] * t_len
    per_kv = n_h // k.shape[1]
    keys = n_b * n_h * t_len * q.shape[3]  # (times the keys read: the work)

    def call(mask: Array | None, q_positions: Array | None, kv_length: Any) -> None:
        add, keep, has_add, has_keep = no_add, no_keep, False, False
        if mask is not None:
            mask = np.asarray(mask)
            if mask.dtype != np.bool_:
                add, has_add = _full(mask, shape, q.dtype)
            elif not mask.all():  # (all true: one sequence's key mask, nothing to read)
                keep, has_keep = _full(mask, shape, np.bool_)
        if q_positions is None:
            qpos = np.arange(t_len, dtype=np.int64) + (s_len - t_len)
        else:
            qpos = np.ascontiguousarray(q_positions, np.int64).reshape(t_len)
        kvlen = -1 if kv_length is None else max(int(kv_length), 0)
        if products:
            keys_k, keys_v = k, v
            if (0 < kvlen < s_len and not (has_add or has_keep)
                    and (not causal or qpos.min() >= 0)):
                # NOTE: a prefill into a cache of larger capacity: the keys from kv_length on
                # weigh exactly 0 in every row (each row keeps key 0): the products skip them
                keys_k, keys_v, kvlen = k[:, :, :kvlen], v[:, :, :kvlen], -1
            _sdpa_gemm(q, keys_k, keys_v, out, (add, keep, qpos, causal, kvlen, scale, softcap,
                                                has_add, has_keep))
            return
        # (the work counts the keys the kernels read: a cache's used length, not its capacity)
        work = keys * (s_len if kvlen < 0 else max(min(s_len, kvlen), 1))
        args = (q, k, v, add, keep, qpos, causal, kvlen, scale, softcap, has_add, has_keep,
                out)
        if q.dtype != np.float32:
            _per_task(_sdpa64, args, n_b * n_h, work)
            return
        if t_len > 1 and (s_len if kvlen < 0 else min(s_len, kvlen)) <= _SHORT_KEYS:
            parts = 1 if work >> 1 < pool.MIN_SPLIT else pool.parts(n_b * n_h, work >> 1)
            if parts == 1:
                _short32(*args, 0, n_b * n_h)
            elif threads.wide_products():  # (beside the products' OpenMP workers, see above)
                _short32_split(*args, parts)
            else:
                _per_task(_short32, args, n_b * n_h, work)
            return
        parts = 1 if work >> 1 < pool.MIN_SPLIT else pool.parts(groups * per_kv, work >> 1)
        if parts == 1:  # (decode at a short context: no closure, no pool)
            _sdpa32(*args, 1, 0, groups)
            return
        chunks = min(per_kv, -(-parts // groups))
        if t_len <= _SPLIT_MAX_QUERIES or threads.wide_products():
            _sdpa32_split(*args, chunks, parts)
            return
        _per_task(_sdpa32, (*args, chunks), groups * chunks, work)

    return call


def _per_task(kernel: Any, args: tuple[Any, ...], tasks: int, work: int) -> None:
    """``kernel(*args, lo, hi)`` over ``range(tasks)``, split over the pool when it pays."""
    if work >> 4 < pool.MIN_SPLIT:  # (decode at a short context: no closure, no pool)
        kernel(*args, 0, tasks)
        return
    # NOTE: a task's multiply-adds count 1/16 of an element
    pool.parallel_for(tasks, lambda lo, hi: kernel(*args, lo, hi), work=work >> 4)


@jit()
def _rotary(x: Any, cos: Any, sin: Any, period: int, interleaved: bool, out: Any) -> None:
    # row r of x uses row r % period of the tables (tables shared by every head and batch
    # entry are passed once, not broadcast into a copy per row)
    half = x.shape[1] // 2
    for r in range(x.shape[0]):
        t = r % period
        if interleaved:
            for j in range(half):
                a, b = x[r, 2 * j], x[r, 2 * j + 1]
                out[r, 2 * j] = a * cos[t, j] - b * sin[t, j]
                out[r, 2 * j + 1] = b * cos[t, j] + a * sin[t, j]
        else:
            for j in range(half):
                a, b = x[r, j], x[r, half + j]
                out[r, j] = a * cos[t, j] - b * sin[t, j]
                out[r, half + j] = b * cos[t, j] + a * sin[t, j]


def _table(table: Array, half_shape: tuple[int, ...], dtype: Any) -> tuple[Array, int]:
    """(rows of `table` as a 2-D C array of `dtype`, its period over the rows of x)."""
    rows, width = half_shape[-2:]
    if table.shape[-2:] == (rows, width) and table.size == rows * width:
        # the common case: one (T, D/2) table for every batch entry and head
        flat = table.reshape(rows, width)
        if flat.dtype != dtype or not flat.flags.c_contiguous:
            flat = np.ascontiguousarray(flat, dtype)
        return flat, rows
    full = np.ascontiguousarray(np.broadcast_to(table, half_shape), dtype)
    return full.reshape(-1, half_shape[-1]), full.size // half_shape[-1]


def rotary(x: Array, cos: Array, sin: Array, out: Array, *, interleaved: bool = False) -> None:
    """Rotary embedding of `x` (..., D) by `cos`/`sin` broadcastable to (..., D/2), into `out`.

    Halves rotate as ``(x1 cos - x2 sin, x2 cos + x1 sin)``; `interleaved` pairs neighbours
    (x[2j], x[2j+1]) instead of the two halves.
    """
    call, _ = prepare_rotary(x, cos, sin, out, interleaved=interleaved)
    call()


def prepare_rotary(x: Array, cos: Array, sin: Array, out: Array, *, interleaved: bool = False
                   ) -> tuple[Callable[[], None], bool]:
    """`rotary`'s kernel call on these arrays, and whether it may be called again.

    Reusable when no operand was copied (see `rowops.prepare_norm`).
    """
    if x.size == 0:
        return nothing, True
    d = x.shape[-1]
    half_shape = (*x.shape[:-1], d // 2)
    rows = x.size // d
    c, period = _table(cos, half_shape, x.dtype)
    s, period_s = _table(sin, half_shape, x.dtype)
    if period_s != period:  # tables broadcast differently: give both the full shape
        c, period = _table(np.broadcast_to(cos, half_shape).copy(), half_shape, x.dtype)
        s, _ = _table(np.broadcast_to(sin, half_shape).copy(), half_shape, x.dtype)
    reusable = (x.flags.c_contiguous and np.may_share_memory(c, cos)
                and np.may_share_memory(s, sin))
    return functools.partial(_rotary, np.ascontiguousarray(x).reshape(rows, d), c, s, period,
                             interleaved, out.reshape(rows, d)), reusable

