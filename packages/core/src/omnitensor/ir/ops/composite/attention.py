"""Attention composites: rotary_embedding."""

from __future__ import annotations

import numpy as np

from ....dtypes import FLOATING
from ....errors import DTypeError, ShapeError
from ...builder import Builder, dense
from ...opdef import OpView, attribute, composite, operand
from ...types import TensorType, Value
from ._emit import broadcast

__all__ = ["RotaryEmbeddingView"]


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
