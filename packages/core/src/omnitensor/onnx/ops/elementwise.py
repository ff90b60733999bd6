"""Elementwise ONNX ops: arithmetic, comparisons, logic, activations and casts."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ... import dtypes as dt
from ...functional import gelu, silu
from ...tensor.math import maximum, minimum, where
from ...tensor.tensor import Tensor
from ..registry import Ctx, Value, handler

Attrs = Mapping[str, Any]


def _unary(op: str) -> Callable[..., Tensor]:
    def run(ctx: Ctx, attrs: Attrs, x: Value) -> Tensor:
        return Tensor._apply(op, ctx.tensor(x))
    return run


for _onnx_name, _ptir in {
    "Neg": "neg", "Abs": "abs", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Tanh": "tanh",
    "Sigmoid": "logistic", "Sin": "sin", "Cos": "cos", "Erf": "erf", "Floor": "floor",
    "Ceil": "ceil", "Sign": "sign", "Not": "not",
}.items():
    handler(_onnx_name, since=6 if _onnx_name in ("Neg", "Abs", "Exp", "Log", "Sqrt", "Tanh",
                                                   "Sigmoid", "Floor", "Ceil") else 1)(
        _unary(_ptir))


def _binary(fn: Callable[[Tensor, Tensor], Tensor]) -> Callable[..., Tensor]:
    def run(ctx: Ctx, attrs: Attrs, a: Value, b: Value) -> Tensor:
        return fn(ctx.tensor(a), ctx.tensor(b))
    return run


def _apply2(op: str) -> Callable[[Tensor, Tensor], Tensor]:
    def fn(a: Tensor, b: Tensor) -> Tensor:
        a, b = _broadcast(a, b)
        return Tensor._apply(op, a, b)
    return fn


def _broadcast(*xs: Tensor) -> list[Tensor]:
    shape = tuple(np.broadcast_shapes(*(tuple(x.shape) for x in xs)))
    return [x if tuple(x.shape) == shape else x.expand(*shape) for x in xs]


# ONNX (since opset 7) broadcasts like numpy; the tensor operators do the same.
handler("Add", since=7)(_binary(lambda a, b: a + b))
handler("Sub", since=7)(_binary(lambda a, b: a - b))
handler("Mul", since=7)(_binary(lambda a, b: a * b))
handler("Pow", since=7)(_binary(lambda a, b: _apply2("pow")(a, b.astype(a.dtype))))
handler("Equal", since=7)(_binary(_apply2("eq")))
handler("Less", since=7)(_binary(_apply2("lt")))
handler("LessOrEqual", since=12)(_binary(_apply2("le")))
handler("Greater", since=7)(_binary(_apply2("gt")))
handler("GreaterOrEqual", since=12)(_binary(_apply2("ge")))
handler("And", since=7)(_binary(_apply2("and")))
handler("Or", since=7)(_binary(_apply2("or")))
handler("Xor", since=7)(_binary(_apply2("xor")))


@handler("Div", since=7)
def _div(ctx: Ctx, attrs: Attrs, a: Value, b: Value) -> Tensor:
    # Integer Div truncates toward zero in ONNX, as PTIR's `div` does.
    return _apply2("div")(ctx.tensor(a), ctx.tensor(b))


def _mod_check(attrs: Attrs) -> str | None:
    return None if attrs.get("fmod", 0) in (0, 1) else "fmod must be 0 or 1"


@handler("Mod", since=10, attributes=("fmod",), check=_mod_check)
def _mod(ctx: Ctx, attrs: Attrs, a: Value, b: Value) -> Tensor:
    x, y = _broadcast(ctx.tensor(a), ctx.tensor(b))
    rem = Tensor._apply("rem", x, y)  # C fmod: the sign of the dividend
    if attrs.get("fmod", 0):
        return rem
    # Python-style mod (the sign of the divisor) for integers when fmod=0.
    zero = Tensor._apply("sub", rem, rem)
    fix = Tensor._apply("and", Tensor._apply("ne", rem, zero),
                        Tensor._apply("ne", Tensor._apply("lt", rem, zero),
                                      Tensor._apply("lt", y, zero)))
    return where(fix, rem + y, rem)


@handler("Reciprocal", since=6)
def _reciprocal(ctx: Ctx, attrs: Attrs, x: Value) -> Tensor:
    t = ctx.tensor(x)
    return 1.0 / t


@handler("Where", since=9)
def _where(ctx: Ctx, attrs: Attrs, c: Value, a: Value, b: Value) -> Tensor:
    return where(ctx.tensor(c), ctx.tensor(a), ctx.tensor(b))


def _variadic(fn: Callable[[Tensor, Tensor], Tensor]) -> Callable[..., Tensor]:
    def run(ctx: Ctx, attrs: Attrs, *xs: Value) -> Tensor:
        out = ctx.tensor(xs[0])
        for x in xs[1:]:
            out = fn(out, ctx.tensor(x))
        return out
    return run


handler("Sum", since=8)(_variadic(lambda a, b: a + b))
handler("Max", since=8)(_variadic(lambda a, b: maximum(*_broadcast(a, b))))
handler("Min", since=8)(_variadic(lambda a, b: minimum(*_broadcast(a, b))))


@handler("Mean", since=8)
def _mean(ctx: Ctx, attrs: Attrs, *xs: Value) -> Tensor:
    return _variadic(lambda a, b: a + b)(ctx, attrs, *xs) / float(len(xs))


def _clip_check(attrs: Attrs) -> str | None:
    return None


@handler("Clip", since=11)
def _clip(ctx: Ctx, attrs: Attrs, x: Value, lo: Value = None, hi: Value = None) -> Tensor:
    out = ctx.tensor(x)
    if lo is not None:
        out = maximum(out, ctx.tensor(lo).astype(out.dtype))
    if hi is not None:
        out = minimum(out, ctx.tensor(hi).astype(out.dtype))
    return out


def _alpha(attrs: Attrs, default: float) -> float:
    return float(attrs.get("alpha", default))


@handler("Relu", since=6)
def _relu(ctx: Ctx, attrs: Attrs, x: Value) -> Tensor:
    return maximum(ctx.tensor(x), 0)


@handler("LeakyRelu", since=6, attributes=("alpha",))
def _leaky_relu(ctx: Ctx, attrs: Attrs, x: Value) -> Tensor:
    t = ctx.tensor(x)
    return where(t >= 0, t, t * _alpha(attrs, 0.01))


@handler("PRelu", since=9)
def _prelu(ctx: Ctx, attrs: Attrs, x: Value, slope: Value) -> Tensor:
    t = ctx.tensor(x)
    return where(t >= 0, t, t * ctx.tensor(slope))


@handler("Elu", since=6, attributes=("alpha",))
def _elu(ctx: Ctx, attrs: Attrs, x: Value) -> Tensor:
    t = ctx.tensor(x)
    return where(t >= 0, t, Tensor._apply("expm1", t) * _alpha(attrs, 1.0))


@handler("Celu", since=12, attributes=("alpha",))
def _celu(ctx: Ctx, attrs: Attrs, x: Value) -> Tensor:
    t, alpha = ctx.tensor(x), _alpha(attrs, 1.0)
    return where(t >= 0, t, Tensor._apply("expm1", t / alpha) * alpha)


@handler("Selu", since=6, attributes=("alpha", "gamma"))
def _selu(ctx: Ctx, attrs: Attrs, x: Value) -> Tensor:
    t = ctx.tensor(x)
    alpha = _alpha(attrs, 1.67326319217681884765625)
    gamma = float(attrs.get("gamma", 1.05070102214813232421875))
    return where(t > 0, t * gamma, (t.exp() * alpha - alpha) * gamma)


@handler("HardSigmoid", since=6, attributes=("alpha", "beta"))
def _hard_sigmoid(ctx: Ctx, attrs: Attrs, x: Value) -> Tensor:
    t = ctx.tensor(x)
    return (t * _alpha(attrs, 0.2) + float(attrs.get("beta", 0.5))).clip(0.0, 1.0)


@handler("HardSwish", since=14)
def _hard_swish(ctx: Ctx, attrs: Attrs, x: Value) -> Tensor:
    t = ctx.tensor(x)
    return t * (t * (1.0 / 6.0) + 0.5).clip(0.0, 1.0)


@handler("Softplus", since=1)
def _softplus(ctx: Ctx, attrs: Attrs, x: Value) -> Tensor:
    t = ctx.tensor(x)
    # log(1 + e^x) = max(x, 0) + log1p(e^-|x|): no overflow for large x.
    return maximum(t, 0) + Tensor._apply("log1p", (-t.abs()).exp())


@handler("Softsign", since=1)
def _softsign(ctx: Ctx, attrs: Attrs, x: Value) -> Tensor:
    t = ctx.tensor(x)
    return t / (t.abs() + 1.0)


@handler("ThresholdedRelu", since=10, attributes=("alpha",))
def _thresholded_relu(ctx: Ctx, attrs: Attrs, x: Value) -> Tensor:
    t = ctx.tensor(x)
    return where(t > _alpha(attrs, 1.0), t, t * 0.0)


@handler("Mish", since=18)
def _mish(ctx: Ctx, attrs: Attrs, x: Value) -> Tensor:
    t = ctx.tensor(x)
    return t * _softplus(ctx, attrs, t).tanh()


def _gelu_check(attrs: Attrs) -> str | None:
    approximate = attrs.get("approximate", "none")
    return None if approximate in ("none", "tanh") else (
        f"approximate={approximate!r} (supported: 'none', 'tanh')")


@handler("Gelu", since=20, attributes=("approximate",), check=_gelu_check)
def _gelu(ctx: Ctx, attrs: Attrs, x: Value) -> Tensor:
    return gelu(ctx.tensor(x), approximate=attrs.get("approximate", "none"))


@handler("Swish", since=24, attributes=("alpha",))
def _swish(ctx: Ctx, attrs: Attrs, x: Value) -> Tensor:
    t, alpha = ctx.tensor(x), _alpha(attrs, 1.0)
    return silu(t) if alpha == 1.0 else t * (t * alpha).sigmoid()


@handler("IsNaN", since=9)
def _isnan(ctx: Ctx, attrs: Attrs, x: Value) -> Tensor:
    t = ctx.tensor(x)
    return Tensor._apply("ne", t, t)


def _isinf_check(attrs: Attrs) -> str | None:
    return None


@handler("IsInf", since=10, attributes=("detect_negative", "detect_positive"))
def _isinf(ctx: Ctx, attrs: Attrs, x: Value) -> Tensor:
    t = ctx.tensor(x)
    pos = t == math.inf
    neg = t == -math.inf
    detect_pos, detect_neg = attrs.get("detect_positive", 1), attrs.get("detect_negative", 1)
    if detect_pos and detect_neg:
        return Tensor._apply("or", pos, neg)
    if detect_pos:
        return pos
    if detect_neg:
        return neg
    return Tensor._apply("and", pos, neg)


def _to_dtype(code: int, what: str) -> dt.DType:
    from ..model import dtype_of

    return dtype_of(code, what)


def _cast_check(attrs: Attrs) -> str | None:
    from ..model import _DTYPES

    if attrs.get("saturate", 1) != 1:
        return "saturate applies to float8 types only, which omnitensor does not have"
    to = attrs.get("to")
    return None if to in _DTYPES else f"cast to element type {to} is not supported"


@handler("Cast", since=6, attributes=("to", "saturate", "round_mode"), check=_cast_check)
def _cast(ctx: Ctx, attrs: Attrs, x: Value) -> Value:
    target = _to_dtype(int(attrs["to"]), "Cast's target")
    return ctx.tensor(x).astype(target)


@handler("CastLike", since=15, attributes=("saturate", "round_mode"))
def _cast_like(ctx: Ctx, attrs: Attrs, x: Value, like: Value) -> Value:
    return ctx.tensor(x).astype(ctx.tensor(like).dtype)


@handler("Identity", since=1)
def _identity(ctx: Ctx, attrs: Attrs, x: Value) -> Value:
    return x


@handler("Dropout", since=7, attributes=("seed", "ratio"))
def _dropout(ctx: Ctx, attrs: Attrs, x: Value, ratio: Value = None,
             training: Value = None) -> list[Value]:
    # Inference semantics: the identity and an all-true mask (training mode is refused).
    if training is not None and (not isinstance(training, np.ndarray) or bool(training)):
        from ...errors import UnsupportedError

        raise UnsupportedError("Dropout in training mode is not supported by the importer",
                               op="onnx")
    t = ctx.tensor(x)
    return [t, Tensor._apply("eq", t, t) if t.dtype.is_floating else t == t]
