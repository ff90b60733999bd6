"""Elementwise ops: unary math, binary arithmetic, logic, comparisons, select, clamp, convert.

All operands of an elementwise op share one shape (broadcasting is explicit in PTIR). float16 and
bfloat16 math is computed in float32 and rounded once to the result dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ...dtypes import ALL, BOOL, FLOATING, INTEGER, NUMERIC, DType, bool_, float32, float64
from ...errors import DTypeError
from .. import rules
from ..opdef import OpView, Trait, attribute, operand, primitive
from ..types import TensorType

__all__ = ["BinaryView", "CompareView", "UnaryView"]

Array = np.ndarray[Any, Any]
_UNARY = Trait.ELEMENTWISE | Trait.UNARY
_BINARY = Trait.ELEMENTWISE | Trait.BINARY
_COMMUTATIVE = _BINARY | Trait.COMMUTATIVE
_LOGIC = INTEGER + BOOL


def _wide(fn: Callable[..., Array]) -> Callable[..., Array]:
    """Run `fn` in float32 for float16/bfloat16 inputs and round the result back once."""

    def kernel(*xs: Array) -> Array:
        dtype = xs[0].dtype
        if dtype.itemsize == 2 and dtype.kind not in "iub":
            return np.asarray(fn(*(x.astype(np.float32) for x in xs))).astype(dtype)
        return np.asarray(fn(*xs)).astype(dtype, copy=False)

    kernel.__name__ = getattr(fn, "__name__", "kernel")
    return kernel


class UnaryView(OpView):
    """Base of unary elementwise ops: one operand `x`, result of the same type."""

    x = operand()

    @staticmethod
    def infer(x: TensorType) -> TensorType:
        return x


class BinaryView(OpView):
    """Base of binary elementwise ops: `lhs` and `rhs` of one type; result of that type."""

    lhs = operand()
    rhs = operand()

    @classmethod
    def infer(cls, lhs: TensorType, rhs: TensorType) -> TensorType:
        return rules.same_types(cls.opdef.name, lhs, rhs)


def _unary(
    name: str,
    kernel: Callable[..., Array],
    dtypes: tuple[DType, ...],
    doc: str,
    traits: Trait = Trait.NONE,
    ulp: int = 0,
) -> type[UnaryView]:
    view = type(
        f"{''.join(p.title() for p in name.split('_'))}View",
        (UnaryView,),
        {"__doc__": doc, "__module__": __name__, "infer": staticmethod(UnaryView.infer)},
    )
    return primitive(name, traits=_UNARY | traits, dtypes=dtypes, reference=kernel, ulp=ulp)(view)


def _binary(
    name: str,
    kernel: Callable[..., Array],
    dtypes: tuple[DType, ...],
    doc: str,
    traits: Trait = _BINARY,
    ulp: int = 0,
    unspecified: Any = None,
) -> type[BinaryView]:
    body: dict[str, Any] = {"__doc__": doc, "__module__": __name__}
    if unspecified is not None:
        body["unspecified"] = staticmethod(unspecified)

    def infer(lhs: TensorType, rhs: TensorType) -> TensorType:
        return rules.same_types(name, lhs, rhs)

    body["infer"] = staticmethod(infer)
    view = type(f"{name.title()}View", (BinaryView,), body)
    return primitive(name, traits=traits, dtypes=dtypes, reference=kernel, ulp=ulp)(view)


def _erf(x: Array) -> Array:
    # NOTE: numpy has no erf; math.erf is correctly rounded-ish in float64, which is what the
    # reference wants (speed is the business of real backends).
    return np.asarray(np.frompyfunc(math.erf, 1, 1)(x.astype(np.float64))).astype(np.float64)


def _logistic(x: Array) -> Array:
    # 1 / (1 + e^-x) written so neither branch overflows.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


# --- unary -------------------------------------------------------------------------------------

NegView = _unary(
    "neg", np.negative, NUMERIC, "Elementwise -x. Integers wrap (-INT_MIN == INT_MIN)."
)
AbsView = _unary(
    "abs", np.abs, NUMERIC, "Elementwise |x|. Integers wrap (|INT_MIN| == INT_MIN); NaN stays NaN."
)
ExpView = _unary(
    "exp", _wide(np.exp), FLOATING, "Elementwise e**x. Overflows to +inf; NaN propagates.", ulp=4
)
LogView = _unary(
    "log", _wide(np.log), FLOATING, "Natural log. log(0) = -inf, log(x<0) = NaN.", ulp=4
)
Log1pView = _unary(
    "log1p", _wide(np.log1p), FLOATING, "log(1 + x), accurate near 0. log1p(-1) = -inf.", ulp=4
)
Expm1View = _unary("expm1", _wide(np.expm1), FLOATING, "e**x - 1, accurate near 0.", ulp=4)
SqrtView = _unary(
    "sqrt", _wide(np.sqrt), FLOATING, "Square root. sqrt(-0.0) = -0.0; sqrt(x<0) = NaN.", ulp=1
)
RsqrtView = _unary(
    "rsqrt",
    _wide(lambda x: 1 / np.sqrt(x)),
    FLOATING,
    "1 / sqrt(x). rsqrt(0) = +inf; rsqrt(x<0) = NaN.",
    ulp=2,
)
TanhView = _unary("tanh", _wide(np.tanh), FLOATING, "Hyperbolic tangent; saturates to ±1.", ulp=4)
LogisticView = _unary(
    "logistic", _wide(_logistic), FLOATING, "Sigmoid 1 / (1 + e**-x); never overflows.", ulp=4
)
SinView = _unary("sin", _wide(np.sin), FLOATING, "Sine (radians). sin(±inf) = NaN.", ulp=8)
CosView = _unary("cos", _wide(np.cos), FLOATING, "Cosine (radians). cos(±inf) = NaN.", ulp=8)
ErfView = _unary("erf", _wide(_erf), FLOATING, "Gauss error function; erf(±inf) = ±1.", ulp=4)
FloorView = _unary(
    "floor",
    _wide(np.floor),
    FLOATING,
    "Largest integer <= x (as a float); ±inf, NaN and -0.0 kept.",
)
CeilView = _unary(
    "ceil", _wide(np.ceil), FLOATING, "Smallest integer >= x (as a float); ±inf, NaN and -0.0 kept."
)
RoundView = _unary(
    "round", _wide(np.rint), FLOATING, "Round to nearest, ties to even (2.5 -> 2.0)."
)
SignView = _unary(
    "sign",
    _wide(np.sign),
    NUMERIC,
    "-1, 0 or 1 by sign; sign(NaN) = NaN, sign(-0.0) = -0.0 or 0.0 (unsigned zero compares equal).",
)
NotView = _unary(
    "not",
    np.invert,
    _LOGIC,
    "Bitwise not for integers, logical not for bool.",
    Trait.NON_DIFFERENTIABLE,
)

# --- binary ------------------------------------------------------------------------------------


def _floating(x: Array) -> bool:
    """Float arrays, bfloat16 included (ml_dtypes' bfloat16 has numpy kind "V", not "f")."""
    return x.dtype.kind == "f" or (x.dtype.itemsize == 2 and x.dtype.kind not in "iub")


def _int_div(lhs: Array, rhs: Array) -> Array:
    if _floating(lhs):
        return _wide(np.true_divide)(lhs, rhs)
    safe = np.where(rhs == 0, 1, rhs).astype(lhs.dtype)
    quotient = np.floor_divide(lhs, safe)
    # numpy floors; PTIR truncates toward zero like C and StableHLO.
    fix = (np.remainder(lhs, safe) != 0) & ((lhs < 0) != (safe < 0))
    return np.asarray((quotient + fix.astype(lhs.dtype)).astype(lhs.dtype))


def _int_div_unspecified(lhs: Array, rhs: Array) -> Array:
    if _floating(lhs):
        return np.zeros(lhs.shape, bool)
    undefined = rhs == 0
    if lhs.dtype.kind == "i":
        undefined |= (lhs == np.iinfo(lhs.dtype).min) & (rhs == -1)
    return np.asarray(undefined)


def _rem(lhs: Array, rhs: Array) -> Array:
    if _floating(lhs):
        return _wide(np.fmod)(lhs, rhs)
    return np.asarray(np.fmod(lhs, np.where(rhs == 0, 1, rhs).astype(lhs.dtype)))


def _pow(lhs: Array, rhs: Array) -> Array:
    if _floating(lhs):
        return _wide(np.power)(lhs, rhs)
    return np.asarray(np.power(lhs, np.where(rhs < 0, 0, rhs).astype(lhs.dtype)))


def _pow_unspecified(lhs: Array, rhs: Array) -> Array:
    return (rhs < 0) if lhs.dtype.kind == "i" else np.zeros(lhs.shape, bool)


AddView = _binary(
    "add", _wide(np.add), NUMERIC, "lhs + rhs. Integers wrap; inf + -inf = NaN.", _COMMUTATIVE
)
SubView = _binary("sub", _wide(np.subtract), NUMERIC, "lhs - rhs. Integers wrap.")
MulView = _binary(
    "mul", _wide(np.multiply), NUMERIC, "lhs * rhs. Integers wrap; 0 * inf = NaN.", _COMMUTATIVE
)
DivView = _binary(
    "div",
    _int_div,
    NUMERIC,
    """lhs / rhs. Floats follow IEEE (x/0 = ±inf, 0/0 = NaN). Integers truncate toward zero;
    integer division by zero, and INT_MIN / -1, are unspecified.""",
    unspecified=_int_div_unspecified,
)
RemView = _binary(
    "rem",
    _rem,
    NUMERIC,
    """Remainder with the sign of lhs (C fmod): rem(-7, 3) = -1. Float rem(x, 0) = NaN; integer
    rem(x, 0) is unspecified.""",
    unspecified=lambda lhs, rhs: (rhs == 0) if not _floating(lhs) else np.zeros(lhs.shape, bool),
)
PowView = _binary(
    "pow",
    _pow,
    NUMERIC,
    """lhs ** rhs. Floats follow C pow (pow(x, 0) = 1 even for NaN x; pow(-8, 1/3) = NaN).
    Integers wrap; a negative integer exponent is unspecified.""",
    ulp=8,
    unspecified=_pow_unspecified,
)
MaxView = _binary("max", np.maximum, NUMERIC, "Elementwise maximum; NaN propagates.", _COMMUTATIVE)
MinView = _binary("min", np.minimum, NUMERIC, "Elementwise minimum; NaN propagates.", _COMMUTATIVE)
Atan2View = _binary(
    "atan2",
    _wide(np.arctan2),
    FLOATING,
    "atan2(lhs, rhs) in (-pi, pi], with C's signed-zero and infinity rules.",
    ulp=4,
)
AndView = _binary(
    "and",
    np.bitwise_and,
    _LOGIC,
    "Bitwise and (logical for bool).",
    _COMMUTATIVE | Trait.NON_DIFFERENTIABLE,
)
OrView = _binary(
    "or",
    np.bitwise_or,
    _LOGIC,
    "Bitwise or (logical for bool).",
    _COMMUTATIVE | Trait.NON_DIFFERENTIABLE,
)
XorView = _binary(
    "xor",
    np.bitwise_xor,
    _LOGIC,
    "Bitwise xor (logical for bool).",
    _COMMUTATIVE | Trait.NON_DIFFERENTIABLE,
)

# --- comparisons -------------------------------------------------------------------------------


class CompareView(BinaryView):
    """Base of comparisons: bool result; any comparison with NaN is false except `ne`."""


def _compare(name: str, kernel: Callable[..., Array], doc: str) -> type[CompareView]:
    def infer(lhs: TensorType, rhs: TensorType) -> TensorType:
        return TensorType(rules.same_types(name, lhs, rhs).shape, bool_)

    view = type(
        f"{name.title()}View",
        (CompareView,),
        {"__doc__": doc, "__module__": __name__, "infer": staticmethod(infer)},
    )
    traits = _BINARY | Trait.COMPARISON | Trait.NON_DIFFERENTIABLE
    return primitive(name, traits=traits, dtypes=ALL, reference=kernel)(view)


EqView = _compare("eq", np.equal, "lhs == rhs (bool). NaN == NaN is false; -0.0 == 0.0 is true.")
NeView = _compare("ne", np.not_equal, "lhs != rhs (bool). NaN != x is true.")
LtView = _compare("lt", np.less, "lhs < rhs (bool); false when either is NaN.")
LeView = _compare("le", np.less_equal, "lhs <= rhs (bool); false when either is NaN.")
GtView = _compare("gt", np.greater, "lhs > rhs (bool); false when either is NaN.")
GeView = _compare("ge", np.greater_equal, "lhs >= rhs (bool); false when either is NaN.")

# --- select, clamp, convert, bitcast -----------------------------------------------------------


@primitive("select", traits=Trait.ELEMENTWISE, dtypes=ALL)
class SelectView(OpView):
    """`on_true` where `pred` else `on_false`, elementwise.

    NaNs in the unselected side do not leak.
    """

    pred = operand(dtypes=BOOL)
    on_true = operand()
    on_false = operand()

    @staticmethod
    def infer(pred: TensorType, on_true: TensorType, on_false: TensorType) -> TensorType:
        out = rules.same_types("select", on_true, on_false)
        if pred.shape != out.shape:
            rules.same_types("select", TensorType(pred.shape, out.dtype), out)
        return out

    @staticmethod
    def reference(pred: Array, on_true: Array, on_false: Array) -> Array:
        return np.where(pred, on_true, on_false)


@primitive("clamp", traits=Trait.ELEMENTWISE, dtypes=NUMERIC)
class ClampView(OpView):
    """min(max(x, lo), hi) elementwise; NaN in any operand propagates; lo > hi gives hi."""

    lo = operand()
    x = operand()
    hi = operand()

    @staticmethod
    def infer(lo: TensorType, x: TensorType, hi: TensorType) -> TensorType:
        return rules.same_types("clamp", lo, x, hi)

    @staticmethod
    def reference(lo: Array, x: Array, hi: Array) -> Array:
        return np.minimum(np.maximum(x, lo), hi)


def _convert_unspecified(x: Array, *, dtype: DType) -> Array:
    if x.dtype.kind != "f" or not dtype.is_integer:
        return np.zeros(x.shape, bool)
    info = np.iinfo(dtype.np)
    wide = x.astype(np.float64)
    return ~np.isfinite(wide) | (np.trunc(wide) < info.min) | (np.trunc(wide) > info.max)


@primitive("convert", traits=Trait.ELEMENTWISE | Trait.UNARY, dtypes=ALL)
class ConvertView(OpView):
    """Convert `x` to `dtype`.

    Float -> int truncates toward zero; NaN, ±inf and out-of-range values are unspecified.
    Int -> narrower int wraps (keeps the low bits). Anything -> bool is ``x != 0`` (NaN -> true).
    bool -> number gives 0 or 1. Float -> narrower float rounds to nearest even, overflowing to inf.
    """

    x = operand()
    dtype = attribute()

    @staticmethod
    def infer(x: TensorType, *, dtype: DType) -> TensorType:
        if not isinstance(dtype, DType):
            raise DTypeError(f"convert: dtype must be a DType (got {dtype!r})", op="convert")
        return TensorType(x.shape, dtype)

    @staticmethod
    def reference(x: Array, *, dtype: DType) -> Array:
        if dtype == bool_:
            return np.asarray(x != 0)
        if x.dtype.kind == "f" and dtype.is_integer:
            safe = np.where(_convert_unspecified(x, dtype=dtype), 0, np.trunc(x.astype(np.float64)))
            return safe.astype(dtype.np)
        if x.dtype.kind == "f" and x.dtype.itemsize == 2 and dtype not in (float32, float64):
            return x.astype(np.float32).astype(dtype.np)  # f16 <-> bf16 through f32 (exact)
        return x.astype(dtype.np)

    unspecified = staticmethod(_convert_unspecified)


@primitive("bitcast", traits=Trait.ELEMENTWISE | Trait.UNARY | Trait.NON_DIFFERENTIABLE, dtypes=ALL)
class BitcastView(OpView):
    """Reinterpret the bits of `x` as `dtype`, which must have the same width (bool is 8 bits)."""

    x = operand()
    dtype = attribute()

    @staticmethod
    def infer(x: TensorType, *, dtype: DType) -> TensorType:
        if not isinstance(dtype, DType) or dtype.bits != x.dtype.bits:
            raise DTypeError(
                f"bitcast: widths differ (got {x.dtype} -> {dtype}, expected equal bit widths)",
                op="bitcast",
            )
        return TensorType(x.shape, dtype)

    @staticmethod
    def reference(x: Array, *, dtype: DType) -> Array:
        # NOTE: ascontiguousarray makes 0-d arrays 1-d; the reshape restores the shape
        out = np.ascontiguousarray(x).view(dtype.np).reshape(np.shape(x))
        return out != 0 if dtype == bool_ else out
