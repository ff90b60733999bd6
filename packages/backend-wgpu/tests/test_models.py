"""The tiny transformer forward on wgpu gives the reference backend's results.

Random tiny Llama (grouped-query attention, RoPE, SwiGLU) and GPT-2 (fused qkv, learned
positions, tanh GELU) checkpoints are built in memory (`omnitensor.models.Checkpoint`: the wgpu
test environment has no torch) and compiled through `ModelBuilder` on the session's wgpu device
and on ``ref``. Their prefill and KV-cached decode logits agree within float32 tolerance, and
greedy generation (`CausalLM` with a character tokenizer) yields the same tokens. Tensors stay
small: lavapipe runs every kernel on one CPU thread.
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np
import pytest

from omnitensor.io.tokenizer import char_tokenizer
from omnitensor.models import Checkpoint, ModelBuilder
from omnitensor.models.spec import builtin_spec
from omnitensor.runtime import CausalLM

ALPHABET = string.ascii_lowercase + " .,"
CONTEXT = 64
# Logits are O(1..10); float32 kernels that sum in another order differ by ~1e-6 relative.
ATOL = RTOL = 1e-4


def _tokenizer() -> Any:
    # NOTE: no EOS token, so a greedy run always produces every requested token.
    return char_tokenizer(ALPHABET, bos="<s>")


def _random(seed: int) -> Any:
    rng = np.random.default_rng(seed)

    def mat(*shape: int, scale: float = 0.5) -> np.ndarray[Any, Any]:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    return mat


def llama_checkpoint(*, hidden: int = 16, ffn: int = 32, layers: int = 2, heads: int = 4,
                     kv_heads: int = 2, seed: int = 0) -> Checkpoint:
    """A grouped-query Llama over the character vocabulary, llama.cpp tensor names."""
    tokenizer = _tokenizer()
    vocab, head_dim, mat = tokenizer.vocab_size, hidden // heads, _random(seed)
    weights = {"token_embd.weight": mat(vocab, hidden), "output.weight": mat(vocab, hidden),
               "output_norm.weight": 1 + mat(hidden, scale=0.05)}
    for i in range(layers):
        weights |= {
            f"blk.{i}.attn_norm.weight": 1 + mat(hidden, scale=0.05),
            f"blk.{i}.attn_q.weight": mat(heads * head_dim, hidden),
            f"blk.{i}.attn_k.weight": mat(kv_heads * head_dim, hidden),
            f"blk.{i}.attn_v.weight": mat(kv_heads * head_dim, hidden),
            f"blk.{i}.attn_output.weight": mat(hidden, heads * head_dim),
            f"blk.{i}.ffn_norm.weight": 1 + mat(hidden, scale=0.05),
            f"blk.{i}.ffn_gate.weight": mat(ffn, hidden),
            f"blk.{i}.ffn_up.weight": mat(ffn, hidden),
            f"blk.{i}.ffn_down.weight": mat(hidden, ffn),
        }
    hparams = dict(arch="llama", context_length=CONTEXT, embedding_length=hidden,
                   block_count=layers, feed_forward_length=ffn, head_count=heads,
                   head_count_kv=kv_heads, vocab_size=vocab, rope_freq_base=10000.0,
                   norm_epsilon=1e-5)
    return Checkpoint("llama", hparams, dict(weights), tokenizer)


def gpt2_checkpoint(*, hidden: int = 16, layers: int = 2, heads: int = 4,
                    seed: int = 1) -> Checkpoint:
    """A GPT-2 (fused qkv with biases, learned positions) over the character vocabulary."""
    tokenizer = _tokenizer()
    vocab, mat = tokenizer.vocab_size, _random(seed)
    weights = {"token_embd.weight": mat(vocab, hidden),
               "position_embd.weight": mat(CONTEXT, hidden),
               "output_norm.weight": 1 + mat(hidden, scale=0.05),
               "output_norm.bias": mat(hidden, scale=0.05)}
    for i in range(layers):
        for name, rows, cols in (("attn_qkv", 3 * hidden, hidden), ("attn_output", hidden, hidden),
                                 ("ffn_up", 4 * hidden, hidden), ("ffn_down", hidden, 4 * hidden)):
            weights[f"blk.{i}.{name}.weight"] = mat(rows, cols)
            weights[f"blk.{i}.{name}.bias"] = mat(rows, scale=0.05)
        for norm in ("attn_norm", "ffn_norm"):
            weights[f"blk.{i}.{norm}.weight"] = 1 + mat(hidden, scale=0.05)
            weights[f"blk.{i}.{norm}.bias"] = mat(hidden, scale=0.05)
    hparams = dict(arch="gpt2", context_length=CONTEXT, embedding_length=hidden,
                   block_count=layers, feed_forward_length=4 * hidden, head_count=heads,
                   head_count_kv=heads, vocab_size=vocab, norm_epsilon=1e-5)
    return Checkpoint("gpt2", hparams, dict(weights), tokenizer)


CHECKPOINTS = {"llama": llama_checkpoint, "gpt2": gpt2_checkpoint}


@pytest.fixture(scope="module")
def ref_backend() -> Any:
    """The reference backend every result is compared with (skips when not installed)."""
    pytest.importorskip("omnitensor_backend_ref",
                        reason="omnitensor-backend-ref is not installed: nothing to compare with")
    from omnitensor.backend.registry import get_backend

    return get_backend("ref")


@pytest.fixture(scope="module", params=sorted(CHECKPOINTS))
def models(request: pytest.FixtureRequest, backend: Any, ref_backend: Any) -> tuple[Any, Any]:
    """(model on wgpu, the same model on ref) for one architecture."""
    arch = request.param
    checkpoint = CHECKPOINTS[arch]()
    builder = ModelBuilder().with_spec(builtin_spec(arch)).with_checkpoint(checkpoint)
    return builder.build(backend), builder.build(ref_backend)


def _prefill_then_decode(model: Any, prompt: list[int], feed: list[int],
                         capacity: int = 16) -> list[np.ndarray[Any, Any]]:
    """Last-token logits of a prefill over `prompt`, then of one decode step per `feed` id."""
    t = len(prompt)
    key_mask = np.ones((1, 1, 1, capacity), np.bool_)
    cache = model.new_cache(1, capacity)
    logits, cache = model.step(np.array([prompt]), np.arange(t)[None], key_mask, 0, cache,
                               np.array([t - 1]))
    out = [np.asarray(logits.numpy())]
    for i, token in enumerate(feed):
        slot = t + i
        logits, cache = model.step(np.array([[token]]), np.array([[slot]]), key_mask, slot,
                                   cache, np.zeros(1))
        out.append(np.asarray(logits.numpy()))
    return out


def test_forward_logits_match_reference(models: tuple[Any, Any]) -> None:
    wgpu_model, ref_model = models
    prompt, feed = [0, 7, 4, 11, 11, 14, 26], [22, 14, 17]  # "<s>hello" then "wor"
    got = _prefill_then_decode(wgpu_model, prompt, feed)
    want = _prefill_then_decode(ref_model, prompt, feed)
    assert got[0].shape == (1, wgpu_model.hparams["vocab_size"])
    for step, (g, w) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(g, w, atol=ATOL, rtol=RTOL,
                                   err_msg=f"{wgpu_model.arch}: logits of step {step}")


def test_greedy_generation_matches_reference(models: tuple[Any, Any]) -> None:
    wgpu_model, ref_model = models
    got = CausalLM(wgpu_model).generate("the cat", max_new_tokens=12, temperature=0)
    want = CausalLM(ref_model).generate("the cat", max_new_tokens=12, temperature=0)
    assert len(want.token_ids) == 12
    assert got.token_ids == want.token_ids
    assert got.text == want.text


def test_batched_generation_matches_reference(models: tuple[Any, Any]) -> None:
    # Two prompts of different lengths: left padding and the key mask run on wgpu too.
    wgpu_model, ref_model = models
    prompts = ["a dog", "the quick fox"]
    got = CausalLM(wgpu_model).generate(prompts, max_new_tokens=6, temperature=0)
    want = CausalLM(ref_model).generate(prompts, max_new_tokens=6, temperature=0)
    assert [g.token_ids for g in got] == [w.token_ids for w in want]


def test_model_weights_live_on_the_device(models: tuple[Any, Any]) -> None:
    wgpu_model, _ = models
    assert wgpu_model.backend.name == "wgpu"
    assert all(w.backend is wgpu_model.backend for w in wgpu_model.weights.values())
