"""A checkpoint: architecture, hyper-parameters, weights in omnitensor's layout, tokenizer.

Turns a GGUF file or a Hugging Face directory into canonical names (llama.cpp's) and layout
(`io.names`). Weights are read-only views of the files mapped in memory (`io.mapped`) where no
conversion is needed, so a checkpoint costs no memory of its own; the builder consumes it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..backend.host_memory import release, seal
from ..errors import FormatError
from ..io.weights import Array, QuantizedArray
from .consistency import check_hparams, check_tensors, check_vocabulary, gguf_key

__all__ = ["Checkpoint", "from_gguf", "from_hf_dir", "open_checkpoint"]

Progress = Callable[[str, int, int], None]

# llama.cpp's enum llama_pooling_type (``<arch>.pooling_type``) -> pooling mode names.
_GGUF_POOLING = {1: "mean", 2: "cls", 3: "lasttoken"}


@dataclass
class Checkpoint:
    """Everything a model needs from its files.

    Attributes:
        arch: llama.cpp architecture name (``llama``, ``qwen2``, ``gpt2``, ``bert``).
        hparams: hyper-parameters by GGUF-style name (see `io.names.HParams`).
        weights: canonical name -> array (or quantized blocks), in omnitensor's layout (but a
            GGUF llama's q/k rows, kept in llama.cpp's pairs where ``rope_interleaved``).
        tokenizer: the model's tokenizer, or None.
        path: where it came from.
        runtime: runtime settings from the files (functional overrides ...).
    """

    arch: str
    hparams: dict[str, Any]
    weights: dict[str, Array | QuantizedArray]
    tokenizer: Any = None
    path: Path | None = None
    runtime: dict[str, Any] = field(default_factory=dict)


def from_gguf(path: str | Path, progress: Progress | None = None, *,
              rotary_pairs: bool = True) -> Checkpoint:
    """Read a GGUF file as llama.cpp writes it (names, metadata, tokenizer, q/k row order).

    Args:
        path: the file.
        progress: called as ``progress(tensor_name, done, total)`` per tensor.
        rotary_pairs: keep llama's q and k rows as the file stores them, in pairs of
            neighbours, and set ``hparams["rope_interleaved"]`` so the model rotates those
            pairs (as llama.cpp does): q and k stay views of the mapped file. False puts them in
            Hugging Face's rotate-half order (``io.names``), a copy of each held beside what a
            backend repacks from it (~20 MB for a 0.5B Q8_0 model, ~380 MB for Llama 3 8B in Q4_K).
    """
    from ..io.gguf import read_gguf
    from ..io.names import GGUF_ROTARY_PAIRS, from_gguf_tensor, hparams_from_gguf
    from ..io.tokenizer import Tokenizer

    file = read_gguf(path)
    source = str(path)
    hp = hparams_from_gguf(file.metadata, file.tensor_names, source)
    # the rules read the extras too (head size, sliding layers): they are merged first
    hparams = dataclasses.asdict(hp) | _gguf_attention_hparams(hp.arch, file.metadata)
    name_key = gguf_key(hp.arch)
    check_hparams(hparams, source, name_key)
    shapes = {n: file.tensor_info(n).shape for n in file.tensor_names}
    check_tensors(hparams, {n: s for n, s in shapes.items() if n != "rope_freqs.weight"},
                  source, name_key, causal=hp.arch != "bert")
    tokenizer = None
    if any(key.startswith("tokenizer.ggml.") for key in file.metadata):
        tokenizer = Tokenizer.from_gguf_metadata(file.metadata, source)
        check_vocabulary(tokenizer, shapes, source)
    pairs = rotary_pairs and hp.arch in GGUF_ROTARY_PAIRS
    if pairs:
        hparams["rope_interleaved"] = True
    weights: dict[str, Array | QuantizedArray] = {}
    names = file.tensor_names
    for i, name in enumerate(names):
        loaded = file.load(name, mapped=True)
        converted = (from_gguf_tensor(hp.arch, name, loaded, hp, rotary_pairs=pairs)
                     if isinstance(loaded, QuantizedArray)
                     else from_gguf_tensor(hp.arch, name, loaded, hp, rotary_pairs=pairs))
        weights[name] = _own(loaded, converted)
        if progress is not None:
            progress(name, i + 1, len(names))
    runtime: dict[str, Any] = {}
    pooling = file.metadata.get(f"{hp.arch}.pooling_type")
    if isinstance(pooling, int) and pooling in _GGUF_POOLING:
        runtime["pooling"] = _GGUF_POOLING[pooling]
    if "rope_factors_long.weight" in weights:
        raise FormatError(f"{path}: LongRoPE scaling (rope_factors_long/short, Phi-3 128k) is "
                          "not supported", path=str(path))
    factors = weights.pop("rope_freqs.weight", None)
    if factors is not None:  # llama.cpp's per-frequency divisors (Llama 3.1's rope scaling)
        array = factors.dequantize() if isinstance(factors, QuantizedArray) else factors
        hparams["rope_scaling"] = {"type": "factors",
                                   "factors": np.asarray(array, np.float64).reshape(-1).tolist()}
    return Checkpoint(hp.arch, hparams, weights, tokenizer, Path(path), runtime)


def from_hf_dir(path: str | Path, progress: Progress | None = None) -> Checkpoint:
    """Read a Hugging Face directory (config.json, safetensors, tokenizer.json)."""
    from ..io.names import from_hf_tensor, hf_name_map, hf_tensor_shape, hparams_from_hf_config
    from ..io.safetensors import read_hf_dir
    from ..io.sentence_transformers import read_sentence_transformers
    from ..io.tokenizer import Tokenizer

    directory = read_hf_dir(path)
    source = str(Path(path) / "config.json")
    hp = hparams_from_hf_config(directory.config, source)
    mapping = hf_name_map(hp.arch, directory.weights.tensor_names)
    hparams = dataclasses.asdict(hp) | _hf_extras(directory.config, source)
    check_hparams(hparams, source)
    shapes = {name: hf_tensor_shape(hp.arch, name, directory.weights.tensor_info(hf).shape)
              for name, hf in mapping.items()}
    check_tensors(hparams, shapes, source, causal=hp.arch != "bert")
    tokenizer = Tokenizer.from_hf_dir(path) if directory.tokenizer_path is not None else None
    if tokenizer is not None:
        check_vocabulary(tokenizer, shapes, str(directory.tokenizer_path))
    weights: dict[str, Array | QuantizedArray] = {}
    for i, (name, hf_name) in enumerate(mapping.items()):
        value = np.asarray(directory.weights.load(hf_name, mapped=True))
        weights[name] = _own(value, from_hf_tensor(hp.arch, name, value))
        if progress is not None:
            progress(name, i + 1, len(mapping))
    runtime = directory.config.get("omnitensor_runtime", {})
    if not isinstance(runtime, dict):
        raise FormatError(f"{source}: omnitensor_runtime must be a JSON object (got "
                          f"{runtime!r})", path=source, key="omnitensor_runtime")
    runtime = dict(runtime) | read_sentence_transformers(path)  # pooling, normalize, prompts
    return Checkpoint(hp.arch, hparams, weights, tokenizer, Path(path), runtime)


def _hf_extras(config: dict[str, Any], source: str) -> dict[str, Any]:
    """Rope scaling, head size and attention settings of a ``config.json``."""
    hparams: dict[str, Any] = {}
    # NOTE: transformers >= 5 writes the scaling rule into "rope_parameters" (io.names reads
    # the base from there too) instead of a top-level "rope_scaling".
    rope = config.get("rope_parameters")
    if isinstance(rope, dict) and rope.get("rope_type", "default") != "default":
        hparams["rope_scaling"] = rope
    if config.get("rope_scaling"):
        hparams["rope_scaling"] = config["rope_scaling"]
    if hparams.get("rope_scaling") is not None and not isinstance(hparams["rope_scaling"], dict):
        raise FormatError(f"{source}: rope_scaling must be a JSON object (got "
                          f"{hparams['rope_scaling']!r})", path=source, key="rope_scaling")
    if config.get("head_dim"):
        hparams["head_dim"] = config["head_dim"]
    try:
        hparams |= _attention_hparams(config)
    except (AttributeError, TypeError, ValueError, KeyError) as exc:
        # NOTE: the sub-objects of rope_parameters / layer_types come from the file as is
        raise FormatError(f"{source}: malformed attention settings (rope_parameters, "
                          f"layer_types, sliding_window): {exc}", path=source) from None
    return hparams


def _own(loaded: Array | QuantizedArray, converted: Array | QuantizedArray
         ) -> Array | QuantizedArray:
    """`converted` (from `loaded`, a view of a mapped file) made read-only for good.

    A conversion that made a new array (llama's q/k row order, GPT-2's transposes) has read
    the file's pages: they are dropped, and the new array is sealed so backends keep it
    without copying it (`backend.host_memory.seal`).
    """
    if converted is loaded:
        return loaded
    source = loaded.blocks if isinstance(loaded, QuantizedArray) else loaded
    release(source)
    if isinstance(converted, QuantizedArray):
        return QuantizedArray(seal(converted.blocks), converted.format, converted.shape)
    return seal(np.asarray(converted))


def _attention_hparams(config: dict[str, Any]) -> dict[str, Any]:
    """Sliding-window settings of a ``config.json`` (Mistral, Qwen2 with use_sliding_window...).

    ``sliding_window``: keys more than this many positions back are not attended, in the layers
    ``layer_types`` marks ``"sliding_attention"`` (every layer when the config has no list).
    """
    out: dict[str, Any] = {}
    scalar = config.get("query_pre_attn_scalar")
    if isinstance(scalar, int | float) and scalar > 0:  # Gemma: scores scaled by scalar**-0.5
        out["attention_scale"] = float(scalar) ** -0.5
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        if isinstance(config.get(key), int | float):
            out[key] = float(config[key])
    rope = config.get("rope_parameters")
    if isinstance(rope, dict) and isinstance(rope.get("sliding_attention"), dict):
        # Gemma 3: global layers and sliding layers have their own rotary base
        out["rope_freq_base"] = float(rope["full_attention"].get("rope_theta", 1e6))
        out["rope_freq_base_swa"] = float(rope["sliding_attention"].get("rope_theta", 1e4))
        if rope["full_attention"].get("rope_type", "default") != "default":
            out["rope_scaling"] = rope["full_attention"]
    window = config.get("sliding_window")
    if isinstance(window, int) and window > 0 and config.get("use_sliding_window", True):
        out["sliding_window"] = window
        types = config.get("layer_types")
        if isinstance(types, list):
            out["sliding_layers"] = [t == "sliding_attention" for t in types]
    return out


def _gguf_attention_hparams(arch: str, metadata: Any) -> dict[str, Any]:
    """Head size and sliding window from llama.cpp's metadata keys."""
    out: dict[str, Any] = {}
    key_length = metadata.get(f"{arch}.attention.key_length")
    if isinstance(key_length, int) and key_length > 0:
        out["head_dim"] = key_length
    window = metadata.get(f"{arch}.attention.sliding_window")
    if isinstance(window, int) and window > 0:
        out["sliding_window"] = window
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        value = metadata.get(f"{arch}.{key}")
        if isinstance(value, int | float) and value > 0:
            out[key] = float(value)
    if metadata.get(f"{arch}.rope.scaling.type") == "linear":
        factor = metadata.get(f"{arch}.rope.scaling.factor")
        if isinstance(factor, int | float) and factor > 0:
            out["rope_scaling"] = {"type": "linear", "factor": float(factor)}
    scale = metadata.get(f"{arch}.attention.scale")
    if isinstance(scale, int | float) and scale > 0:
        out["attention_scale"] = float(scale)
    layers = metadata.get(f"{arch}.block_count")
    if arch in _SWA_PATTERN and isinstance(layers, int):
        # llama.cpp's fixed patterns: Gemma 2 slides in even layers, Gemma 3 in 5 of every 6
        period = _SWA_PATTERN[arch]
        out["sliding_layers"] = [(i + 1) % period != 0 for i in range(layers)]
        if arch == "gemma3":
            out["rope_freq_base_swa"] = 10000.0
    return out


_SWA_PATTERN = {"gemma2": 2, "gemma3": 6}


def open_checkpoint(path: str | Path, progress: Progress | None = None) -> Checkpoint:
    """A GGUF file or a Hugging Face directory, detected from the path.

    Raises:
        FormatError: when the path is neither.
    """
    p = Path(path)
    if p.is_dir():
        return from_hf_dir(p, progress)
    if p.is_file():
        with p.open("rb") as f:
            magic = f.read(4)
        if magic == b"GGUF":
            return from_gguf(p, progress)
        raise FormatError(f"{p}: not a GGUF file (magic {magic!r}) and not a model directory",
                          path=str(p), offset=0)
    raise FormatError(f"{p}: no such file or directory", path=str(p))
