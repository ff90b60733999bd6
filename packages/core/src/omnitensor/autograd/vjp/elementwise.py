"""Gradient rules of the elementwise ops (operands share one shape, so no unbroadcasting)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from . import vjp
from ._util import mask, op, scalar

if TYPE_CHECKING:
    from ...dtypes import DType
    from ...tensor.tensor import Tensor

# --- unary --------------------------------------------------------------------------------------


@vjp("neg")
def _neg(g: Tensor, out: Tensor, x: Tensor) -> Tensor:
    return -g


@vjp("abs")
def _abs(g: Tensor, out: Tensor, x: Tensor) -> Tensor:
    return g * op("sign", x)


@vjp("exp")
def _exp(g: Tensor, out: Tensor, x: Tensor) -> Tensor:
    return g * out


@vjp("log")
def _log(g: Tensor, out: Tensor, x: Tensor) -> Tensor:
    return g / x


@vjp("log1p")
def _log1p(g: Tensor, out: Tensor, x: Tensor) -> Tensor:
    return g / (x + 1.0)


@vjp("expm1")
def _expm1(g: Tensor, out: Tensor, x: Tensor) -> Tensor:
    return g * (out + 1.0)


@vjp("sqrt")
def _sqrt(g: Tensor, out: Tensor, x: Tensor) -> Tensor:
    return g * 0.5 / out


@vjp("rsqrt")
def _rsqrt(g: Tensor, out: Tensor, x: Tensor) -> Tensor:
    return g * -0.5 * out * out * out  # d/dx x**-1/2 = -1/2 x**-3/2


@vjp("tanh")
def _tanh(g: Tensor, out: Tensor, x: Tensor) -> Tensor:
    return g * (1.0 - out * out)


@vjp("logistic")
def _logistic(g: Tensor, out: Tensor, x: Tensor) -> Tensor:
    return g * out * (1.0 - out)


@vjp("sin")
def _sin(g: Tensor, out: Tensor, x: Tensor) -> Tensor:
    return g * op("cos", x)


@vjp("cos")
def _cos(g: Tensor, out: Tensor, x: Tensor) -> Tensor:
    return -g * op("sin", x)


@vjp("erf")
def _erf(g: Tensor, out: Tensor, x: Tensor) -> Tensor:
    return g * (2.0 / math.sqrt(math.pi)) * (-(x * x)).exp()


def _zero(g: Tensor, out: Tensor, x: Tensor) -> Tensor:
    """Piecewise-constant ops: the gradient is zero almost everywhere (as in PyTorch)."""
    return g * 0.0


for _name in ("floor", "ceil", "round", "sign"):
    vjp(_name)(_zero)


@vjp("convert")
def _convert(g: Tensor, out: Tensor, x: Tensor, *, dtype: DType) -> Tensor | None:
    return g.astype(x.dtype) if x.dtype.is_floating else None


# --- binary -------------------------------------------------------------------------------------


@vjp("add")
def _add(g: Tensor, out: Tensor, lhs: Tensor, rhs: Tensor) -> tuple[Tensor, Tensor]:
    return g, g


@vjp("sub")
def _sub(g: Tensor, out: Tensor, lhs: Tensor, rhs: Tensor) -> tuple[Tensor, Tensor]:
    return g, -g


@vjp("mul")
def _mul(g: Tensor, out: Tensor, lhs: Tensor, rhs: Tensor) -> tuple[Tensor, Tensor]:
    return g * rhs, g * lhs


@vjp("div")
def _div(g: Tensor, out: Tensor, lhs: Tensor, rhs: Tensor) -> tuple[Tensor, Tensor]:
    return g / rhs, -g * lhs / (rhs * rhs)


@vjp("rem")
def _rem(g: Tensor, out: Tensor, lhs: Tensor, rhs: Tensor) -> tuple[Tensor, Tensor]:
    # rem = lhs - trunc(lhs / rhs) * rhs, with trunc piecewise constant.
    q = lhs / rhs
    trunc = op("sign", q) * op("floor", q.abs())
    return g, -g * trunc


@vjp("pow")
def _pow(g: Tensor, out: Tensor, lhs: Tensor, rhs: Tensor) -> tuple[Tensor, Tensor]:
    from ...tensor.math import where

    # PyTorch's conventions: d/dlhs is 0 where the exponent is 0; d/drhs is 0 where lhs == 0
    # (the limit of x**y log x), which keeps 0**y finite for y > 0.
    dlhs = where(rhs == 0.0, 0.0, g * rhs * op("pow", lhs, rhs - 1.0))
    safe = where(lhs == 0.0, 1.0, lhs)
    drhs = where(lhs == 0.0, 0.0, g * out * safe.log())
    return dlhs, drhs


def _split(g: Tensor, win: Tensor, tie: Tensor) -> Tensor:
    return g * (mask(win, g) + 0.5 * mask(tie, g))


@vjp("max")
def _max(g: Tensor, out: Tensor, lhs: Tensor, rhs: Tensor) -> tuple[Tensor, Tensor]:
    # Ties split the gradient evenly, as PyTorch's maximum does.
    tie = lhs == rhs
    return _split(g, lhs > rhs, tie), _split(g, rhs > lhs, tie)


@vjp("min")
def _min(g: Tensor, out: Tensor, lhs: Tensor, rhs: Tensor) -> tuple[Tensor, Tensor]:
    tie = lhs == rhs
    return _split(g, lhs < rhs, tie), _split(g, rhs < lhs, tie)


@vjp("atan2")
def _atan2(g: Tensor, out: Tensor, lhs: Tensor, rhs: Tensor) -> tuple[Tensor, Tensor]:
    denom = lhs * lhs + rhs * rhs
    return g * rhs / denom, -g * lhs / denom


# --- select / clamp -----------------------------------------------------------------------------


@vjp("select")
def _select(g: Tensor, out: Tensor, pred: Tensor, on_true: Tensor, on_false: Tensor
            ) -> tuple[None, Tensor, Tensor]:
    zero = scalar(0.0, g)
    return None, op("select", pred, g, zero), op("select", pred, zero, g)


@vjp("clamp")
def _clamp(g: Tensor, out: Tensor, lo: Tensor, x: Tensor, hi: Tensor
           ) -> tuple[Tensor, Tensor, Tensor]:
    # out = min(max(x, lo), hi): exactly one operand is chosen at each element.
    from_hi = (x > hi) | (lo > hi)
    from_lo = (x < lo) & ~from_hi
    from_x = ~(from_hi | from_lo)
    return g * mask(from_lo, g), g * mask(from_x, g), g * mask(from_hi, g)
