"""A tiny BERT encoder on wgpu gives the reference backend's embeddings.

BERT needs what the causal models do not: exact GELU (hence `erf` in WGSL), bidirectional
attention with a padding mask, token-type embeddings and layer norms with biases (which run as
fused row kernels). The checkpoint is random and built in memory, like those of `test_models`.
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np
import pytest

from omnitensor.io.tokenizer import char_tokenizer
from omnitensor.models import Checkpoint, ModelBuilder
from omnitensor.models.spec import builtin_spec

ALPHABET = string.ascii_lowercase + " .,"


def bert_checkpoint(*, hidden: int = 16, layers: int = 2, heads: int = 4,
                    seed: int = 2) -> Checkpoint:
    """A BERT encoder (post-norm, biased projections, exact GELU) over characters."""
    tokenizer = char_tokenizer(ALPHABET, bos="[CLS]")
    vocab = tokenizer.vocab_size
    rng = np.random.default_rng(seed)

    def mat(*shape: int, scale: float = 0.5) -> np.ndarray[Any, Any]:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    weights = {"token_embd.weight": mat(vocab, hidden), "position_embd.weight": mat(64, hidden),
               "token_types.weight": mat(2, hidden),
               "token_embd_norm.weight": 1 + mat(hidden, scale=0.05),
               "token_embd_norm.bias": mat(hidden, scale=0.05)}
    for i in range(layers):
        for name, rows, cols in (("attn_q", hidden, hidden), ("attn_k", hidden, hidden),
                                 ("attn_v", hidden, hidden), ("attn_output", hidden, hidden),
                                 ("ffn_up", 4 * hidden, hidden),
                                 ("ffn_down", hidden, 4 * hidden)):
            weights[f"blk.{i}.{name}.weight"] = mat(rows, cols)
            weights[f"blk.{i}.{name}.bias"] = mat(rows, scale=0.05)
        for norm in ("attn_output_norm", "layer_output_norm"):
            weights[f"blk.{i}.{norm}.weight"] = 1 + mat(hidden, scale=0.05)
            weights[f"blk.{i}.{norm}.bias"] = mat(hidden, scale=0.05)
    hparams = dict(arch="bert", context_length=64, embedding_length=hidden, block_count=layers,
                   feed_forward_length=4 * hidden, head_count=heads, head_count_kv=heads,
                   vocab_size=vocab, norm_epsilon=1e-12)
    return Checkpoint("bert", hparams, dict(weights), tokenizer)


@pytest.fixture(scope="module")
def models(backend: Any) -> tuple[Any, Any]:
    """(BERT on wgpu, the same BERT on ref)."""
    pytest.importorskip("omnitensor_backend_ref",
                        reason="omnitensor-backend-ref is not installed: nothing to compare with")
    from omnitensor.backend.registry import get_backend

    builder = ModelBuilder().with_spec(builtin_spec("bert")).with_checkpoint(bert_checkpoint())
    return builder.build(backend), builder.build(get_backend("ref"))


def test_embeddings_match_reference(models: tuple[Any, Any], backend: Any) -> None:
    wgpu_model, ref_model = models
    tokenizer = wgpu_model.tokenizer
    texts = ["the cat sat", "a dog", "quick brown fox, jumps."]
    ids = [tokenizer.encode(t) for t in texts]
    width = max(map(len, ids))
    tokens = np.zeros((len(ids), width), np.int32)
    mask = np.zeros((len(ids), width), np.bool_)
    for row, seq in enumerate(ids):
        tokens[row, :len(seq)], mask[row, :len(seq)] = seq, True
    got = wgpu_model.encode(tokens, mask)
    want = ref_model.encode(tokens, mask)
    assert got.shape == (3, 16)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(np.linalg.norm(got, axis=-1), 1.0, rtol=1e-5)


def test_encoder_program_uses_fused_norms_and_erf(models: tuple[Any, Any], backend: Any) -> None:
    wgpu_model, _ = models
    tokens = np.ones((2, 5), np.int32)  # a batch size no other test compiles
    original = backend.compile
    seen: list[Any] = []

    def spy(function: Any) -> Any:
        exe = original(function)
        seen.append(exe)
        return exe

    backend.compile = spy
    try:
        wgpu_model.encode(tokens, np.ones((2, 5), np.bool_))
    finally:
        del backend.compile
    steps = [step for exe in seen for step in exe.lowered.steps]
    assert [s.kind for s in steps].count("layer_norm") == 5  # embeddings, then two per layer
    assert any("m_erf(" in step.source for step in steps)
    before = backend.stats()
    wgpu_model.encode(tokens, np.ones((2, 5), np.bool_))
    assert backend.stats()["submits"] - before["submits"] == 1  # the whole encoder, one submit
