"""Choosing the next token from logits: greedy, temperature, top-k, top-p (on the host)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import OmnitensorError

__all__ = ["sample"]


def sample(logits: np.ndarray[Any, Any], *, temperature: float, top_k: int | None,
           top_p: float | None, rng: np.random.Generator) -> np.ndarray[Any, Any]:
    """Next token ids (B,) from logits (B, V).

    ``temperature == 0`` is greedy (argmax, lowest id on ties). Otherwise logits are divided by
    the temperature, restricted to the `top_k` largest and to the smallest set whose probability
    reaches `top_p`, and sampled with `rng` (seeded by the caller: same seed, same text).
    """
    if temperature < 0 or (top_p is not None and not 0 < top_p <= 1) or (
            top_k is not None and top_k < 1):
        raise OmnitensorError(
            f"sample: need temperature >= 0, 0 < top_p <= 1, top_k >= 1 (got temperature="
            f"{temperature}, top_p={top_p}, top_k={top_k})")
    logits = np.asarray(logits, dtype=np.float64)
    if temperature == 0:
        return np.asarray(logits.argmax(axis=-1).astype(np.int64))
    scaled = logits / temperature
    if top_k is not None and top_k < scaled.shape[-1]:
        kth = np.partition(scaled, -top_k, axis=-1)[:, -top_k][:, None]
        scaled = np.where(scaled < kth, -np.inf, scaled)
    probs = np.exp(scaled - scaled.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    if top_p is not None and top_p < 1:
        order = np.argsort(-probs, axis=-1, kind="stable")
        sorted_p = np.take_along_axis(probs, order, axis=-1)
        keep_sorted = np.cumsum(sorted_p, axis=-1) - sorted_p < top_p
        keep = np.zeros_like(keep_sorted)
        np.put_along_axis(keep, order, keep_sorted, axis=-1)
        probs = np.where(keep, probs, 0.0)
        probs /= probs.sum(axis=-1, keepdims=True)
    return np.array([rng.choice(probs.shape[-1], p=row) for row in probs], dtype=np.int64)
