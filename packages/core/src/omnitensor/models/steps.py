"""Step kinds of the ModelSpec forward plan; each registers itself by name with `@step`.

A step reads named values and weights from a `StepContext` and writes its output value. Third
parties add kinds with the same decorator (or from a plugin module that imports it); a spec naming
an unknown kind fails when it is loaded, listing the known ones.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import functional as F
from ..dtypes import int32
from ..errors import FormatError, ShapeError, SpecError
from ..ir.types import QTensorType
from ..tensor.creation import arange
from ..tensor.shape import stack
from ..tensor.tensor import Tensor
from .spec import repeat_count

__all__ = ["StepContext", "known_steps", "run_steps", "step"]

StepFn = Callable[["StepContext", Mapping[str, Any]], None]
_STEPS: dict[str, StepFn] = {}


def step(name: str) -> Callable[[StepFn], StepFn]:
    """Register a step kind under `name` (``@step("RmsNorm")``)."""

    def wrap(fn: StepFn) -> StepFn:
        if name in _STEPS:
            raise FormatError(f"step kind {name!r} is registered twice")
        _STEPS[name] = fn
        return fn

    return wrap


def known_steps() -> dict[str, StepFn]:
    """Every registered step kind."""
    return dict(_STEPS)


@dataclass
class StepContext:
    """What the steps of one forward call share.

    Attributes:
        hparams: hyper-parameters (GGUF-style names: ``embedding_length``, ``head_count`` ...).
        weights: parameters by canonical name (dense or quantized tensors).
        values: named intermediate values; ``tokens`` (B, T) int32 on entry.
        positions: logical positions of the tokens, (B, T) int32 (RoPE, learned positions).
        slots: cache slots the tokens are written to, (T,) int32 (causal masking in slot space).
        key_mask: (B, 1, 1, S) bool of keys that may be attended (padding), or None.
        cache: per layer, the cache handle of its keys and values stacked, (2, B, H_kv, S, D)
            (rebound in place), or None without a cache.
        start: 0-d int32 slot of the first token (with a cache).
        last: (B,) int32 index of the token whose logits are wanted, or None for all tokens.
        layer: the layer a repeat block is running.
        spec_source: for error messages.
        uses: weight names read so far.
        runtime: the model's runtime settings (``pooling``, ``normalize`` ...).
    """

    hparams: Mapping[str, Any]
    weights: Mapping[str, Tensor]
    values: dict[str, Tensor]
    positions: Tensor
    slots: Tensor
    key_mask: Tensor | None = None
    cache: list[Tensor] | None = None
    start: Tensor | None = None
    last: Tensor | None = None
    layer: int = 0
    spec_source: str = "<spec>"
    uses: set[str] = field(default_factory=set)
    runtime: Mapping[str, Any] = field(default_factory=dict)

    def name(self, template: str) -> str:
        """A weight name with ``{layer}`` substituted."""
        return template.replace("{layer}", str(self.layer))

    def weight(self, template: str, *, optional: bool = False, dense: bool = False
               ) -> Tensor | None:
        """The weight named by `template`; quantized weights are dequantized when `dense`.

        Raises:
            FormatError: a missing required weight, naming the step's expectation.
        """
        name = self.name(template)
        tensor = self.weights.get(name)
        if tensor is None:
            if optional:
                return None
            group = ".".join(name.split(".")[:2]) + "."
            near = sorted(n for n in self.weights if n.startswith(group))[:8]
            raise FormatError(f"{self.spec_source}: missing weight {name!r} (the checkpoint has "
                              f"{', '.join(near) if near else f'no {group}* weights'})",
                              path=self.spec_source, weight=name)
        self.uses.add(name)
        qtype = tensor._node.types[tensor._index]
        if dense and isinstance(qtype, QTensorType):
            return Tensor._apply("dequantize", tensor, format=qtype.format)
        return tensor

    def value(self, name: str) -> Tensor:
        """The named intermediate value."""
        if name not in self.values:
            raise FormatError(f"{self.spec_source}: value {name!r} is used before it is set "
                              f"(have {sorted(self.values)})", path=self.spec_source)
        return self.values[name]

    def hp(self, key: str) -> Any:
        """A hyper-parameter."""
        if key not in self.hparams:
            raise FormatError(f"{self.spec_source}: missing hyper-parameter {key!r}",
                              path=self.spec_source)
        return self.hparams[key]

    def linear(self, x: Tensor, prefix: str, *, bias: bool = True) -> Tensor:
        """``x @ W.T + b`` for weight ``<prefix>.weight`` (quantized weights use qmatmul)."""
        w = self.weight(f"{prefix}.weight")
        assert w is not None
        b = self.weight(f"{prefix}.bias", optional=True) if bias else None
        wtype = w._node.types[w._index]
        if isinstance(wtype, QTensorType):
            out = Tensor._apply("qmatmul", x, w, format=wtype.format)
            return out + b if b is not None else out
        return F.linear(x, w, b)


def run_steps(ctx: StepContext, steps: tuple[Mapping[str, Any], ...] | list[Any],
              prefix: str = "") -> None:
    """Run `steps` in order (repeat blocks once per layer).

    Raises:
        FormatError, ShapeError: from a step, with the step's position, kind and layer added
            to the message (and as the error's ``step`` field).
    """
    for i, spec_step in enumerate(steps):
        where = f"{prefix}{i}"
        if "repeat" in spec_step:
            count = spec_step["repeat"]
            if isinstance(count, str):
                ctx.hp(count)  # a missing hyper-parameter is named as such
            layers = repeat_count(ctx.spec_source, count, ctx.hparams, where)
            for layer in range(layers):
                ctx.layer = layer
                run_steps(ctx, spec_step["steps"], f"{where}.")
            continue
        kind = spec_step["op"]
        try:
            _STEPS[kind](ctx, _Fields(spec_step, ctx.spec_source, f"step {where} ({kind})"))
        except (FormatError, ShapeError) as error:
            if "step" in error.fields:  # already located by an inner run_steps
                raise
            label = f"step {where} ({kind}" + (f", layer {ctx.layer})" if prefix else ")")
            raise _located(error, ctx.spec_source, label, where) from error


class _Fields(Mapping[str, Any]):
    """A step's fields as its kind reads them: a missing required field is a `SpecError`."""

    def __init__(self, step: Mapping[str, Any], source: str, label: str) -> None:
        self._step, self._source, self._label = step, source, label

    def __getitem__(self, key: str) -> Any:
        if key not in self._step:
            raise SpecError(f"{self._source}: {self._label} needs field {key!r} (it has "
                            f"{', '.join(sorted(self._step))})", path=self._source)
        return self._step[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._step.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._step

    def __iter__(self) -> Iterator[str]:
        return iter(self._step)

    def __len__(self) -> int:
        return len(self._step)


def _located(error: FormatError | ShapeError, source: str, label: str,
             where: str) -> FormatError | ShapeError:
    """A copy of `error` (same type and fields) whose message says which step raised it."""
    message = error.message.removeprefix(f"{source}: ")
    located = copy.copy(error)
    located.message = f"{source}: {label}: {message}"
    located.args = (located.message,)
    located.fields = {**error.fields, "step": where}
    return located


def _eps(ctx: StepContext, s: Mapping[str, Any]) -> float:
    eps = s.get("eps", "norm_epsilon")
    return float(ctx.hp(eps) if isinstance(eps, str) else eps)


@step("Embedding")
def _embedding(ctx: StepContext, s: Mapping[str, Any]) -> None:
    """Out = weight[input] (token ids -> vectors).

    A quantized table the runtime gathered on the host arrives as the value
    ``rows:<weight>`` (only the rows read are dequantized); otherwise the table is read dense.
    """
    name = ctx.name(s["weight"])
    gathered = ctx.values.get(f"rows:{name}")
    if gathered is not None and s.get("input", "tokens") == "tokens":
        ctx.uses.add(name)
        ctx.values[s["output"]] = gathered
        return
    table = ctx.weight(s["weight"], dense=True)
    assert table is not None
    ctx.values[s["output"]] = F.embedding(ctx.value(s.get("input", "tokens")), table)


@step("PositionEmbedding")
def _position_embedding(ctx: StepContext, s: Mapping[str, Any]) -> None:
    """Out = input + weight[positions] (learned absolute positions, GPT-2 and BERT)."""
    table = ctx.weight(s["weight"], dense=True)
    assert table is not None
    ctx.values[s["output"]] = ctx.value(s["input"]) + F.embedding(ctx.positions, table)


@step("TokenTypeEmbedding")
def _token_type(ctx: StepContext, s: Mapping[str, Any]) -> None:
    """Out = input + weight[0] (BERT's segment embedding; omnitensor embeds one segment)."""
    table = ctx.weight(s["weight"], dense=True)
    assert table is not None
    ctx.values[s["output"]] = ctx.value(s["input"]) + table[0]


@step("LayerNorm")
def _layer_norm(ctx: StepContext, s: Mapping[str, Any]) -> None:
    """Out = layer_norm(input) * weight + bias over the last axis."""
    x = ctx.value(s["input"])
    w = ctx.weight(s["weight"], dense=True)
    b = ctx.weight(s.get("bias", s["weight"].replace(".weight", ".bias")), optional=True,
                   dense=True)
    ctx.values[s["output"]] = F.layer_norm(x, x.shape[-1], w, b, eps=_eps(ctx, s))


@step("RmsNorm")
def _rms_norm(ctx: StepContext, s: Mapping[str, Any]) -> None:
    """Out = input / rms(input) * weight over the last axis."""
    x = ctx.value(s["input"])
    w = ctx.weight(s["weight"], dense=True)
    ctx.values[s["output"]] = F.rms_norm(x, x.shape[-1], w, eps=_eps(ctx, s))


@step("Add")
def _add(ctx: StepContext, s: Mapping[str, Any]) -> None:
    """Out = sum of inputs (residual connections)."""
    names = s["inputs"]
    out = ctx.value(names[0])
    for name in names[1:]:
        out = out + ctx.value(name)
    ctx.values[s["output"]] = out


def _heads(x: Tensor, heads: int, head_dim: int) -> Tensor:
    b, t, _ = x.shape
    return x.reshape(b, t, heads, head_dim).transpose(0, 2, 1, 3)  # (B, H, T, D)


@step("Attention")
def _attention(ctx: StepContext, s: Mapping[str, Any]) -> None:
    """Multi-head attention with optional RoPE, grouped-query heads and the KV cache.

    Weights under `prefix`: ``q``, ``k``, ``v`` (or fused ``qkv``) and ``output``, each
    ``.weight`` with an optional ``.bias``.
    """
    x = ctx.value(s["input"])
    prefix = ctx.name(s["prefix"])
    heads, kv_heads = int(ctx.hp("head_count")), int(ctx.hp("head_count_kv"))
    head_dim = int(ctx.hparams.get("head_dim") or ctx.hp("embedding_length") // heads)
    if f"{prefix}qkv.weight" in ctx.weights:
        qkv = ctx.linear(x, f"{prefix}qkv")
        q_width, kv_width = heads * head_dim, kv_heads * head_dim
        q = qkv[..., :q_width]
        k = qkv[..., q_width : q_width + kv_width]
        v = qkv[..., q_width + kv_width :]
    else:
        q, k, v = (ctx.linear(x, f"{prefix}{n}") for n in ("q", "k", "v"))
    q, k, v = _heads(q, heads, head_dim), _heads(k, kv_heads, head_dim), _heads(v, kv_heads,
                                                                                head_dim)
    if s.get("qk_norm", False):  # RMSNorm of each head's q and k (Qwen3, Gemma 3)
        q = F.rms_norm(q, head_dim, ctx.weight(f"{prefix}q_norm.weight", dense=True),
                       eps=_eps(ctx, s))
        k = F.rms_norm(k, head_dim, ctx.weight(f"{prefix}k_norm.weight", dense=True),
                       eps=_eps(ctx, s))
    sliding = _is_sliding(ctx)
    if s.get("rope", False):
        # Gemma 3: sliding layers have their own base and no scaling
        local = sliding and ctx.hparams.get("rope_freq_base_swa") is not None
        base = ctx.hp("rope_freq_base_swa" if local else "rope_freq_base")
        scaling = None if local else ctx.hparams.get("rope_scaling")
        cos, sin = F.rope_tables(ctx.positions, head_dim, float(base), scaling, dtype=q.dtype)
        if cos.ndim == 3:  # per-sequence positions (B, T, D/2) -> (B, 1, T, D/2)
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        # a GGUF llama's q/k rows kept in llama.cpp's order rotate in pairs of neighbours
        pairs = bool(ctx.hparams.get("rope_interleaved", False))
        q = F.rotary_embedding(q, cos, sin, interleaved=pairs)
        k = F.rotary_embedding(k, cos, sin, interleaved=pairs)
    causal = bool(s.get("causal", True))
    kv_length = None
    if ctx.cache is not None:
        assert ctx.start is not None
        kv_cache = ctx.cache[ctx.layer]  # keys and values stacked: (2, B, H_kv, S, D)
        zero = Tensor._apply("constant", value=_zero())
        rows = stack([k.astype(kv_cache.dtype), v.astype(kv_cache.dtype)])
        # the cache handle is rebound to the updated cache (in place where donated)
        kv_cache.assign(Tensor._apply("dynamic_update_slice", kv_cache, rows, zero, zero, zero,
                                      ctx.start, zero))
        k, v = kv_cache[0].astype(q.dtype), kv_cache[1].astype(q.dtype)
        kv_length = ctx.start + x.shape[1]
    extra: dict[str, Any] = {}
    if ctx.hparams.get("attn_logit_softcapping"):
        extra["softcap"] = float(ctx.hparams["attn_logit_softcapping"])
    scale = ctx.hparams.get("attention_scale")  # Gemma: query_pre_attn_scalar ** -0.5
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=_window_mask(ctx, k.shape[2]) if causal and sliding else ctx.key_mask,
        is_causal=causal, scale=float(scale) if scale else None,
        q_positions=ctx.slots if causal else None, kv_length=kv_length, **extra)
    b, _, t, _ = out.shape
    out = out.transpose(0, 2, 1, 3).reshape(b, t, heads * head_dim)  # (B, T, C)
    ctx.values[s["output"]] = ctx.linear(out, f"{prefix}output")


def _is_sliding(ctx: StepContext) -> bool:
    """Whether this layer attends a sliding window.

    True when ``sliding_window`` is set and ``sliding_layers`` (one bool per layer; default
    all) marks the layer.
    """
    layers = ctx.hparams.get("sliding_layers")
    if not ctx.hparams.get("sliding_window"):
        return False
    return not (isinstance(layers, list) and ctx.layer < len(layers) and not layers[ctx.layer])


def _window_mask(ctx: StepContext, keys: int) -> Tensor | None:
    """The key mask, narrowed to the last ``sliding_window`` slots.

    A query at slot i attends keys at slots j with ``i - j < sliding_window`` (transformers'
    rule).
    """
    window = int(ctx.hparams["sliding_window"])
    t = ctx.slots.shape[0]
    near = (ctx.slots.astype(int32).reshape(t, 1) - arange(keys, dtype=int32).reshape(1, keys)
            < window).reshape(1, 1, t, keys)
    return near if ctx.key_mask is None else ctx.key_mask & near


def _zero() -> Any:
    import numpy as np

    return np.asarray(0, dtype=np.int32)


_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "gelu": lambda x: F.gelu(x),
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "relu": F.relu,
}


@step("MLP")
def _mlp(ctx: StepContext, s: Mapping[str, Any]) -> None:
    """down(act(up(x))), or down(act(gate(x)) * up(x)) when ``gated`` (SwiGLU).

    Weights under `prefix`: ``up``, ``down`` and, when gated, ``gate`` (or ``gate_up``, the
    gate rows then the up rows, as `fusion` joins them at load); with ``fused_gate`` the ``up``
    weight holds the gate rows then the up rows (Phi-3's gate_up_proj).
    """
    x = ctx.value(s["input"])
    prefix = ctx.name(s["prefix"])
    name = s.get("activation", "gelu")
    if name not in _ACTIVATIONS:
        raise FormatError(f"{ctx.spec_source}: MLP activation {name!r} is not one of "
                          f"{sorted(_ACTIVATIONS)}", path=ctx.spec_source)
    act = _ACTIVATIONS[name]
    joined = s.get("gated") and f"{prefix}gate_up.weight" in ctx.weights
    up = ctx.linear(x, f"{prefix}gate_up" if joined else f"{prefix}up")
    if s.get("fused_gate") or joined:
        half = up.shape[-1] // 2
        hidden = act(up[..., :half]) * up[..., half:]
    else:
        hidden = act(ctx.linear(x, f"{prefix}gate")) * up if s.get("gated") else act(up)
    ctx.values[s["output"]] = ctx.linear(hidden, f"{prefix}down")


@step("LMHead")
def _lm_head(ctx: StepContext, s: Mapping[str, Any]) -> None:
    """Logits from the last hidden states; ties to `fallback` when `weight` is absent."""
    x = ctx.value(s["input"])
    if ctx.last is not None:  # (B, T, C) -> (B, 1, C) at each sequence's last token
        index = ctx.last.astype(int32).reshape(-1, 1)
        x = Tensor._apply("gather", x, index, axis=1, batch_dims=1)
    name = ctx.name(s["weight"])
    if name not in ctx.weights and "fallback" in s:
        name = ctx.name(s["fallback"])
    logits = ctx.linear(x, name.removesuffix(".weight"), bias=False)
    cap = ctx.hparams.get("final_logit_softcapping")
    if cap:  # Gemma 2: cap * tanh(logits / cap)
        logits = F.softcap(logits, float(cap))
    ctx.values[s["output"]] = logits[:, 0] if ctx.last is not None else logits


def _pool_mask(ctx: StepContext) -> Tensor | None:
    """(B, T) true on the tokens pooling reads: ``pool_mask`` when given, else the key mask."""
    if "pool_mask" in ctx.values:
        return ctx.values["pool_mask"]
    return ctx.key_mask


@step("ScaleBySqrt")
def _scale_by_sqrt(ctx: StepContext, s: Mapping[str, Any]) -> None:
    """Out = input * sqrt(hparam `of`), rounded to the input's dtype (Gemma's embeddings)."""
    x = ctx.value(s["input"])
    factor = Tensor._apply("constant", value=_scalar(float(ctx.hp(s["of"])) ** 0.5, x))
    ctx.values[s["output"]] = x * factor


def _scalar(value: float, like: Tensor) -> Any:
    import numpy as np

    return np.asarray(value, dtype=like.dtype.np)


@step("MeanPool")
def _mean_pool(ctx: StepContext, s: Mapping[str, Any]) -> None:
    """Mean over the tokens that are not padding (sentence-transformers pooling)."""
    x = ctx.value(s["input"])  # (B, T, C)
    ctx.values[s["output"]] = F.pool(x, _pool_mask(ctx), "mean")


@step("Pool")
def _pool(ctx: StepContext, s: Mapping[str, Any]) -> None:
    """One vector per sequence over real tokens; the mode is ``mode`` or runtime ``pooling``.

    Modes are `functional.pooling.POOLING_MODES` (sentence-transformers' names); the runtime
    setting comes from ``1_Pooling/config.json`` or GGUF ``<arch>.pooling_type``.
    """
    x = ctx.value(s["input"])  # (B, T, C)
    mode = str(s.get("mode") or ctx.runtime.get("pooling", "mean"))
    ctx.values[s["output"]] = F.pool(x, _pool_mask(ctx), mode)


@step("Normalize")
def _normalize(ctx: StepContext, s: Mapping[str, Any]) -> None:
    """Out = input / max(||input||_2, 1e-12) along the last axis.

    With ``"when": "<runtime flag>"`` the step is the identity when that runtime setting is
    false (a sentence-transformers model without a ``Normalize`` module).
    """
    x = ctx.value(s["input"])
    flag = s.get("when")
    enabled = bool(ctx.runtime.get(flag, True)) if isinstance(flag, str) else True
    ctx.values[s["output"]] = F.l2_normalize(x) if enabled else x
