"""Rotary position embedding and scaled dot-product attention (causal, padding, GQA, KV cache).

Shapes follow PyTorch: queries ``(B, Hq, T, D)``, keys/values ``(B, Hkv, S, D)`` with ``Hq`` a
multiple of ``Hkv`` (grouped-query attention shares each key/value head between ``Hq / Hkv``
query heads without copying). Positions and cache lengths are tensors, never baked-in constants,
so one compiled program serves every decode step.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..dtypes import as_dtype, bool_, float32, float64, int32
from ..errors import OmnitensorError, ShapeError
from ..tensor.creation import arange
from ..tensor.math import where
from ..tensor.shape import concatenate
from ..tensor.tensor import Tensor, as_tensor
from ._ops import lowest, op
from .activations import softmax
from .registry import functional

__all__ = ["rope_frequencies", "rope_tables", "rotary_embedding", "scaled_dot_product_attention"]


def rope_frequencies(head_dim: int, base: float = 10000.0,
                     scaling: Mapping[str, Any] | None = None) -> np.ndarray[Any, Any]:
    """Inverse frequencies ``base ** (-2i / head_dim)`` (float64), with a scaling variant.

    `scaling` (Hugging Face's ``rope_scaling``): ``{"type": "linear", "factor": f}`` divides
    positions by f; ``{"type": "ntk", "factor": f}`` raises the base (NTK-aware);
    ``{"type": "llama3", "factor", "low_freq_factor", "high_freq_factor",
    "original_max_position_embeddings"}`` is Llama 3's piecewise rule; ``{"type": "factors",
    "factors": [...]}`` divides each frequency by its factor (llama.cpp's ``rope_freqs.weight``).
    """
    if head_dim % 2:
        raise ShapeError(f"rope: head_dim must be even (got {head_dim})", op="rope")
    kind = (scaling or {}).get("type", (scaling or {}).get("rope_type", "default"))
    factor = float((scaling or {}).get("factor", 1.0))
    if kind == "ntk":
        base = base * factor ** (head_dim / (head_dim - 2))
    inv = base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    if kind == "linear":
        inv = inv / factor
    elif kind == "llama3":
        assert scaling is not None
        low = float(scaling.get("low_freq_factor", 1.0))
        high = float(scaling.get("high_freq_factor", 4.0))
        old = float(scaling.get("original_max_position_embeddings", 8192))
        wavelen = 2 * math.pi / inv
        smooth = (old / wavelen - low) / (high - low)
        scaled = np.where(wavelen > old / low, inv / factor, inv)
        mid = (wavelen <= old / low) & (wavelen >= old / high)
        inv = np.where(mid, (1 - smooth) * inv / factor + smooth * inv, scaled)
    elif kind == "factors":
        assert scaling is not None
        factors = np.asarray(scaling.get("factors", ()), dtype=np.float64).reshape(-1)
        if factors.shape != inv.shape:
            raise ShapeError(f"rope: {factors.size} frequency factors for head_dim {head_dim} "
                             f"(expected {inv.size})", op="rope")
        inv = inv / factors
    elif kind not in ("default", "ntk"):
        raise OmnitensorError(f"rope: unknown scaling type {kind!r} (expected linear, ntk, "
                              "llama3 or factors)", op="rope")
    return inv


def rope_tables(positions: Tensor | int, head_dim: int, base: float = 10000.0,
                scaling: Mapping[str, Any] | None = None, dtype: Any = float32
                ) -> tuple[Tensor, Tensor]:
    """RoPE tables ``(cos, sin)`` of shape ``positions.shape + (head_dim // 2,)``.

    `positions` is an integer tensor (e.g. ``arange(T) + offset`` with a KV cache) or a length.
    """
    if isinstance(positions, int):
        positions = arange(positions, dtype=int32)
    # angles in float64 for float64 models, else float32 (then rounded to `dtype`)
    work = float64 if as_dtype(dtype) == float64 else float32
    inv = Tensor._apply("constant", value=rope_frequencies(head_dim, base, scaling)
                        .astype(work.np))
    angles = positions.astype(work).unsqueeze(-1) * inv  # (..., D/2)
    return (Tensor._apply("cos", angles).astype(dtype), Tensor._apply("sin", angles)
            .astype(dtype))


def _fits(table: Tensor, half: tuple[int, ...]) -> bool:
    try:
        return bool(np.broadcast_shapes(table.shape, half) == half)
    except ValueError:
        return False


@functional("rotary_embedding")
def rotary_embedding(x: Tensor, cos: Tensor, sin: Tensor, *, interleaved: bool = False
                     ) -> Tensor:
    """Rotate pairs of features of `x` (..., T, D) by the angles of ``cos``/``sin`` (T, D/2).

    ``interleaved=False`` pairs feature i with i + D/2 (GPT-NeoX / Hugging Face Llama);
    ``interleaved=True`` pairs 2i with 2i+1 (GPT-J, Meta's original Llama).
    """
    d = x.shape[-1]
    if cos.shape[-1] * 2 != d:
        raise ShapeError(f"rotary_embedding: tables of width {cos.shape[-1]} do not fit head "
                         f"dim {d} (expected {d // 2})", op="rotary_embedding",
                         shapes=[x.shape, cos.shape])
    half = (*x.shape[:-1], d // 2)
    if x.dtype.is_floating and cos.dtype == x.dtype == sin.dtype and _fits(cos, half) and (
            _fits(sin, half)):
        return Tensor._apply("rotary_embedding", x, cos, sin, interleaved=bool(interleaved))
    if interleaved:
        pairs = x.reshape(x.shape[:-1] + (d // 2, 2))
        x1, x2 = pairs[..., 0], pairs[..., 1]
        out = concatenate([(x1 * cos - x2 * sin).unsqueeze(-1),
                           (x2 * cos + x1 * sin).unsqueeze(-1)], axis=-1)
        return out.reshape(x.shape)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


@functional("attention")
def scaled_dot_product_attention(
    query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
    dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None, *,
    q_positions: Tensor | None = None, kv_length: Tensor | None = None,
    dropout_key: Tensor | None = None, softcap: float | None = None,
) -> Tensor:
    """softmax(q k^T * scale + mask) v, PyTorch's signature plus KV-cache arguments.

    Args:
        query: (B, Hq, T, D).
        key: (B, Hkv, S, D); Hq must be a multiple of Hkv (grouped-query attention).
        value: (B, Hkv, S, Dv).
        attn_mask: bool (True attends) or additive float mask broadcastable to (B, Hq, T, S);
            a padding mask is ``(B, 1, 1, S)``.
        dropout_p: dropout on the attention weights (needs `dropout_key`).
        is_causal: query i sees keys at positions <= its own. Query positions default to
            ``S - T + i`` (the end of the keys, which is PyTorch's alignment when T == S).
        scale: default ``1 / sqrt(D)``.
        q_positions: int (T,) absolute positions of the queries (decoding with a cache).
        kv_length: 0-d int: keys at positions >= kv_length are masked (fixed-capacity cache).
        dropout_key: RNG key for `dropout_p`.
        softcap: scores become ``softcap * tanh(scores / softcap)`` before masking (Gemma 2).

    Returns:
        (B, Hq, T, Dv).
    """
    b, hq, t, d = query.shape
    hkv, s = key.shape[1], key.shape[2]
    if hq % hkv or key.shape[0] != b or value.shape[:3] != key.shape[:3]:
        raise ShapeError(
            f"attention: incompatible shapes (got query {query.shape}, key {key.shape}, value "
            f"{value.shape}; expected (B, Hq, T, D), (B, Hkv, S, D), (B, Hkv, S, Dv) with Hq a "
            "multiple of Hkv)", op="attention", shapes=[query.shape, key.shape, value.shape])
    groups = hq // hkv
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    if (dropout_p == 0.0 and query.dtype.is_floating and query.dtype == key.dtype == value.dtype
            and value.ndim == 4 and (softcap is None or softcap > 0)):
        composite = _composite(query, key, value, attn_mask, is_causal, scale, q_positions,
                               kv_length, softcap)
        if composite is not None:
            return composite
    q = query.reshape(b, hkv, groups * t, d)  # heads sharing a kv head side by side
    scores = op("dot_general", q, key, contracting=((3,), (3,)), batch=((0, 1), (0, 1)))
    scores = (scores * scale).reshape(b, hq, t, s)  # (B, Hq, T, S)
    if softcap is not None:
        scores = (scores * (1.0 / softcap)).tanh() * softcap
    keep: Tensor | None = None
    if is_causal or kv_length is not None:
        k_pos = arange(s, dtype=int32)
        if is_causal:
            qp = q_positions if q_positions is not None else arange(t, dtype=int32) + (s - t)
            keep = k_pos.reshape(1, s) <= qp.astype(int32).reshape(t, 1)  # (T, S)
        if kv_length is not None:
            valid = k_pos < as_tensor(kv_length).astype(int32)
            keep = valid.reshape(1, s) if keep is None else keep & valid.reshape(1, s)
    if attn_mask is not None:
        if attn_mask.dtype.is_bool:
            keep = attn_mask if keep is None else keep & attn_mask
        else:
            scores = scores + attn_mask.astype(scores.dtype)
    if keep is not None:
        scores = where(keep.astype(bool_), scores, lowest(scores.dtype))
    probs = softmax(scores, axis=-1)
    if dropout_p > 0.0:
        from .basic import dropout

        probs = dropout(probs, dropout_p, key=dropout_key)
    probs = probs.reshape(b, hkv, groups * t, s)
    out = op("dot_general", probs, value, contracting=((3,), (2,)), batch=((0, 1), (0, 1)))
    return out.reshape(b, hq, t, value.shape[-1])


def _composite(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None,
               is_causal: bool, scale: float, q_positions: Tensor | None,
               kv_length: Tensor | None, softcap: float | None) -> Tensor | None:
    """The attention as one `scaled_dot_product_attention` composite.

    None when the mask cannot be carried (one that does not broadcast to the scores).
    """
    b, hq, t, _ = query.shape
    full = (b, hq, t, key.shape[2])
    extras: list[Tensor] = []
    kind = "none"
    if attn_mask is not None:
        mask = as_tensor(attn_mask)
        try:
            fits = np.broadcast_shapes(mask.shape, full) == full
        except ValueError:
            fits = False
        if not fits:
            return None
        kind = "bool" if mask.dtype.is_bool else "additive"
        extras.append(mask if kind == "bool" else mask.astype(query.dtype))
    positions = q_positions is not None and is_causal
    if positions:
        assert q_positions is not None
        extras.append(as_tensor(q_positions).astype(int32).reshape(t))
    if kv_length is not None:
        extras.append(as_tensor(kv_length).astype(int32).reshape(()))
    return Tensor._apply("scaled_dot_product_attention", query, key, value, *extras,
                         scale=float(scale), is_causal=bool(is_causal), mask_kind=kind,
                         has_q_positions=positions, has_kv_length=kv_length is not None,
                         softcap=float(softcap or 0.0))
