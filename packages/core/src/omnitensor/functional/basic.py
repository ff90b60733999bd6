"""Linear maps, embedding lookup and dropout."""

from __future__ import annotations

from ..dtypes import int32, result_type
from ..errors import DTypeError, OmnitensorError
from ..tensor.math import where
from ..tensor.tensor import Tensor
from ._ops import op
from .registry import functional

__all__ = ["dropout", "embedding", "linear"]


@functional("linear")
def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """X @ weight.T + bias; `weight` is (out_features, in_features) as in PyTorch.

    Operands of different dtypes are promoted by the one rule (`omnitensor.dtypes.promote`),
    as ``x @ weight.T`` would be: a float64 input to a float32 layer gives float64.
    """
    target = result_type(x, weight)
    x, weight = x.astype(target), weight.astype(target)
    out = op("dot_general", x, weight, contracting=((x.ndim - 1,), (1,)))  # (..., out)
    return out + bias if bias is not None else out


@functional("embedding")
def embedding(indices: Tensor, weight: Tensor) -> Tensor:
    """Rows of `weight` (num_embeddings, dim) at integer `indices`.

    The result has shape ``indices.shape + (dim,)``. Out-of-range indices are clamped (the
    `gather` op's rule).
    """
    if not indices.dtype.is_integer:
        raise DTypeError(f"embedding: indices must be integers (got {indices.dtype})",
                         op="embedding")
    return op("gather", weight, indices.astype(int32), axis=0)


@functional("dropout")
def dropout(x: Tensor, p: float = 0.5, *, key: Tensor | None = None,
            training: bool = True) -> Tensor:
    """Zero each element with probability `p` and scale the rest by 1/(1-p).

    Args:
        x: input.
        p: drop probability in [0, 1).
        key: uint32[2] RNG key (a tensor input, so that a compiled step never repeats a mask).
        training: identity when False.
    """
    if not training or p == 0.0:
        return x
    if not 0.0 <= p < 1.0:
        raise OmnitensorError(f"dropout: p must be in [0, 1) (got {p})", op="dropout")
    if key is None:
        raise OmnitensorError("dropout: pass key= (an RNG key tensor, e.g. omnitensor.key(0))",
                              op="dropout")
    u = op("rng", key, shape=x.shape, dtype=x.dtype, distribution="uniform", stream=0)
    return where(u >= p, x * (1.0 / (1.0 - p)), 0.0)
