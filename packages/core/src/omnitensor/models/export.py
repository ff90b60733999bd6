"""Exporting a checkpoint as a GGUF file that llama.cpp loads (F32, F16, BF16 or Q8_0 ...).

Weights go from omnitensor's canonical layout back to llama.cpp's (`io.names.to_gguf_tensor`
redoes llama's rotary q/k row order); hyper-parameters become llama.cpp's metadata keys; a BPE
tokenizer (byte-level or character vocabularies) becomes ``tokenizer.ggml.*`` keys.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import FormatError
from ..io.gguf import write_gguf
from ..io.names import (
    GGUF_ROTARY_PAIRS,
    HParams,
    gguf_metadata_from_hparams,
    to_gguf_tensor,
)
from ..io.weights import Array, QuantizedArray
from .checkpoint import Checkpoint

__all__ = ["export_gguf", "gguf_tokenizer_metadata"]


def gguf_tokenizer_metadata(tokenizer: Any) -> dict[str, Any]:
    """``tokenizer.ggml.*`` keys for a BPE `tokenizer` (`io.tokenizer.Tokenizer`).

    Raises:
        FormatError: for tokenizer models GGUF's ``gpt2`` tokenizer cannot express.
    """
    spec = json.loads(tokenizer.to_json())
    model = spec.get("model", {})
    if model.get("type") not in ("BPE", "WordLevel"):
        raise FormatError(f"export: only BPE and word-level tokenizers are exported to GGUF "
                          f"(got {model.get('type')!r}); pass tokenizer_metadata explicitly")
    vocab: dict[str, int] = dict(model.get("vocab", {}))
    for added in spec.get("added_tokens", []):
        vocab[added["content"]] = int(added["id"])
    tokens = [""] * (max(vocab.values()) + 1 if vocab else 0)
    for token, index in vocab.items():
        tokens[index] = token
    special = {a["content"] for a in spec.get("added_tokens", []) if a.get("special")}
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    if not merges:
        # NOTE: llama.cpp's gpt2 tokenizer needs at least one merge (and the gguf package cannot
        # write an empty array): add one reserved pair that text never forms. A special token
        # is never built from text pieces, so merging it with itself is inert.
        first = next((t for t in tokens if t in special), tokens[0])
        tokens.append(first + first)
        merges = [f"{first} {first}"]
    types = [3 if t in special else 1 for t in tokens]
    out: dict[str, Any] = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "gpt-2",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.add_bos_token": bool(tokenizer.add_bos),
    }
    for key, value in (("bos", tokenizer.bos_id), ("eos", tokenizer.eos_id),
                       ("padding", tokenizer.pad_id)):
        if value is not None:
            out[f"tokenizer.ggml.{key}_token_id"] = int(value)
    if tokenizer.chat_template:
        out["tokenizer.chat_template"] = tokenizer.chat_template
    return out


def _rope_scaling(hp: Mapping[str, Any], metadata: dict[str, Any],
                  weights: dict[str, Array | QuantizedArray], hparams: HParams) -> None:
    """Rotary scaling as llama.cpp's converter writes it.

    Linear scaling becomes metadata keys; Llama 3's rule (and explicit factors) the
    ``rope_freqs.weight`` divisors of each frequency.
    """
    scaling = hp.get("rope_scaling")
    if not isinstance(scaling, Mapping):
        return
    kind = scaling.get("type", scaling.get("rope_type", "default"))
    arch = hparams.arch
    if kind == "linear":
        metadata[f"{arch}.rope.scaling.type"] = "linear"
        metadata[f"{arch}.rope.scaling.factor"] = float(scaling.get("factor", 1.0))
    elif kind in ("llama3", "factors"):
        from ..functional.attention import rope_frequencies

        head_dim = int(hp.get("head_dim") or hparams.head_dim)
        base = float(hparams.rope_freq_base)
        plain = rope_frequencies(head_dim, base)
        weights["rope_freqs.weight"] = (plain / rope_frequencies(head_dim, base, scaling)
                                        ).astype(np.float32)
    elif kind != "default":
        raise FormatError(f"export: rope scaling {kind!r} has no GGUF form omnitensor writes")


def export_gguf(checkpoint: Checkpoint, path: str | Path, *, dtype: str = "f32",
                tokenizer_metadata: Mapping[str, Any] | None = None,
                name: str | None = None) -> Path:
    """Write `checkpoint` as a GGUF file llama.cpp loads and runs the same.

    Args:
        checkpoint: weights in omnitensor's layout (`models.open_checkpoint`, or built in memory).
        path: the output file.
        dtype: ``"f32"``, ``"f16"``, ``"bf16"``, a ggml format (``"q4_0"``, ``"q4_1"``,
            ``"q5_0"``, ``"q5_1"``, ``"q8_0"``, ``"q2_k"``, ``"q3_k"``, ``"q4_k"``, ``"q5_k"``,
            ``"q6_k"``, ``"iq4_nl"``, ``"iq4_xs"``) or a llama.cpp mix (``"q4_k_m"``,
            ``"q5_k_m"``, ``"q4_k_s"``, ``"q5_k_s"``) for matrices (1-D tensors stay f32, as
            llama.cpp writes them; see `io.gguf_mix`).
        tokenizer_metadata: ``tokenizer.ggml.*`` keys; by default made from the checkpoint's
            tokenizer (`gguf_tokenizer_metadata`).
        name: ``general.name`` (default: the file's stem).

    Returns:
        The path written.
    """
    fields = HParams.__dataclass_fields__
    hparams = HParams(**{k: v for k, v in checkpoint.hparams.items() if k in fields})
    metadata: dict[str, Any] = gguf_metadata_from_hparams(hparams)
    metadata["general.name"] = name or Path(path).stem
    arch = hparams.arch
    head_dim = checkpoint.hparams.get("head_dim")
    if head_dim and head_dim != hparams.head_dim:  # explicit head size (Qwen3, Gemma)
        metadata[f"{arch}.attention.key_length"] = int(head_dim)
        metadata[f"{arch}.attention.value_length"] = int(head_dim)
        metadata[f"{arch}.rope.dimension_count"] = int(head_dim)
    if checkpoint.hparams.get("sliding_window"):
        metadata[f"{arch}.attention.sliding_window"] = int(checkpoint.hparams["sliding_window"])
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        if checkpoint.hparams.get(key):
            metadata[f"{arch}.{key}"] = float(checkpoint.hparams[key])
    if checkpoint.hparams.get("attention_scale"):
        metadata[f"{arch}.attention.scale"] = float(checkpoint.hparams["attention_scale"])
    if tokenizer_metadata is not None:
        metadata.update(tokenizer_metadata)
    elif checkpoint.tokenizer is not None:
        metadata.update(gguf_tokenizer_metadata(checkpoint.tokenizer))
    weights: dict[str, Array | QuantizedArray] = {}
    _rope_scaling(checkpoint.hparams, metadata, weights, hparams)
    # q/k rows a GGUF checkpoint kept in llama.cpp's pairs are written as they are
    pairs = bool(checkpoint.hparams.get("rope_interleaved", False))
    if pairs and hparams.arch not in GGUF_ROTARY_PAIRS:
        raise FormatError(f"export_gguf: the checkpoint rotates q/k in pairs of neighbours "
                          f"(rope_interleaved) but llama.cpp's {hparams.arch} rotates halves; "
                          "load it with rotary_pairs=False or export it as llama")
    for n, v in checkpoint.weights.items():
        weights[n] = (to_gguf_tensor(hparams.arch, n, v, hparams, rotary_pairs=pairs)
                      if isinstance(v, QuantizedArray)
                      else to_gguf_tensor(hparams.arch, n, v, hparams, rotary_pairs=pairs))
    write_gguf(path, metadata, weights, arch=hparams.arch, dtype=dtype)
    return Path(path)
