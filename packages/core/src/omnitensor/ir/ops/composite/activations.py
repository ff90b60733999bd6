"""Elementwise activation composites: gelu (erf and tanh forms) and silu."""

from __future__ import annotations

import math

from ....dtypes import FLOATING
from ....errors import OmnitensorError
from ...builder import Builder
from ...opdef import OpView, attribute, composite, operand
from ...types import TensorType, Value
from ._emit import binary

__all__ = ["GeluView", "SiluView"]

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


@composite("gelu", dtypes=FLOATING, ulp=8)
class GeluView(OpView):
    """Gaussian error linear unit x * Phi(x); `approximate` is "none" (erf) or "tanh".

    Exact: ``0.5 x (1 + erf(x / sqrt 2))``; tanh: ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
    x^3)))``. NaN stays NaN, -inf gives NaN (-inf * 0), +inf gives +inf.
    """

    x = operand()
    approximate: str = attribute("none")

    @staticmethod
    def infer(x: TensorType, *, approximate: str) -> TensorType:
        if approximate not in ("none", "tanh"):
            raise OmnitensorError(
                f"gelu: unknown approximate={approximate!r} (expected 'none' or 'tanh')",
                op="gelu")
        return x

    @staticmethod
    def decompose(b: Builder, x: Value, *, approximate: str) -> Value:
        if approximate == "tanh":
            cube = binary(b, "mul", binary(b, "mul", binary(b, "mul", 0.044715, x), x), x)
            inner = binary(b, "mul", _SQRT_2_OVER_PI, binary(b, "add", x, cube))
            phi2 = binary(b, "add", 1.0, b.emit("tanh", inner))
        else:
            phi2 = binary(b, "add", 1.0, b.emit("erf", binary(b, "mul", x, 1.0 / math.sqrt(2.0))))
        return binary(b, "mul", binary(b, "mul", 0.5, x), phi2)


@composite("silu", dtypes=FLOATING, ulp=4)
class SiluView(OpView):
    """x * logistic(x) (swish). -inf gives NaN (-inf * 0) as the decomposition computes it."""

    x = operand()

    @staticmethod
    def infer(x: TensorType) -> TensorType:
        return x

    @staticmethod
    def decompose(b: Builder, x: Value) -> Value:
        return b.emit("mul", x, b.emit("logistic", x))
