"""Name maps and the llama rotary q/k row permutation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from omnitensor.errors import FormatError, ShapeError
from omnitensor.io.names import (
    HParams,
    from_gguf_tensor,
    from_hf_tensor,
    gguf_metadata_from_hparams,
    hf_name_map,
    hf_to_gguf_name,
    hparams_from_gguf,
    hparams_from_hf_config,
    permute_qk,
    to_gguf_tensor,
    unpermute_qk,
)
from omnitensor.io.weights import QuantizedArray


@given(heads=st.integers(1, 4), half=st.integers(1, 4), cols=st.integers(0, 3))
def test_permute_inverse(heads: int, half: int, cols: int) -> None:
    rows = heads * half * 2
    shape = (rows, cols) if cols else (rows,)
    w = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    p = permute_qk(w, heads)
    np.testing.assert_array_equal(unpermute_qk(p, heads), w)
    np.testing.assert_array_equal(permute_qk(unpermute_qk(w, heads), heads), w)
    if half > 1:
        assert not np.array_equal(p, w)


def test_permute_matches_llama_cpp_converter() -> None:
    # convert_hf_to_gguf.LlamaModel.permute, written out.
    def reference(w: np.ndarray, n_head: int) -> np.ndarray:
        return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
                .swapaxes(1, 2).reshape(w.shape))

    w = np.random.default_rng(0).standard_normal((24, 5))
    np.testing.assert_array_equal(permute_qk(w, 3), reference(w, 3))
    # per head: rows [x0, x1, y0, y1] -> [x0, y0, x1, y1]
    np.testing.assert_array_equal(permute_qk(np.arange(4.0), 1), [0.0, 2.0, 1.0, 3.0])
    with pytest.raises(ShapeError):
        permute_qk(np.zeros((6, 2)), 2)


def test_llama_qk_round_trip_through_gguf_layout() -> None:
    hp = HParams("llama", 32, 64, 1, 128, head_count=4, head_count_kv=2)
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((64, 64)), rng.standard_normal((32, 64))
    for name, w in (("blk.0.attn_q.weight", q), ("blk.0.attn_k.weight", k)):
        stored = to_gguf_tensor("llama", name, w, hp)
        assert not np.array_equal(stored, w)
        np.testing.assert_array_equal(from_gguf_tensor("llama", name, stored, hp), w)
        # qwen2 is not permuted by llama.cpp
        assert from_gguf_tensor("qwen2", name, w, hp) is w
    # quantized rows move as whole rows of blocks
    qa = QuantizedArray.quantize(k, "q8_0")
    stored_q = to_gguf_tensor("llama", "blk.0.attn_k.weight", qa, hp)
    assert isinstance(stored_q, QuantizedArray)
    expected = to_gguf_tensor("llama", "blk.0.attn_k.weight", qa.dequantize(), hp)
    assert isinstance(expected, np.ndarray)
    np.testing.assert_array_equal(stored_q.dequantize(), expected)
    back = from_gguf_tensor("llama", "blk.0.attn_k.weight", stored_q, hp)
    assert isinstance(back, QuantizedArray)
    np.testing.assert_array_equal(back.blocks, qa.blocks)


@pytest.mark.parametrize(("arch", "hf", "gguf"), [
    ("llama", "model.embed_tokens.weight", "token_embd.weight"),
    ("llama", "model.layers.3.self_attn.q_proj.weight", "blk.3.attn_q.weight"),
    ("qwen2", "model.layers.0.self_attn.k_proj.bias", "blk.0.attn_k.bias"),
    ("llama", "model.layers.0.mlp.gate_proj.weight", "blk.0.ffn_gate.weight"),
    ("llama", "model.layers.0.post_attention_layernorm.weight", "blk.0.ffn_norm.weight"),
    ("llama", "model.norm.weight", "output_norm.weight"),
    ("llama", "lm_head.weight", "output.weight"),
    ("llama", "model.layers.0.self_attn.rotary_emb.inv_freq", None),
    ("gpt2", "transformer.h.1.attn.c_attn.weight", "blk.1.attn_qkv.weight"),
    ("gpt2", "h.1.mlp.c_proj.bias", "blk.1.ffn_down.bias"),
    ("gpt2", "transformer.wpe.weight", "position_embd.weight"),
    ("gpt2", "h.0.attn.bias", None),
    ("bert", "embeddings.LayerNorm.weight", "token_embd_norm.weight"),
    ("bert", "bert.encoder.layer.2.attention.output.LayerNorm.bias",
     "blk.2.attn_output_norm.bias"),
    ("bert", "encoder.layer.0.output.dense.weight", "blk.0.ffn_down.weight"),
])
def test_hf_to_gguf_names(arch: str, hf: str, gguf: str | None) -> None:
    assert hf_to_gguf_name(arch, hf) == gguf


def test_name_map_and_errors() -> None:
    names = ["model.embed_tokens.weight", "model.norm.weight", "model.rotary_emb.inv_freq"]
    assert hf_name_map("llama", names) == {"token_embd.weight": "model.embed_tokens.weight",
                                           "output_norm.weight": "model.norm.weight"}
    with pytest.raises(FormatError, match="no GGUF name"):
        hf_to_gguf_name("llama", "model.weird.weight")
    with pytest.raises(FormatError, match="unknown architecture"):
        hf_to_gguf_name("mamba", "x")


def test_gpt2_conv1d_transposed() -> None:
    w = np.arange(12.0).reshape(3, 4)  # (in, out)
    np.testing.assert_array_equal(from_hf_tensor("gpt2", "blk.0.attn_qkv.weight", w), w.T)
    assert from_hf_tensor("gpt2", "token_embd.weight", w) is w


def test_hparams_both_sources_agree() -> None:
    config = {"model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
              "max_position_embeddings": 256, "rope_theta": 1e6, "rms_norm_eps": 1e-6,
              "vocab_size": 100, "tie_word_embeddings": True}
    hp = hparams_from_hf_config(config)
    assert hp.arch == "qwen2" and hp.head_dim == 16 and hp.head_count_kv == 2
    metadata = gguf_metadata_from_hparams(hp)
    again = hparams_from_gguf(metadata, ["token_embd.weight"])
    assert again == hp
    gpt2 = hparams_from_hf_config({"model_type": "gpt2", "n_embd": 8, "n_head": 2, "n_layer": 1,
                                   "n_positions": 16, "vocab_size": 5})
    assert gpt2.feed_forward_length == 32 and gpt2.tie_embeddings
    with pytest.raises(FormatError, match="missing"):
        hparams_from_hf_config({"model_type": "llama"})
