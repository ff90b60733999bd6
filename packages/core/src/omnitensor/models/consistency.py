"""Consistency checks of a checkpoint: hyper-parameters in sane ranges and against tensor shapes.

They run on the tensor directory before any weight is read (GGUF, Hugging Face) and again on the
merged hyper-parameters before a model is built, so a file whose values disagree is refused with
a `FormatError` naming the file, the key and the tensor, never built into a model that answers
wrong (a dropped layer, clamped positions, NaN logits). Tokenizer tables are checked in
`io.tokenizer`; the spec's own limits in `models.spec`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any, Final

from ..errors import FormatError

__all__ = ["LIMITS", "check_hparams", "check_tensors", "check_vocabulary", "gguf_key", "hf_key"]

#: Inclusive (low, high) bounds of the integer hyper-parameters (high: far above any released
#: model, low enough that a cache or a table of that size is refused before it is allocated).
LIMITS: Final[dict[str, tuple[int, int]]] = {
    "context_length": (1, 1 << 24),
    "embedding_length": (1, 1 << 17),
    "block_count": (1, 1024),
    "feed_forward_length": (1, 1 << 20),
    "head_count": (1, 1 << 12),
    "head_count_kv": (1, 1 << 12),
    "vocab_size": (0, 1 << 24),
    "head_dim": (1, 1 << 12),
    "sliding_window": (1, 1 << 24),
}
#: Hyper-parameters that must be finite and positive (and below the bound).
_POSITIVE: Final[dict[str, float]] = {
    "norm_epsilon": 1.0, "rope_freq_base": 1e12, "rope_freq_base_swa": 1e12,
    "attention_scale": 1e6, "attn_logit_softcapping": 1e9, "final_logit_softcapping": 1e9,
}
_HF_NAMES: Final = {
    "context_length": "max_position_embeddings (n_positions)", "embedding_length": "hidden_size",
    "block_count": "num_hidden_layers", "feed_forward_length": "intermediate_size",
    "head_count": "num_attention_heads", "head_count_kv": "num_key_value_heads",
    "vocab_size": "vocab_size", "norm_epsilon": "rms_norm_eps (layer_norm_eps)",
    "rope_freq_base": "rope_theta", "tie_embeddings": "tie_word_embeddings",
}
_LAYER: Final = re.compile(r"blk\.(\d+)\.")
KeyName = Callable[[str], str]


_GGUF_NAMES: Final = {
    "head_count": "attention.head_count", "head_count_kv": "attention.head_count_kv",
    "rope_freq_base": "rope.freq_base", "head_dim": "attention.key_length",
    "sliding_window": "attention.sliding_window", "attention_scale": "attention.scale",
    "tie_embeddings": "(no output.weight tensor)",
}


def gguf_key(arch: str) -> KeyName:
    """Names hyper-parameters as GGUF metadata keys (``llama.block_count``)."""
    from ..io.names import RMS_ARCHS

    eps = "attention.layer_norm_rms_epsilon" if arch in RMS_ARCHS else \
        "attention.layer_norm_epsilon"
    names = {**_GGUF_NAMES, "norm_epsilon": eps}
    return lambda key: f"{arch}.{names.get(key, key)}"


def hf_key(key: str) -> str:
    """Names hyper-parameters as ``config.json`` keys."""
    return _HF_NAMES.get(key, key)


def _fail(source: str, key: str, problem: str, remedy: str, *, tensor: str | None = None
          ) -> FormatError:
    return FormatError(f"{source}: {problem}; {remedy}", path=source, key=key, tensor=tensor)


def check_hparams(hparams: Mapping[str, Any], source: str, name: KeyName = hf_key) -> None:
    """Refuse hyper-parameters out of their ranges or inconsistent among themselves.

    Args:
        hparams: GGUF-style names (``embedding_length``, ``head_count`` ...).
        source: the file (or spec) they came from.
        name: how the source spells a key, for the message.

    Raises:
        FormatError: naming the source and the key, with the range or the rule broken.
    """
    for key, (low, high) in LIMITS.items():
        value = hparams.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise _fail(source, key, f"{name(key)} = {value!r} is out of range "
                        f"(expected an integer in {low}..{high})", "fix the value in the file")
    for key, bound in _POSITIVE.items():
        value = hparams.get(key)
        if value is None:
            continue
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or not 0 < value < bound:
            raise _fail(source, key, f"{name(key)} = {value!r} must be a finite number in "
                        f"(0, {bound:g})", "fix the value in the file")
    heads, kv = hparams.get("head_count"), hparams.get("head_count_kv")
    width, head_dim = hparams.get("embedding_length"), hparams.get("head_dim")
    if isinstance(heads, int) and isinstance(kv, int) and heads % kv:
        raise _fail(source, "head_count_kv", f"{name('head_count')} = {heads} is not a "
                    f"multiple of {name('head_count_kv')} = {kv}", "fix one of the two")
    if isinstance(heads, int) and isinstance(width, int) and not head_dim and width % heads:
        raise _fail(source, "head_count", f"{name('head_count')} = {heads} does not divide "
                    f"{name('embedding_length')} = {width}", "fix one of the two, or give "
                    "the head size (head_dim / attention.key_length)")
    layers, sliding = hparams.get("block_count"), hparams.get("sliding_layers")
    if isinstance(sliding, list) and isinstance(layers, int) and len(sliding) != layers:
        raise _fail(source, "sliding_layers", f"{len(sliding)} layer types for "
                    f"{name('block_count')} = {layers} layers", "fix layer_types")


def check_tensors(hparams: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]],
                  source: str, name: KeyName = hf_key, *, causal: bool = True) -> None:
    """Refuse hyper-parameters that disagree with the tensors (canonical names and layout).

    Checks the layer count against the ``blk.N.`` tensors, the vocabulary and the width against
    the embedding, the heads against the q/k/v rows, learned positions against the context
    length, the output head against the tie setting, and every norm against the width.

    Args:
        hparams: GGUF-style names, already range-checked (`check_hparams`).
        shapes: tensor name (llama.cpp's) -> shape in omnitensor's layout.
        source: the file, for the message.
        name: how the source spells a key.
        causal: a text generator (needs an output head, its own or tied).

    Raises:
        FormatError: naming the file, the key and the conflicting tensor.
    """
    def conflict(key: str, tensor: str, problem: str) -> FormatError:
        return _fail(source, key, f"{name(key)} = {hparams.get(key)!r} but tensor {tensor!r} "
                     f"has shape {shapes[tensor]} ({problem})", "the file is inconsistent: "
                     "fix the key or re-export the model", tensor=tensor)

    layers = hparams.get("block_count")
    found = sorted({int(m.group(1)) for n in shapes if (m := _LAYER.match(n))})
    if isinstance(layers, int) and found and found != list(range(layers)):
        extra = [i for i in found if i >= layers]
        missing = sorted(set(range(layers)) - set(found))
        example = next(n for n in shapes if n.startswith(f"blk.{(extra or found)[-1]}."))
        what = (f"the file also has layer(s) {extra[:4]}" if extra
                else f"layer(s) {missing[:4]} have no tensors")
        raise _fail(source, "block_count", f"{name('block_count')} = {layers} but {what} "
                    f"(e.g. {example!r})", "fix the key or re-export the model", tensor=example)
    width, vocab = hparams.get("embedding_length"), hparams.get("vocab_size")
    heads, kv = hparams.get("head_count"), hparams.get("head_count_kv")
    head_dim = hparams.get("head_dim") or (
        width // heads if isinstance(width, int) and isinstance(heads, int) and heads else None)
    embd = shapes.get("token_embd.weight")
    if embd is not None:
        if len(embd) != 2 or embd[1] != width:
            raise conflict("embedding_length", "token_embd.weight", "expected (vocab, width)")
        if vocab and embd[0] != vocab:
            raise conflict("vocab_size", "token_embd.weight", "one row per token")
    out = shapes.get("output.weight")
    if out is not None and (len(out) != 2 or out[1] != width or (vocab and out[0] != vocab)):
        raise conflict("embedding_length", "output.weight", "expected (vocab, width)")
    if causal and out is None and hparams.get("tie_embeddings") is False:
        raise _fail(source, "tie_embeddings", f"{name('tie_embeddings')} is false but there is "
                    "no output head (output.weight / lm_head.weight)", "add the tensor, or set "
                    "the key to true if the model reuses its embeddings")
    positions = shapes.get("position_embd.weight")
    context = hparams.get("context_length")
    if positions is not None and isinstance(context, int) and positions[0] < context:
        raise conflict("context_length", "position_embd.weight", "fewer position rows than the "
                       "context length: positions past the table would be clamped")
    if not isinstance(head_dim, int):
        return
    rows = {"attn_q": heads, "attn_k": kv, "attn_v": kv}
    for tensor, shape in shapes.items():
        part = tensor.split(".")[2] if _LAYER.match(tensor) else None
        count = rows.get(part or "")
        if isinstance(count, int) and tensor.endswith(".weight") and shape[0] != count * head_dim:
            key = "head_count" if part == "attn_q" else "head_count_kv"
            raise conflict(key, tensor, f"expected {count} heads x {head_dim} rows")
        if part == "attn_qkv" and tensor.endswith(".weight") and isinstance(heads, int) \
                and isinstance(kv, int) and shape[0] != (heads + 2 * kv) * head_dim:
            raise conflict("head_count", tensor, f"expected ({heads} + 2 x {kv}) heads x "
                           f"{head_dim} rows")
        if tensor.endswith("norm.weight") and "_q_norm" not in tensor \
                and "_k_norm" not in tensor and shape != (width,):
            raise conflict("embedding_length", tensor, "a norm weight has one entry per channel")


def check_vocabulary(tokenizer: Any, shapes: Mapping[str, tuple[int, ...]], source: str) -> None:
    """Refuse special token ids past the embedding's rows (they would read another row).

    Ordinary ids are checked when text is encoded (`runtime.loaded`): an exporter may write
    tokens that no text produces (llama.cpp's converter pads merges with extra tokens).

    Raises:
        FormatError: naming the tokenizer's source, the id and the embedding tensor.
    """
    embd = shapes.get("token_embd.weight")
    if embd is None or not embd:
        return
    specials = {"bos": tokenizer.bos_id, "pad": tokenizer.pad_id,
                **{f"eos #{i}": e for i, e in enumerate(tokenizer.eos_ids)}}
    for what, token in specials.items():
        if token is not None and not 0 <= token < embd[0]:
            raise FormatError(f"{source}: the {what} token id {token} is past the {embd[0]} rows "
                              "of token_embd.weight; the tokenizer does not belong to these "
                              "weights", path=source, tensor="token_embd.weight")
