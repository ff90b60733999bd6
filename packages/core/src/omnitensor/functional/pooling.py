"""Sequence pooling (sentence embeddings) and L2 normalization.

The pooling modes are sentence-transformers' (``1_Pooling/config.json``): every mode reads only
the tokens that `mask` marks real, so padding never changes an embedding.
"""

from __future__ import annotations

from ..dtypes import int32
from ..errors import OmnitensorError
from ..tensor.creation import arange
from ..tensor.math import where
from ..tensor.tensor import Tensor
from ._ops import lowest, op
from .registry import functional

__all__ = ["POOLING_MODES", "l2_normalize", "pool"]

#: The pooling modes `pool` knows, by sentence-transformers' names.
POOLING_MODES = ("mean", "cls", "max", "lasttoken", "mean_sqrt_len_tokens", "weightedmean")


@functional("pool")
def pool(x: Tensor, mask: Tensor | None, mode: str = "mean") -> Tensor:
    """One vector per sequence from token vectors `x` (B, T, C), over real tokens only.

    ``mean``: sum(x * m) / max(sum(m), 1e-9); ``mean_sqrt_len_tokens``: sum(x * m) /
    sqrt(sum(m)); ``weightedmean``: the mean weighted by position 1..T; ``max``: max over real
    tokens; ``cls``: the first token; ``lasttoken``: the last real token of each row (rows
    padded on the right).

    Args:
        x: token vectors, (B, T, C).
        mask: (B, T) (or any shape with B*T elements) true on real tokens; None: all real.
        mode: one of `POOLING_MODES`.

    Raises:
        OmnitensorError: an unknown mode.
    """
    if mode not in POOLING_MODES:
        raise OmnitensorError(f"pool: mode {mode!r} is not one of {POOLING_MODES}", op="pool")
    b, t, _ = x.shape
    if mode == "cls":
        return x[:, 0]
    real = (mask.reshape(b, t, 1) if mask is not None else
            op("constant", value=_ones(b, t)))  # (B, T, 1) bool
    weights = real.astype(x.dtype)
    count = weights.sum(axis=1)  # (B, 1)
    if mode == "max":
        return where(real, x, lowest(x.dtype)).max(axis=1)
    if mode == "lasttoken":
        last = (count.astype(int32) - 1).clip(0, t - 1)  # (B, 1)
        return op("gather", x, last, axis=1, batch_dims=1)[:, 0]
    if mode == "weightedmean":
        weights = weights * (arange(t, dtype=x.dtype) + 1).reshape(1, t, 1)
        count = weights.sum(axis=1)
    total = (x * weights).sum(axis=1)  # (B, C)
    if mode == "mean":
        return total / count.clip(1e-9)
    return total / count.clip(1e-9).sqrt()


@functional("l2_normalize")
def l2_normalize(x: Tensor, eps: float = 1e-12) -> Tensor:
    """X / max(||x||_2, eps) along the last axis (torch.nn.functional.normalize)."""
    norm = (x * x).sum(axis=-1, keepdims=True).sqrt().clip(eps)
    return x / norm


def _ones(b: int, t: int) -> object:
    import numpy as np

    return np.ones((b, t, 1), np.bool_)
