"""Choosing the next token from logits: greedy, temperature, top-k, top-p (on the host)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import GenerationArgumentError

__all__ = ["check_sampling", "sample"]


def _integer(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def _real(value: Any) -> bool:
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(
        value, bool | np.bool_) and math.isfinite(float(value))


def check_sampling(op: str, *, max_new_tokens: Any = 1, temperature: Any = 0.0,
                   top_k: Any = None, top_p: Any = None, seed: Any = 0,
                   stop: Any = ()) -> None:
    """Refuse generation arguments of the wrong kind or out of range, before any work.

    Args:
        op: the caller's name for the message (``"generate"``).
        max_new_tokens: an integer >= 1.
        temperature: a finite number >= 0 (0 is greedy).
        top_k: None or an integer >= 1.
        top_p: None or a number in (0, 1].
        seed: an integer >= 0.
        stop: a list or tuple of strings (not one string).

    Raises:
        GenerationArgumentError: naming the first bad argument, its value and the range.
    """
    def bad(name: str, value: Any, expected: str) -> GenerationArgumentError:
        return GenerationArgumentError(f"{op}: {name} must be {expected} (got {value!r})",
                                       op=op, argument=name)

    if not _integer(max_new_tokens) or max_new_tokens < 1:
        raise bad("max_new_tokens", max_new_tokens, "an integer >= 1")
    if not _real(temperature) or temperature < 0:
        raise bad("temperature", temperature, "a finite number >= 0 (0 is greedy)")
    if top_k is not None and (not _integer(top_k) or top_k < 1):
        raise bad("top_k", top_k, "None or an integer >= 1")
    if top_p is not None and (not _real(top_p) or not 0 < top_p <= 1):
        raise bad("top_p", top_p, "None or a number in (0, 1]")
    if not _integer(seed) or seed < 0:
        raise bad("seed", seed, "an integer >= 0")
    if isinstance(stop, str) or not isinstance(stop, Sequence) or not all(
            isinstance(s, str) and s for s in stop):
        raise bad("stop", stop, "a list of non-empty strings")


def sample(logits: np.ndarray[Any, Any], *, temperature: float, top_k: int | None,
           top_p: float | None, rng: np.random.Generator) -> np.ndarray[Any, Any]:
    """Next token ids (B,) from logits (B, V).

    ``temperature == 0`` is greedy (argmax, lowest id on ties). Otherwise logits are divided by
    the temperature, restricted to the `top_k` largest and to the smallest set whose probability
    reaches `top_p`, and sampled with `rng` (seeded by the caller: same seed, same text).
    """
    check_sampling("sample", temperature=temperature, top_k=top_k, top_p=top_p)
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
