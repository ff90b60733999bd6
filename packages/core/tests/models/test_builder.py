"""The typestate builder stage by stage, and its sources (checkpoint, GGUF, HF directory)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from omnitensor.errors import FormatError
from omnitensor.io.gguf import write_gguf
from omnitensor.io.names import HParams, gguf_metadata_from_hparams, to_gguf_tensor
from omnitensor.io.safetensors import write_safetensors
from omnitensor.io.weights import QuantizedArray
from omnitensor.models import (
    CompiledModel,
    ModelBuilder,
    ModelSpec,
    SpecBuilder,
    WeightsBuilder,
    builtin_spec,
    open_checkpoint,
)
from omnitensor.models.fusion import fuse_projections


def _logits(model: CompiledModel, ids: list[int]) -> np.ndarray:
    t = len(ids)
    cache = model.new_cache(1, 16)
    logits, _ = model.step(np.array([ids]), np.arange(t)[None], np.ones((1, 1, 1, 16), bool), 0,
                           cache, np.array([t - 1]))
    return logits.numpy()


def test_stages_expose_only_the_next_step(make_llama: Any) -> None:
    first = ModelBuilder()
    second = first.with_spec("llama")
    assert isinstance(second, SpecBuilder)
    third = second.with_checkpoint(make_llama())
    assert isinstance(third, WeightsBuilder)
    model = third.build("ref")
    assert isinstance(model, CompiledModel)
    assert model.backend.name == "ref" and model.arch == "llama"
    # wrong orders fail at runtime too (and under mypy: tests/typing)
    assert not hasattr(first, "with_gguf") and not hasattr(first, "build")
    assert not hasattr(second, "build") and not hasattr(third, "with_spec")


def test_spec_forms_are_equivalent(make_llama: Any, tmp_path: Path) -> None:
    spec = builtin_spec("llama")
    path = tmp_path / "llama.json"
    path.write_text(spec.to_json())
    ids = [29, 3, 1, 4]
    results = [_logits(ModelBuilder().with_spec(form).with_checkpoint(make_llama()).build("ref"),
                       ids) for form in (spec, "llama", spec.to_json(), path, str(path))]
    for other in results[1:]:
        np.testing.assert_array_equal(other, results[0])


def test_unknown_builtin_and_missing_file() -> None:
    with pytest.raises(FormatError, match="no spec for architecture 'nonesuch'"):
        ModelBuilder().with_spec("nonesuch")
    with pytest.raises(FormatError, match="cannot read the model spec"):
        ModelSpec.from_json(Path("/nonexistent/spec.json"))


def test_bad_quant_policy(make_llama: Any) -> None:
    builder = ModelBuilder().with_spec("llama").with_checkpoint(make_llama())
    with pytest.raises(FormatError, match="quant_policy 'fast'"):
        builder.build("ref", quant_policy="fast")


def test_hparams_checkpoint_overrides_spec(make_llama: Any) -> None:
    model = ModelBuilder().with_spec("llama").with_checkpoint(make_llama(context=32)).build("ref")
    assert model.context_length == 32
    assert model.hparams["rope_freq_base"] == 10000.0
    # q/k/v and gate/up are joined at load (`models.fusion`); every other weight keeps its name
    expected = set(fuse_projections(make_llama().weights, builtin_spec("llama"), model.hparams))
    assert {"blk.0.attn_qkv.weight", "blk.0.ffn_gate_up.weight"} <= expected
    assert set(model.parameters()) == expected


def test_with_gguf_and_with_safetensors_agree(make_llama: Any, tmp_path: Path) -> None:
    checkpoint = make_llama()
    hp = HParams(**checkpoint.hparams)
    metadata = {**gguf_metadata_from_hparams(hp),
                "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a", "b"],
                "tokenizer.ggml.merges": ["a b"]}
    metadata["tokenizer.ggml.tokens"] = ["a", "b", "ab"]
    gguf_path = tmp_path / "m.gguf"
    write_gguf(gguf_path, metadata, {n: to_gguf_tensor("llama", n, w, hp)
                                     for n, w in checkpoint.weights.items()}, arch="llama")
    from_gguf = ModelBuilder().with_spec("llama").with_gguf(gguf_path).build("ref")
    assert from_gguf.tokenizer is not None and from_gguf.tokenizer.encode("ab") == [2]

    hf = tmp_path / "hf"
    hf.mkdir()
    hf_names = {"token_embd.weight": "model.embed_tokens.weight",
                "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}
    parts = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj",
             "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
             "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
             "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}

    def hf_name(name: str) -> str:
        if name in hf_names:
            return hf_names[name]
        _, layer, part, _ = name.split(".")
        return f"model.layers.{layer}.{parts[part]}.weight"

    write_safetensors(hf / "model.safetensors", {hf_name(n): w
                                                 for n, w in checkpoint.weights.items()})
    (hf / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 16, "intermediate_size": 32,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "vocab_size": 31}))
    checkpoint.tokenizer.save(hf / "tokenizer.json")
    progress: list[tuple[str, int, int]] = []
    from_hf = ModelBuilder().with_spec("llama").with_safetensors(
        hf, progress=lambda *a: progress.append(a)).build("ref")
    assert progress[-1][1] == progress[-1][2] == len(checkpoint.weights)
    direct = ModelBuilder().with_spec("llama").with_checkpoint(checkpoint).build("ref")
    ids = [29, 0, 1, 2]
    np.testing.assert_allclose(_logits(from_gguf, ids), _logits(direct, ids), atol=1e-5)
    np.testing.assert_allclose(_logits(from_hf, ids), _logits(direct, ids), atol=1e-5)
    assert open_checkpoint(gguf_path).arch == open_checkpoint(hf).arch == "llama"


def test_gguf_llama_keeps_q_and_k_as_stored_and_rotates_pairs(make_llama: Any,
                                                              tmp_path: Path) -> None:
    import mmap

    from omnitensor.io.gguf import read_gguf
    from omnitensor.models.checkpoint import from_gguf
    from omnitensor.models.export import export_gguf

    checkpoint = make_llama()
    hp = HParams(**checkpoint.hparams)
    stored = {n: to_gguf_tensor("llama", n, w, hp) for n, w in checkpoint.weights.items()}
    path = tmp_path / "m.gguf"
    write_gguf(path, gguf_metadata_from_hparams(hp), stored, arch="llama")

    kept = from_gguf(path)
    assert kept.hparams["rope_interleaved"] is True
    q = kept.weights["blk.0.attn_q.weight"]
    np.testing.assert_array_equal(q, stored["blk.0.attn_q.weight"])
    base = q
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    assert isinstance(base, mmap.mmap)  # a view of the file, not a copy

    reordered = from_gguf(path, rotary_pairs=False)
    assert "rope_interleaved" not in reordered.hparams
    for name in ("blk.0.attn_q.weight", "blk.1.attn_k.weight"):
        assert not np.array_equal(kept.weights[name], checkpoint.weights[name])
        np.testing.assert_array_equal(reordered.weights[name], checkpoint.weights[name])

    ids = [29, 0, 1, 2, 5, 7]
    want = _logits(ModelBuilder().with_spec("llama").with_checkpoint(checkpoint).build("ref"), ids)
    for loaded in (kept, reordered):
        got = _logits(ModelBuilder().with_spec("llama").with_checkpoint(loaded).build("ref"), ids)
        np.testing.assert_allclose(got, want, atol=1e-5)

    # written back, the rows are the file's again (not permuted a second time)
    export_gguf(kept, tmp_path / "again.gguf")
    again = read_gguf(tmp_path / "again.gguf")
    for name in ("blk.0.attn_q.weight", "blk.0.attn_k.weight"):
        np.testing.assert_array_equal(again.load(name), stored[name])
    kept.arch = kept.hparams["arch"] = "qwen2"  # whose GGUF rotates halves
    with pytest.raises(FormatError, match="rope_interleaved"):
        export_gguf(kept, tmp_path / "wrong.gguf")


def test_open_checkpoint_errors(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="no such file or directory"):
        open_checkpoint(tmp_path / "missing")
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"NOPE" + bytes(16))
    with pytest.raises(FormatError, match="not a GGUF file") as info:
        open_checkpoint(junk)
    assert info.value.path == str(junk)


@pytest.mark.parametrize("quant_policy", ["auto", "dequantize"])
def test_quantized_weights_run(make_llama: Any, quant_policy: str) -> None:
    dense = make_llama(hidden=32, ffn=64)
    quantized = make_llama(hidden=32, ffn=64)
    for name, w in quantized.weights.items():
        if w.ndim == 2:
            quantized.weights[name] = QuantizedArray.quantize(w, "q8_0")
    ids = [29, 5, 6, 7]
    want = _logits(ModelBuilder().with_spec("llama").with_checkpoint(dense).build("ref"), ids)
    got = _logits(ModelBuilder().with_spec("llama").with_checkpoint(quantized).build(
        "ref", quant_policy=quant_policy), ids)
    assert np.abs(got - want).max() < 0.05 * np.abs(want).max()
