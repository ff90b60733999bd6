"""The fused attention backward: dq, dk and dv over short key rows, one pass per kv head.

Lowers the ``scaled_dot_product_attention_backward`` composite (the gradient autograd records
for attention) where the keys are few (`lowering.BACKWARD_MAX_KEYS`: a training step's), the
shapes where its decomposition is a dozen small batched products and elementwise passes, each
dominated by its call. One task per (batch entry, kv head): its keys and values copied
contiguous, then for every query row of the query heads sharing them the weights again, as the
forward computed them (`attention._weights`), ``dp = grad . values``, the softmax's backward,
and the three products (the row's dq written at once; dk and dv summed over the rows and
written at the end). Keys a row does not see get no score gradient, but the sums still run
over every key, so an inf or NaN operand spreads as the reference's products spread it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import pool, threads
from ._compat import jit, prange
from .attention import _IN_ORDER_FROM, _dot_in_order, _full, _key_limit, _per_task, _weights
from .mathlib import tanh32f

__all__ = ["prepare_backward"]

Array = np.ndarray[Any, Any]


@jit()
def _backward32(q: Any, k: Any, v: Any, g: Any, add: Any, keep: Any, qpos: Any, causal: bool,
                kvlen: int, scale: float, softcap: float, has_add: bool, has_keep: bool,
                dq: Any, dk: Any, dv: Any, lo: int, hi: int) -> None:
    n_h, t_len, d_len = q.shape[1], q.shape[2], q.shape[3]
    n_kv, s_len, dv_len = k.shape[1], k.shape[2], v.shape[3]
    groups = n_h // n_kv
    sc = np.float32(scale)
    inv_cap = np.float32(1.0 / softcap) if softcap > 0 else np.float32(0.0)
    row = np.empty(s_len, np.float32)  # the scores, then the weights
    raw = np.empty(s_len, np.float32)  # the scores (the soft cap's derivative reads them)
    ds = np.empty(s_len, np.float32)
    keys = np.empty((s_len, d_len), np.float32)
    values = np.empty((s_len, dv_len), np.float32)
    dkeys = np.empty((s_len, d_len), np.float32)
    dvalues = np.empty((s_len, dv_len), np.float32)
    query = np.empty(d_len, np.float32)
    grad = np.empty(dv_len, np.float32)
    dquery = np.empty(d_len, np.float32)
    for task in range(lo, hi):
        b, kh = task // n_kv, task % n_kv
        k_max = np.float32(0.0)
        for s in range(s_len):
            for d in range(d_len):
                x = k[b, kh, s, d]
                keys[s, d] = x
                k_max = max(k_max, abs(x))
                dkeys[s, d] = np.float32(0.0)
            for d in range(dv_len):
                values[s, d] = v[b, kh, s, d]
                dvalues[s, d] = np.float32(0.0)
        for h in range(kh * groups, (kh + 1) * groups):
            for t in range(t_len):
                q_max = np.float32(0.0)
                for d in range(d_len):
                    x = q[b, h, t, d]
                    query[d] = x
                    q_max = max(q_max, abs(x))
                for d in range(dv_len):
                    grad[d] = g[b, h, t, d]
                # (as the forward's `_short32`: near the float limits, the reference's order)
                in_order = np.float64(q_max) * np.float64(k_max) * d_len >= _IN_ORDER_FROM
                n = max(_key_limit(qpos, t, causal, kvlen, s_len), 0)
                for s in range(n):
                    if in_order:
                        acc = _dot_in_order(query, keys[s])
                    else:
                        key = keys[s]
                        acc = np.float32(0.0)
                        for d in range(d_len):
                            acc += query[d] * key[d]
                    row[s] = acc
                    raw[s] = acc
                end = _weights(row, n, add[b, h, t], keep[b, h, t], scale, softcap, has_add,
                               has_keep)
                # keys past `end` weigh 0, or NaN in a NaN row (as the reference's softmax)
                rest = row[0] if end > 0 and row[0] != row[0] else np.float32(0.0)
                for s in range(end, s_len):
                    row[s] = rest
                total = np.float32(0.0)
                for s in range(s_len):
                    value = values[s]
                    acc = np.float32(0.0)
                    for d in range(dv_len):
                        acc += grad[d] * value[d]
                    ds[s] = acc
                    total += acc * row[s]
                for s in range(s_len):
                    seen = s < n and s < end and (not has_keep or keep[b, h, t, s])
                    if seen:
                        x = row[s] * (ds[s] - total)
                        if softcap > 0:
                            c = tanh32f(raw[s] * sc * inv_cap)
                            x = x * (np.float32(1.0) - c * c)
                        ds[s] = x * sc
                    else:
                        ds[s] = np.float32(0.0)
                for d in range(d_len):
                    dquery[d] = np.float32(0.0)
                for s in range(s_len):
                    x, p = ds[s], row[s]
                    key, dkey, dvalue = keys[s], dkeys[s], dvalues[s]
                    for d in range(d_len):
                        dquery[d] += x * key[d]
                        dkey[d] += x * query[d]
                    for d in range(dv_len):
                        dvalue[d] += p * grad[d]
                for d in range(d_len):
                    dq[b, h, t, d] = dquery[d]
        for s in range(s_len):
            for d in range(d_len):
                dk[b, kh, s, d] = dkeys[s, d]
            for d in range(dv_len):
                dv[b, kh, s, d] = dvalues[s, d]


@jit(parallel=True)
def _backward32_split(q: Any, k: Any, v: Any, g: Any, add: Any, keep: Any, qpos: Any,
                      causal: bool, kvlen: int, scale: float, softcap: float, has_add: bool,
                      has_keep: bool, dq: Any, dk: Any, dv: Any, parts: int) -> None:
    tasks = q.shape[0] * k.shape[1]
    step = -(-tasks // parts)
    for part in prange(parts):
        _backward32(q, k, v, g, add, keep, qpos, causal, kvlen, scale, softcap, has_add,
                    has_keep, dq, dk, dv, part * step, min(tasks, part * step + step))


#: ``call(mask, q_positions, kv_length)`` on the arrays it was prepared for.
Backward = Callable[[Array | None, Array | None, Any], None]


def prepare_backward(q: Array, k: Array, v: Array, g: Array, dq: Array, dk: Array, dv: Array,
                     *, scale: float, causal: bool, softcap: float = 0.0) -> Backward:
    """The fused backward on these float32 arrays (any strides).

    As `attention.prepare_sdpa`, the mask, the query positions and the cache length are the
    call's, at every run.
    """
    n_b, n_h, t_len, d_len = q.shape
    n_kv, s_len = k.shape[1], k.shape[2]
    shape = (n_b, n_h, t_len, s_len)
    no_add, no_keep = _full(None, shape, q.dtype)[0], _full(None, shape, np.bool_)[0]
    tasks = n_b * n_kv
    # (the multiply-adds: four products of the rows by the keys)
    work = n_b * n_h * t_len * s_len * (2 * d_len + 2 * v.shape[3])
    scale, softcap = float(scale), float(softcap)

    def call(mask: Array | None, q_positions: Array | None, kv_length: Any) -> None:
        if dk.size == 0 and dq.size == 0:
            return
        add, keep, has_add, has_keep = no_add, no_keep, False, False
        if mask is not None:
            mask = np.asarray(mask)
            if mask.dtype != np.bool_:
                add, has_add = _full(mask, shape, q.dtype)
            elif not mask.all():
                keep, has_keep = _full(mask, shape, np.bool_)
        if q_positions is None:
            qpos = np.arange(t_len, dtype=np.int64) + (s_len - t_len)
        else:
            qpos = np.ascontiguousarray(q_positions, np.int64).reshape(t_len)
        kvlen = -1 if kv_length is None else max(int(kv_length), 0)
        args = (q, k, v, g, add, keep, qpos, causal, kvlen, scale, softcap, has_add, has_keep,
                dq, dk, dv)
        parts = 1 if work < pool.MIN_SPLIT else pool.parts(tasks, work)
        if parts == 1:
            _backward32(*args, 0, tasks)
        elif threads.wide_products():  # (beside the products' OpenMP workers)
            _backward32_split(*args, parts)
        else:
            _per_task(_backward32, args, tasks, work << 4)

    return call
