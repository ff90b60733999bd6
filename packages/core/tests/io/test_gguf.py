"""GGUF reader/writer: round trips, llama.cpp-style files, malformed files."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gguf
import ml_dtypes
import numpy as np
import pytest

from omnitensor.backend.host_memory import immutable
from omnitensor.errors import FormatError
from omnitensor.io.gguf import read_gguf, write_gguf
from omnitensor.io.weights import QuantizedArray, WeightFile
from omnitensor.ir import quant_blocks

RNG = np.random.default_rng(0)


def _tensors() -> dict[str, np.ndarray | QuantizedArray]:
    return {
        "f32": RNG.standard_normal((4, 64)).astype(np.float32),
        "f16": RNG.standard_normal((3, 5)).astype(np.float16),
        "bf16": RNG.standard_normal((2, 3, 8)).astype(ml_dtypes.bfloat16),
        "q8_0": QuantizedArray.quantize(RNG.standard_normal((4, 64)), "q8_0"),
        "q4_0": QuantizedArray.quantize(RNG.standard_normal((2, 3, 32)), "q4_0"),
        "q4_k": QuantizedArray.quantize(RNG.standard_normal((2, 256)), "q4_k"),
        "q6_k": QuantizedArray.quantize(RNG.standard_normal((3, 512)), "q6_k"),
        "vec": np.arange(7, dtype=np.float32),
        "ids": np.arange(6, dtype=np.int32).reshape(2, 3),
    }


METADATA = {
    "llama.context_length": 128,
    "llama.embedding_length": 64,
    "llama.rope.freq_base": 10000.0,
    "tokenizer.ggml.tokens": ["a", "b", "c"],
    "tokenizer.ggml.scores": [0.5, 1.0, -2.0],
    "tokenizer.ggml.token_type": [1, 1, 3],
    "tokenizer.ggml.add_bos_token": True,
    "general.name": "tiny",
    "custom.big": 2**40,
    "custom.neg": -3,
}


def test_round_trip_every_type(tmp_path: Path) -> None:
    tensors = _tensors()
    path = tmp_path / "m.gguf"
    write_gguf(path, METADATA, tensors, arch="llama")
    file = read_gguf(path)
    assert isinstance(file, WeightFile)
    assert file.architecture == "llama"
    assert file.tensor_names == tuple(tensors)
    for key, value in METADATA.items():
        assert file.metadata[key] == value
    assert file.metadata_types["llama.context_length"] == "uint32"
    assert file.metadata_types["tokenizer.ggml.token_type"] == "array[int32]"
    assert file.metadata_types["custom.big"] == "int64"
    for name, expected in tensors.items():
        info = file.tensor_info(name)
        loaded = file.load(name)
        if isinstance(expected, QuantizedArray):
            assert info.type == name and info.qtype is not None
            assert isinstance(loaded, QuantizedArray)
            assert loaded.format == expected.format and loaded.shape == expected.shape
            np.testing.assert_array_equal(loaded.blocks, expected.blocks)
            np.testing.assert_array_equal(file.load(name, dequantize=True), expected.dequantize())
        else:
            assert info.shape == expected.shape
            assert isinstance(loaded, np.ndarray) and loaded.dtype == expected.dtype
            np.testing.assert_array_equal(loaded, expected)
            assert loaded.flags.writeable  # a copy, not a view of a map
        mapped = file.load(name, mapped=True)  # a view of the file mapped read-only
        if isinstance(expected, QuantizedArray):
            assert isinstance(mapped, QuantizedArray) and immutable(mapped.blocks)
            np.testing.assert_array_equal(mapped.blocks, expected.blocks)
        else:
            assert isinstance(mapped, np.ndarray) and immutable(mapped)
            assert mapped.dtype == expected.dtype
            np.testing.assert_array_equal(mapped, expected)
    everything = file.load_all()
    assert list(everything) == list(tensors)


def test_agrees_with_gguf_reader(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    write_gguf(path, METADATA, _tensors(), arch="llama")
    ours = read_gguf(path)
    theirs = gguf.GGUFReader(path)
    for tensor in theirs.tensors:
        info = ours.tensor_info(tensor.name)
        assert info.shape == tuple(reversed(tensor.shape.tolist()))
        assert info.type == tensor.tensor_type.name.lower()
        assert info.offset == tensor.data_offset and info.nbytes == tensor.n_bytes
    assert set(ours.metadata) == {k for k in theirs.fields if not k.startswith("GGUF.")}


def test_file_written_like_llama_cpp(tmp_path: Path) -> None:
    """GGUFWriter used directly (as convert_hf_to_gguf does): numpy shapes reversed into ne."""
    path = tmp_path / "ll.gguf"
    w = gguf.GGUFWriter(path, "llama")
    w.add_context_length(32)
    w.add_block_count(1)
    w.add_head_count(2)
    w.add_rope_freq_base(1e6)
    w.add_tokenizer_model("llama")
    w.add_bos_token_id(1)
    w.add_add_bos_token(True)
    embd = RNG.standard_normal((10, 64)).astype(np.float32)  # (vocab, hidden)
    q = RNG.standard_normal((64, 64)).astype(np.float16)
    q8 = gguf.quantize(RNG.standard_normal((8, 64)).astype(np.float32),
                       gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("token_embd.weight", embd)
    w.add_tensor("blk.0.attn_q.weight", q)
    w.add_tensor("blk.0.ffn_up.weight", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    file = read_gguf(path)
    assert file.metadata["llama.context_length"] == 32
    assert file.metadata["llama.rope.freq_base"] == 1e6
    assert file.metadata["tokenizer.ggml.add_bos_token"] is True
    assert file.tensor_info("token_embd.weight").shape == (10, 64)
    np.testing.assert_array_equal(file.load("token_embd.weight"), embd)
    np.testing.assert_array_equal(file.load("blk.0.attn_q.weight"), q)
    up = file.load("blk.0.ffn_up.weight")
    assert isinstance(up, QuantizedArray) and up.shape == (8, 64)
    np.testing.assert_array_equal(up.blocks, q8)
    # ne in the file really is reversed: ggml's ne[0] is the row length.
    (tensor,) = [t for t in gguf.GGUFReader(path).tensors if t.name == "token_embd.weight"]
    assert tensor.shape.tolist() == [64, 10]


def test_write_dtype_conversion(tmp_path: Path) -> None:
    tensors = {"w": RNG.standard_normal((4, 64)).astype(np.float32),
               "odd": RNG.standard_normal((4, 10)).astype(np.float32),
               "norm": np.ones(64, np.float32)}
    path = tmp_path / "q.gguf"
    write_gguf(path, {}, tensors, arch="llama", dtype="q8_0")
    file = read_gguf(path)
    assert file.tensor_info("w").type == "q8_0"
    assert file.tensor_info("odd").type == "f16"  # not a whole number of blocks
    assert file.tensor_info("norm").type == "f32"  # 1-D stays f32, as in llama.cpp
    assert file.metadata["general.file_type"] == 7
    assert file.metadata["general.quantization_version"] == 2
    w = file.load("w", dequantize=True)
    np.testing.assert_allclose(w, tensors["w"], atol=0.05)


def _one_tensor_file(path: Path, raw: np.ndarray, qtype: Any) -> Path:
    w = gguf.GGUFWriter(path, "llama")
    w.add_tensor("t", raw, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("fmt", ["q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q5_k", "iq4_nl",
                                 "iq4_xs"])
def test_more_ggml_types_stay_quantized(tmp_path: Path, fmt: str) -> None:
    x = RNG.standard_normal((2, 256)).astype(np.float32)
    raw = quant_blocks.quantize(x, fmt)
    qtype = getattr(gguf.GGMLQuantizationType, fmt.upper())
    file = read_gguf(_one_tensor_file(tmp_path / f"{fmt}.gguf", raw, qtype))
    assert file.tensor_info("t").type == fmt
    loaded = file.load("t")
    assert isinstance(loaded, QuantizedArray) and loaded.format == fmt
    np.testing.assert_array_equal(loaded.blocks, raw)  # no float32 copy
    np.testing.assert_array_equal(loaded.dequantize(), gguf.dequantize(raw, qtype))


def test_other_ggml_types_are_dequantized(tmp_path: Path) -> None:
    x = RNG.standard_normal((2, 256)).astype(np.float32)
    raw = gguf.quantize(x, gguf.GGMLQuantizationType.TQ2_0)
    file = read_gguf(_one_tensor_file(tmp_path / "tq2.gguf", raw,
                                      gguf.GGMLQuantizationType.TQ2_0))
    assert file.tensor_info("t").type == "tq2_0"
    loaded = file.load("t")
    assert isinstance(loaded, np.ndarray) and loaded.dtype == np.float32
    np.testing.assert_array_equal(loaded, gguf.dequantize(raw, gguf.GGMLQuantizationType.TQ2_0))


def test_missing_tensor_names_file(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    write_gguf(path, {}, {"blk.0.attn_q.weight": np.zeros((2, 2), np.float32)}, arch="llama")
    with pytest.raises(FormatError, match="did you mean 'blk.0.attn_q.weight'") as info:
        read_gguf(path).load("blk.0.attn_k.weight")
    assert str(path) in str(info.value)


# --- malformed files ------------------------------------------------------------------------------


def _header(n_tensors: int, n_kv: int, version: int = 3) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv)


def _gguf_str(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _tensor_entry(name: str, ne: list[int], type_id: int, offset: int) -> bytes:
    return (_gguf_str(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
            + struct.pack("<IQ", type_id, offset))


def _valid(tmp_path: Path) -> bytes:
    path = tmp_path / "valid.gguf"
    write_gguf(path, METADATA, {"t": np.ones((4, 8), np.float32)}, arch="llama")
    return path.read_bytes()


def _one_tensor(ne: list[int], type_id: int = 0, offset: int = 0, data: int = 128) -> bytes:
    head = _header(1, 0) + _tensor_entry("t", ne, type_id, offset)
    head += b"\0" * (-len(head) % 32)
    return head + b"\0" * data


MALFORMED: dict[str, Callable[[bytes], bytes]] = {
    "wrong magic": lambda v: b"GGUX" + v[4:],
    "empty": lambda v: b"",
    "big endian": lambda v: b"GGUF" + struct.pack(">I", 3) + v[8:],
    "version 1": lambda v: b"GGUF" + struct.pack("<I", 1) + v[8:],
    "truncated header": lambda v: v[:30],
    "truncated data": lambda v: v[:-16],
    "absurd kv count": lambda v: _header(0, 2**63),
    "absurd tensor count": lambda v: _header(2**40, 0),
    "absurd string length": lambda v: _header(0, 1) + struct.pack("<Q", 2**62) + b"key",
    "absurd array length": lambda v: (_header(0, 1) + _gguf_str("k")
                                      + struct.pack("<IIQ", 9, 4, 2**60)),
    "unknown value type": lambda v: _header(0, 1) + _gguf_str("k") + struct.pack("<I", 99),
    "too many dims": lambda v: _one_tensor([1, 1, 1, 1, 1]),
    "absurd dims": lambda v: _one_tensor([2**40, 2**40]),
    "unknown tensor type": lambda v: _one_tensor([4], type_id=200),
    "offset out of range": lambda v: _one_tensor([4], offset=2**50),
    "misaligned offset": lambda v: _one_tensor([4], offset=3),
    "size past end": lambda v: _one_tensor([64], data=16),
    "partial block": lambda v: _one_tensor([33], type_id=8),
    "bad utf8 key": lambda v: _header(0, 1) + struct.pack("<Q", 2) + b"\xff\xfe" + b"\0" * 16,
}


@pytest.mark.parametrize("case", MALFORMED)
def test_malformed_raises_format_error(tmp_path: Path, case: str) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(MALFORMED[case](_valid(tmp_path)))
    with pytest.raises(FormatError) as info:
        file = read_gguf(path)
        file.load_all()
    assert str(path) in str(info.value)
    assert info.value.path == str(path)


def test_duplicate_tensor_and_overlap(tmp_path: Path) -> None:
    head = _header(2, 0) + _tensor_entry("a", [8], 0, 0) + _tensor_entry("b", [8], 0, 0)
    head += b"\0" * (-len(head) % 32)
    path = tmp_path / "overlap.gguf"
    path.write_bytes(head + b"\0" * 64)
    with pytest.raises(FormatError, match="overlaps"):
        read_gguf(path)
    head = _header(2, 0) + _tensor_entry("a", [8], 0, 0) + _tensor_entry("a", [8], 0, 32)
    head += b"\0" * (-len(head) % 32)
    path.write_bytes(head + b"\0" * 64)
    with pytest.raises(FormatError, match="duplicate tensor"):
        read_gguf(path)


def test_file_shrinks_after_parse(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    write_gguf(path, {}, {"t": np.ones((64, 64), np.float32)}, arch="llama")
    file = read_gguf(path)
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(FormatError, match="truncated"):
        file.load("t")
    with pytest.raises(FormatError, match="truncated"):
        file.load("t", mapped=True)


def test_random_corruption_never_crashes(tmp_path: Path) -> None:
    valid = _valid(tmp_path)
    rng = np.random.default_rng(1)
    path = tmp_path / "fuzz.gguf"
    for _ in range(200):
        data = bytearray(valid)
        for pos in rng.integers(0, len(data), size=4):
            data[pos] = rng.integers(0, 256)
        path.write_bytes(bytes(data[: rng.integers(1, len(data) + 1)]))
        try:
            read_gguf(path).load_all()
        except FormatError:
            pass
