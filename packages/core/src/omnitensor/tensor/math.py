"""Elementwise tensor math: broadcasting, promotion, operators and the elementwise functions.

Each function here takes tensors (or values `as_tensor` converts) and lowers to PTIR primitives
through `Tensor._apply`; broadcasting and dtype promotion (weak Python scalars, DESIGN §3) are
explicit in the recorded graph. The same functions are `Tensor`'s operators and methods, the
top-level ``omnitensor.exp``-style API and the Array API namespace's (`omnitensor.array_api`).
Reductions live in `reduce`, shape manipulation in `shape`, matmul and einsum in `linalg`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .. import dtypes as dt
from ..dtypes import DType
from ..errors import DTypeError, ShapeError

if TYPE_CHECKING:
    from .tensor import Tensor, TensorLike

__all__ = [
    "abs", "acos", "acosh", "add", "asin", "asinh", "atan", "atan2", "atanh", "bitwise_and",
    "bitwise_invert", "bitwise_or", "bitwise_xor", "broadcast_shapes", "ceil", "clip",
    "copysign", "cos",
    "cosh", "divide", "equal", "erf", "exp", "expm1", "floor", "floor_divide", "greater",
    "greater_equal", "hypot", "isfinite", "isinf", "isnan", "less", "less_equal", "log", "log1p",
    "log2", "log10", "logaddexp", "logical_and", "logical_not", "logical_or", "logical_xor",
    "maximum", "minimum", "multiply", "negative", "not_equal", "positive", "pow", "reciprocal",
    "remainder", "round", "rsqrt", "sigmoid", "sign", "signbit", "sin", "sinh", "sqrt", "square",
    "subtract", "tan", "tanh", "trunc", "where",
]


def broadcast_shapes(op: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy's broadcast of `shapes`.

    Raises:
        ShapeError: ``"<op>: cannot broadcast (2, 3) with (4,)"``.
    """
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for shape in shapes:
        for i, d in enumerate(shape, start=ndim - len(shape)):
            if out[i] == 1:
                out[i] = d
            elif d not in (1, out[i]):
                listed = " with ".join(str(s) for s in shapes)
                raise ShapeError(f"{op}: cannot broadcast {listed}", op=op, shapes=list(shapes))
    return tuple(out)


def _operands(op: str, values: Sequence[TensorLike], dtype: DType | None = None
              ) -> list[Tensor]:
    """Promote and broadcast a mix of tensors, arrays and Python scalars to one dtype and shape."""
    from .creation import full
    from .tensor import Tensor, as_tensor

    converted: list[Tensor | bool | int | float] = []
    for i, v in enumerate(values):
        if isinstance(v, (Tensor, bool, int, float)):
            converted.append(v)
        else:
            converted.append(as_tensor(v, fn=op, arg=("x1", "x2", "x3")[min(i, 2)]))
    target = dtype or dt.result_type(*converted)
    tensors = [v for v in converted if isinstance(v, Tensor)]
    shape = broadcast_shapes(op, *(t.shape for t in tensors)) if tensors else ()
    out = []
    for v in converted:
        out.append(v.astype(target) if isinstance(v, Tensor) else full((), v, dtype=target))
    return [broadcast_to(t, shape) for t in out]


def broadcast_to(x: Tensor, shape: Sequence[int]) -> Tensor:
    """`x` broadcast to `shape` (NumPy rules); a view where the backend allows."""
    shape = tuple(int(d) for d in shape)
    if x.shape == shape:
        return x
    if len(shape) < x.ndim or broadcast_shapes("broadcast_to", x.shape, shape) != shape:
        raise ShapeError(f"broadcast_to: cannot broadcast {x.shape} to {shape}",
                         op="broadcast_to", shapes=[x.shape, shape])
    offset = len(shape) - x.ndim
    return x._view_or_apply(
        "broadcast_in_dim", shape=shape, dims=tuple(range(offset, offset + x.ndim))
    )


def binary(op: str, lhs: TensorLike, rhs: TensorLike, dtype: DType | None = None) -> Tensor:
    """``op(lhs, rhs)`` with NumPy broadcasting and omnitensor's promotion."""
    from .tensor import Tensor

    a, b = _operands(op, [lhs, rhs], dtype)
    return Tensor._apply(op, a, b)


def unary(op: str, x: TensorLike) -> Tensor:
    """``op(x)``; integer inputs of float-only ops are converted to the default float first."""
    from ..ir.opdef import get_op
    from .tensor import Tensor, as_tensor

    t = as_tensor(x, fn=op, arg="x")
    allowed = get_op(op).dtypes
    if t.dtype not in allowed and dt.default_float in allowed and not t.dtype.is_floating:
        t = t.astype(dt.default_float)
    return Tensor._apply(op, t)


def _float(fn: str, x: TensorLike) -> Tensor:
    """`x` as a floating tensor (integers and bools convert to the default float)."""
    from .tensor import as_tensor

    t = as_tensor(x, fn=fn, arg="x")
    return t if t.dtype.is_floating else t.astype(dt.default_float)


# --- arithmetic ---------------------------------------------------------------------------------


def add(x1: TensorLike, x2: TensorLike) -> Tensor:
    """x1 + x2 (broadcast, promoted)."""
    return binary("add", x1, x2)


def subtract(x1: TensorLike, x2: TensorLike) -> Tensor:
    """x1 - x2."""
    return binary("sub", x1, x2)


def multiply(x1: TensorLike, x2: TensorLike) -> Tensor:
    """x1 * x2."""
    return binary("mul", x1, x2)


def divide(x1: TensorLike, x2: TensorLike) -> Tensor:
    """True division x1 / x2; integer operands give the default float dtype."""
    target = dt.result_type(x1, x2)
    if not target.is_floating:
        target = dt.default_float
    return binary("div", x1, x2, dtype=target)


def floor_divide(x1: TensorLike, x2: TensorLike) -> Tensor:
    """floor(x1 / x2), rounding toward negative infinity like Python's ``//``."""
    target = dt.result_type(x1, x2)
    if target.is_floating:
        return unary("floor", binary("div", x1, x2))
    a, b = _operands("floor_divide", [x1, x2])
    q = binary("div", a, b)
    adjust = not_equal(binary("rem", a, b), 0) & not_equal(less(a, 0), less(b, 0))
    return q - adjust.astype(target)


def remainder(x1: TensorLike, x2: TensorLike) -> Tensor:
    """x1 mod x2 with the sign of x2, like Python's ``%``."""
    a, b = _operands("remainder", [x1, x2])
    r = binary("rem", a, b)
    return where(not_equal(r, 0) & not_equal(less(r, 0), less(b, 0)), r + b, r)


def pow(x1: TensorLike, x2: TensorLike) -> Tensor:  # noqa: A001 (the Array API's name)
    """x1 ** x2."""
    return binary("pow", x1, x2)


def maximum(x1: TensorLike, x2: TensorLike) -> Tensor:
    """Elementwise maximum (NaN propagates)."""
    return binary("max", x1, x2)


def minimum(x1: TensorLike, x2: TensorLike) -> Tensor:
    """Elementwise minimum (NaN propagates)."""
    return binary("min", x1, x2)


def atan2(x1: TensorLike, x2: TensorLike) -> Tensor:
    """The angle of the point (x2, x1), in radians."""
    target = dt.result_type(x1, x2)
    return binary("atan2", x1, x2, dtype=target if target.is_floating else dt.default_float)


def hypot(x1: TensorLike, x2: TensorLike) -> Tensor:
    """sqrt(x1**2 + x2**2)."""
    a, b = _operands("hypot", [x1, x2])
    return sqrt(a * a + b * b)


def logaddexp(x1: TensorLike, x2: TensorLike) -> Tensor:
    """log(exp(x1) + exp(x2)), computed without overflow."""
    a, b = _operands("logaddexp", [x1, x2])
    hi = maximum(a, b)
    finite = where(isinf(hi), 0.0, hi)
    return finite + log(exp(a - finite) + exp(b - finite))


def negative(x: TensorLike) -> Tensor:
    """-x."""
    return unary("neg", x)


def positive(x: TensorLike) -> Tensor:
    """+x (the same value)."""
    from .tensor import as_tensor

    return as_tensor(x, fn="positive", arg="x")


def abs(x: TensorLike) -> Tensor:  # noqa: A001 (NumPy's name)
    """Absolute value ``|x|``."""
    return unary("abs", x)


def sign(x: TensorLike) -> Tensor:
    """-1, 0 or 1 by the sign of x (NaN stays NaN)."""
    return unary("sign", x)


def square(x: TensorLike) -> Tensor:
    """The square of each element (``x * x``)."""
    from .tensor import as_tensor

    t = as_tensor(x, fn="square", arg="x")
    return t * t


def reciprocal(x: TensorLike) -> Tensor:
    """1 / x."""
    return divide(1.0, x)


def clip(x: TensorLike, min: TensorLike | None = None,  # noqa: A002 (NumPy's names)
         max: TensorLike | None = None) -> Tensor:  # noqa: A002
    """Clamp into [min, max] (either may be None); the result keeps x's dtype."""
    from .tensor import as_tensor

    out = as_tensor(x, fn="clip", arg="x")
    if min is not None:
        out = binary("max", out, min, dtype=out.dtype)
    if max is not None:
        out = binary("min", out, max, dtype=out.dtype)
    return out


# --- exponentials, logarithms, powers -----------------------------------------------------------


def exp(x: TensorLike) -> Tensor:
    """e**x."""
    return unary("exp", x)


def expm1(x: TensorLike) -> Tensor:
    """e**x - 1, accurate for small x."""
    return unary("expm1", x)


def log(x: TensorLike) -> Tensor:
    """Natural logarithm."""
    return unary("log", x)


def log1p(x: TensorLike) -> Tensor:
    """log(1 + x), accurate for small x."""
    return unary("log1p", x)


def log2(x: TensorLike) -> Tensor:
    """Base-2 logarithm."""
    return log(x) * (1.0 / math.log(2.0))


def log10(x: TensorLike) -> Tensor:
    """Base-10 logarithm."""
    return log(x) * (1.0 / math.log(10.0))


def sqrt(x: TensorLike) -> Tensor:
    """Square root."""
    return unary("sqrt", x)


def rsqrt(x: TensorLike) -> Tensor:
    """1 / sqrt(x)."""
    return unary("rsqrt", x)


# --- trigonometric and hyperbolic ---------------------------------------------------------------


def sin(x: TensorLike) -> Tensor:
    """Sine (radians)."""
    return unary("sin", x)


def cos(x: TensorLike) -> Tensor:
    """Cosine (radians)."""
    return unary("cos", x)


def tan(x: TensorLike) -> Tensor:
    """Tangent (radians)."""
    t = _float("tan", x)
    return sin(t) / cos(t)


def asin(x: TensorLike) -> Tensor:
    """Inverse sine, in [-pi/2, pi/2]."""
    t = _float("asin", x)
    return atan2(t, sqrt((1.0 - t) * (1.0 + t)))


def acos(x: TensorLike) -> Tensor:
    """Inverse cosine, in [0, pi]."""
    t = _float("acos", x)
    return atan2(sqrt((1.0 - t) * (1.0 + t)), t)


def atan(x: TensorLike) -> Tensor:
    """Inverse tangent, in [-pi/2, pi/2]."""
    t = _float("atan", x)
    return atan2(t, 1.0)


def tanh(x: TensorLike) -> Tensor:
    """Hyperbolic tangent."""
    return unary("tanh", x)


def sinh(x: TensorLike) -> Tensor:
    """Hyperbolic sine."""
    t = _float("sinh", x)
    # NOTE: (e^x - e^-x) / 2 through expm1 keeps small |x| accurate
    return (expm1(t) - expm1(-t)) * 0.5


def cosh(x: TensorLike) -> Tensor:
    """Hyperbolic cosine."""
    t = _float("cosh", x)
    return (exp(t) + exp(-t)) * 0.5


def asinh(x: TensorLike) -> Tensor:
    """Inverse hyperbolic sine."""
    t = _float("asinh", x)
    a = abs(t)
    # NOTE: log1p form for moderate |x|, log(2|x|) where a*a would overflow; the sign is
    # copied so that -0.0 and -inf keep theirs
    moderate = log1p(a + a * a / (1.0 + sqrt(1.0 + a * a)))
    r = where(a > 2.0**28, log(a) + math.log(2.0), moderate)
    return where(signbit(t), -r, r)


def acosh(x: TensorLike) -> Tensor:
    """Inverse hyperbolic cosine (NaN below 1)."""
    t = _float("acosh", x)
    # log(t + sqrt(t^2 - 1)) = log(t) + log1p(sqrt((1 - 1/t)(1 + 1/t))): no overflow for large t
    inv = 1.0 / t
    return log(t) + log1p(sqrt((1.0 - inv) * (1.0 + inv)))


def atanh(x: TensorLike) -> Tensor:
    """Inverse hyperbolic tangent (defined for ``|x| < 1``)."""
    t = _float("atanh", x)
    return 0.5 * (log1p(t) - log1p(-t))


def sigmoid(x: TensorLike) -> Tensor:
    """Logistic sigmoid 1 / (1 + e**-x)."""
    return unary("logistic", x)


def erf(x: TensorLike) -> Tensor:
    """The error function."""
    return unary("erf", x)


# --- rounding -----------------------------------------------------------------------------------


def _rounding(op: str, x: TensorLike) -> Tensor:
    from .tensor import as_tensor

    t = as_tensor(x, fn=op, arg="x")
    return t if not t.dtype.is_floating else unary(op, t)  # integers are already whole


def floor(x: TensorLike) -> Tensor:
    """Largest integer value not above x (integers unchanged)."""
    return _rounding("floor", x)


def ceil(x: TensorLike) -> Tensor:
    """Smallest integer value not below x (integers unchanged)."""
    return _rounding("ceil", x)


def round(x: TensorLike) -> Tensor:  # noqa: A001 (NumPy's name)
    """Round half to even (integers unchanged)."""
    return _rounding("round", x)


def trunc(x: TensorLike) -> Tensor:
    """Round toward zero (integers unchanged)."""
    from .tensor import as_tensor

    t = as_tensor(x, fn="trunc", arg="x")
    if not t.dtype.is_floating:
        return t
    return where(less(t, 0), unary("ceil", t), unary("floor", t))


# --- comparison and logic -----------------------------------------------------------------------


def equal(x1: TensorLike, x2: TensorLike) -> Tensor:
    """x1 == x2 (bool)."""
    return binary("eq", x1, x2)


def not_equal(x1: TensorLike, x2: TensorLike) -> Tensor:
    """x1 != x2 (bool)."""
    return binary("ne", x1, x2)


def less(x1: TensorLike, x2: TensorLike) -> Tensor:
    """x1 < x2 (bool)."""
    return binary("lt", x1, x2)


def less_equal(x1: TensorLike, x2: TensorLike) -> Tensor:
    """x1 <= x2 (bool)."""
    return binary("le", x1, x2)


def greater(x1: TensorLike, x2: TensorLike) -> Tensor:
    """x1 > x2 (bool)."""
    return binary("gt", x1, x2)


def greater_equal(x1: TensorLike, x2: TensorLike) -> Tensor:
    """x1 >= x2 (bool)."""
    return binary("ge", x1, x2)


def isnan(x: TensorLike) -> Tensor:
    """True where x is NaN."""
    from .tensor import as_tensor

    t = as_tensor(x, fn="isnan", arg="x")
    return not_equal(t, t)


def isinf(x: TensorLike) -> Tensor:
    """True where x is +inf or -inf."""
    from .tensor import as_tensor

    t = as_tensor(x, fn="isinf", arg="x")
    if not t.dtype.is_floating:
        return not_equal(t, t)  # all False, same shape
    return equal(abs(t), math.inf)


def isfinite(x: TensorLike) -> Tensor:
    """True where x is neither NaN nor infinite."""
    from .tensor import as_tensor

    t = as_tensor(x, fn="isfinite", arg="x")
    if not t.dtype.is_floating:
        return equal(t, t)
    return less(abs(t), math.inf)


def _bool(fn: str, x: TensorLike) -> Tensor:
    from .tensor import as_tensor

    t = as_tensor(x, fn=fn, arg="x")
    return t if t.dtype.is_bool else not_equal(t, 0)


def logical_and(x1: TensorLike, x2: TensorLike) -> Tensor:
    """x1 and x2, elementwise (non-bool operands count nonzero as True)."""
    return binary("and", _bool("logical_and", x1), _bool("logical_and", x2))


def logical_or(x1: TensorLike, x2: TensorLike) -> Tensor:
    """x1 or x2, elementwise."""
    return binary("or", _bool("logical_or", x1), _bool("logical_or", x2))


def logical_xor(x1: TensorLike, x2: TensorLike) -> Tensor:
    """x1 xor x2, elementwise."""
    return binary("xor", _bool("logical_xor", x1), _bool("logical_xor", x2))


def logical_not(x: TensorLike) -> Tensor:
    """Logical negation, elementwise."""
    return unary("not", _bool("logical_not", x))


def _bitwise(fn: str, op: str, x1: TensorLike, x2: TensorLike) -> Tensor:
    target = dt.result_type(x1, x2)
    if target.is_floating:
        raise DTypeError(f"{fn}: needs integer or bool operands (got {target}); convert with "
                         "astype first", op=fn, dtype=str(target))
    return binary(op, x1, x2)


def bitwise_and(x1: TensorLike, x2: TensorLike) -> Tensor:
    """Bitwise and of integers or bools."""
    return _bitwise("bitwise_and", "and", x1, x2)


def bitwise_or(x1: TensorLike, x2: TensorLike) -> Tensor:
    """Bitwise or of integers or bools."""
    return _bitwise("bitwise_or", "or", x1, x2)


def bitwise_xor(x1: TensorLike, x2: TensorLike) -> Tensor:
    """Bitwise xor of integers or bools."""
    return _bitwise("bitwise_xor", "xor", x1, x2)


def bitwise_invert(x: TensorLike) -> Tensor:
    """Bitwise not of integers or bools (``~x``)."""
    from .tensor import as_tensor

    t = as_tensor(x, fn="bitwise_invert", arg="x")
    if t.dtype.is_floating:
        raise DTypeError(f"bitwise_invert: needs an integer or bool tensor (got {t.dtype})",
                         op="bitwise_invert", dtype=str(t.dtype))
    return unary("not", t)


def signbit(x: TensorLike) -> Tensor:
    """True where the sign bit is set (including -0.0, -inf and negative NaNs)."""
    from .tensor import Tensor, as_tensor

    t = as_tensor(x, fn="signbit", arg="x")
    if not t.dtype.is_floating:
        return less(t, 0)
    as_int = {16: dt.int16, 32: dt.int32, 64: dt.int64}[t.dtype.bits]
    return less(Tensor._apply("bitcast", t, dtype=as_int), 0)


def copysign(x1: TensorLike, x2: TensorLike) -> Tensor:
    """The magnitude of x1 with the sign bit of x2."""
    a, b = _operands("copysign", [x1, x2])
    if not a.dtype.is_floating:
        a, b = a.astype(dt.default_float), b.astype(dt.default_float)
    magnitude = abs(a)
    return where(signbit(b), -magnitude, magnitude)


def where(condition: TensorLike, x1: TensorLike, x2: TensorLike) -> Tensor:
    """`x1` where `condition` else `x2`, broadcasting all three."""
    from .tensor import Tensor, as_tensor

    c = as_tensor(condition, fn="where", arg="condition")
    if not c.dtype.is_bool:
        c = c.astype(dt.bool_)
    a, b = _operands("where", [x1, x2])
    shape = broadcast_shapes("where", c.shape, a.shape)
    return Tensor._apply("select", broadcast_to(c, shape), broadcast_to(a, shape),
                         broadcast_to(b, shape))


def full_like_scalar(x: Tensor, value: bool | int | float) -> Tensor:
    """A 0-d tensor holding the weak scalar `value` in the dtype promotion gives it with `x`."""
    from .creation import full

    return full((), value, dt.result_type(x, value))


# --- operator forms (Tensor's reflected operators) ----------------------------------------------


def _radd(x: Tensor, other: TensorLike) -> Tensor:
    return binary("add", other, x)


def _rsub(x: Tensor, other: TensorLike) -> Tensor:
    return binary("sub", other, x)


def _rmul(x: Tensor, other: TensorLike) -> Tensor:
    return binary("mul", other, x)


def _rtruediv(x: Tensor, other: TensorLike) -> Tensor:
    return divide(other, x)


def _rfloordiv(x: Tensor, other: TensorLike) -> Tensor:
    return floor_divide(other, x)


def _rmod(x: Tensor, other: TensorLike) -> Tensor:
    return remainder(other, x)


def _rpow(x: Tensor, other: TensorLike) -> Tensor:
    return binary("pow", other, x)


def _rand(x: Tensor, other: TensorLike) -> Tensor:
    return binary("and", other, x)


def _ror(x: Tensor, other: TensorLike) -> Tensor:
    return binary("or", other, x)


def _rxor(x: Tensor, other: TensorLike) -> Tensor:
    return binary("xor", other, x)


def _and(x: Tensor, other: TensorLike) -> Tensor:
    return binary("and", x, other)


def _or(x: Tensor, other: TensorLike) -> Tensor:
    return binary("or", x, other)


def _xor(x: Tensor, other: TensorLike) -> Tensor:
    return binary("xor", x, other)


def _invert(x: Tensor) -> Tensor:
    return unary("not", x)


def _eq(x: Tensor, other: object) -> Tensor:
    return binary("eq", x, other)  # type: ignore[arg-type]  # object: Python's == contract


def _ne(x: Tensor, other: object) -> Tensor:
    return binary("ne", x, other)  # type: ignore[arg-type]  # object: Python's != contract
