"""Sharded inference equals single-process results, in input order, on rank 0 only."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from omnitensor import distributed as dist
from omnitensor.runtime import load_model

TEXTS = [f"the cat sat on the mat {'dog ' * (k % 5)}{k}" for k in range(11)]
PROMPTS = ["12+34=", "7+8=", "99+1=", "5+5=", "40+2="]


def test_sharded_embed_equals_one_process(bert: Path) -> None:
    encoder = load_model(bert, "ref")
    calls: list[tuple[int, int]] = []
    got = dist.embed(encoder, TEXTS, batch_size=2, progress=lambda d, t: calls.append((d, t)))
    if dist.rank() == 0:
        assert got is not None
        expected = encoder.embed(TEXTS, batch_size=2)
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
        rows = dist.shard_range(len(TEXTS))
        assert calls and calls[-1] == (len(rows), len(rows))
    else:
        assert got is None and calls == []


def test_sharded_generate_equals_one_process() -> None:
    lm = load_model("char-gpt", "ref")
    got = dist.generate(lm, PROMPTS, 4)
    if dist.rank() == 0:
        assert got is not None
        assert [g.text for g in got] == [g.text for g in lm.generate(PROMPTS, 4)]
    else:
        assert got is None


def test_more_ranks_than_texts() -> None:
    encoder_free = dist.generate(load_model("char-gpt", "ref"), PROMPTS[:1], 2)
    if dist.rank() == 0:
        assert encoder_free is not None and len(encoder_free) == 1
