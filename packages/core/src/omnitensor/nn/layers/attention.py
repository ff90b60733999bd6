"""Multi-head attention (RoPE, grouped-query heads, causal, KV cache) and the transformer block."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ... import functional as F
from ...dtypes import int32
from ...errors import OmnitensorError
from ...tensor.creation import arange, zeros
from ...tensor.realize import tracing
from ...tensor.tensor import Tensor, as_tensor
from ..module import Module, assign
from .basic import Dropout, LayerNorm, Linear, RMSNorm
from .mlp import MLP, SwiGLU

__all__ = ["KVCache", "MultiHeadAttention", "TransformerBlock"]


class KVCache:
    """Preallocated keys and values (B, Hkv, capacity, D), written in place at a position.

    The buffers are state tensors updated with `dynamic_update_slice`; the position is a 0-d
    tensor, so every decode step has the same program.
    """

    def __init__(self, batch: int, kv_heads: int, capacity: int, head_dim: int,
                 dtype: Any = None) -> None:
        self.capacity = capacity
        self.k = zeros(batch, kv_heads, capacity, head_dim, dtype=dtype).realize()
        self.v = zeros(batch, kv_heads, capacity, head_dim, dtype=dtype).realize()

    def update(self, k: Tensor, v: Tensor, pos: Tensor) -> tuple[Tensor, Tensor]:
        """Write (B, Hkv, T, D) blocks at `pos` and return the whole buffers."""
        zero = as_tensor(0).astype(int32)
        p = pos.astype(int32)
        new_k = Tensor._apply("dynamic_update_slice", self.k, k.astype(self.k.dtype), zero, zero,
                              p, zero)
        new_v = Tensor._apply("dynamic_update_slice", self.v, v.astype(self.v.dtype), zero, zero,
                              p, zero)
        assign(self.k, new_k)
        assign(self.v, new_v)
        return self.k, self.v


class MultiHeadAttention(Module):
    """Self-attention with `n_heads` query heads and `n_kv_heads` key/value heads.

    Args:
        dim: model width.
        n_heads: query heads (dim must divide evenly).
        n_kv_heads: key/value heads (a divisor of n_heads; default n_heads).
        causal: mask future positions.
        rope: apply rotary embeddings to q and k.
        rope_base: RoPE base.
        rope_scaling: RoPE scaling variant (see `functional.rope_frequencies`).
        bias: biases in the projections.
        dropout: dropout on the attention weights.
    """

    def __init__(self, dim: int, n_heads: int, n_kv_heads: int | None = None, *,
                 causal: bool = True, rope: bool = False, rope_base: float = 10000.0,
                 rope_scaling: Mapping[str, Any] | None = None, bias: bool = True,
                 dropout: float = 0.0, dtype: Any = None) -> None:
        super().__init__()
        kv = n_kv_heads or n_heads
        if dim % n_heads or n_heads % kv:
            raise OmnitensorError(
                f"MultiHeadAttention: dim {dim} must divide into n_heads {n_heads}, and n_heads "
                f"into n_kv_heads {kv}")
        self.dim, self.n_heads, self.n_kv_heads = dim, n_heads, kv
        self.head_dim = dim // n_heads
        self.causal, self.rope, self.rope_base, self.rope_scaling = (
            causal, rope, rope_base, rope_scaling)
        self.q = Linear(dim, n_heads * self.head_dim, bias, dtype)
        self.k = Linear(dim, kv * self.head_dim, bias, dtype)
        self.v = Linear(dim, kv * self.head_dim, bias, dtype)
        self.o = Linear(n_heads * self.head_dim, dim, bias, dtype)
        self.attn_dropout = Dropout(dropout) if dropout else None

    def forward(self, x: Tensor, *, attn_mask: Tensor | None = None, cache: KVCache | None = None,
                pos: Tensor | int | None = None) -> Tensor:
        """X (B, T, dim) -> (B, T, dim); with `cache`, x holds T new tokens at position `pos`."""
        b, t, _ = x.shape
        q = self.q(x).reshape(b, t, self.n_heads, self.head_dim).transpose(0, 2, 1, 3)
        k = self.k(x).reshape(b, t, self.n_kv_heads, self.head_dim).transpose(0, 2, 1, 3)
        v = self.v(x).reshape(b, t, self.n_kv_heads, self.head_dim).transpose(0, 2, 1, 3)
        start = as_tensor(0 if pos is None else pos).astype(int32)
        positions = arange(t, dtype=int32) + start  # (T,) absolute positions
        if self.rope:
            cos, sin = F.rope_tables(positions, self.head_dim, self.rope_base,
                                     self.rope_scaling, dtype=x.dtype)
            q = F.rotary_embedding(q, cos, sin)
            k = F.rotary_embedding(k, cos, sin)
        kv_length = None
        if cache is not None:
            k, v = cache.update(k, v, start)
            kv_length = start + t
        dropout_p, dropout_key = 0.0, None
        if self.attn_dropout is not None and self.training:
            dropout_p = self.attn_dropout.p
            from ...tensor.creation import split_key

            state = self.attn_dropout._buffers["key"]
            carry, dropout_key = split_key(state, 2)
            if tracing.get() is None:
                carry.realize()
            assign(state, carry)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask, dropout_p, self.causal,
            q_positions=positions if (self.causal and cache is not None) else None,
            kv_length=kv_length, dropout_key=dropout_key)  # (B, H, T, hd)
        merged = out.transpose(0, 2, 1, 3).reshape(b, t, self.n_heads * self.head_dim)
        result: Tensor = self.o(merged)
        return result

    def make_cache(self, batch: int, capacity: int, dtype: Any = None) -> KVCache:
        """A KV cache of `capacity` positions for this layer."""
        return KVCache(batch, self.n_kv_heads, capacity, self.head_dim, dtype)


class TransformerBlock(Module):
    """Pre-norm block: x + attn(norm1(x)), then x + mlp(norm2(x)).

    Args:
        dim: model width.
        n_heads: attention heads.
        mlp_hidden: feed-forward width (default 4 * dim).
        n_kv_heads: key/value heads (GQA).
        norm: ``"layer"`` (GPT-2) or ``"rms"`` (Llama).
        mlp: ``"gelu"``/``"gelu_tanh"``/``"relu"`` (MLP) or ``"swiglu"``.
        rope: rotary embeddings in attention.
        causal: causal attention.
        bias: biases in the linear layers.
        dropout: residual dropout.
    """

    def __init__(self, dim: int, n_heads: int, mlp_hidden: int | None = None, *,
                 n_kv_heads: int | None = None, norm: str = "layer", mlp: str = "gelu",
                 rope: bool = False, causal: bool = True, bias: bool = True,
                 dropout: float = 0.0, eps: float = 1e-5, dtype: Any = None) -> None:
        super().__init__()
        hidden = mlp_hidden or 4 * dim
        if norm not in ("layer", "rms"):
            raise OmnitensorError(f"TransformerBlock: norm must be 'layer' or 'rms' (got {norm!r})")
        self.norm1: Module = LayerNorm(dim, eps, dtype=dtype) if norm == "layer" else RMSNorm(
            dim, eps, dtype=dtype)
        self.attn = MultiHeadAttention(dim, n_heads, n_kv_heads, causal=causal, rope=rope,
                                       bias=bias, dtype=dtype)
        self.norm2: Module = LayerNorm(dim, eps, dtype=dtype) if norm == "layer" else RMSNorm(
            dim, eps, dtype=dtype)
        self.mlp: Module = SwiGLU(dim, hidden, bias, dtype) if mlp == "swiglu" else MLP(
            dim, hidden, activation=mlp, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout) if dropout else None

    def forward(self, x: Tensor, *, attn_mask: Tensor | None = None, cache: KVCache | None = None,
                pos: Tensor | int | None = None) -> Tensor:
        """Apply the layer (see the class docstring)."""
        h = self.attn(self.norm1(x), attn_mask=attn_mask, cache=cache, pos=pos)
        if self.dropout is not None:
            h = self.dropout(h)
        x = x + h
        h = self.mlp(self.norm2(x))
        if self.dropout is not None:
            h = self.dropout(h)
        result: Tensor = x + h
        return result
