"""Linear, Embedding, Dropout, LayerNorm and RMSNorm layers (each wraps its functional)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ... import functional as F
from ...errors import OmnitensorError
from ...tensor.creation import key as make_key
from ...tensor.creation import ones, rand, randn, split_key, zeros
from ...tensor.realize import tracing
from ...tensor.tensor import Tensor
from ..module import Module, Parameter, assign

__all__ = ["Dropout", "Embedding", "LayerNorm", "Linear", "RMSNorm"]


def uniform(shape: tuple[int, ...], bound: float, dtype: Any = None) -> Tensor:
    """U(-bound, bound) from the global generator (`omnitensor.manual_seed`)."""
    return (rand(*shape, dtype=dtype) * 2.0 - 1.0) * bound


class Linear(Module):
    """y = x W^T + b, with W (out_features, in_features) initialized U(-1/sqrt(in), 1/sqrt(in)).

    Args:
        in_features: input size.
        out_features: output size.
        bias: learn an additive bias.
        dtype: parameter dtype (default float32).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 dtype: Any = None) -> None:
        super().__init__()
        if in_features <= 0 or out_features <= 0:
            raise OmnitensorError(f"Linear: sizes must be positive (got {in_features}, "
                                  f"{out_features})")
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / math.sqrt(in_features)
        self.weight = Parameter(uniform((out_features, in_features), bound, dtype))
        self.bias = Parameter(uniform((out_features,), bound, dtype)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        """Apply the layer (see the class docstring)."""
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> dict[str, Any]:
        """Constructor settings shown by `repr`."""
        return {"in_features": self.in_features, "out_features": self.out_features,
                "bias": self.bias is not None}


class Embedding(Module):
    """Lookup table (num_embeddings, embedding_dim) initialized N(0, 1)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, dtype: Any = None) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.weight = Parameter(randn(num_embeddings, embedding_dim, dtype=dtype))

    def forward(self, indices: Tensor) -> Tensor:
        """Apply the layer (see the class docstring)."""
        return F.embedding(indices, self.weight)

    def extra_repr(self) -> dict[str, Any]:
        """Constructor settings shown by `repr`."""
        return {"num_embeddings": self.num_embeddings, "embedding_dim": self.embedding_dim}


class Dropout(Module):
    """Zero elements with probability `p` while training.

    The RNG key is a buffer (a state input): each call splits it, so a compiled step draws a
    new mask every time.
    """

    def __init__(self, p: float = 0.5, seed: int = 0) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise OmnitensorError(f"Dropout: p must be in [0, 1) (got {p})")
        self.p = p
        self.register_buffer("key", make_key(seed))

    def forward(self, x: Tensor) -> Tensor:
        """Apply the layer (see the class docstring)."""
        if not self.training or self.p == 0.0:
            return x
        state: Tensor = self._buffers["key"]
        carry, use = split_key(state, 2)
        if tracing.get() is None:
            carry.realize()  # keep the key chain one step long outside compiled steps
        assign(state, carry)
        return F.dropout(x, self.p, key=use, training=True)

    def extra_repr(self) -> dict[str, Any]:
        """Constructor settings shown by `repr`."""
        return {"p": self.p}


def _shape(normalized_shape: int | Sequence[int]) -> tuple[int, ...]:
    return (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)


class LayerNorm(Module):
    """Layer normalization over trailing `normalized_shape` with learned scale and shift."""

    def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True, dtype: Any = None) -> None:
        super().__init__()
        self.normalized_shape, self.eps = _shape(normalized_shape), eps
        self.weight = Parameter(ones(self.normalized_shape, dtype=dtype)) if (
            elementwise_affine) else None
        self.bias = Parameter(zeros(self.normalized_shape, dtype=dtype)) if (
            elementwise_affine and bias) else None

    def forward(self, x: Tensor) -> Tensor:
        """Apply the layer (see the class docstring)."""
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> dict[str, Any]:
        """Constructor settings shown by `repr`."""
        return {"normalized_shape": self.normalized_shape, "eps": self.eps}


class RMSNorm(Module):
    """Root-mean-square normalization with a learned scale."""

    def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-6,
                 dtype: Any = None) -> None:
        super().__init__()
        self.normalized_shape, self.eps = _shape(normalized_shape), eps
        self.weight = Parameter(ones(self.normalized_shape, dtype=dtype))

    def forward(self, x: Tensor) -> Tensor:
        """Apply the layer (see the class docstring)."""
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> dict[str, Any]:
        """Constructor settings shown by `repr`."""
        return {"normalized_shape": self.normalized_shape, "eps": self.eps}
