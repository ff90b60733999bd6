"""Tiny in-memory checkpoints (random weights, character tokenizer) on the reference backend."""

from __future__ import annotations

import string
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import omnitensor as ot
from omnitensor.io.tokenizer import char_tokenizer
from omnitensor.models import Checkpoint

ALPHABET = string.ascii_lowercase + " .,"


@pytest.fixture(autouse=True)
def _ref_backend() -> Iterator[None]:
    pytest.importorskip("omnitensor_backend_ref")
    with ot.use_backend("ref"):
        yield


def llama_weights(*, vocab: int, hidden: int = 16, ffn: int = 32, layers: int = 2,
                  heads: int = 4, kv_heads: int = 2, seed: int = 0,
                  tied: bool = False) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    head_dim = hidden // heads

    def mat(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.5).astype(np.float32)

    weights = {"token_embd.weight": mat(vocab, hidden),
               "output_norm.weight": 1 + mat(hidden) * 0.1}
    if not tied:
        weights["output.weight"] = mat(vocab, hidden)
    for i in range(layers):
        weights |= {
            f"blk.{i}.attn_norm.weight": 1 + mat(hidden) * 0.1,
            f"blk.{i}.attn_q.weight": mat(heads * head_dim, hidden),
            f"blk.{i}.attn_k.weight": mat(kv_heads * head_dim, hidden),
            f"blk.{i}.attn_v.weight": mat(kv_heads * head_dim, hidden),
            f"blk.{i}.attn_output.weight": mat(hidden, heads * head_dim),
            f"blk.{i}.ffn_norm.weight": 1 + mat(hidden) * 0.1,
            f"blk.{i}.ffn_gate.weight": mat(ffn, hidden),
            f"blk.{i}.ffn_up.weight": mat(ffn, hidden),
            f"blk.{i}.ffn_down.weight": mat(hidden, ffn),
        }
    return weights


def llama_checkpoint(*, context: int = 64, eos: bool = True, **kw: Any) -> Checkpoint:
    """A 2-layer grouped-query Llama over the character vocabulary (+ <s>, </s>)."""
    tokenizer = char_tokenizer(ALPHABET, bos="<s>", eos="</s>" if eos else None)
    vocab = tokenizer.vocab_size
    hidden, ffn = kw.get("hidden", 16), kw.get("ffn", 32)
    hparams = dict(arch="llama", context_length=context, embedding_length=hidden,
                   block_count=kw.get("layers", 2), feed_forward_length=ffn,
                   head_count=kw.get("heads", 4), head_count_kv=kw.get("kv_heads", 2),
                   vocab_size=vocab, rope_freq_base=10000.0, norm_epsilon=1e-5)
    return Checkpoint("llama", hparams, dict(llama_weights(vocab=vocab, **kw)), tokenizer)


def bert_checkpoint(*, hidden: int = 16, layers: int = 2, heads: int = 4,
                    seed: int = 0) -> Checkpoint:
    tokenizer = char_tokenizer(ALPHABET, bos="[CLS]")
    vocab = tokenizer.vocab_size
    rng = np.random.default_rng(seed)

    def mat(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.5).astype(np.float32)

    weights = {"token_embd.weight": mat(vocab, hidden), "position_embd.weight": mat(64, hidden),
               "token_types.weight": mat(2, hidden), "token_embd_norm.weight": 1 + mat(hidden),
               "token_embd_norm.bias": mat(hidden)}
    for i in range(layers):
        for name, shape in (("attn_q", (hidden, hidden)), ("attn_k", (hidden, hidden)),
                            ("attn_v", (hidden, hidden)), ("attn_output", (hidden, hidden)),
                            ("ffn_up", (2 * hidden, hidden)), ("ffn_down", (hidden, 2 * hidden))):
            weights[f"blk.{i}.{name}.weight"] = mat(*shape)
            weights[f"blk.{i}.{name}.bias"] = mat(shape[0])
        for norm in ("attn_output_norm", "layer_output_norm"):
            weights[f"blk.{i}.{norm}.weight"] = 1 + mat(hidden) * 0.1
            weights[f"blk.{i}.{norm}.bias"] = mat(hidden)
    hparams = dict(arch="bert", context_length=64, embedding_length=hidden, block_count=layers,
                   feed_forward_length=2 * hidden, head_count=heads, head_count_kv=heads,
                   vocab_size=vocab, norm_epsilon=1e-12)
    return Checkpoint("bert", hparams, dict(weights), tokenizer)


# Test modules cannot import this conftest under --import-mode=importlib: fixtures hand out the
# factories.
@pytest.fixture
def make_llama() -> Any:
    return llama_checkpoint


@pytest.fixture
def make_bert() -> Any:
    return bert_checkpoint
