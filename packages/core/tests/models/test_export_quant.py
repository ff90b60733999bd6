"""`export_gguf` writes every common ggml format and llama.cpp's Q4_K_M/Q5_K_M mixes.

The blocks written are omnitensor's quantizers' (byte-exact with ggml's, see
tests/ir/test_quant_codecs.py), the per-tensor types of a mix follow llama.cpp's quantize tool,
and the exported file loads back quantized and generates.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from omnitensor.io.gguf import read_gguf
from omnitensor.io.gguf_mix import FILE_TYPES, tensor_types
from omnitensor.io.names import HParams, to_gguf_tensor
from omnitensor.io.weights import QuantizedArray
from omnitensor.models import Checkpoint, export_gguf
from omnitensor.runtime import load_model

PLAIN = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k",
         "iq4_nl", "iq4_xs"]


def _llama(make_llama: Any, layers: int = 2) -> Checkpoint:
    checkpoint: Checkpoint = make_llama(hidden=256, ffn=512, layers=layers, heads=4, kv_heads=2,
                                        eos=False)
    return checkpoint


@pytest.mark.parametrize("dtype", PLAIN)
def test_plain_types(tmp_path: Path, make_llama: Any, dtype: str) -> None:
    checkpoint = _llama(make_llama)
    path = export_gguf(checkpoint, tmp_path / f"m-{dtype}.gguf", dtype=dtype)
    file = read_gguf(path)
    assert file.metadata["general.file_type"] == FILE_TYPES[dtype]
    fields = HParams.__dataclass_fields__
    hp = HParams(**{k: v for k, v in checkpoint.hparams.items() if k in fields})
    for name, value in checkpoint.weights.items():
        info = file.tensor_info(name)
        if value.ndim == 1:
            assert info.type == "f32"
            continue
        assert info.type == dtype, name
        loaded = file.load(name)
        assert isinstance(loaded, QuantizedArray)
        want = QuantizedArray.quantize(to_gguf_tensor("llama", name, value, hp), dtype)
        np.testing.assert_array_equal(loaded.blocks, want.blocks)
    model = load_model(path, "ref")
    assert len(model.generate("abc", max_new_tokens=2).token_ids) == 2


def _more_bits(layer: int, layers: int) -> bool:
    return layer < layers // 8 or layer >= 7 * layers // 8 or (layer - layers // 8) % 3 == 2


@pytest.mark.parametrize("mix,base", [("q4_k_m", "q4_k"), ("q5_k_m", "q5_k")])
def test_k_m_mixes_follow_llama_cpp(tmp_path: Path, make_llama: Any, mix: str,
                                    base: str) -> None:
    layers = 8
    checkpoint = _llama(make_llama, layers)
    path = export_gguf(checkpoint, tmp_path / f"m-{mix}.gguf", dtype=mix)
    file = read_gguf(path)
    assert file.metadata["general.file_type"] == FILE_TYPES[mix]
    bumped = {i for i in range(layers) if _more_bits(i, layers)}
    assert bumped == {0, 3, 6, 7}
    for name in file.tensor_names:
        got = file.tensor_info(name).type
        if name == "output.weight":
            assert got == "q6_k"
        elif name.endswith(("attn_v.weight", "ffn_down.weight")):
            assert got == ("q6_k" if int(name.split(".")[1]) in bumped else base), name
        elif len(file.tensor_info(name).shape) == 1:
            assert got == "f32"
        else:
            assert got == base, name
    assert len(load_model(path, "ref").generate("ab", max_new_tokens=2).token_ids) == 2


def test_rows_that_do_not_fit_fall_back_like_llama_cpp() -> None:
    shapes = {"blk.0.ffn_up.weight": (64, 96), "blk.0.attn_v.weight": (64, 64),
              "blk.0.ffn_down.weight": (64, 256), "token_embd.weight": (10, 48),
              "blk.0.attn_norm.weight": (64,)}
    assert tensor_types(shapes, "q4_k") == {
        "blk.0.ffn_up.weight": "q5_0", "blk.0.attn_v.weight": "q5_0",
        "blk.0.ffn_down.weight": "q4_k", "token_embd.weight": "f16",
        "blk.0.attn_norm.weight": None}
    assert tensor_types(shapes, "q3_k")["blk.0.ffn_up.weight"] == "iq4_nl"
    assert tensor_types(shapes, "q6_k")["blk.0.ffn_up.weight"] == "q8_0"
    assert tensor_types(shapes, "q5_k")["blk.0.ffn_up.weight"] == "q5_1"


def test_unsupported_longrope_gguf_is_an_error(tmp_path: Path, make_llama: Any) -> None:
    from omnitensor.errors import FormatError

    checkpoint = _llama(make_llama)
    checkpoint.weights["rope_factors_long.weight"] = np.ones(8, np.float32)
    path = export_gguf(checkpoint, tmp_path / "longrope.gguf")
    with pytest.raises(FormatError, match="LongRoPE"):
        load_model(path, "ref")
