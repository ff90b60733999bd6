"""``omnitensor inspect`` on GGUF, safetensors and Hugging Face directories."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from omnitensor.cli.main import main
from omnitensor.io.gguf import write_gguf
from omnitensor.io.safetensors import write_safetensors
from omnitensor.io.tokenizer import char_tokenizer
from omnitensor.io.weights import QuantizedArray


def _gguf(tmp_path: Path) -> Path:
    path = tmp_path / "m.gguf"
    tokens = ["<s>", "a", "b"]
    write_gguf(path, {"llama.context_length": 16, "tokenizer.ggml.model": "llama",
                      "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.scores": [0.0, -1.0, -2.0],
                      "tokenizer.ggml.token_type": [3, 1, 1], "tokenizer.ggml.bos_token_id": 0},
               {"token_embd.weight": np.ones((3, 32), np.float32),
                "blk.0.attn_q.weight": QuantizedArray.quantize(np.ones((32, 32)), "q8_0")},
               arch="llama")
    return path


def test_inspect_gguf(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _gguf(tmp_path)
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "format:       gguf v3" in out and "architecture: llama" in out
    assert "blk.0.attn_q.weight" in out and "q8_0" in out and "[32, 32]" in out
    assert "tokenizer: BPE, 3 tokens, bos=0" in out
    assert "llama.context_length = 16" in out


def test_inspect_json_and_stats(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _gguf(tmp_path)
    assert main(["inspect", "--json", "--stats", str(path)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["tensor_count"] == 2 and result["types"] == {"f32": 1, "q8_0": 1}
    (embd,) = [t for t in result["tensors"] if t["name"] == "token_embd.weight"]
    assert embd["shape"] == [3, 32] and embd["stats"]["mean"] == 1.0


def test_inspect_hf_dir_and_safetensors(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 4}))
    write_safetensors(tmp_path / "model.safetensors", {"wte.weight": np.zeros((5, 4), np.float32)})
    char_tokenizer("abc").save(tmp_path / "tokenizer.json")
    assert main(["inspect", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "huggingface" in out and "gpt2" in out and "wte.weight" in out
    assert "tokenizer: WordLevel, 3 tokens" in out
    assert main(["inspect", str(tmp_path / "model.safetensors")]) == 0
    assert "format:       safetensors" in capsys.readouterr().out


def test_inspect_unusable_tokenizer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.gguf"
    write_gguf(path, {"tokenizer.ggml.tokens": ["a"]}, {"t": np.ones(4, np.float32)}, arch="llama")
    assert main(["inspect", str(path)]) == 0
    assert "tokenizer: unavailable (gguf tokenizer: unsupported" in capsys.readouterr().out


def test_inspect_malformed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00")
    assert main(["inspect", str(bad)]) == 1
    err = capsys.readouterr().err
    assert str(bad) in err and "truncated" in err
    assert main(["inspect", str(tmp_path / "missing.gguf")]) == 1
