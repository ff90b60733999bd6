"""Every failure class the fuzz campaigns (and issue #19) found, as a fixed input.

Each test loads a small valid model with one thing wrong and expects the project's error type,
naming what is wrong (key, file, tensor), quickly.
"""

from __future__ import annotations

import json
import math
import shutil
import struct
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from omnitensor.errors import FormatError, GenerationArgumentError, OmnitensorError, SpecError
from omnitensor.io import read_gguf, write_gguf
from omnitensor.models import ModelBuilder, ModelSpec, builtin_spec, open_checkpoint
from omnitensor.runtime import load_model


def _gguf(fuzz: ModuleType, tmp_path: Path, which: str, **changes: Any) -> Path:
    """The seed GGUF `which` with metadata keys changed (None deletes) or tensors dropped."""
    file = read_gguf(fuzz._seed_gguf(tmp_path, which))
    metadata = {k: v for k, v in file.metadata.items() if k != "general.file_type"}
    types = dict(file.metadata_types)
    tensors = file.load_all()
    for key, value in changes.items():
        key = key.replace("__", ".")
        if key.startswith("drop."):
            del tensors[key.removeprefix("drop.")]
        elif value is None:
            metadata.pop(key)
        else:
            metadata[key] = value
            types.pop(key, None)
    out = tmp_path / "case.gguf"
    write_gguf(out, metadata, tensors, arch=str(metadata["general.architecture"]),
               types={k: t for k, t in types.items() if k in metadata})
    return out


def _load(path: Path) -> Any:
    checkpoint = open_checkpoint(path)
    return ModelBuilder().with_spec(builtin_spec(checkpoint.arch)).with_checkpoint(
        checkpoint).build("ref")


@pytest.mark.parametrize(("which", "key", "value", "match"), [
    ("gpt2", "gpt2.attention.layer_norm_epsilon", math.nan, "layer_norm_epsilon = nan"),
    ("llama", "llama.attention.layer_norm_rms_epsilon", -1.0, "finite number"),
    ("llama", "llama.rope.freq_base", math.inf, "rope.freq_base = inf"),
    ("gpt2", "gpt2.block_count", 1, "block_count = 1 but the file also has layer"),
    ("gpt2", "gpt2.block_count", 3, r"layer\(s\) \[2\] have no tensors"),
    ("gpt2", "gpt2.context_length", 0, "context_length = 0 is out of range"),
    ("gpt2", "gpt2.context_length", 4096, "position_embd.weight"),
    ("gpt2", "gpt2.context_length", "32", "must be an integer"),
    ("gpt2", "gpt2.attention.head_count", 3, "does not divide"),
    ("llama", "llama.attention.head_count_kv", 3, "not a multiple"),
    ("llama", "llama.attention.head_count_kv", 4, "attn_k"),
    ("gpt2", "gpt2.embedding_length", 2**40, "out of range"),
    ("gpt2", "gpt2.vocab_size", 99, "token_embd.weight"),
    ("llama", "llama.block_count", [2, 3], "differs between layers"),
    ("llama", "tokenizer.ggml.bos_token_id", 10**6, "not a token id"),
    ("llama", "tokenizer.ggml.tokens", [1, 2, 3], "array of strings"),
    ("llama", "tokenizer.ggml.token_type", [1], "one per token"),
    ("llama", "tokenizer.ggml.add_bos_token", 7, "must be a bool"),
    ("llama", "general.architecture", "", "general.architecture"),
])
def test_gguf_values_refused(fuzz: ModuleType, tmp_path: Path, which: str, key: str,
                             value: Any, match: str) -> None:
    path = _gguf(fuzz, tmp_path, which, **{key.replace(".", "__"): value})
    with pytest.raises(FormatError, match=match) as info:
        _load(path)
    assert str(path) in str(info.value)


def test_gguf_missing_layer_tensor_names_the_file(fuzz: ModuleType, tmp_path: Path) -> None:
    path = _gguf(fuzz, tmp_path, "llama", drop__output__weight=1)
    model = _load(path)  # no output head in a GGUF file means tied: allowed
    assert model.hparams["tie_embeddings"] is True


def test_gguf_nested_empty_arrays_refused_fast(tmp_path: Path) -> None:
    count = 200_000  # 2.4 MB of nested empty arrays
    body = struct.pack("<Q", 1) + b"k" + struct.pack("<IIQ", 9, 9, count)
    body += struct.pack("<IQ", 0, 0) * count
    path = tmp_path / "nested.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + body)
    start = time.perf_counter()
    with pytest.raises(FormatError, match="arrays of arrays"):
        read_gguf(path)
    assert time.perf_counter() - start < 2


def _hf(fuzz: ModuleType, tmp_path: Path, which: str, **config: Any) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(fuzz._seed_hf(tmp_path, which), folder)
    data = json.loads((folder / "config.json").read_text())
    for key, value in config.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    (folder / "config.json").write_text(json.dumps(data))
    return folder


@pytest.mark.parametrize(("which", "changes", "match"), [
    ("gpt2", {"n_positions": 4096}, "position_embd.weight"),
    ("gpt2", {"layer_norm_epsilon": "1e-5"}, "must be a number"),
    ("gpt2", {"n_layer": 1}, "num_hidden_layers = 1"),
    ("gpt2", {"tie_word_embeddings": "yes"}, "true or false"),
    ("gpt2", {"model_type": ["gpt2"]}, "unsupported model_type"),
    ("llama", {"tie_word_embeddings": False, "_drop_lm_head": True}, "no output head"),
    ("llama", {"rms_norm_eps": 0.0}, "rms_norm_eps"),
    ("llama", {"num_attention_heads": 6, "num_key_value_heads": 6}, "does not divide"),
    ("llama", {"num_attention_heads": 5}, "not a multiple of num_key_value_heads"),
    ("llama", {"max_position_embeddings": 0}, "out of range"),
    ("llama", {"vocab_size": 2.5}, "must be an integer"),
    ("llama", {"rope_scaling": [1, 2]}, "rope_scaling must be a JSON object"),
    ("llama", {"omnitensor_runtime": 3}, "omnitensor_runtime"),
])
def test_hf_config_refused(fuzz: ModuleType, tmp_path: Path, which: str,
                           changes: dict[str, Any], match: str) -> None:
    drop = changes.pop("_drop_lm_head", False)
    folder = _hf(fuzz, tmp_path, which, **changes)
    if drop:
        from omnitensor.io import read_safetensors, write_safetensors

        file = read_safetensors(folder / "model.safetensors")
        kept = {n: file.load(n) for n in file.tensor_names if n != "lm_head.weight"}
        write_safetensors(folder / "model.safetensors", kept)
    with pytest.raises(FormatError, match=match) as info:
        _load(folder)
    assert "config.json" in str(info.value)


@pytest.mark.parametrize("shift", [2**31, 2**31 - 100, -5])
def test_tokenizer_ids_shifted_refused_before_the_library(fuzz: ModuleType, tmp_path: Path,
                                                          shift: int) -> None:
    folder = _hf(fuzz, tmp_path, "gpt2")
    tree = json.loads((folder / "tokenizer.json").read_text())
    tree["model"]["vocab"] = {k: v + shift for k, v in tree["model"]["vocab"].items()}
    for added in tree["added_tokens"]:
        added["id"] += shift
    (folder / "tokenizer.json").write_text(json.dumps(tree))
    start = time.perf_counter()
    with pytest.raises(FormatError, match="token id .* is out of range"):
        _load(folder)
    assert time.perf_counter() - start < 5  # no 8 GB hole-filling inside the library


def test_tokenizer_library_errors_are_format_errors(fuzz: ModuleType, tmp_path: Path) -> None:
    folder = _hf(fuzz, tmp_path, "gpt2")
    tree = json.loads((folder / "tokenizer.json").read_text())
    tree["model"]["type"] = "NoSuchModel"
    (folder / "tokenizer.json").write_text(json.dumps(tree))
    with pytest.raises(FormatError, match="tokenizer.json"):
        _load(folder)


# --- ModelSpec --------------------------------------------------------------------------------


def _spec(**edit: Any) -> str:
    base = json.loads(builtin_spec("llama").to_json())
    if "insert" in edit:
        base["forward"].insert(1, edit["insert"])
    if "hparams" in edit:
        base["hparams"] = edit["hparams"]
    if "step" in edit:
        base["forward"][1]["steps"][0] = edit["step"]
    return json.dumps(base)


_ADD = {"op": "Add", "inputs": ["x", "x"], "output": "x"}


@pytest.mark.parametrize(("text", "match"), [
    (_spec(insert={"repeat": 100000, "steps": [_ADD]}), r"runs 100000 times"),
    (_spec(insert={"repeat": -1, "steps": [_ADD]}), r"0\.\.1024"),
    (_spec(insert={"repeat": 1000, "steps": [_ADD] * 20}), "more than 10000 steps"),
    (_spec(insert={"op": "Add", "inputs": [[]], "output": "x"}), "inputs"),
    (_spec(insert={"op": "Add", "inputs": ["x"], "output": None}), "'output'"),
    (_spec(step={"op": "RmsNorm", "input": "x", "weight": ["w"], "output": "h"}), "weight"),
    (_spec(step={"op": "RmsNorm", "input": "x", "weight": "w", "output": "h", "eps": -1}),
     "eps"),
    (_spec(hparams=None), "hparams must be a JSON object"),
    ('{"name": "n", "kind": "causal_lm", "forward": [' + '{"repeat": 1, "steps": [' * 6
     + json.dumps(_ADD) + "]}" * 6 + "]}", "nested deeper than 4"),
    ('{"name": "n", "kind": "causal_lm", "forward": [' + '{"repeat": 1, "steps": [' * 5000
     + json.dumps(_ADD) + "]}" * 5000 + "]}", "nested too deeply"),
])
def test_bad_specs_refused_fast(text: str, match: str) -> None:
    start = time.perf_counter()
    with pytest.raises(SpecError, match=match):
        ModelSpec.from_json(text)
    assert time.perf_counter() - start < 2


def test_spec_field_missing_at_build_is_a_spec_error(fuzz: ModuleType) -> None:
    spec = ModelSpec.from_json(_spec(step={"op": "RmsNorm", "weight": "blk.{layer}.attn_norm"
                                           ".weight", "output": "h"}))
    with pytest.raises(SpecError, match="needs field 'input'"):
        ModelBuilder().with_spec(spec).with_checkpoint(fuzz._tiny_llama()).build("ref")


def test_spec_embedding_without_weight_is_a_spec_error(fuzz: ModuleType) -> None:
    base = json.loads(builtin_spec("llama").to_json())
    del base["forward"][0]["weight"]  # found by the long campaign: a KeyError at upload
    spec = ModelSpec.from_json(json.dumps(base))
    with pytest.raises(SpecError, match="needs field 'weight'"):
        ModelBuilder().with_spec(spec).with_checkpoint(fuzz._tiny_llama()).build("ref")


def test_spec_repeat_over_a_bad_hyper_parameter(fuzz: ModuleType) -> None:
    spec = ModelSpec.from_json(_spec(insert={"repeat": "layers_x", "steps": [_ADD]}))
    checkpoint = fuzz._tiny_llama()
    checkpoint.hparams["layers_x"] = 10**6  # the checkpoint's value, known only at build
    try:
        with pytest.raises(SpecError, match="layers_x' = 1000000"):
            ModelBuilder().with_spec(spec).with_checkpoint(checkpoint).build("ref")
    finally:
        del checkpoint.hparams["layers_x"]


# --- generation arguments ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def char_gpt() -> Any:
    from omnitensor.cli.generate import shipped_model

    return load_model(shipped_model("char-gpt.gguf"), "ref")


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"max_new_tokens": -1}, "max_new_tokens"), ({"max_new_tokens": 0}, "max_new_tokens"),
    ({"max_new_tokens": 2.5}, "max_new_tokens"), ({"max_new_tokens": True}, "max_new_tokens"),
    ({"temperature": math.nan}, "temperature"), ({"temperature": -1.0}, "temperature"),
    ({"temperature": math.inf}, "temperature"), ({"temperature": "0"}, "temperature"),
    ({"top_k": 0}, "top_k"), ({"top_p": 0.0}, "top_p"), ({"top_p": 1.5}, "top_p"),
    ({"seed": -3}, "seed"), ({"stop": "="}, "stop"), ({"prompt": 7}, "prompt"),
])
def test_generation_arguments(char_gpt: Any, kwargs: dict[str, Any], match: str) -> None:
    prompt = kwargs.pop("prompt", "12+3=")
    for call in (char_gpt.generate, char_gpt.stream):
        with pytest.raises(GenerationArgumentError, match=match) as info:
            call(prompt, **{"max_new_tokens": 2, **kwargs})  # stream checks at the call
        assert isinstance(info.value, ValueError) and isinstance(info.value, OmnitensorError)


# --- found by the long campaign (benchmarks/fuzz.py --cases 3000 --seed 7) --------------------


def test_gguf_zero_size_tensor_with_a_huge_dimension(fuzz: ModuleType, tmp_path: Path) -> None:
    data = bytearray(fuzz._seed_gguf(tmp_path, "gpt2").read_bytes())
    file = read_gguf(fuzz._seed_gguf(tmp_path, "gpt2"))
    # rewrite one 1-D tensor's entry as ne = [0, 2**61] (a two-dim, zero-size tensor)
    name = next(n for n in file.tensor_names if len(file.tensor_info(n).shape) == 1)
    key = struct.pack("<Q", len(name)) + name.encode()
    at = bytes(data).index(key) + len(key)
    n_dims, ne0 = struct.unpack_from("<IQ", data, at)
    assert n_dims == 1
    data[at:at + 12] = struct.pack("<IQ", 2, 0)
    data[at + 12:at + 12] = struct.pack("<Q", 2**61)
    path = tmp_path / "zero.gguf"
    path.write_bytes(bytes(data))
    with pytest.raises(FormatError):
        _load(path)


def test_safetensors_header_with_unhashable_dtype(fuzz: ModuleType, tmp_path: Path) -> None:
    folder = _hf(fuzz, tmp_path, "gpt2")
    raw = (folder / "model.safetensors").read_bytes()
    length = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + length])
    name = next(k for k in header if k != "__metadata__")
    header[name]["dtype"] = ["F32"]
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(text)) + text
                                               + raw[8 + length:])
    with pytest.raises(FormatError, match="unknown dtype"):
        _load(folder)


def test_safetensors_zero_size_tensor_with_a_huge_dimension(tmp_path: Path) -> None:
    from omnitensor.io import read_safetensors

    text = json.dumps({"t": {"dtype": "F32", "shape": [0, 2**61],
                             "data_offsets": [0, 0]}}).encode()
    (tmp_path / "z.safetensors").write_bytes(struct.pack("<Q", len(text)) + text)
    with pytest.raises(FormatError, match="absurd shape"):
        read_safetensors(tmp_path / "z.safetensors")


def test_gguf_metadata_arrays_stay_packed(tmp_path: Path) -> None:
    import numpy as np

    from omnitensor.io.gguf import NumberArray

    count = 1_000_000
    body = struct.pack("<Q", 1) + b"k" + struct.pack("<IIQ", 9, 4, count)
    body += np.arange(count, dtype="<u4").tobytes()
    path = tmp_path / "array.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + body)
    value = read_gguf(path).metadata["k"]
    assert isinstance(value, NumberArray)
    assert value.array.nbytes == 4 * count  # 1x the file, not a list of a million ints
    assert value[3] == 3 and value[-1] == count - 1 and value[:3] == [0, 1, 2]


def test_prompt_ids_past_the_embedding_are_refused() -> None:
    from omnitensor.cli.generate import shipped_model
    from omnitensor.io.tokenizer import char_tokenizer
    from omnitensor.runtime import CausalLM

    checkpoint = open_checkpoint(shipped_model("char-gpt.gguf"))
    rows = checkpoint.weights["token_embd.weight"].shape[0]
    # a tokenizer from another model: ids up to 25 for a 14-row embedding
    checkpoint.tokenizer = char_tokenizer("0123456789+=abcdefghijklmnop")
    model = CausalLM(ModelBuilder().with_spec(builtin_spec("gpt2")).with_checkpoint(
        checkpoint).build("ref"))
    assert model.generate("12+3=", 2).token_ids  # ids below the rows still work
    with pytest.raises(FormatError, match=f"token id 2[0-9] .* {rows} rows"):
        model.generate("12+op=", 2)
