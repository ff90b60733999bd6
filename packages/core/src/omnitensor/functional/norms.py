"""Normalizations over trailing axes: layer_norm and rms_norm (PyTorch's signatures)."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ShapeError
from ..tensor.tensor import Tensor
from .registry import functional

__all__ = ["layer_norm", "rms_norm"]


def _axes(fn: str, x: Tensor, normalized_shape: int | Sequence[int]) -> tuple[int, ...]:
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(x.shape[x.ndim - len(shape):]) != shape:
        raise ShapeError(
            f"{fn}: trailing dims of the input {x.shape} do not match normalized_shape {shape}",
            op=fn, shapes=[x.shape, shape])
    return tuple(range(x.ndim - len(shape), x.ndim))


@functional("layer_norm")
def layer_norm(x: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """(x - mean) / sqrt(var + eps) * weight + bias over the trailing `normalized_shape`."""
    axes = _axes("layer_norm", x, normalized_shape)
    centered = x - x.mean(axes, keepdims=True)
    var = (centered * centered).mean(axes, keepdims=True)
    out = centered * Tensor._apply("rsqrt", var + eps)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


@functional("rms_norm")
def rms_norm(x: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None,
             eps: float = 1e-6) -> Tensor:
    """X / sqrt(mean(x^2) + eps) * weight over the trailing `normalized_shape`."""
    axes = _axes("rms_norm", x, normalized_shape)
    out = x * Tensor._apply("rsqrt", (x * x).mean(axes, keepdims=True) + eps)
    return out * weight if weight is not None else out
