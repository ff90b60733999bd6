"""Tensor names and layouts per architecture: Hugging Face <-> GGUF (llama.cpp) names.

omnitensor's canonical names are llama.cpp's (``token_embd.weight``, ``blk.{i}.attn_q.weight``,
``output_norm.weight``, ``output.weight``...), and its canonical layout is Hugging Face's:
matrices are ``[out_features, in_features]`` (GPT-2's Conv1D weights are transposed) and llama's
rotary q/k rows are in Hugging Face's rotate-half order. llama.cpp's converter permutes those rows
for the ``llama`` architecture (not for ``qwen2``) into pairs of neighbours (`GGUF_ROTARY_PAIRS`),
so `from_gguf_tensor` undoes it and `to_gguf_tensor` redoes it: weights from either source end up
identical. A model may instead keep the file's rows (``rotary_pairs=True``: no copy of q and k)
and rotate neighbouring pairs, as llama.cpp does (``rope_interleaved`` among its hyper-parameters;
`models.checkpoint.from_gguf` does so by default). Hyper-parameters are mapped here too
(`hparams_from_hf_config`, `hparams_from_gguf`, `gguf_metadata_from_hparams`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar, cast, final

import numpy as np

from ..errors import FormatError, ShapeError
from .weights import Array, QuantizedArray

__all__ = [
    "ARCHITECTURES",
    "GGUF_ROTARY_PAIRS",
    "HParams",
    "arch_from_hf_config",
    "from_gguf_tensor",
    "from_hf_tensor",
    "gguf_metadata_from_hparams",
    "hf_name_map",
    "hf_to_gguf_name",
    "hparams_from_gguf",
    "hparams_from_hf_config",
    "hf_tensor_shape",
    "permute_qk",
    "to_gguf_tensor",
    "unpermute_qk",
]

# (HF-name regex, GGUF name template); ``{i}`` is the layer index from group "i". `None` drops
# buffers that are not weights (masks, rotary caches).
_Rule = tuple[re.Pattern[str], str | None]


def _rules(prefix: str, pairs: list[tuple[str, str | None]]) -> list[_Rule]:
    return [(re.compile(f"^(?:{prefix})?{pattern}$"), name) for pattern, name in pairs]


_LAYER = r"(?P<i>\d+)"
_WB = r"(?P<p>weight|bias)"

_GPT2: Final = _rules(r"transformer\.", [
    (r"wte\.weight", "token_embd.weight"),
    (r"wpe\.weight", "position_embd.weight"),
    (rf"h\.{_LAYER}\.ln_1\.{_WB}", "blk.{i}.attn_norm.{p}"),
    (rf"h\.{_LAYER}\.attn\.c_attn\.{_WB}", "blk.{i}.attn_qkv.{p}"),
    (rf"h\.{_LAYER}\.attn\.c_proj\.{_WB}", "blk.{i}.attn_output.{p}"),
    (rf"h\.{_LAYER}\.ln_2\.{_WB}", "blk.{i}.ffn_norm.{p}"),
    (rf"h\.{_LAYER}\.mlp\.c_fc\.{_WB}", "blk.{i}.ffn_up.{p}"),
    (rf"h\.{_LAYER}\.mlp\.c_proj\.{_WB}", "blk.{i}.ffn_down.{p}"),
    (rf"h\.{_LAYER}\.attn\.(?:masked_)?bias", None),
    (rf"ln_f\.{_WB}", "output_norm.{p}"),
    (r"lm_head\.weight", "output.weight"),
])
_LLAMA: Final = _rules(r"model\.", [
    (r"embed_tokens\.weight", "token_embd.weight"),
    (rf"layers\.{_LAYER}\.input_layernorm\.weight", "blk.{i}.attn_norm.weight"),
    (rf"layers\.{_LAYER}\.self_attn\.q_proj\.{_WB}", "blk.{i}.attn_q.{p}"),
    (rf"layers\.{_LAYER}\.self_attn\.k_proj\.{_WB}", "blk.{i}.attn_k.{p}"),
    (rf"layers\.{_LAYER}\.self_attn\.v_proj\.{_WB}", "blk.{i}.attn_v.{p}"),
    (rf"layers\.{_LAYER}\.self_attn\.o_proj\.{_WB}", "blk.{i}.attn_output.{p}"),
    (rf"layers\.{_LAYER}\.self_attn\.rotary_emb\.inv_freq", None),
    (rf"layers\.{_LAYER}\.post_attention_layernorm\.weight", "blk.{i}.ffn_norm.weight"),
    (rf"layers\.{_LAYER}\.mlp\.gate_proj\.weight", "blk.{i}.ffn_gate.weight"),
    (rf"layers\.{_LAYER}\.mlp\.up_proj\.weight", "blk.{i}.ffn_up.weight"),
    (rf"layers\.{_LAYER}\.mlp\.down_proj\.weight", "blk.{i}.ffn_down.weight"),
    (r"rotary_emb\.inv_freq", None),
    (r"norm\.weight", "output_norm.weight"),
    (r"lm_head\.weight", "output.weight"),
])
_BERT_WB = r"(?P<p>weight|bias|gamma|beta)"
_BERT: Final = _rules(r"bert\.", [
    (r"embeddings\.word_embeddings\.weight", "token_embd.weight"),
    (r"embeddings\.position_embeddings\.weight", "position_embd.weight"),
    (r"embeddings\.token_type_embeddings\.weight", "token_types.weight"),
    (rf"embeddings\.LayerNorm\.{_BERT_WB}", "token_embd_norm.{p}"),
    (r"embeddings\.position_ids", None),
    (rf"encoder\.layer\.{_LAYER}\.attention\.self\.query\.{_WB}", "blk.{i}.attn_q.{p}"),
    (rf"encoder\.layer\.{_LAYER}\.attention\.self\.key\.{_WB}", "blk.{i}.attn_k.{p}"),
    (rf"encoder\.layer\.{_LAYER}\.attention\.self\.value\.{_WB}", "blk.{i}.attn_v.{p}"),
    (rf"encoder\.layer\.{_LAYER}\.attention\.output\.dense\.{_WB}", "blk.{i}.attn_output.{p}"),
    (rf"encoder\.layer\.{_LAYER}\.attention\.output\.LayerNorm\.{_BERT_WB}",
     "blk.{i}.attn_output_norm.{p}"),
    (rf"encoder\.layer\.{_LAYER}\.intermediate\.dense\.{_WB}", "blk.{i}.ffn_up.{p}"),
    (rf"encoder\.layer\.{_LAYER}\.output\.dense\.{_WB}", "blk.{i}.ffn_down.{p}"),
    (rf"encoder\.layer\.{_LAYER}\.output\.LayerNorm\.{_BERT_WB}",
     "blk.{i}.layer_output_norm.{p}"),
    (rf"pooler\.dense\.{_WB}", "pooler.dense.{p}"),
])

_QWEN3: Final = [*_LLAMA, *_rules(r"model\.", [
    (rf"layers\.{_LAYER}\.self_attn\.q_norm\.weight", "blk.{i}.attn_q_norm.weight"),
    (rf"layers\.{_LAYER}\.self_attn\.k_norm\.weight", "blk.{i}.attn_k_norm.weight"),
])]

_PHI3: Final = _rules(r"model\.", [
    (r"embed_tokens\.weight", "token_embd.weight"),
    (rf"layers\.{_LAYER}\.input_layernorm\.weight", "blk.{i}.attn_norm.weight"),
    (rf"layers\.{_LAYER}\.self_attn\.qkv_proj\.weight", "blk.{i}.attn_qkv.weight"),
    (rf"layers\.{_LAYER}\.self_attn\.o_proj\.weight", "blk.{i}.attn_output.weight"),
    (rf"layers\.{_LAYER}\.post_attention_layernorm\.weight", "blk.{i}.ffn_norm.weight"),
    # gate and up fused, gate first (llama.cpp keeps them fused as ffn_up)
    (rf"layers\.{_LAYER}\.mlp\.gate_up_proj\.weight", "blk.{i}.ffn_up.weight"),
    (rf"layers\.{_LAYER}\.mlp\.down_proj\.weight", "blk.{i}.ffn_down.weight"),
    (r"norm\.weight", "output_norm.weight"),
    (r"lm_head\.weight", "output.weight"),
])

_GEMMA: Final = _rules(r"model\.", [
    (r"embed_tokens\.weight", "token_embd.weight"),
    (rf"layers\.{_LAYER}\.input_layernorm\.weight", "blk.{i}.attn_norm.weight"),
    (rf"layers\.{_LAYER}\.self_attn\.q_proj\.weight", "blk.{i}.attn_q.weight"),
    (rf"layers\.{_LAYER}\.self_attn\.k_proj\.weight", "blk.{i}.attn_k.weight"),
    (rf"layers\.{_LAYER}\.self_attn\.v_proj\.weight", "blk.{i}.attn_v.weight"),
    (rf"layers\.{_LAYER}\.self_attn\.o_proj\.weight", "blk.{i}.attn_output.weight"),
    (rf"layers\.{_LAYER}\.self_attn\.q_norm\.weight", "blk.{i}.attn_q_norm.weight"),
    (rf"layers\.{_LAYER}\.self_attn\.k_norm\.weight", "blk.{i}.attn_k_norm.weight"),
    (rf"layers\.{_LAYER}\.post_attention_layernorm\.weight",
     "blk.{i}.post_attention_norm.weight"),
    (rf"layers\.{_LAYER}\.pre_feedforward_layernorm\.weight", "blk.{i}.ffn_norm.weight"),
    (rf"layers\.{_LAYER}\.post_feedforward_layernorm\.weight", "blk.{i}.post_ffw_norm.weight"),
    (rf"layers\.{_LAYER}\.mlp\.gate_proj\.weight", "blk.{i}.ffn_gate.weight"),
    (rf"layers\.{_LAYER}\.mlp\.up_proj\.weight", "blk.{i}.ffn_up.weight"),
    (rf"layers\.{_LAYER}\.mlp\.down_proj\.weight", "blk.{i}.ffn_down.weight"),
    (r"norm\.weight", "output_norm.weight"),
    (r"lm_head\.weight", "output.weight"),
])

# llama.cpp architecture -> rules. Mistral and TinyLlama are "llama"; Qwen2 has its own name
# (q/k/v biases, no q/k row permutation).
ARCHITECTURES: Final[dict[str, list[_Rule]]] = {
    "gpt2": _GPT2,
    "llama": _LLAMA,
    "qwen2": _LLAMA,
    "qwen3": _QWEN3,
    "phi3": _PHI3,
    "gemma2": _GEMMA,
    "gemma3": _GEMMA,
    "bert": _BERT,
}
#: Architectures normalized with RMSNorm (GGUF ``attention.layer_norm_rms_epsilon``) and rotary.
RMS_ARCHS: Final = ("llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3")
#: Gemma's RMSNorm multiplies by (1 + weight); llama.cpp's converter stores 1 + weight.
_GEMMA_NORM: Final = re.compile(r".*norm\.weight")
_HF_MODEL_TYPES: Final = {"gpt2": "gpt2", "llama": "llama", "mistral": "llama", "qwen2": "qwen2",
                          "qwen3": "qwen3", "phi3": "phi3", "gemma2": "gemma2",
                          "gemma3_text": "gemma3", "bert": "bert"}
_GPT2_CONV1D: Final = re.compile(r"blk\.\d+\.(attn_qkv|attn_output|ffn_up|ffn_down)\.weight")
_ROTARY_QK: Final = re.compile(r"blk\.\d+\.attn_(q|k)\.(weight|bias)")
#: Architectures whose q/k rows llama.cpp's converter stores in pairs of neighbours (each head's
#: rows ``[x0, y0, x1, y1, ...]`` where Hugging Face has ``[x0, x1, ..., y0, y1, ...]``).
GGUF_ROTARY_PAIRS: Final = frozenset({"llama"})


def _rules_for(arch: str) -> list[_Rule]:
    if arch not in ARCHITECTURES:
        raise FormatError(f"names: unknown architecture {arch!r} (expected one of "
                          f"{', '.join(ARCHITECTURES)})")
    return ARCHITECTURES[arch]


def arch_from_hf_config(config: Mapping[str, Any], source: str = "names") -> str:
    """llama.cpp architecture name for a Hugging Face ``config.json`` (``model_type``).

    Raises:
        FormatError: for a model type with no mapping.
    """
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in _HF_MODEL_TYPES:
        raise FormatError(f"{source}: unsupported model_type {model_type!r} (expected one of "
                          f"{', '.join(_HF_MODEL_TYPES)})", path=source, key="model_type")
    return _HF_MODEL_TYPES[str(model_type)]


def hf_to_gguf_name(arch: str, hf_name: str) -> str | None:
    """The GGUF name of Hugging Face tensor `hf_name`; None for buffers that are not weights.

    Raises:
        FormatError: for a name no rule of `arch` knows.
    """
    for pattern, template in _rules_for(arch):
        match = pattern.match(hf_name)
        if match:
            return None if template is None else template.format(**match.groupdict())
    raise FormatError(f"names: {arch} has no GGUF name for Hugging Face tensor {hf_name!r}")


def hf_name_map(arch: str, hf_names: Any) -> dict[str, str]:
    """GGUF name -> Hugging Face name for every weight in `hf_names` (buffers dropped).

    Raises:
        FormatError: for an unknown name, or two names mapping to one GGUF name.
    """
    out: dict[str, str] = {}
    for hf_name in hf_names:
        name = hf_to_gguf_name(arch, hf_name)
        if name is None:
            continue
        if name in out:
            raise FormatError(f"names: {hf_name!r} and {out[name]!r} both map to {name!r}")
        out[name] = hf_name
    return out


# --- rotary q/k row order ---------------------------------------------------------------------


def _heads(op: str, rows: int, n_head: int) -> int:
    if n_head <= 0 or rows % (2 * n_head):
        raise ShapeError(f"{op}: {rows} rows do not split into {n_head} heads of even size")
    return rows // n_head // 2


def permute_qk(w: Array, n_head: int) -> Array:
    """Hugging Face (rotate-half) q/k rows -> llama.cpp's interleaved-pair row order.

    llama.cpp's ``LlamaModel.permute``: per head, rows ``[x0..x(d/2-1), y0..y(d/2-1)]`` become
    ``[x0, y0, x1, y1, ...]``. Pass the query head count for q and the KV head count for k.

    Args:
        w: weight [n_head * head_dim, in] or bias [n_head * head_dim].
        n_head: heads of this projection.
    """
    half = _heads("permute_qk", w.shape[0], n_head)
    # (n_head, 2, half, ...) -> (n_head, half, 2, ...)
    return w.reshape(n_head, 2, half, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute_qk(w: Array, n_head: int) -> Array:
    """Inverse of `permute_qk`: llama.cpp's interleaved q/k rows -> Hugging Face's order."""
    half = _heads("unpermute_qk", w.shape[0], n_head)
    # (n_head, half, 2, ...) -> (n_head, 2, half, ...)
    return w.reshape(n_head, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


_W = TypeVar("_W", Array, QuantizedArray)


def _permute_any(value: Array | QuantizedArray, n_head: int, *,
                 inverse: bool) -> Array | QuantizedArray:
    fn = unpermute_qk if inverse else permute_qk
    if isinstance(value, QuantizedArray):
        # Blocks run along the rows' last axis, so permuting rows moves whole rows of blocks.
        return QuantizedArray(np.ascontiguousarray(fn(value.blocks, n_head)), value.format,
                              value.shape)
    return np.ascontiguousarray(fn(np.asarray(value), n_head))


def _qk_heads(name: str, hparams: HParams) -> int:
    return hparams.head_count if ".attn_q." in name else hparams.head_count_kv


def from_gguf_tensor(arch: str, name: str, value: _W, hparams: HParams, *,
                     rotary_pairs: bool = False) -> _W:
    """A tensor as stored in a GGUF file -> omnitensor's layout (undo llama's q/k permutation).

    Args:
        arch: the file's architecture.
        name: the tensor's canonical name.
        value: the tensor as stored.
        hparams: the file's hyper-parameters (head counts).
        rotary_pairs: keep llama's q/k rows as stored (in pairs of neighbours; the model must
            then rotate pairs, ``rope_interleaved``): the tensor is returned as it is.
    """
    if arch in GGUF_ROTARY_PAIRS and not rotary_pairs and _ROTARY_QK.fullmatch(name):
        return cast(_W, _permute_any(value, _qk_heads(name, hparams), inverse=True))
    return value


def to_gguf_tensor(arch: str, name: str, value: _W, hparams: HParams, *,
                   rotary_pairs: bool = False) -> _W:
    """Omnitensor's layout -> as llama.cpp's converter stores it (redo llama's q/k permutation).

    Args:
        arch: the architecture written.
        name: the tensor's canonical name.
        value: the tensor in omnitensor's layout.
        hparams: the model's hyper-parameters (head counts).
        rotary_pairs: `value`'s q/k rows are already in pairs (a model with
            ``rope_interleaved``): the tensor is returned as it is.
    """
    if arch in GGUF_ROTARY_PAIRS and not rotary_pairs and _ROTARY_QK.fullmatch(name):
        return cast(_W, _permute_any(value, _qk_heads(name, hparams), inverse=False))
    return value


def hf_tensor_shape(arch: str, name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape `from_hf_tensor` gives tensor `name` of Hugging Face shape `shape`."""
    if arch == "gpt2" and _GPT2_CONV1D.fullmatch(name):
        return tuple(reversed(shape))
    return tuple(shape)


def from_hf_tensor(arch: str, name: str, value: Array) -> Array:
    """A Hugging Face tensor (already renamed to `name`) -> omnitensor's layout.

    GPT-2's Conv1D weights are ``[in, out]``; they are transposed to ``[out, in]`` like every
    other matrix (as llama.cpp's converter does).
    """
    if arch == "gpt2" and _GPT2_CONV1D.fullmatch(name):
        return np.ascontiguousarray(value.T)  # (in, out) -> (out, in)
    if arch in ("gemma2", "gemma3") and _GEMMA_NORM.fullmatch(name):
        return np.asarray(value, np.float32) + np.float32(1)  # as llama.cpp's converter
    return value


# --- hyper-parameters -------------------------------------------------------------------------


@final
@dataclass(frozen=True)
class HParams:
    """Architecture hyper-parameters common to both sources (GGUF keys without the arch prefix).

    Attributes:
        arch: llama.cpp architecture name.
        context_length: maximum positions.
        embedding_length: hidden size.
        block_count: layers.
        feed_forward_length: MLP hidden size.
        head_count: query heads.
        head_count_kv: key/value heads (== head_count without grouped-query attention).
        vocab_size: vocabulary rows of the embedding (0 when unknown).
        rope_freq_base: rotary base (theta); llama family only.
        norm_epsilon: RMSNorm / LayerNorm epsilon.
        tie_embeddings: whether the output projection reuses ``token_embd.weight``.
    """

    arch: str
    context_length: int
    embedding_length: int
    block_count: int
    feed_forward_length: int
    head_count: int
    head_count_kv: int
    vocab_size: int = 0
    rope_freq_base: float = 10000.0
    norm_epsilon: float = 1e-5
    tie_embeddings: bool = False

    @property
    def head_dim(self) -> int:
        """Per-head size."""
        return self.embedding_length // self.head_count


def _need(source: str, mapping: Mapping[str, Any], *keys: str) -> int:
    for key in keys:
        if key in mapping and mapping[key] is not None:
            return _as_int(source, key, mapping[key])
    raise FormatError(f"{source}: missing hyper-parameter {keys[0]!r}", path=source, key=keys[0])


def _as_int(source: str, key: str, value: Any) -> int:
    """`value` as an int; a float with no fraction is accepted (JSON writers emit 32.0)."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise FormatError(f"{source}: hyper-parameter {key!r} must be an integer (got "
                          f"{value!r})", path=source, key=key)
    return value


def _as_float(source: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FormatError(f"{source}: hyper-parameter {key!r} must be a number (got {value!r})",
                          path=source, key=key)
    return float(value)


def _opt_int(source: str, config: Mapping[str, Any], key: str, default: int) -> int:
    value = config.get(key)
    return default if value is None else _as_int(source, key, value)


def _opt_float(source: str, config: Mapping[str, Any], key: str, default: float) -> float:
    value = config.get(key)
    return default if value is None else _as_float(source, key, value)


def _opt_bool(source: str, config: Mapping[str, Any], key: str, default: bool) -> bool:
    value = config.get(key, default)
    if not isinstance(value, bool):
        raise FormatError(f"{source}: {key!r} must be true or false (got {value!r})",
                          path=source, key=key)
    return value


def hparams_from_hf_config(config: Mapping[str, Any], source: str = "config.json") -> HParams:
    """Hyper-parameters from a Hugging Face ``config.json`` (types checked, not ranges).

    Args:
        config: the parsed file.
        source: the file, for error messages.

    Raises:
        FormatError: for an unsupported model type or a missing key.
    """
    arch = arch_from_hf_config(config, source)
    src = source
    if arch == "gpt2":
        hidden = _need(src, config, "n_embd", "hidden_size")
        heads = _need(src, config, "n_head", "num_attention_heads")
        return HParams(arch, _need(src, config, "n_positions", "n_ctx"), hidden,
                       _need(src, config, "n_layer", "num_hidden_layers"),
                       _opt_int(src, config, "n_inner", 4 * hidden), heads, heads,
                       _opt_int(src, config, "vocab_size", 0),
                       norm_epsilon=_opt_float(src, config, "layer_norm_epsilon", 1e-5),
                       tie_embeddings=_opt_bool(src, config, "tie_word_embeddings", True))
    heads = _need(src, config, "num_attention_heads")
    common: dict[str, Any] = dict(
        context_length=_need(src, config, "max_position_embeddings"),
        embedding_length=_need(src, config, "hidden_size"),
        block_count=_need(src, config, "num_hidden_layers"),
        feed_forward_length=_need(src, config, "intermediate_size"),
        head_count=heads, vocab_size=_opt_int(src, config, "vocab_size", 0))
    if arch == "bert":
        return HParams(arch, head_count_kv=heads,
                       norm_epsilon=_opt_float(src, config, "layer_norm_eps", 1e-12), **common)
    # NOTE: transformers >= 5 writes rope_theta into "rope_parameters", not the top level.
    rope_parameters = config.get("rope_parameters")
    rope: Mapping[str, Any] = rope_parameters if isinstance(rope_parameters, dict) else {}
    theta = config.get("rope_theta")
    theta = rope.get("rope_theta") if theta is None else theta
    return HParams(arch, head_count_kv=_opt_int(src, config, "num_key_value_heads", heads),
                   rope_freq_base=10000.0 if theta is None else _as_float(src, "rope_theta",
                                                                          theta),
                   norm_epsilon=_opt_float(src, config, "rms_norm_eps", 1e-6),
                   tie_embeddings=_opt_bool(src, config, "tie_word_embeddings", False), **common)


def hparams_from_gguf(metadata: Mapping[str, Any], tensor_names: Any = (),
                      source: str = "gguf") -> HParams:
    """Hyper-parameters from GGUF metadata (``<arch>.context_length`` ...), types checked.

    Args:
        metadata: the file's key/values.
        tensor_names: the file's tensor names; a file without ``output.weight`` ties embeddings.
        source: the file, for error messages.

    Raises:
        FormatError: for a missing architecture or key, or a value of the wrong type (naming
            the key).
    """
    arch = metadata.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise FormatError(f"{source}: missing general.architecture", path=source,
                          key="general.architecture")
    src = source

    def key(name: str, default: Any = None) -> Any:
        full = f"{arch}.{name}"
        value = metadata.get(full, default)
        if value is None:
            raise FormatError(f"{src}: missing metadata key {full}", path=src, key=full)
        if isinstance(value, list | Sequence) and not isinstance(value, str):
            # per-layer arrays (a list or a packed NumberArray): every layer must agree
            if not value or any(v != value[0] for v in value):
                raise FormatError(f"{src}: {full} differs between layers (got {value[:8]!r}); "
                                  "omnitensor needs one value for every layer", path=src,
                                  key=full)
            value = value[0]
        return value

    def integer(name: str, default: Any = None) -> int:
        return _as_int(src, f"{arch}.{name}", key(name, default))

    def number(name: str, default: Any = None) -> float:
        return _as_float(src, f"{arch}.{name}", key(name, default))

    heads = integer("attention.head_count")
    eps_key = "attention.layer_norm_rms_epsilon" if arch in RMS_ARCHS \
        else "attention.layer_norm_epsilon"
    names = set(tensor_names)
    tokens = metadata.get("tokenizer.ggml.tokens")
    vocab = metadata.get(f"{arch}.vocab_size")
    vocab = (len(tokens) if isinstance(tokens, list) else 0) if vocab is None else _as_int(
        src, f"{arch}.vocab_size", vocab)
    return HParams(arch, integer("context_length"), integer("embedding_length"),
                   integer("block_count"), integer("feed_forward_length"), heads,
                   integer("attention.head_count_kv", heads), vocab,
                   rope_freq_base=number("rope.freq_base", 10000.0),
                   norm_epsilon=number(eps_key, 1e-5),
                   tie_embeddings=bool(names) and "output.weight" not in names)


def gguf_metadata_from_hparams(hparams: HParams) -> dict[str, Any]:
    """The llama.cpp metadata keys for `hparams` (``general.architecture`` included)."""
    arch = hparams.arch
    out: dict[str, Any] = {
        "general.architecture": arch,
        f"{arch}.context_length": hparams.context_length,
        f"{arch}.embedding_length": hparams.embedding_length,
        f"{arch}.block_count": hparams.block_count,
        f"{arch}.feed_forward_length": hparams.feed_forward_length,
        f"{arch}.attention.head_count": hparams.head_count,
    }
    if arch in RMS_ARCHS:
        out[f"{arch}.attention.head_count_kv"] = hparams.head_count_kv
        out[f"{arch}.rope.freq_base"] = float(hparams.rope_freq_base)
        out[f"{arch}.rope.dimension_count"] = hparams.head_dim
        out[f"{arch}.attention.layer_norm_rms_epsilon"] = float(hparams.norm_epsilon)
    else:
        out[f"{arch}.attention.layer_norm_epsilon"] = float(hparams.norm_epsilon)
    if hparams.vocab_size:
        out[f"{arch}.vocab_size"] = hparams.vocab_size
    return out
