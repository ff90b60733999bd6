"""Elementwise activation composites: gelu (erf and tanh forms), silu, swiglu and geglu."""

from __future__ import annotations

import math

from ....dtypes import FLOATING
from ....errors import OmnitensorError, ShapeError
from ...builder import Builder
from ...opdef import OpView, attribute, composite, operand
from ...types import TensorType, Value
from ._emit import binary

__all__ = ["GegluView", "GeluView", "SiluView", "SwigluView"]

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


def _check_gated(op: str, gate: TensorType, up: TensorType) -> TensorType:
    if gate != up:
        raise ShapeError(f"{op}: gate {gate} and up {up} must have one type", op=op,
                         shapes=[gate.shape, up.shape])
    return gate


@composite("swiglu", dtypes=FLOATING, ulp=8)
class SwigluView(OpView):
    """Gated linear unit with SiLU: silu(gate) * up (Llama's feed-forward activation).

    `gate` and `up` have one type. Edge cases follow the decomposition (silu(-inf) is NaN).
    """

    gate = operand()
    up = operand()

    @staticmethod
    def infer(gate: TensorType, up: TensorType) -> TensorType:
        return _check_gated("swiglu", gate, up)

    @staticmethod
    def decompose(b: Builder, gate: Value, up: Value) -> Value:
        return b.emit("mul", SiluView.decompose(b, gate), up)


@composite("geglu", dtypes=FLOATING, ulp=8)
class GegluView(OpView):
    """Gated linear unit with GELU: gelu(gate, approximate) * up (`approximate` as in gelu)."""

    gate = operand()
    up = operand()
    approximate: str = attribute("none")

    @staticmethod
    def infer(gate: TensorType, up: TensorType, *, approximate: str) -> TensorType:
        GeluView.infer(gate, approximate=approximate)
        return _check_gated("geglu", gate, up)

    @staticmethod
    def decompose(b: Builder, gate: Value, up: Value, *, approximate: str) -> Value:
        return b.emit("mul", GeluView.decompose(b, gate, approximate=approximate), up)
