"""Attention composites: rotary_embedding and scaled_dot_product_attention."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ....dtypes import ALL, FLOATING, bool_, int32
from ....errors import DTypeError, OmnitensorError, ShapeError
from ...builder import Builder, dense
from ...opdef import OpView, attribute, composite, operand
from ...types import TensorType, Value
from ._emit import binary, broadcast, scalar

__all__ = ["MASK_KINDS", "AttentionWeights", "RotaryEmbeddingView",
           "ScaledDotProductAttentionView", "attention_weights"]


def _half(b: Builder, x: Value, which: int, interleaved: bool) -> Value:
    """Feature i (which=0) or its partner (which=1) of every rotated pair, shape (..., D/2)."""
    shape = dense(x.type).shape
    d, lead = shape[-1], shape[:-1]
    if interleaved:
        pairs = b.emit("reshape", x, shape=(*lead, d // 2, 2))
        part = b.emit("slice", pairs, start=(0,) * len(shape) + (which,),
                      limit=(*lead, d // 2, which + 1), stride=(1,) * (len(shape) + 1))
        return b.emit("reshape", part, shape=(*lead, d // 2))
    start = (0,) * (len(shape) - 1) + (which * d // 2,)
    return b.emit("slice", x, start=start, limit=(*lead, (which + 1) * d // 2),
                  stride=(1,) * len(shape))


@composite("rotary_embedding", dtypes=FLOATING, ulp=4)
class RotaryEmbeddingView(OpView):
    """Rotate feature pairs of `x` (..., D) by the angles whose `cos`/`sin` are given.

    `cos` and `sin` have x's dtype and broadcast (NumPy rules, trailing) to ``x.shape[:-1] +
    (D/2,)``. ``interleaved=False`` pairs feature i with i + D/2 (GPT-NeoX, Hugging Face
    Llama); ``interleaved=True`` pairs 2i with 2i + 1 (GPT-J). Each pair (a, b) becomes
    ``(a cos - b sin, b cos + a sin)``; edge values propagate as those products do.
    """

    x = operand()
    cos = operand()
    sin = operand()
    interleaved: bool = attribute(False)

    @staticmethod
    def infer(x: TensorType, cos: TensorType, sin: TensorType, *,
              interleaved: bool) -> TensorType:
        op = "rotary_embedding"
        if not x.shape or x.shape[-1] % 2:
            raise ShapeError(f"{op}: x must have an even last dim (got {x.shape})", op=op,
                             shapes=[x.shape])
        half = (*x.shape[:-1], x.shape[-1] // 2)
        for name, t in (("cos", cos), ("sin", sin)):
            if t.dtype != x.dtype:
                raise DTypeError(f"{op}: {name} has dtype {t.dtype} (expected x's {x.dtype})",
                                 op=op, dtype=t.dtype.name)
            try:
                fits = np.broadcast_shapes(t.shape, half) == half
            except ValueError:
                fits = False
            if not fits:
                raise ShapeError(f"{op}: {name} of shape {t.shape} does not broadcast to {half}",
                                 op=op, shapes=[x.shape, t.shape])
        return x

    @staticmethod
    def decompose(b: Builder, x: Value, cos: Value, sin: Value, *, interleaved: bool) -> Value:
        shape = dense(x.type).shape
        half = (*shape[:-1], shape[-1] // 2)
        c, s = broadcast(b, cos, half), broadcast(b, sin, half)
        x1, x2 = _half(b, x, 0, interleaved), _half(b, x, 1, interleaved)
        first = b.emit("sub", b.emit("mul", x1, c), b.emit("mul", x2, s))
        second = b.emit("add", b.emit("mul", x2, c), b.emit("mul", x1, s))
        if not interleaved:
            return b.emit("concatenate", first, second, axis=len(shape) - 1)
        col = (*half, 1)
        both = b.emit("concatenate", b.emit("reshape", first, shape=col),
                      b.emit("reshape", second, shape=col), axis=len(shape))
        return b.emit("reshape", both, shape=shape)


def _lowest(dtype: Any) -> float:
    """Half the most negative finite value (exp underflows to 0; masked rows stay finite)."""
    import ml_dtypes

    info: Any = ml_dtypes.finfo(dtype.np)  # type: ignore[no-untyped-call]
    return float(info.min) * 0.5


#: Kinds of the attention mask operand (`ScaledDotProductAttentionView.mask_kind`).
MASK_KINDS = ("none", "bool", "additive")


@composite("scaled_dot_product_attention", dtypes=FLOATING, ulp=16)
class ScaledDotProductAttentionView(OpView):
    """softmax(softcap(q k^T * scale) + mask) v with grouped-query heads and a KV cache.

    `q` (B, Hq, T, D), `k` (B, Hkv, S, D), `v` (B, Hkv, S, Dv), one dtype; Hq a multiple of Hkv
    (each key/value head serves Hq / Hkv query heads). Result (B, Hq, T, Dv).

    `extras` holds, in this order and only when present: the mask (`mask_kind` "bool": True
    attends, or "additive": q's dtype, added to the scores; either broadcastable to
    (B, Hq, T, S)), the int32 (T,) absolute query positions (`has_q_positions`, with
    `is_causal` only) and the 0-d int32 cache length (`has_kv_length`: keys at positions >= it
    are masked). With `is_causal`, query i sees keys at positions <= its position, which is
    ``S - T + i`` unless positions are given (the end of the keys: a decode step against a
    filled cache, or PyTorch's alignment when T == S). A `softcap` > 0 maps the scaled scores
    to ``softcap * tanh(scores / softcap)`` before the mask (Gemma 2). Masked scores are half
    the dtype's lowest value, so a fully masked row is uniform, not NaN.
    """

    q = operand()
    k = operand()
    v = operand()
    extras = operand(variadic=True, min_count=0, dtypes=ALL)
    scale: float = attribute()
    is_causal: bool = attribute(False)
    mask_kind: str = attribute("none")
    has_q_positions: bool = attribute(False)
    has_kv_length: bool = attribute(False)
    softcap: float = attribute(0.0)

    @staticmethod
    def infer(q: TensorType, k: TensorType, v: TensorType, extras: tuple[TensorType, ...], *,
              scale: float, is_causal: bool, mask_kind: str, has_q_positions: bool,
              has_kv_length: bool, softcap: float) -> TensorType:
        op = "scaled_dot_product_attention"
        if any(len(t.shape) != 4 for t in (q, k, v)) or q.shape[1] % max(k.shape[1], 1) or (
                q.shape[0] != k.shape[0] or k.shape[:3] != v.shape[:3] or q.shape[3] != k.shape[3]
                or k.shape[1] == 0):
            raise ShapeError(
                f"{op}: incompatible shapes (got q {q.shape}, k {k.shape}, v {v.shape}; expected "
                "(B, Hq, T, D), (B, Hkv, S, D), (B, Hkv, S, Dv) with Hq a multiple of Hkv)",
                op=op, shapes=[q.shape, k.shape, v.shape])
        if not q.dtype == k.dtype == v.dtype:
            raise DTypeError(f"{op}: q, k and v must share one dtype (got {q.dtype}, {k.dtype}, "
                             f"{v.dtype})", op=op, dtype=k.dtype.name)
        _check_extras(q, k, extras, mask_kind=mask_kind, has_q_positions=has_q_positions,
                      has_kv_length=has_kv_length, is_causal=is_causal, softcap=softcap)
        return TensorType((*q.shape[:3], v.shape[3]), q.dtype)

    @staticmethod
    def decompose(b: Builder, q: Value, k: Value, v: Value, extras: tuple[Value, ...], *,
                  scale: float, is_causal: bool, mask_kind: str, has_q_positions: bool,
                  has_kv_length: bool, softcap: float) -> Value:
        bq, hq, t, _ = dense(q.type).shape
        hkv, s, dv = dense(k.type).shape[1], dense(k.type).shape[2], dense(v.type).shape[3]
        weights = attention_weights(b, q, k, extras, scale=scale, is_causal=is_causal,
                                    mask_kind=mask_kind, has_q_positions=has_q_positions,
                                    has_kv_length=has_kv_length, softcap=softcap)
        probs = b.emit("reshape", weights.probs, shape=(bq, hkv, hq // hkv * t, s))
        out = b.emit("dot_general", probs, v, contracting=((3,), (2,)), batch=((0, 1), (0, 1)))
        return b.emit("reshape", out, shape=(bq, hq, t, dv))


@dataclass(frozen=True)
class AttentionWeights:
    """What `attention_weights` emits: the weights and what their gradient needs.

    Attributes:
        probs: the softmax weights, (B, Hq, T, S).
        keep: the bool (B, Hq, T, S) keys attended, None when nothing is masked out.
        capped: ``tanh(scores / softcap)`` before the mask (None without a soft cap).
    """

    probs: Value
    keep: Value | None
    capped: Value | None


def attention_weights(b: Builder, q: Value, k: Value, extras: tuple[Value, ...], *,
                      scale: float, is_causal: bool, mask_kind: str, has_q_positions: bool,
                      has_kv_length: bool, softcap: float) -> AttentionWeights:
    """Emit the attention weights softmax(softcap(q k^T * scale) + mask) of the composite."""
    bq, hq, t, d = dense(q.type).shape
    hkv, s = dense(k.type).shape[1], dense(k.type).shape[2]
    g = hq // hkv
    rest = list(extras)
    mask = rest.pop(0) if mask_kind != "none" else None
    q_positions = rest.pop(0) if has_q_positions else None
    kv_length = rest.pop(0) if has_kv_length else None
    full = (bq, hq, t, s)
    qr = b.emit("reshape", q, shape=(bq, hkv, g * t, d))
    scores = b.emit("dot_general", qr, k, contracting=((3,), (3,)), batch=((0, 1), (0, 1)))
    scores = binary(b, "mul", scores, float(scale))
    scores = b.emit("reshape", scores, shape=full)
    capped: Value | None = None
    if softcap > 0.0:
        capped = b.emit("tanh", binary(b, "mul", scores, 1.0 / softcap))
        scores = binary(b, "mul", capped, float(softcap))
    keep: Value | None = None
    if is_causal or kv_length is not None:
        k_pos = b.emit("iota", shape=(t, s), dimension=1, dtype=int32)
        if is_causal:
            if q_positions is None:
                q_pos = binary(b, "add", b.emit("iota", shape=(t, s), dimension=0,
                                                dtype=int32), s - t)
            else:
                q_pos = b.emit("broadcast_in_dim", q_positions, shape=(t, s), dims=(0,))
            keep = b.emit("le", k_pos, q_pos)
        if kv_length is not None:
            limit = b.emit("broadcast_in_dim", kv_length, shape=(t, s), dims=())
            valid = b.emit("lt", k_pos, limit)
            keep = valid if keep is None else b.emit("and", keep, valid)
    if mask is not None and mask_kind == "bool":
        keep = mask if keep is None else binary(b, "and", keep, mask)
    elif mask is not None:
        scores = binary(b, "add", scores, mask)
    if keep is not None:
        low = broadcast(b, scalar(b, _lowest(dense(q.type).dtype), q), full)
        keep = _broadcast_to(b, keep, full)
        scores = b.emit("select", keep, scores, low)
    # NOTE: the softmax stays a composite, as F.softmax records it: a backend that expands
    # attention still reaches its softmax row kernel.
    return AttentionWeights(b.emit("softmax", scores, axes=(3,)), keep, capped)


def _broadcast_to(b: Builder, value: Value, shape: tuple[int, ...]) -> Value:
    """`value` broadcast to `shape` by NumPy rules (size-1 dims stretch)."""
    have = dense(value.type).shape
    if have == shape:
        return value
    offset = len(shape) - len(have)
    return b.emit("broadcast_in_dim", value, shape=shape, dims=tuple(range(offset, len(shape))))


def _check_extras(q: TensorType, k: TensorType, extras: tuple[TensorType, ...], *,
                  mask_kind: str, has_q_positions: bool, has_kv_length: bool, is_causal: bool,
                  softcap: float) -> None:
    op = "scaled_dot_product_attention"
    if mask_kind not in MASK_KINDS:
        raise OmnitensorError(f"{op}: unknown mask_kind={mask_kind!r} (expected one of "
                              f"{', '.join(MASK_KINDS)})", op=op)
    if has_q_positions and not is_causal:
        raise OmnitensorError(f"{op}: query positions are only read by causal attention "
                              "(is_causal=True)", op=op)
    if not softcap >= 0.0:
        raise OmnitensorError(f"{op}: softcap must be >= 0 (0: none; got {softcap})", op=op)
    want = (mask_kind != "none") + has_q_positions + has_kv_length
    if len(extras) != want:
        raise ShapeError(f"{op}: {len(extras)} extra operand(s) for mask_kind={mask_kind!r}, "
                         f"has_q_positions={has_q_positions}, has_kv_length={has_kv_length} "
                         f"(expected {want})", op=op)
    rest = list(extras)
    full = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    if mask_kind != "none":
        mask = rest.pop(0)
        dtype = bool_ if mask_kind == "bool" else q.dtype
        if mask.dtype != dtype:
            raise DTypeError(f"{op}: a {mask_kind} mask has dtype {mask.dtype} (expected "
                             f"{dtype})", op=op, dtype=mask.dtype.name)
        try:
            fits = np.broadcast_shapes(mask.shape, full) == full
        except ValueError:
            fits = False
        if not fits:
            raise ShapeError(f"{op}: mask of shape {mask.shape} does not broadcast to {full}",
                             op=op, shapes=[mask.shape, full])
    for name, want_shape, present in (("q_positions", (q.shape[2],), has_q_positions),
                                      ("kv_length", (), has_kv_length)):
        if not present:
            continue
        value = rest.pop(0)
        if value.dtype != int32 or value.shape != want_shape:
            raise ShapeError(f"{op}: {name} is {value} (expected int32{list(want_shape)})",
                             op=op, shapes=[value.shape])
