"""Sharded inference: texts or prompts split across ranks, gathered in input order on rank 0.

Each rank takes a contiguous block; other ranks than the root get None back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import ArgumentTypeError, ShapeError
from .group import communicator, rank
from .training import shard_range

__all__ = ["embed", "generate"]

#: ``(done, total)`` after each batch on rank 0 (the CLI draws its progress bar with it).
Progress = Callable[[int, int], None]


def _texts(name: str, texts: Any) -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, Sequence) or not all(
            isinstance(t, str) for t in texts):
        raise ArgumentTypeError(f"distributed.{name}: expected a list of strings")
    return list(texts)


def embed(encoder: Any, texts: Sequence[str], *, batch_size: int = 32, root: int = 0,
          progress: Progress | None = None, **options: Any) -> np.ndarray[Any, Any] | None:
    """`Encoder.embed` over `texts` split across the ranks; the rows in input order on `root`.

    Every rank must call it with the same texts (each embeds its contiguous block, in batches of
    `batch_size`). `progress` is called on `root` only, with rows done on `root` and its block's
    size.

    Returns:
        On `root`, the (N, C) float32 embeddings, equal to ``encoder.embed(texts)``; else None.

    Raises:
        ArgumentTypeError: `texts` is not a list of strings, or a bad `batch_size`.
    """
    items = _texts("embed", texts)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ArgumentTypeError(f"distributed.embed: batch_size must be a positive int (got "
                                f"{batch_size!r})")
    rows = shard_range(len(items))
    mine = items[rows.start:rows.stop]
    parts = []
    for start in range(0, len(mine), batch_size):
        chunk = mine[start:start + batch_size]
        parts.append(np.asarray(encoder.embed(chunk, batch_size=batch_size, **options)))
        if progress is not None and rank() == root:
            progress(start + len(chunk), len(mine))
    local = np.concatenate(parts) if parts else None
    gathered = communicator().all_gather_object(local)
    if rank() != root:
        return None
    blocks = [b for b in gathered if b is not None]
    if not blocks:
        width = _width(encoder)
        return np.zeros((0, width), np.float32)
    out = np.concatenate(blocks)
    if out.shape[0] != len(items):
        raise ShapeError(f"distributed.embed: gathered {out.shape[0]} rows for {len(items)} "
                         "texts; every rank must pass the same texts", op="embed")
    return out


def _width(encoder: Any) -> int:
    return int(encoder.embed(["x"]).shape[1])


def generate(lm: Any, prompts: Sequence[str], max_new_tokens: int = 64, *, root: int = 0,
             **options: Any) -> list[Any] | None:
    """`CausalLM.generate` over `prompts` split across the ranks; results in input order on root.

    Every rank must call it with the same prompts. `options` are ``generate``'s (temperature,
    top_k, top_p, seed, stop); a seeded sampler gives each prompt the same draws only when its
    batch is the same, so compare sampled runs at the same world size.

    Returns:
        On `root`, one `Generation` per prompt; else None.
    """
    items = _texts("generate", prompts)
    rows = shard_range(len(items))
    mine = items[rows.start:rows.stop]
    local = lm.generate(mine, max_new_tokens, **options) if mine else []
    gathered = communicator().all_gather_object(list(local))
    if rank() != root:
        return None
    out = [g for block in gathered for g in block]
    if len(out) != len(items):
        raise ShapeError(f"distributed.generate: gathered {len(out)} results for {len(items)} "
                         "prompts; every rank must pass the same prompts", op="generate")
    return out
