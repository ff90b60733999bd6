"""Soft capping: a smooth bound on logits (Gemma 2)."""

from __future__ import annotations

from ..tensor.tensor import Tensor
from .registry import functional

__all__ = ["softcap"]


@functional("softcap")
def softcap(x: Tensor, cap: float) -> Tensor:
    """Cap * tanh(x / cap): close to `x` for small values, within (-cap, cap) always."""
    return (x * (1.0 / cap)).tanh() * cap
