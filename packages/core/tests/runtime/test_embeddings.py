"""Embeddings of a sentence-transformers directory whose tokenizer.json pads and truncates.

A tiny random BERT is written in the Hugging Face layout (config.json, model.safetensors, a
WordPiece tokenizer.json that pads every input to a fixed length, modules.json, 1_Pooling,
sentence_bert_config.json, config_sentence_transformers.json) and compared with a plain-numpy
BERT over the real tokens only: tokenizer padding must not leak into the model, every pooling
mode reads real tokens only, long texts are truncated with a warning, prompts are applied.
"""

from __future__ import annotations

import json
import logging
import math
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import omnitensor as ot
from omnitensor.errors import FormatError, OmnitensorError
from omnitensor.io.safetensors import write_safetensors
from omnitensor.io.tokenizer import Tokenizer
from omnitensor.runtime import Encoder, load_model

tokenizers = pytest.importorskip("tokenizers")

HIDDEN, LAYERS, HEADS, FFN, POSITIONS = 16, 2, 4, 32, 64
FIXED = 24  # tokenizer.json pads (and truncates) every input to this many tokens
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
WORDS = ["the", "cat", "sat", "on", "mat", "dog", "query", ":"]
VOCAB = [*SPECIALS, *string.ascii_lowercase, *(f"##{c}" for c in string.ascii_lowercase),
         *WORDS, ".", ","]
TEXTS = ["The cat sat on the mat.", "a dog", "Zebras quietly, quickly cross the road", "x"]


@pytest.fixture(autouse=True)
def _ref_backend() -> Iterator[None]:
    pytest.importorskip("omnitensor_backend_ref")
    with ot.use_backend("ref"):
        yield


def _tokenizer_json(*, pad: bool) -> str:
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import models, normalizers, pre_tokenizers, processors

    backend = HFTokenizer(models.WordPiece({t: i for i, t in enumerate(VOCAB)},
                                           unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    backend.add_special_tokens(SPECIALS)
    if pad:  # what all-MiniLM-L6-v2's tokenizer.json does (with 128)
        backend.enable_padding(length=FIXED, pad_id=0, pad_token="[PAD]")
        backend.enable_truncation(max_length=FIXED)
    return str(backend.to_str())


def _weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def mat(*shape: int, scale: float = 0.5) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    w = {"embeddings.word_embeddings.weight": mat(len(VOCAB), HIDDEN),
         "embeddings.position_embeddings.weight": mat(POSITIONS, HIDDEN),
         "embeddings.token_type_embeddings.weight": mat(2, HIDDEN),
         "embeddings.LayerNorm.weight": 1 + mat(HIDDEN, scale=0.1),
         "embeddings.LayerNorm.bias": mat(HIDDEN, scale=0.1)}
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."
        for name, shape in (("attention.self.query", (HIDDEN, HIDDEN)),
                            ("attention.self.key", (HIDDEN, HIDDEN)),
                            ("attention.self.value", (HIDDEN, HIDDEN)),
                            ("attention.output.dense", (HIDDEN, HIDDEN)),
                            ("intermediate.dense", (FFN, HIDDEN)),
                            ("output.dense", (HIDDEN, FFN))):
            w[f"{p}{name}.weight"] = mat(*shape)
            w[f"{p}{name}.bias"] = mat(shape[0], scale=0.1)
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            w[f"{p}{norm}.weight"] = 1 + mat(HIDDEN, scale=0.1)
            w[f"{p}{norm}.bias"] = mat(HIDDEN, scale=0.1)
    return w


def _write(path: Path, *, pooling: str = "mean", normalize: bool = True, pad: bool = True,
           max_seq_length: int | None = None, prompts: dict[str, str] | None = None,
           include_prompt: bool = True, extra_module: str | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({
        "architectures": ["BertModel"], "model_type": "bert", "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "intermediate_size": FFN,
        "max_position_embeddings": POSITIONS, "vocab_size": len(VOCAB),
        "layer_norm_eps": 1e-12, "hidden_act": "gelu", "type_vocab_size": 2}))
    write_safetensors(path / "model.safetensors", _weights())
    (path / "tokenizer.json").write_text(_tokenizer_json(pad=pad))
    modules = [{"idx": 0, "name": "0", "path": "",
                "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling",
                "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize",
                        "type": "sentence_transformers.models.Normalize"})
    if extra_module:
        modules.append({"idx": 3, "name": "3", "path": "3", "type": extra_module})
    (path / "modules.json").write_text(json.dumps(modules))
    (path / "1_Pooling").mkdir(exist_ok=True)
    legacy = {"cls": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens",
              "max": "pooling_mode_max_tokens",
              "mean_sqrt_len_tokens": "pooling_mode_mean_sqrt_len_tokens",
              "lasttoken": "pooling_mode_lasttoken",
              "weightedmean": "pooling_mode_weightedmean_tokens"}
    pool_config: dict[str, Any] = {"word_embedding_dimension": HIDDEN,
                                   **{key: key == legacy[pooling] for key in legacy.values()}}
    if not include_prompt:
        pool_config["include_prompt"] = False
    (path / "1_Pooling" / "config.json").write_text(json.dumps(pool_config))
    if max_seq_length is not None:
        (path / "sentence_bert_config.json").write_text(json.dumps(
            {"max_seq_length": max_seq_length, "do_lower_case": False}))
    if prompts is not None:
        (path / "config_sentence_transformers.json").write_text(json.dumps(
            {"prompts": prompts, "default_prompt_name": None}))
    return path


# --- a plain-numpy BERT over the real tokens of one text ---------------------------------------


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-12) * w + b


def _hidden(ids: list[int]) -> np.ndarray:
    w = {k: v.astype(np.float64) for k, v in _weights().items()}
    t = len(ids)
    x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][
        :t] + w["embeddings.token_type_embeddings.weight"][0])
    x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
    d = HIDDEN // HEADS
    gelu = np.vectorize(lambda v: 0.5 * v * (1 + math.erf(v / math.sqrt(2))))
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."

        def lin(v: np.ndarray, name: str, p: str = p) -> np.ndarray:
            return v @ w[f"{p}{name}.weight"].T + w[f"{p}{name}.bias"]

        q, k, v = (lin(x, f"attention.self.{n}").reshape(t, HEADS, d).transpose(1, 0, 2)
                   for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(d)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        attn = (probs @ v).transpose(1, 0, 2).reshape(t, HIDDEN)
        x = _layer_norm(x + lin(attn, "attention.output.dense"),
                        w[f"{p}attention.output.LayerNorm.weight"],
                        w[f"{p}attention.output.LayerNorm.bias"])
        x = _layer_norm(x + lin(gelu(lin(x, "intermediate.dense")), "output.dense"),
                        w[f"{p}output.LayerNorm.weight"], w[f"{p}output.LayerNorm.bias"])
    return x


def _pool(h: np.ndarray, mode: str, skip: int = 0) -> np.ndarray:
    real = h[skip:]
    if mode == "cls":
        return h[0]
    if mode == "max":
        return real.max(0)
    if mode == "lasttoken":
        return real[-1]
    if mode == "mean_sqrt_len_tokens":
        return real.sum(0) / math.sqrt(len(real))
    if mode == "weightedmean":
        weights = np.arange(skip + 1, len(h) + 1, dtype=np.float64)[:, None]
        return (real * weights).sum(0) / weights.sum()
    return real.mean(0)


def _unpadded_ids(text: str) -> list[int]:
    from tokenizers import Tokenizer as HFTokenizer

    return list(HFTokenizer.from_str(_tokenizer_json(pad=False)).encode(text).ids)


def _expected(texts: list[str], mode: str = "mean", normalize: bool = True) -> np.ndarray:
    out = np.stack([_pool(_hidden(_unpadded_ids(t)), mode) for t in texts])
    if normalize:
        out /= np.linalg.norm(out, axis=-1, keepdims=True)
    return out


# --- tests ---------------------------------------------------------------------------------------


def test_tokenizer_padding_and_truncation_never_reach_the_ids(tmp_path: Path) -> None:
    path = _write(tmp_path / "m")
    tok = Tokenizer.from_hf_dir(path)
    ids = tok.encode_batch(TEXTS)
    assert [len(x) for x in ids] == [len(_unpadded_ids(t)) for t in TEXTS]
    assert all(0 not in x for x in ids)  # no [PAD]
    long = " ".join(["cat"] * 40)
    assert len(tok.encode(long)) == 42  # the file's truncation (24) is not applied either
    cut = tok.encode_batch([long], max_length=10)[0]
    assert cut[0] == 2 and cut[-1] == 3 and len(cut) == 10  # specials kept


@pytest.mark.parametrize("mode", ["mean", "cls", "max", "lasttoken", "mean_sqrt_len_tokens",
                                  "weightedmean"])
def test_embeddings_match_numpy_bert_over_real_tokens(tmp_path: Path, mode: str) -> None:
    normalize = mode != "max"  # also checks a model without a Normalize module
    encoder = load_model(_write(tmp_path / "m", pooling=mode, normalize=normalize))
    assert isinstance(encoder, Encoder)
    got = encoder.embed(TEXTS)
    np.testing.assert_allclose(got, _expected(TEXTS, mode, normalize), atol=2e-5, rtol=1e-4)


def test_padded_tokenizer_gives_the_same_embeddings_as_unpadded(tmp_path: Path) -> None:
    padded = load_model(_write(tmp_path / "padded", pad=True)).embed(TEXTS)
    plain = load_model(_write(tmp_path / "plain", pad=False)).embed(TEXTS)
    np.testing.assert_allclose(padded, plain, atol=1e-6)
    single = np.concatenate([load_model(tmp_path / "padded").embed(t) for t in TEXTS[:2]])
    np.testing.assert_allclose(padded[:2], single, atol=1e-5)
    assert load_model(tmp_path / "plain").embed([]).shape == (0, HIDDEN)


def test_long_text_is_truncated_to_max_seq_length_with_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    encoder = load_model(_write(tmp_path / "m", max_seq_length=12))
    assert encoder.max_seq_length == 12
    long = " ".join(["the cat sat on the mat"] * 20)  # far more than the 64 positions
    with caplog.at_level(logging.WARNING):
        got = encoder.embed([long, "a dog"])
    assert any("truncated" in r.getMessage() for r in caplog.records)
    ids = _unpadded_ids(long)
    kept = [*ids[:11], 3]  # [CLS] + 10 word pieces + [SEP]
    expected = _pool(_hidden(kept), "mean")
    np.testing.assert_allclose(got[0], expected / np.linalg.norm(expected), atol=2e-5)


def test_context_length_bounds_truncation_without_sentence_bert_config(tmp_path: Path) -> None:
    encoder = load_model(_write(tmp_path / "m"))
    assert encoder.max_seq_length == POSITIONS
    got = encoder.embed(" ".join(["dog"] * 100))  # no index error past the position table
    assert got.shape == (1, HIDDEN) and np.isfinite(got).all()


def test_prompts(tmp_path: Path) -> None:
    prompts = {"query": "query: "}
    encoder = load_model(_write(tmp_path / "m", prompts=prompts))
    np.testing.assert_allclose(encoder.embed(["a dog"], prompt_name="query"),
                               _expected(["query: a dog"]), atol=2e-5)
    np.testing.assert_allclose(encoder.embed(["a dog"], prompt="query: "),
                               _expected(["query: a dog"]), atol=2e-5)
    with pytest.raises(OmnitensorError, match="not one of the model's prompts"):
        encoder.embed(["a dog"], prompt_name="passage")
    # include_prompt: false pools over the text only ([CLS] and the prompt's tokens left out)
    excluded = load_model(_write(tmp_path / "x", prompts=prompts, include_prompt=False))
    ids = _unpadded_ids("query: a dog")
    skip = len(_unpadded_ids("query: ")) - 1
    pooled = _pool(_hidden(ids), "mean", skip)
    np.testing.assert_allclose(excluded.embed(["a dog"], prompt_name="query")[0],
                               pooled / np.linalg.norm(pooled), atol=2e-5)


def test_unsupported_module_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "m", extra_module="sentence_transformers.models.Dense")
    with pytest.raises(FormatError, match="Dense"):
        load_model(path)


def test_encoder_buckets_pad_short_texts_tightly_and_long_ones_coarsely() -> None:
    from omnitensor.models.compiled import encoder_bucket

    assert [encoder_bucket(n) for n in (1, 8, 9, 16)] == [8, 8, 9, 16]  # every length to 16
    assert [encoder_bucket(n) for n in (21, 22, 23, 25, 33, 63)] == [22, 22, 24, 26, 36, 64]
    assert [encoder_bucket(n) for n in (65, 97, 129, 257, 513)] == [80, 112, 160, 320, 640]
    lengths = range(1, 2049)
    buckets = [encoder_bucket(n) for n in lengths]
    assert all(b >= n and encoder_bucket(b) == b for n, b in zip(lengths, buckets, strict=True))
    assert buckets == sorted(buckets)
    # padding: under an eighth of the work up to 64 tokens, under a quarter above
    assert all(b - n < n / (8 if b <= 64 else 4) for n, b in zip(lengths, buckets, strict=True)
               if n > 16)
    assert len(set(buckets[:512])) <= 40  # plans a corpus of texts up to 512 tokens builds
