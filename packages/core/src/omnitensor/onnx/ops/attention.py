"""ONNX `Attention` (opset 23+): grouped-query attention with masks, KV cache and soft-capping.

Plain cases (no mask, no soft-cap, no exposed scores, causal alignment that matches) call
`functional.scaled_dot_product_attention`, which emits the attention composite; the rest is
built from primitives following the operator's definition (bottom-right causal alignment,
fully masked rows give zeros).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ... import dtypes as dt
from ...errors import UnsupportedError
from ...functional import scaled_dot_product_attention
from ...tensor.creation import full
from ...tensor.math import where
from ...tensor.shape import concatenate
from ...tensor.tensor import Tensor
from ..registry import Ctx, Value, handler

Attrs = Mapping[str, Any]

_ATTRS = ("is_causal", "kv_num_heads", "q_num_heads", "qk_matmul_output_mode", "scale",
          "softcap", "softmax_precision", "left_window_size", "right_window_size")


def _check(attrs: Attrs) -> str | None:
    mode = attrs.get("qk_matmul_output_mode", 0)
    return None if mode in (0, 1, 2, 3) else f"qk_matmul_output_mode={mode}"


def _heads(t: Tensor, heads: int) -> Tensor:
    """(B, S, H*D) -> (B, H, S, D)."""
    b, s, hidden = t.shape
    return t.reshape(b, s, heads, hidden // heads).permute(0, 2, 1, 3)


def _repeat_heads(t: Tensor, reps: int) -> Tensor:
    """Each KV head repeated `reps` times, interleaved: h0, h0, h1, h1, ..."""
    if reps == 1:
        return t
    b, h, s, d = t.shape
    return t.reshape(b, h, 1, s, d).expand(b, h, reps, s, d).reshape(b, h * reps, s, d)


def _zeros(t: Tensor) -> Tensor:
    """Zeros shaped like `t` (never `t * 0`, which is NaN where `t` is inf or NaN)."""
    return full(tuple(t.shape), 0, dtype=t.dtype)


def _neg_inf(dtype: dt.DType) -> float:
    return -math.inf if dtype.is_floating else float(np.iinfo(dtype.np).min)


@handler("Attention", since=23, attributes=_ATTRS, check=_check)
def _attention(ctx: Ctx, attrs: Attrs, q: Value, k: Value, v: Value, mask: Value = None,
               past_key: Value = None, past_value: Value = None,
               nonpad_kv_seqlen: Value = None) -> list[Tensor | None]:
    query, key, value = ctx.tensor(q), ctx.tensor(k), ctx.tensor(v)
    three_d = query.ndim == 3
    if three_d:
        if "q_num_heads" not in attrs or "kv_num_heads" not in attrs:
            raise UnsupportedError("3-D Attention needs q_num_heads and kv_num_heads",
                                   op="onnx")
        query = _heads(query, int(attrs["q_num_heads"]))
        key = _heads(key, int(attrs["kv_num_heads"]))
        value = _heads(value, int(attrs["kv_num_heads"]))
    if (past_key is None) != (past_value is None):
        raise UnsupportedError("past_key and past_value must be given together", op="onnx")
    past = 0
    if past_key is not None:
        pk, pv = ctx.tensor(past_key), ctx.tensor(past_value)
        past = pk.shape[2]
        key, value = concatenate([pk, key], axis=2), concatenate([pv, value], axis=2)
    present_key, present_value = key, value
    b, hq, t, d = query.shape
    hkv, s = key.shape[1], key.shape[2]
    scale = float(attrs["scale"]) if "scale" in attrs else 1.0 / math.sqrt(d)
    softcap = float(attrs.get("softcap", 0.0))
    causal = bool(attrs.get("is_causal", 0))
    outputs = [bool(name) for name in ctx.node.output] + [False] * 4
    mode = int(attrs.get("qk_matmul_output_mode", 0))

    window = (int(attrs.get("left_window_size", -1)), int(attrs.get("right_window_size", -1)))
    plain = (mask is None and nonpad_kv_seqlen is None and softcap == 0.0 and window == (-1, -1)
             and not outputs[3] and "softmax_precision" not in attrs
             and (not causal or past + t == s) and hq % hkv == 0)
    if plain:
        y = scaled_dot_product_attention(query, key, value, is_causal=causal, scale=scale)
        scores = None
    else:
        y, scores = _explicit(ctx, query, key, value, mask, nonpad_kv_seqlen, past, scale,
                              softcap, causal, mode, window, attrs)
    if three_d:
        y = y.permute(0, 2, 1, 3).reshape(b, t, -1)
    return [y, present_key if outputs[1] else None, present_value if outputs[2] else None,
            scores]


def _explicit(ctx: Ctx, query: Tensor, key: Tensor, value: Tensor, mask: Value,
              nonpad: Value, past: int, scale: float, softcap: float, causal: bool, mode: int,
              window: tuple[int, int], attrs: Attrs) -> tuple[Tensor, Tensor | None]:
    b, hq, t, _ = query.shape
    hkv, s = key.shape[1], key.shape[2]
    key, value = _repeat_heads(key, hq // hkv), _repeat_heads(value, hq // hkv)
    root = math.sqrt(scale)
    scores = (query * root) @ (key * root).permute(0, 1, 3, 2)  # (B, H, T, S)
    if softcap > 0.0:
        scores = (scores / softcap).tanh() * softcap
    dtype = query.dtype
    bias = _bias(ctx, mask, nonpad, past, b, t, s, causal, window, dtype)
    with_bias = scores + bias if bias is not None else scores
    exposed: Tensor | None = scores if mode in (0, 1) else with_bias
    work = with_bias
    if "softmax_precision" in attrs:
        from ..model import dtype_of

        work = work.astype(dtype_of(int(attrs["softmax_precision"]), "softmax_precision"))
    peak = work.max(-1, keepdims=True)
    peak = where(peak == -math.inf, _zeros(peak), peak)
    e = (work - peak).exp()
    total = e.sum(-1, keepdims=True)
    total = where(total == 0.0, _zeros(total) + 1.0, total)
    probs = e / total
    if bias is not None:
        dead = bias.max(-1, keepdims=True) == -math.inf
        probs = where(dead, _zeros(probs), probs)
    if mode == 3:
        exposed = probs
    y = probs.astype(dtype) @ value
    return y, None if exposed is None else exposed.astype(dtype)


def _bias(ctx: Ctx, mask: Value, nonpad: Value, past: int, b: int, t: int, s: int,
          causal: bool, window: tuple[int, int], dtype: dt.DType) -> Tensor | None:
    """The additive bias (0 or -inf) of the masks, broadcastable to (B, H, T, S)."""
    bias: Tensor | None = None
    if mask is not None:
        m = ctx.tensor(mask)
        if m.shape[-1] < s:  # a shorter mask is padded as "do not attend"
            fill = False if m.dtype == dt.bool_ else -math.inf
            from ...functional._ops import pad

            m = pad(m, (0,) * m.ndim, (0,) * (m.ndim - 1) + (s - m.shape[-1],), fill)
        if m.dtype == dt.bool_:
            zero = full(tuple(m.shape), 0, dtype=dtype)
            m = where(m, zero, zero + _neg_inf(dtype))
        bias = m.astype(dtype)
    i = np.arange(t).reshape(t, 1)
    j = np.arange(s).reshape(1, s)
    if nonpad is not None:
        lengths = ctx.tensor(nonpad).astype(dt.int32).reshape(b, 1, 1, 1)
        jj = Tensor._apply("iota", shape=(b, 1, t, s), dimension=3, dtype=dt.int32)
        ii = Tensor._apply("iota", shape=(b, 1, t, s), dimension=2, dtype=dt.int32)
        allowed = jj < lengths.expand(b, 1, t, s)
        diff = ii + (lengths.expand(b, 1, t, s) - t) - jj  # query position - key position
        if causal:
            allowed = Tensor._apply("and", allowed, diff >= 0)
        if window[0] >= 0:
            allowed = Tensor._apply("and", allowed, diff <= window[0])
        if window[1] >= 0:
            allowed = Tensor._apply("and", allowed, -diff <= window[1])
        zero = full((b, 1, t, s), 0, dtype=dtype)
        extra = where(allowed, zero, zero + _neg_inf(dtype))
        return extra if bias is None else bias + extra
    if causal or window != (-1, -1):
        gap = i + past - j
        ok = gap >= 0 if causal else np.ones((t, s), bool)
        if window[0] >= 0:
            ok = ok & (gap <= window[0])
        if window[1] >= 0:
            ok = ok & (-gap <= window[1])
        extra_np = np.where(ok, 0.0, -np.inf).astype(dtype.np)
        from ...tensor.interop import from_numpy

        extra = from_numpy(extra_np)
        return extra if bias is None else bias + extra
    return bias
