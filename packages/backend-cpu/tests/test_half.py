"""16-bit float weights (``f16``, ``bf16``) kept 16-bit on cpu: widening, products, models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import omnitensor as ot
from omnitensor.io.safetensors import write_safetensors
from omnitensor.ir import quant_blocks
from omnitensor.ir.types import QTensorType
from omnitensor.models import Checkpoint, ModelBuilder, export_gguf
from omnitensor_backend_cpu import half

NUMPY = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}


# the hardware conversion where the CPU has one, and the integer arithmetic used elsewhere
HARDWARE = [False, True] if half.HALF_CONVERSION else [False]


@pytest.mark.parametrize("hardware", HARDWARE)
@pytest.mark.parametrize("fmt", ["f16", "bf16"])
def test_widening_is_exact_for_every_bit_pattern(fmt: str, hardware: bool) -> None:
    bits = np.arange(1 << 16, dtype=np.uint16).reshape(256, 256)
    want = bits.view(NUMPY[fmt]).astype(np.float32)
    got = half.widen(bits, fmt, hardware=hardware)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got.view(np.uint32)[~nan], want.view(np.uint32)[~nan])


@pytest.mark.parametrize("hardware", HARDWARE)
@pytest.mark.parametrize("fmt", ["f16", "bf16"])
@pytest.mark.parametrize("m", [1, 3, 17])  # row reductions (decode) and widened tiles (prefill)
def test_qmatmul_matches_the_reference(fmt: str, m: int, hardware: bool) -> None:
    rng = np.random.default_rng(m)
    w = rng.standard_normal((300, 192)).astype(np.float32)
    w[4, :3] = [0.0, 3e-7, -6e-8]  # zero and subnormal halves take the exact pass
    blocks = quant_blocks.quantize(w, fmt)
    blocks.flags.writeable = False
    x = rng.standard_normal((m, 192)).astype(np.float32)
    out = np.empty((m, 300), np.float32)
    half.qmatmul(x, blocks, fmt, out, hardware=hardware)
    want = x.astype(np.float64) @ quant_blocks.dequantize(blocks, fmt).T.astype(np.float64)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    assert half.row_flags(blocks, fmt) is half.row_flags(blocks, fmt)  # computed once


def _weights(rng: np.random.Generator, hidden: int = 64, layers: int = 2, ffn: int = 128,
             vocab: int = 96) -> dict[str, Any]:
    def mat(*shape: int) -> Any:
        return rng.standard_normal(shape, dtype=np.float32) * 0.2

    weights = {"token_embd.weight": mat(vocab, hidden),
               "output_norm.weight": 1 + mat(hidden) * 0.1}
    for i in range(layers):
        weights |= {f"blk.{i}.attn_norm.weight": 1 + mat(hidden) * 0.1,
                    f"blk.{i}.ffn_norm.weight": 1 + mat(hidden) * 0.1,
                    f"blk.{i}.attn_q.weight": mat(hidden, hidden),
                    f"blk.{i}.attn_k.weight": mat(hidden // 2, hidden),
                    f"blk.{i}.attn_v.weight": mat(hidden // 2, hidden),
                    f"blk.{i}.attn_output.weight": mat(hidden, hidden),
                    f"blk.{i}.ffn_gate.weight": mat(ffn, hidden),
                    f"blk.{i}.ffn_up.weight": mat(ffn, hidden),
                    f"blk.{i}.ffn_down.weight": mat(hidden, ffn)}
    return weights


def _checkpoint(weights: dict[str, Any]) -> Checkpoint:
    hparams = dict(arch="llama", context_length=64, embedding_length=64, block_count=2,
                   feed_forward_length=128, head_count=4, head_count_kv=2, vocab_size=96,
                   rope_freq_base=1e4, norm_epsilon=1e-5)
    return Checkpoint("llama", hparams, weights)


def _logits(model: Any, ids: list[int]) -> Any:
    cap = 16
    mask = np.ones((1, 1, 1, cap), np.bool_)
    logits, _ = model.step(np.array([ids]), np.arange(len(ids))[None], mask, 0,
                           model.new_cache(1, cap), np.array([len(ids) - 1]))
    return logits.numpy()


_TOKENIZER = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2",
              "tokenizer.ggml.tokens": [f"<t{i}>" for i in range(95)] + ["<t0><t0>"],
              "tokenizer.ggml.token_type": [1] * 96, "tokenizer.ggml.merges": ["<t0> <t0>"]}


@pytest.mark.parametrize("fmt", ["f16", "bf16"])
def test_16_bit_models_stay_16_bit_and_match_the_reference(fmt: str, tmp_path: Path) -> None:
    weights = _weights(np.random.default_rng(0))
    gguf = export_gguf(_checkpoint(weights), tmp_path / f"m-{fmt}.gguf", dtype=fmt,
                       tokenizer_metadata=_TOKENIZER)
    hf = tmp_path / "hf"
    hf.mkdir()
    names = {"token_embd.weight": "model.embed_tokens.weight",
             "output_norm.weight": "model.norm.weight"}
    parts = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
             "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
             "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
             "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}

    def hf_name(name: str) -> str:
        if name in names:
            return names[name]
        _, layer, part, _ = name.split(".")
        return f"model.layers.{layer}.{parts[part]}.weight"

    write_safetensors(hf / "model.safetensors",
                      {hf_name(n): w.astype(NUMPY[fmt]) for n, w in weights.items()})
    (hf / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "vocab_size": 96,
        "tie_word_embeddings": True}))
    ids = [5, 17, 3, 88, 41]
    for source in (gguf, hf):
        builder = ModelBuilder().with_spec("llama")
        loaded = builder.with_gguf(source) if source == gguf else builder.with_safetensors(
            source)
        model = loaded.build("cpu")
        wtype = model.weights["blk.0.ffn_gate_up.weight"]._node.types[0]
        assert wtype == QTensorType(fmt, (256, 64))  # gate and up joined, kept 16-bit
        table = model.weights["token_embd.weight"]._node.types[0]
        assert table == QTensorType(fmt, (96, 64))
        # the reference: the same weights widened to float32 at load (BLAS/GEMV products)
        reference = loaded.build("cpu", quant_policy="dequantize")
        assert reference.weights["blk.0.ffn_gate_up.weight"].dtype == ot.float32
        want = _logits(reference, ids)
        np.testing.assert_allclose(_logits(model, ids), want, rtol=1e-4,
                                   atol=1e-4 * np.abs(want).max())
