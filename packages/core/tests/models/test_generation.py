"""CausalLM generation edge cases, sampling, streaming, and Encoder batching."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from omnitensor.errors import OmnitensorError, ShapeError
from omnitensor.models import ModelBuilder
from omnitensor.runtime import CausalLM, Encoder, Generation
from omnitensor.runtime.sampling import sample


@pytest.fixture
def lm(make_llama: Any) -> CausalLM:
    return CausalLM(ModelBuilder().with_spec("llama").with_checkpoint(make_llama(
        context=32)).build("ref"))


def test_greedy_generation_is_deterministic(lm: CausalLM) -> None:
    first = lm.generate("hello", max_new_tokens=6)
    assert isinstance(first, Generation)
    assert first.prompt_tokens == 6  # <s> + 5 characters
    assert 0 < len(first.token_ids) <= 6
    assert first.text == lm.tokenizer.decode(first.token_ids)
    assert first.prefill_s > 0 and first.decode_s >= 0
    assert lm.generate("hello", max_new_tokens=6).token_ids == first.token_ids
    assert lm.capabilities == ("generate",)


def test_greedy_is_argmax_of_step_logits(lm: CausalLM) -> None:
    ids = lm.tokenizer.encode("abc")
    model = lm.model
    cache = model.new_cache(1, 32)
    logits, _ = model.step(np.array([ids]), np.arange(len(ids))[None],
                           np.ones((1, 1, 1, 32), bool), 0, cache, np.array([len(ids) - 1]))
    gen = lm.generate("abc", max_new_tokens=1)
    expected = int(logits.numpy()[0].argmax())
    assert gen.token_ids == ([] if expected in lm.tokenizer.eos_ids else [expected])


def test_context_overflow_is_shape_error(lm: CausalLM) -> None:
    with pytest.raises(ShapeError, match=r"prompt \(6 tokens\) \+ max_new_tokens \(27\) = 33 "
                                         r"exceeds the context length 32"):
        lm.generate("hello", max_new_tokens=27)
    assert len(lm.generate("hello", max_new_tokens=26).token_ids) <= 26  # exactly fits


def test_empty_prompt_is_an_error(make_llama: Any) -> None:
    model = CausalLM(ModelBuilder().with_spec("llama").with_checkpoint(make_llama(
        )).build("ref"))
    model.tokenizer.backend.post_processor = None  # no BOS: "" encodes to nothing
    with pytest.raises(OmnitensorError, match="encodes to no tokens"):
        model.generate("", max_new_tokens=2)


def test_stop_strings_cut_the_text(lm: CausalLM) -> None:
    full = lm.generate("hello", max_new_tokens=8, temperature=1.0, seed=3)
    assert len(full.text) >= 3
    stop = full.text[2]
    cut = lm.generate("hello", max_new_tokens=8, temperature=1.0, seed=3, stop=[stop])
    assert cut.stop_reason == "stop"
    assert stop not in cut.text
    assert cut.text == full.text[: full.text.index(stop)]
    assert len(cut.token_ids) == full.text.index(stop) + 1  # generation stops at the stop token


def test_stream_yields_generate_text(lm: CausalLM) -> None:
    pieces = list(lm.stream("hello", max_new_tokens=6))
    assert "".join(pieces) == lm.generate("hello", max_new_tokens=6).text


def test_sampling_is_reproducible_by_seed(lm: CausalLM) -> None:
    kwargs: dict[str, Any] = dict(max_new_tokens=12, temperature=1.5)
    a = lm.generate("the", seed=7, **kwargs)
    b = lm.generate("the", seed=7, **kwargs)
    assert a.token_ids == b.token_ids
    others = {tuple(lm.generate("the", seed=s, **kwargs).token_ids) for s in range(1, 6)}
    assert len(others) > 1  # different seeds explore different continuations


@pytest.mark.parametrize("kwargs", [dict(top_k=1), dict(top_p=1e-6), dict(temperature=1e-4)])
def test_degenerate_sampling_is_greedy(lm: CausalLM, kwargs: dict[str, Any]) -> None:
    greedy = lm.generate("hello", max_new_tokens=6)
    kw = {"temperature": 1.0, **kwargs}
    assert lm.generate("hello", max_new_tokens=6, seed=11, **kw).token_ids == greedy.token_ids


def test_batched_generation_matches_single(lm: CausalLM) -> None:
    prompts = ["a", "hello there", "abc"]
    batched = lm.generate(prompts, max_new_tokens=5)
    assert [g.prompt_tokens for g in batched] == [2, 12, 4]
    for prompt, gen in zip(prompts, batched, strict=True):
        assert gen.token_ids == lm.generate(prompt, max_new_tokens=5).token_ids


def test_eos_ends_generation(make_llama: Any) -> None:
    checkpoint = make_llama(context=32)
    lm = CausalLM(ModelBuilder().with_spec("llama").with_checkpoint(checkpoint).build("ref"))
    free = lm.generate("hello", max_new_tokens=6)
    assert free.token_ids
    lm.tokenizer.eos_ids = (free.token_ids[0],)  # the first greedy token is now EOS
    stopped = lm.generate("hello", max_new_tokens=6)
    assert stopped.token_ids == [] and stopped.stop_reason == "eos" and stopped.text == ""


def test_decode_compiles_once_per_bucket_not_per_token(make_llama: Any) -> None:
    from omnitensor.tensor.realize import stats

    checkpoint = make_llama(context=512, eos=False)  # no EOS: all 256 tokens are generated
    lm = CausalLM(ModelBuilder().with_spec("llama").with_checkpoint(checkpoint).build("ref"))
    before = stats.compiles
    gen = lm.generate("hello", max_new_tokens=256, temperature=1.0)
    assert len(gen.token_ids) == 256
    assert stats.compiles - before <= 2  # one prefill plan, one decode plan
    before = stats.compiles
    lm.generate("world", max_new_tokens=250, temperature=1.0)  # same buckets (8, 512)
    assert stats.compiles == before


# --- sampling on logits -------------------------------------------------------------------------


def test_sample_top_k_and_top_p_restrict_choices() -> None:
    logits = np.log(np.array([[0.5, 0.3, 0.15, 0.05]] * 400))
    rng = np.random.default_rng(0)
    assert set(sample(logits, temperature=1.0, top_k=2, top_p=None, rng=rng)) == {0, 1}
    assert set(sample(logits, temperature=1.0, top_k=None, top_p=0.7, rng=rng)) == {0, 1}
    assert set(sample(logits, temperature=1.0, top_k=None, top_p=0.85, rng=rng)) == {0, 1, 2}
    everything = sample(logits, temperature=1.0, top_k=None, top_p=None, rng=rng)
    assert set(everything) == {0, 1, 2, 3}
    assert abs((everything == 0).mean() - 0.5) < 0.1


def test_sample_greedy_and_ties() -> None:
    logits = np.array([[1.0, 3.0, 3.0], [0.0, -1.0, -2.0]])
    got = sample(logits, temperature=0, top_k=None, top_p=None, rng=np.random.default_rng())
    assert got.tolist() == [1, 0]


@pytest.mark.parametrize("kwargs", [dict(temperature=-1.0), dict(top_p=0.0), dict(top_p=1.5),
                                    dict(top_k=0)])
def test_sample_rejects_bad_settings(kwargs: dict[str, Any]) -> None:
    settings: dict[str, Any] = {"temperature": 1.0, "top_k": None, "top_p": None, **kwargs}
    with pytest.raises(OmnitensorError, match="sample: (temperature|top_p|top_k) must be"):
        sample(np.zeros((1, 4)), rng=np.random.default_rng(), **settings)


# --- encoder --------------------------------------------------------------------------------------


@pytest.fixture
def encoder(make_bert: Any) -> Encoder:
    return Encoder(ModelBuilder().with_spec("bert").with_checkpoint(make_bert()).build("ref"))


TEXTS = ["hello world", "a", "the quick brown fox", "abc, def."]


def test_encoder_batching_equals_single(encoder: Encoder) -> None:
    together = encoder.embed(TEXTS)
    assert together.shape == (4, 16) and together.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    single = np.concatenate([encoder.embed(t) for t in TEXTS])
    np.testing.assert_allclose(together, single, atol=1e-5)
    np.testing.assert_allclose(encoder.embed(TEXTS, batch_size=3), together, atol=1e-5)
    assert encoder.capabilities == ("embed",)


def test_encoder_padding_does_not_leak(encoder: Encoder) -> None:
    short = encoder.embed("ab")
    padded_with_long = encoder.embed(["ab", "a much longer sentence than the first"])[:1]
    np.testing.assert_allclose(short, padded_with_long, atol=1e-5)
    assert not np.allclose(encoder.embed("ab"), encoder.embed("ba"), atol=1e-3)


def test_encoder_too_long_is_truncated_with_a_warning(encoder: Encoder,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING"):
        long = encoder.embed("x" * 80)
    assert any("truncated" in r.getMessage() for r in caplog.records)
    np.testing.assert_allclose(long, encoder.embed("x" * 63), atol=1e-5)  # 63 + the BOS
