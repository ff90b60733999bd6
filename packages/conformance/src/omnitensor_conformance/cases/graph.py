"""Fused multi-op graphs built from primitives: softmax, layer norm, a GELU-tanh chain, attention.

A backend that fuses these (or offers them through `custom_call`) must still match the reference
of the whole graph. They are rows ``graph.<name>`` of the matrix, compared by NMSE.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from omnitensor.dtypes import DType, bfloat16, float16, float32, float64
from omnitensor.ir.builder import Builder
from omnitensor.ir.opdef import all_ops
from omnitensor.ir.types import TensorType, Value

from ..case import Arg, Case, register_case_source

_DTYPES = (float32, float16, bfloat16, float64)
_NEEDED = ("broadcast_in_dim", "reduce_max", "reduce_sum", "sub", "exp", "div", "mul", "add",
           "tanh", "rsqrt", "dot_general", "constant")


def _tt(x: Value) -> TensorType:
    assert isinstance(x.type, TensorType)  # graphs are built from dense inputs only
    return x.type


def _scalar(b: Builder, value: float, dtype: DType, shape: tuple[int, ...]) -> Value:
    c = b.constant(value, dtype)
    return b.emit("broadcast_in_dim", c, shape=shape, dims=())


def _keep(b: Builder, x: Value, shape: tuple[int, ...]) -> Value:
    """Broadcast a (rows,) reduction back over the last axis of `shape`."""
    return b.emit("broadcast_in_dim", x, shape=shape, dims=tuple(range(len(shape) - 1)))


def softmax(b: Builder, x: Value) -> Value:
    """Softmax over the last axis: exp(x - max) / sum(exp(x - max))."""
    shape = _tt(x).shape
    last = (len(shape) - 1,)
    shifted = b.emit("sub", x, _keep(b, b.emit("reduce_max", x, axes=last), shape))
    e = b.emit("exp", shifted)
    return b.emit("div", e, _keep(b, b.emit("reduce_sum", e, axes=last), shape))


def layer_norm(b: Builder, x: Value, gamma: Value, beta: Value) -> Value:
    """(x - mean) * rsqrt(var + 1e-5) * gamma + beta over the last axis."""
    shape = _tt(x).shape
    dtype = _tt(x).dtype
    last = (len(shape) - 1,)
    inv_n = _scalar(b, 1.0 / shape[-1], dtype, shape[:-1])
    mean = b.emit("mul", b.emit("reduce_sum", x, axes=last), inv_n)
    centered = b.emit("sub", x, _keep(b, mean, shape))
    var = b.emit("mul", b.emit("reduce_sum", b.emit("mul", centered, centered), axes=last), inv_n)
    inv = b.emit("rsqrt", b.emit("add", var, _scalar(b, 1e-5, dtype, shape[:-1])))
    normed = b.emit("mul", centered, _keep(b, inv, shape))
    g = b.emit("broadcast_in_dim", gamma, shape=shape, dims=(len(shape) - 1,))
    bb = b.emit("broadcast_in_dim", beta, shape=shape, dims=(len(shape) - 1,))
    return b.emit("add", b.emit("mul", normed, g), bb)


def gelu_tanh(b: Builder, x: Value) -> Value:
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    shape, dtype = _tt(x).shape, _tt(x).dtype
    cube = b.emit("mul", b.emit("mul", x, x), x)
    inner = b.emit("add", x, b.emit("mul", cube, _scalar(b, 0.044715, dtype, shape)))
    t = b.emit("tanh", b.emit("mul", inner, _scalar(b, math.sqrt(2 / math.pi), dtype, shape)))
    one_plus = b.emit("add", t, _scalar(b, 1.0, dtype, shape))
    return b.emit("mul", b.emit("mul", x, one_plus), _scalar(b, 0.5, dtype, shape))


def attention(b: Builder, q: Value, k: Value, v: Value) -> Value:
    """softmax(q k^T / sqrt(d)) v with batch dims (B, H): q (B,H,T,D), k/v (B,H,S,D)."""
    batch_dims = ((0, 1), (0, 1))
    scores = b.emit("dot_general", q, k, contracting=((3,), (3,)), batch=batch_dims)  # (B,H,T,S)
    scale = _scalar(b, 1.0 / math.sqrt(_tt(q).shape[-1]), _tt(q).dtype, _tt(scores).shape)
    probs = softmax(b, b.emit("mul", scores, scale))
    return b.emit("dot_general", probs, v, contracting=((3,), (2,)), batch=batch_dims)  # (B,H,T,D)


def graph_cases() -> Iterator[Case]:
    """The fused-graph cases (none until every primitive they use is declared)."""
    ops = all_ops()
    if any(name not in ops for name in _NEEDED):
        return
    for dtype in _DTYPES:
        def t(*shape: int, dtype: DType = dtype) -> TensorType:
            return TensorType(shape, dtype)

        def case(name: str, sample: str, args: tuple[Arg, ...], build: object,
                 dtype: DType = dtype) -> Case:
            return Case(f"graph.{name}", dtype.name, sample, args, build,  # type: ignore[arg-type]
                        source="graph", check="nmse")

        yield case("softmax", "rows", (Arg(t(6, 33)),), softmax)
        yield case("softmax", "large_logits", (Arg(t(4, 257), "full"),), softmax)
        yield case("layer_norm", "rows", (Arg(t(5, 64)), Arg(t(64)), Arg(t(64))), layer_norm)
        yield case("gelu_tanh", "chain", (Arg(t(7, 129)),), gelu_tanh)
        yield case("attention", "heads", (Arg(t(2, 3, 5, 16)), Arg(t(2, 3, 7, 16)),
                                          Arg(t(2, 3, 7, 16))), attention)


register_case_source("graph", graph_cases)
