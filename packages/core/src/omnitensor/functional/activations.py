"""Activations and normalized exponentials: softmax, log_softmax, gelu, silu, relu.

softmax/log_softmax over the last axis, gelu and silu emit their composites
(`ir/ops/composite/`); softmax over another axis records the primitives directly.
"""

from __future__ import annotations

from ..dtypes import default_float
from ..errors import OmnitensorError
from ..tensor.math import _operands, where
from ..tensor.tensor import Tensor
from .registry import functional

__all__ = ["geglu", "gelu", "log_softmax", "relu", "silu", "softmax", "swiglu"]


def _floating(x: Tensor) -> Tensor:
    return x if x.dtype.is_floating else x.astype(default_float)


def _last(x: Tensor, axis: int) -> bool:
    """True when `axis` names x's last dim of a floating x (the composite's trailing form)."""
    if not isinstance(axis, int) or isinstance(axis, bool) or x.ndim == 0:
        return False
    return x.dtype.is_floating and axis in (-1, x.ndim - 1)


@functional("softmax")
def softmax(x: Tensor, axis: int = -1) -> Tensor:
    """exp(x) / sum(exp(x)) along `axis`, shifted by the max for stability.

    Args:
        x: float tensor.
        axis: the normalized axis.
    """
    if _last(x, axis):
        return Tensor._apply("softmax", x, axes=(x.ndim - 1,))
    shifted = x - x.max(axis, keepdims=True).detach()  # the shift does not change the value
    e = shifted.exp()
    return e / e.sum(axis, keepdims=True)


@functional("log_softmax")
def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    """X - log(sum(exp(x))) along `axis`, computed stably."""
    if _last(x, axis):
        return Tensor._apply("log_softmax", x, axes=(x.ndim - 1,))
    shifted = x - x.max(axis, keepdims=True).detach()
    return shifted - shifted.exp().sum(axis, keepdims=True).log()


@functional("gelu")
def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """Gaussian error linear unit: x * Phi(x) (``approximate="tanh"``: the tanh formula).

    Math: exact ``0.5 x (1 + erf(x / sqrt 2))``; tanh ``0.5 x (1 + tanh(sqrt(2/pi)(x +
    0.044715 x^3)))``.
    """
    if approximate in ("none", "tanh"):
        return Tensor._apply("gelu", _floating(x), approximate=approximate)
    raise OmnitensorError(
        f"gelu: unknown approximate={approximate!r} (expected 'none' or 'tanh')", op="gelu")


@functional("silu")
def silu(x: Tensor) -> Tensor:
    """X * sigmoid(x) (a.k.a. swish)."""
    return Tensor._apply("silu", _floating(x))


@functional("swiglu")
def swiglu(gate: Tensor, up: Tensor) -> Tensor:
    """silu(gate) * up (SwiGLU, Llama's gated feed-forward); broadcast and promoted."""
    gate, up = _gated(gate, up)
    return Tensor._apply("swiglu", gate, up)


@functional("geglu")
def geglu(gate: Tensor, up: Tensor, approximate: str = "none") -> Tensor:
    """gelu(gate, approximate) * up (GeGLU); broadcast and promoted."""
    if approximate not in ("none", "tanh"):
        raise OmnitensorError(
            f"geglu: unknown approximate={approximate!r} (expected 'none' or 'tanh')", op="geglu")
    gate, up = _gated(gate, up)
    return Tensor._apply("geglu", gate, up, approximate=approximate)


def _gated(gate: Tensor, up: Tensor) -> tuple[Tensor, Tensor]:
    """Both operands in one floating dtype and one shape (NumPy broadcasting)."""
    a, b = _operands("swiglu", [_floating(gate), _floating(up)])
    return a, b


@functional("relu")
def relu(x: Tensor) -> Tensor:
    """max(x, 0); the gradient at 0 is 0, as in PyTorch."""
    return where(x > 0, x, 0.0)
