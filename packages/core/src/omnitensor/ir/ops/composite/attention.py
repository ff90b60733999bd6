"""Attention composites: rotary_embedding and scaled_dot_product_attention."""

from __future__ import annotations

from typing import Any

import numpy as np

from ....dtypes import FLOATING, int32
from ....errors import DTypeError, ShapeError
from ...builder import Builder, dense
from ...opdef import OpView, attribute, composite, operand
from ...types import TensorType, Value
from ._emit import binary, broadcast, scalar

__all__ = ["RotaryEmbeddingView", "ScaledDotProductAttentionView"]


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


@composite("scaled_dot_product_attention", dtypes=FLOATING, ulp=16)
class ScaledDotProductAttentionView(OpView):
    """softmax(q k^T * scale [causal mask]) v with grouped-query heads.

    `q` (B, Hq, T, D), `k` (B, Hkv, S, D), `v` (B, Hkv, S, Dv), one dtype; Hq a multiple of Hkv
    (each key/value head serves Hq / Hkv query heads). With `is_causal`, query i sees keys at
    positions <= S - T + i (the end of the keys: a decode step against a filled cache, or
    PyTorch's alignment when T == S); masked scores are half the dtype's lowest value, so a
    fully masked row is uniform, not NaN. Result (B, Hq, T, Dv). Padding masks, explicit query
    positions and cache lengths are applied by the functional with primitives.
    """

    q = operand()
    k = operand()
    v = operand()
    scale: float = attribute()
    is_causal: bool = attribute(False)

    @staticmethod
    def infer(q: TensorType, k: TensorType, v: TensorType, *, scale: float,
              is_causal: bool) -> TensorType:
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
        return TensorType((*q.shape[:3], v.shape[3]), q.dtype)

    @staticmethod
    def decompose(b: Builder, q: Value, k: Value, v: Value, *, scale: float,
                  is_causal: bool) -> Value:
        from .norms import SoftmaxView

        bq, hq, t, d = dense(q.type).shape
        hkv, s, dv = dense(k.type).shape[1], dense(k.type).shape[2], dense(v.type).shape[3]
        g = hq // hkv
        qr = b.emit("reshape", q, shape=(bq, hkv, g * t, d))
        scores = b.emit("dot_general", qr, k, contracting=((3,), (3,)), batch=((0, 1), (0, 1)))
        scores = binary(b, "mul", scores, float(scale))
        scores = b.emit("reshape", scores, shape=(bq, hq, t, s))
        if is_causal:
            k_pos = b.emit("iota", shape=(t, s), dimension=1, dtype=int32)
            q_pos = binary(b, "add", b.emit("iota", shape=(t, s), dimension=0, dtype=int32), s - t)
            keep = b.emit("broadcast_in_dim", b.emit("le", k_pos, q_pos), shape=(bq, hq, t, s),
                          dims=(2, 3))
            low = broadcast(b, scalar(b, _lowest(dense(q.type).dtype), q), (bq, hq, t, s))
            scores = b.emit("select", keep, scores, low)
        probs = SoftmaxView.decompose(b, scores, axes=(3,))
        probs = b.emit("reshape", probs, shape=(bq, hkv, g * t, s))
        out = b.emit("dot_general", probs, v, contracting=((3,), (2,)), batch=((0, 1), (0, 1)))
        return b.emit("reshape", out, shape=(bq, hq, t, dv))
