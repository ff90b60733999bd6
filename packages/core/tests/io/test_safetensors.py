"""safetensors reader/writer and Hugging Face directories (single, sharded, bf16, malformed)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy

from omnitensor.backend.host_memory import immutable
from omnitensor.errors import FormatError
from omnitensor.io.safetensors import read_hf_dir, read_safetensors, write_safetensors
from omnitensor.io.weights import WeightFile

RNG = np.random.default_rng(0)


def _tensors() -> dict[str, np.ndarray]:
    return {
        "a": RNG.standard_normal((3, 4)).astype(np.float32),
        "b": RNG.standard_normal((5,)).astype(np.float16),
        "c": RNG.standard_normal((2, 2, 2)).astype(ml_dtypes.bfloat16),
        "d": np.arange(6, dtype=np.int64).reshape(2, 3),
        "e": np.zeros((0, 3), np.float32),
    }


def test_round_trip_with_bf16(tmp_path: Path) -> None:
    tensors = _tensors()
    path = tmp_path / "model.safetensors"
    write_safetensors(path, tensors, metadata={"format": "pt"})
    file = read_safetensors(path)
    assert isinstance(file, WeightFile)
    assert set(file.tensor_names) == set(tensors)
    assert file.metadata == {"format": "pt"}
    for name, expected in tensors.items():
        loaded = file.load(name)
        assert loaded.dtype == expected.dtype and loaded.shape == expected.shape
        np.testing.assert_array_equal(loaded, expected)
        mapped = file.load(name, mapped=True)
        assert mapped.dtype == expected.dtype and mapped.shape == expected.shape
        np.testing.assert_array_equal(mapped, expected)
        # aligned data are viewed in the mapped file; unaligned ones are copied
        aligned = file.tensor_info(name).offset % expected.dtype.itemsize == 0
        assert immutable(mapped) == aligned and mapped.flags.writeable != aligned
    assert file.tensor_info("c").type == "bf16"


def test_interoperates_with_the_safetensors_package(tmp_path: Path) -> None:
    tensors = {k: v for k, v in _tensors().items() if v.dtype != ml_dtypes.bfloat16}
    theirs = tmp_path / "theirs.safetensors"
    safetensors.numpy.save_file(tensors, theirs, metadata={"x": "y"})
    file = read_safetensors(theirs)
    for name, expected in tensors.items():
        np.testing.assert_array_equal(file.load(name), expected)
    ours = tmp_path / "ours.safetensors"
    write_safetensors(ours, tensors)
    loaded = safetensors.numpy.load_file(ours)
    for name, expected in tensors.items():
        np.testing.assert_array_equal(loaded[name], expected)


def _hf_dir(tmp_path: Path, *, sharded: bool) -> tuple[Path, dict[str, np.ndarray]]:
    tensors = _tensors()
    config = {"model_type": "llama", "hidden_size": 4}
    (tmp_path / "config.json").write_text(json.dumps(config))
    if sharded:
        names = sorted(tensors)
        shards = {"model-00001-of-00002.safetensors": names[:2],
                  "model-00002-of-00002.safetensors": names[2:]}
        weight_map = {}
        for file, part in shards.items():
            write_safetensors(tmp_path / file, {n: tensors[n] for n in part})
            weight_map.update({n: file for n in part})
        index = {"metadata": {"total_size": 1}, "weight_map": weight_map}
        (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    else:
        write_safetensors(tmp_path / "model.safetensors", tensors)
    return tmp_path, tensors


@pytest.mark.parametrize("sharded", [False, True])
def test_hf_directory(tmp_path: Path, sharded: bool) -> None:
    directory, tensors = _hf_dir(tmp_path, sharded=sharded)
    hf = read_hf_dir(directory)
    assert hf.architecture == "llama" and hf.config["hidden_size"] == 4
    assert set(hf.weights.tensor_names) == set(tensors)
    for name, expected in tensors.items():
        np.testing.assert_array_equal(hf.weights.load(name), expected)
    if sharded:
        assert len(hf.weights.shards) == 2
        assert hf.weights.tensor_info("d").file.name == "model-00002-of-00002.safetensors"
    with pytest.raises(FormatError, match="no tensor named"):
        hf.weights.load("zzz")


def test_hf_directory_errors(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="no config.json"):
        read_hf_dir(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "pytorch_model.bin").write_bytes(b"pickle")
    with pytest.raises(FormatError, match="pickle"):
        read_hf_dir(tmp_path)
    (tmp_path / "pytorch_model.bin").unlink()
    index = {"weight_map": {"a": "../outside.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(FormatError, match="not a file name"):
        read_hf_dir(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(FormatError, match="config.json"):
        read_hf_dir(tmp_path)


def _file(header: object, data: bytes = b"", *, length: int | None = None) -> bytes:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(text) if length is None else length) + text + data


MALFORMED = {
    "too short": b"\x01\x02",
    "header length past end": _file({}, length=10**6),
    "absurd header length": _file({}, length=2**63),
    "bad json": _file(b"{not json"),
    "not an object": _file([1, 2]),
    "unknown dtype": _file({"t": {"dtype": "F7", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4),
    "negative dim": _file({"t": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}},
                          b"\0" * 4),
    "offsets out of range": _file({"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}),
    "absurd dims": _file({"t": {"dtype": "F32", "shape": [2**40, 2**40],
                                "data_offsets": [0, 4]}}, b"\0" * 4),
    "size mismatch": _file({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}},
                           b"\0" * 4),
    "bad offsets": _file({"t": {"dtype": "F32", "shape": [1], "data_offsets": "x"}}, b"\0" * 4),
    "overlap": _file({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                      "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8),
    "bad metadata": _file({"__metadata__": {"a": 1}}),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_malformed_raises_format_error(tmp_path: Path, case: str) -> None:
    path = tmp_path / "bad.safetensors"
    path.write_bytes(MALFORMED[case])
    with pytest.raises(FormatError) as info:
        read_safetensors(path)
    assert str(path) in str(info.value) and info.value.path == str(path)


def test_truncated_after_parse(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    write_safetensors(path, {"t": np.ones(100, np.float32)})
    file = read_safetensors(path)
    path.write_bytes(path.read_bytes()[:-8])
    with pytest.raises(FormatError, match="truncated"):
        file.load("t")
