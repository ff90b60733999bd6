"""Tokenizers: char-level, GGUF-built BPE (gpt2), SentencePiece-style (llama), WordPiece, HF."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gguf import bytes_to_unicode
from hypothesis import given
from hypothesis import strategies as st

from omnitensor.errors import FormatError
from omnitensor.io.gguf import read_gguf, write_gguf
from omnitensor.io.tokenizer import Tokenizer, char_tokenizer

ALPHABET = "abcdefgh \n.!"


@given(st.text(alphabet=ALPHABET, max_size=40))
def test_char_round_trip(text: str) -> None:
    tok = char_tokenizer(ALPHABET, bos="<bos>", eos="<eos>")
    ids = tok.encode(text)
    assert ids[0] == tok.bos_id and len(ids) == len(text) + 1
    assert tok.decode(ids) == text


def test_char_tokenizer_json(tmp_path: Path) -> None:
    tok = char_tokenizer(ALPHABET, eos="<eos>")
    assert tok.encode("ab") == [0, 1] and tok.eos_id == len(ALPHABET)
    tok.save(tmp_path / "tokenizer.json")
    json.loads((tmp_path / "tokenizer.json").read_text())  # valid JSON
    again = Tokenizer.from_file(tmp_path / "tokenizer.json")
    assert again.encode("hag.") == tok.encode("hag.")
    with pytest.raises(FormatError, match="cannot encode"):
        tok.encode("xyz")
    assert char_tokenizer("ab", unk="?").encode("azb") == [0, 2, 1]
    with pytest.raises(FormatError):
        char_tokenizer(["ab"])


_BYTE_CHARS = [bytes_to_unicode()[i] for i in range(256)]  # slow in gguf: compute once


def _gpt2_metadata() -> dict[str, object]:
    byte_chars = _BYTE_CHARS
    tokens = [*byte_chars, "Ġt", "he", "Ġthe", "Ġh", "<|endoftext|>"]
    return {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.merges": ["Ġ t", "h e", "Ġt he", "Ġ h"],
        "tokenizer.ggml.token_type": [1] * (len(tokens) - 1) + [3],
        "tokenizer.ggml.bos_token_id": len(tokens) - 1,
        "tokenizer.ggml.eos_token_id": len(tokens) - 1,
        "tokenizer.chat_template": "{{ messages }}",
    }


_GPT2 = Tokenizer.from_gguf_metadata(_gpt2_metadata())


@given(st.text(max_size=30))
def test_gguf_bpe_round_trip(text: str) -> None:
    tok = _GPT2
    assert tok.decode(tok.encode(text)) == text


def test_gguf_bpe_merges_and_specials(tmp_path: Path) -> None:
    metadata = _gpt2_metadata()
    path = tmp_path / "t.gguf"
    write_gguf(path, metadata, {}, arch="gpt2")
    tok = Tokenizer.from_gguf_metadata(read_gguf(path).metadata)
    assert not tok.add_bos  # gpt2 vocabularies default to no BOS
    assert tok.chat_template == "{{ messages }}"
    ids = tok.encode("the the<|endoftext|>")
    assert [tok.id_to_token(i) for i in ids] == ["t", "he", "Ġthe", "<|endoftext|>"]
    assert tok.decode(ids) == "the the"
    assert tok.decode(ids, skip_special_tokens=False) == "the the<|endoftext|>"


def _llama_metadata(**extra: object) -> dict[str, object]:
    words = ["▁", "h", "e", "l", "o", "▁h", "ll", "▁he", "llo", "▁hello", "w", "r", "d"]
    tokens = ["<unk>", "<s>", "</s>", *[f"<0x{i:02X}>" for i in range(256)], *words]
    return {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": [0.0] * 259 + [-float(i) for i in range(len(words))],
        "tokenizer.ggml.token_type": [2, 3, 3] + [6] * 256 + [1] * len(words),
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0,
        **extra,
    }


def test_gguf_spm_with_byte_fallback() -> None:
    tok = Tokenizer.from_gguf_metadata(_llama_metadata())
    assert tok.add_bos and tok.bos_id == 1 and tok.eos_ids == (2,)
    ids = tok.encode("hello world\n€")
    pieces = [tok.id_to_token(i) for i in ids]
    assert pieces[:3] == ["<s>", "▁hello", "▁"]
    assert "<0x0A>" in pieces and "<0xE2>" in pieces  # bytes of "\n" and "€"
    assert tok.decode(ids) == "hello world\n€"
    assert tok.encode("hello", add_special_tokens=False)[0] != 1
    no_bos = Tokenizer.from_gguf_metadata(_llama_metadata(**{
        "tokenizer.ggml.add_bos_token": False}))
    assert not no_bos.add_bos and no_bos.encode("hello")[0] != 1


def test_gguf_wordpiece() -> None:
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "▁hello", "▁world", "s", "▁!"]
    tok = Tokenizer.from_gguf_metadata({
        "tokenizer.ggml.model": "bert", "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": [3, 2, 3, 3, 1, 1, 1, 1],
        "tokenizer.ggml.bos_token_id": 2, "tokenizer.ggml.eos_token_id": 3,
        "tokenizer.ggml.unknown_token_id": 1, "tokenizer.ggml.padding_token_id": 0})
    assert tok.encode("Hello worlds!") == [2, 4, 5, 6, 7, 3]
    assert tok.pad_id == 0


def test_gguf_tokenizer_errors() -> None:
    with pytest.raises(FormatError, match="tokens"):
        Tokenizer.from_gguf_metadata({"tokenizer.ggml.model": "llama"})
    with pytest.raises(FormatError, match="unsupported"):
        Tokenizer.from_gguf_metadata({"tokenizer.ggml.model": "rwkv",
                                      "tokenizer.ggml.tokens": ["a"]})
    with pytest.raises(FormatError, match="not a token id"):
        Tokenizer.from_gguf_metadata({**_gpt2_metadata(), "tokenizer.ggml.bos_token_id": 10**6})


def test_hf_directory_tokenizer(tmp_path: Path) -> None:
    Tokenizer.from_gguf_metadata(_llama_metadata()).save(tmp_path / "tokenizer.json")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<s>", "eos_token": {"content": "</s>"}, "add_bos_token": True,
        "chat_template": [{"name": "default", "template": "T"}]}))
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 0]}))
    tok = Tokenizer.from_hf_dir(tmp_path)
    assert (tok.bos_id, tok.eos_id, tok.eos_ids, tok.add_bos) == (1, 2, (2, 0), True)
    assert tok.chat_template == "T"
    assert tok.decode(tok.encode("hello")) == "hello"
    (tmp_path / "tokenizer.json").write_text("{bad")
    with pytest.raises(FormatError, match="tokenizer.json"):
        Tokenizer.from_hf_dir(tmp_path)
