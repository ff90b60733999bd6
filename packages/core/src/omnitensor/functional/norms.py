"""Normalizations over trailing axes: layer_norm and rms_norm (PyTorch's signatures).

Both emit their composite (`ir/ops/composite/norms.py`); a weight or bias the composite does
not take as an operand (another shape or dtype, a bias without a weight) is applied after it.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..dtypes import default_float
from ..errors import ShapeError
from ..tensor.tensor import Tensor
from .registry import functional

__all__ = ["layer_norm", "rms_norm"]


def _floating(x: Tensor) -> Tensor:
    """Integer inputs normalize in the default float (as `Tensor.mean` computes them)."""
    return x if x.dtype.is_floating else x.astype(default_float)


def _axes(fn: str, x: Tensor, normalized_shape: int | Sequence[int]) -> tuple[int, ...]:
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(x.shape[x.ndim - len(shape):]) != shape:
        raise ShapeError(
            f"{fn}: trailing dims of the input {x.shape} do not match normalized_shape {shape}",
            op=fn, shapes=[x.shape, shape])
    return tuple(range(x.ndim - len(shape), x.ndim))


def _params(x: Tensor, axes: tuple[int, ...], *given: Tensor | None) -> tuple[Tensor, ...]:
    """The leading parameters the composite takes as operands (normalized shape, x's dtype)."""
    want = tuple(x.shape[a] for a in axes)
    taken: list[Tensor] = []
    for p in given:
        if p is None or tuple(p.shape) != want or p.dtype != x.dtype:
            break
        taken.append(p)
    return tuple(taken)


@functional("layer_norm")
def layer_norm(x: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """(x - mean) / sqrt(var + eps) * weight + bias over the trailing `normalized_shape`."""
    axes = _axes("layer_norm", x, normalized_shape)
    x = _floating(x)
    params = _params(x, axes, weight, bias)
    out = Tensor._apply("layer_norm", x, *params, axes=axes, eps=float(eps))
    if weight is not None and len(params) < 1:
        out = out * weight
    if bias is not None and len(params) < 2:
        out = out + bias
    return out


@functional("rms_norm")
def rms_norm(x: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None,
             eps: float = 1e-6) -> Tensor:
    """X / sqrt(mean(x^2) + eps) * weight over the trailing `normalized_shape`."""
    axes = _axes("rms_norm", x, normalized_shape)
    x = _floating(x)
    params = _params(x, axes, weight)
    out = Tensor._apply("rms_norm", x, *params, axes=axes, eps=float(eps))
    return out * weight if weight is not None and not params else out
