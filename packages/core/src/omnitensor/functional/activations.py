"""Activations and normalized exponentials: softmax, log_softmax, gelu, silu, relu."""

from __future__ import annotations

import math

from ..errors import OmnitensorError
from ..tensor.math import where
from ..tensor.tensor import Tensor
from .registry import functional

__all__ = ["gelu", "log_softmax", "relu", "silu", "softmax"]


@functional("softmax")
def softmax(x: Tensor, axis: int = -1) -> Tensor:
    """exp(x) / sum(exp(x)) along `axis`, shifted by the max for stability.

    Args:
        x: float tensor.
        axis: the normalized axis.
    """
    shifted = x - x.max(axis, keepdims=True).detach()  # the shift does not change the value
    e = shifted.exp()
    return e / e.sum(axis, keepdims=True)


@functional("log_softmax")
def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    """X - log(sum(exp(x))) along `axis`, computed stably."""
    shifted = x - x.max(axis, keepdims=True).detach()
    return shifted - shifted.exp().sum(axis, keepdims=True).log()


@functional("gelu")
def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """Gaussian error linear unit: x * Phi(x) (``approximate="tanh"``: the tanh formula).

    Math: exact ``0.5 x (1 + erf(x / sqrt 2))``; tanh ``0.5 x (1 + tanh(sqrt(2/pi)(x +
    0.044715 x^3)))``.
    """
    if approximate == "none":
        return 0.5 * x * (1.0 + Tensor._apply("erf", x * (1.0 / math.sqrt(2.0))))
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)
        return 0.5 * x * (1.0 + inner.tanh())
    raise OmnitensorError(
        f"gelu: unknown approximate={approximate!r} (expected 'none' or 'tanh')", op="gelu")


@functional("silu")
def silu(x: Tensor) -> Tensor:
    """X * sigmoid(x) (a.k.a. swish)."""
    return x * x.sigmoid()


@functional("relu")
def relu(x: Tensor) -> Tensor:
    """max(x, 0); the gradient at 0 is 0, as in PyTorch."""
    return where(x > 0, x, 0.0)
