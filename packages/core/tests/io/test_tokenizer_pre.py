"""GGUF tokenizers split text as llama.cpp does for each ``tokenizer.ggml.pre`` name.

One byte-level BPE vocabulary (trained here with the `tokenizers` library, merges crossing
digits, punctuation, spaces and scripts so that every pre-tokenizer difference shows) is read
from GGUF metadata under each pre-tokenizer name and compared with:

- the `tokenizers` library configured as the model's own ``tokenizer.json`` is (Digits,
  Punctuation, ByteLevel, Split: written independently of omnitensor's regex table);
- llama.cpp itself (vocab-only load of the same GGUF file), where llama-cpp-python is installed.

Special tokens written in the text (``<|im_start|>``) and ``add_bos``/``add_eos`` from the
metadata are checked too, and a SentencePiece vocabulary with byte fallback (Gemma's, no space
prefix) against llama.cpp.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tokenizers import Regex, models, pre_tokenizers, trainers
from tokenizers import Tokenizer as HFTokenizer

from omnitensor.io.gguf import write_gguf
from omnitensor.io.names import HParams, gguf_metadata_from_hparams
from omnitensor.io.tokenizer import PRE_TOKENIZERS, Tokenizer

CORPUS = ["Hello world! It's 2024-10-05, we're at 12345 items... Don't stop.",
          "def f(x):\n    return x**2  # comment\n\n\nclass A: pass",
          "中文测试，你好世界。한국어 텍스트 日本語", "$100 + 200 = 300; a<b>c^d~e|f`g",
          "   leading spaces and trailing   ", "ÀÉÎÕÜ naïve café résumé", "emoji 🙂🙂 ok",
          "1234567890 1 12 123 1234", "I'M HERE 'S 'Ll they'll\r\n\r\nok"]
TEXTS = ["Hello world! It's 2024-10-05, we're at 12345 items...",
         "def f(x):\n    return x**2\n\n\n", "中文测试，你好世界。한국어",
         "$100 + 200 = 300; a<b>c^d~e|f`g", "   leading   ",
         "I'M HERE 'S 'Ll", "x\r\n\r\ny", "<|im_start|>user\nhi 42<|im_end|>", "1234567 89",
         "naïve café 🙂", "a  b   c\n \n"]
SPECIALS = ["<|im_start|>", "<|im_end|>"]

_GPT2 = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
_BYTES = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
_DIGITS = pre_tokenizers.Digits(individual_digits=True)
_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
           r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def _split(pattern: str) -> Any:
    return pre_tokenizers.Split(Regex(pattern), behavior="isolated")


#: each model's own tokenizer.json pre-tokenizer (Hugging Face's terms)
HF_PRE: dict[str, Any] = {
    "gpt-2": _GPT2,
    "starcoder": pre_tokenizers.Sequence([_DIGITS, _GPT2]),
    "smollm": pre_tokenizers.Sequence([_DIGITS, _GPT2]),
    "command-r": pre_tokenizers.Sequence([_DIGITS, _GPT2]),
    "qwen2": pre_tokenizers.Sequence([_split(_QWEN2), _BYTES]),
    "llama-bpe": pre_tokenizers.Sequence([_split(_LLAMA3), _BYTES]),
    "deepseek-coder": pre_tokenizers.Sequence([
        _split(r"[\r\n]"), _split(r"\s?\p{L}+"), _split(r"\s?\p{P}+"),
        _split("[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"), _DIGITS, _BYTES]),
}


@cache
def _vocab() -> tuple[list[str], list[str]]:
    trainer_tok = HFTokenizer(models.BPE())
    trainer_tok.pre_tokenizer = _BYTES  # no splitting: merges cross every boundary
    trainer_tok.train_from_iterator(CORPUS * 20, trainers.BpeTrainer(
        vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    spec = json.loads(trainer_tok.to_str())
    tokens = [""] * len(spec["model"]["vocab"])
    for token, index in spec["model"]["vocab"].items():
        tokens[index] = token
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    return [*tokens, *SPECIALS], merges


def _metadata(pre: str, *, add_bos: bool = False, add_eos: bool = False) -> dict[str, Any]:
    tokens, merges = _vocab()
    n = len(tokens)
    hp = HParams("llama", 64, 64, 1, 128, 4, 4, n)
    return gguf_metadata_from_hparams(hp) | {
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": [1] * (n - 2) + [3, 3],
        "tokenizer.ggml.merges": merges, "tokenizer.ggml.bos_token_id": n - 2,
        "tokenizer.ggml.eos_token_id": n - 1, "tokenizer.ggml.add_bos_token": add_bos,
        "tokenizer.ggml.add_eos_token": add_eos}


def _hf_reference(pre: str) -> HFTokenizer:
    tokens, merges = _vocab()
    vocab = {t: i for i, t in enumerate(tokens)}
    ref = HFTokenizer(models.BPE(vocab, [tuple(m.split(" ")) for m in merges]))
    ref.pre_tokenizer = HF_PRE[pre]
    ref.add_special_tokens(SPECIALS)
    return ref


@pytest.mark.parametrize("pre", sorted(HF_PRE))
def test_pre_tokenizer_matches_the_models_tokenizer_json(pre: str) -> None:
    ours = Tokenizer.from_gguf_metadata(_metadata(pre))
    ref = _hf_reference(pre)
    for text in TEXTS:
        assert ours.encode(text) == ref.encode(text).ids, (pre, text)
        assert ours.decode(ours.encode(text), skip_special_tokens=False) == text


def test_special_tokens_in_text_and_add_bos_eos_from_metadata() -> None:
    tokens, _ = _vocab()
    bos, eos = len(tokens) - 2, len(tokens) - 1
    ours = Tokenizer.from_gguf_metadata(_metadata("qwen2", add_bos=True, add_eos=True))
    ids = ours.encode("<|im_start|>user\nhi<|im_end|>")
    assert ids[0] == bos and ids[-1] == eos  # added from the metadata flags
    assert ids[1] == bos and ids[-2] == eos  # and written in the text, one token each
    assert Tokenizer.from_gguf_metadata(_metadata("qwen2")).encode("hi")[0] != bos


def test_unknown_pre_tokenizer_warns(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING"):
        Tokenizer.from_gguf_metadata(_metadata("no-such-pre"))
    assert "no-such-pre" in caplog.text


def _llama_cpp(path: Path) -> Any:
    llama_cpp = pytest.importorskip("llama_cpp")
    return llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)


def _write(path: Path, metadata: dict[str, Any]) -> Path:
    n = len(metadata["tokenizer.ggml.tokens"])
    write_gguf(path, metadata, {"token_embd.weight": np.zeros((n, 64), np.float32)},
               arch="llama")
    return path


@pytest.mark.parametrize("pre", PRE_TOKENIZERS)
def test_pre_tokenizer_matches_llama_cpp(tmp_path: Path, pre: str) -> None:
    metadata = _metadata(pre)
    llm = _llama_cpp(_write(tmp_path / f"{pre}.gguf", metadata))
    ours = Tokenizer.from_gguf_metadata(metadata)
    for text in TEXTS:
        assert ours.encode(text) == llm.tokenize(text.encode(), add_bos=False, special=True), \
            (pre, text)


def test_gemma_sentencepiece_with_byte_fallback_matches_llama_cpp(tmp_path: Path) -> None:
    pieces = ["▁the", "▁cat", "▁sat", "he", "at", "▁t", "▁c", "▁s", "▁", "t", "h", "e", "c",
              "a", "s", "o", "n", "m", "▁on", "▁mat"]
    tokens = ["<pad>", "<eos>", "<bos>", "<unk>", *(f"<0x{b:02X}>" for b in range(256)),
              *pieces, "<start_of_turn>", "<end_of_turn>"]
    types = [3, 3, 3, 2, *[6] * 256, *[1] * len(pieces), 3, 3]
    scores = [0.0] * 260 + [-float(i) for i in range(len(pieces))] + [0.0, 0.0]
    hp = HParams("llama", 64, 64, 1, 128, 4, 4, len(tokens))
    metadata = gguf_metadata_from_hparams(hp) | {
        "tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types, "tokenizer.ggml.scores": scores,
        "tokenizer.ggml.bos_token_id": 2, "tokenizer.ggml.eos_token_id": 1,
        "tokenizer.ggml.unknown_token_id": 3, "tokenizer.ggml.padding_token_id": 0,
        "tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.add_space_prefix": False}
    ours = Tokenizer.from_gguf_metadata(metadata)
    llm = _llama_cpp(_write(tmp_path / "gemma.gguf", metadata))
    for text in ["the cat sat on the mat", " the  cat", "héllo ☃ x", "<start_of_turn>user\nhi",
                 "theatre"]:
        assert ours.encode(text) == llm.tokenize(text.encode(), add_bos=True, special=True), \
            text
