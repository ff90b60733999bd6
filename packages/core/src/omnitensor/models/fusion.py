"""Products that read the same input, joined at load into one weight: q/k/v and gate/up.

Why: a decode step is ~600 small steps, and each product is one more pass over a row of
activations, one more parallel region, one more kernel launch on a device. An attention layer's
q, k and v products read the same normalized hidden state, as do a gated MLP's gate and up
products; with their weights stacked row-wise (the layout of GPT-2's ``c_attn`` and Phi-3's
``gate_up_proj``) each group is one product, whose output the steps slice back into its parts
(`steps._attention` reads ``qkv``, `steps._mlp` reads ``gate_up``). vLLM and TensorRT-LLM join
the same groups at load for the same reason.

A group is joined only when every part is there and they can be stacked as they are: all
quantized in one format, or all dense of one dtype, with the same input width, and biases on all
parts or on none. Anything else (Q4_K_M's ``attn_v`` in Q6_K beside Q4_K ``attn_q``) stays
apart, so joining never changes what is computed, only how many products compute it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from ..backend.host_memory import aligned_empty, release, seal
from ..io.weights import QuantizedArray
from .spec import ModelSpec, repeat_count

__all__ = ["fuse_projections"]

#: step kind -> (the parts it reads under its prefix, the joined weight's name under it)
_GROUPS: dict[str, tuple[tuple[str, ...], str]] = {
    "Attention": (("q", "k", "v"), "qkv"),
    "MLP": (("gate", "up"), "gate_up"),
}


def fuse_projections(weights: dict[str, Any], spec: ModelSpec, hparams: Mapping[str, Any],
                     quantized: Callable[[QuantizedArray], bool] = lambda _: True
                     ) -> dict[str, Any]:
    """`weights` with each joinable group of its spec's steps stacked into one weight.

    The parts' entries are replaced by the joined one (``blk.0.attn_qkv.weight`` for
    ``blk.0.attn_{q,k,v}.weight``); the pages of mapped parts are released once copied, so the
    process holds each weight once. `weights` itself is left as it was.

    Args:
        weights: the checkpoint's weights by canonical name (arrays or `QuantizedArray`).
        spec: the model whose `Attention` and gated `MLP` steps name the groups.
        hparams: its hyper-parameters (the repeat counts).
        quantized: whether quantized parts like this one may be stacked (`CompiledModel` says
            no where the backend keeps a repacked copy beside the bytes: `Backend.repacks`).
    """
    out = dict(weights)
    for prefix, parts, joined in _groups(spec, hparams):
        names = [f"{prefix}{p}.weight" for p in parts]
        biases = [f"{prefix}{p}.bias" for p in parts]
        if f"{prefix}{joined}.weight" in out or not all(n in out for n in names):
            continue
        present = [b in out for b in biases]
        if any(present) and not all(present):
            continue
        if isinstance(out[names[0]], QuantizedArray) and not quantized(out[names[0]]):
            continue
        stacked = _stack([out[n] for n in names])
        stacked_bias = _stack([out[b] for b in biases]) if all(present) else None
        if stacked is None or (all(present) and stacked_bias is None):
            continue
        for name in names + (biases if all(present) else []):
            _release(out.pop(name))
        out[f"{prefix}{joined}.weight"] = stacked
        if stacked_bias is not None:
            out[f"{prefix}{joined}.bias"] = stacked_bias
    return out


def _groups(spec: ModelSpec, hparams: Mapping[str, Any]
            ) -> Iterator[tuple[str, tuple[str, ...], str]]:
    """(prefix, parts, joined name) of every step whose products may be joined, per layer."""

    def visit(steps: Any, layer: int, where: str) -> Iterator[tuple[str, tuple[str, ...], str]]:
        for i, step in enumerate(steps):
            if isinstance(step, Mapping) and "repeat" in step:
                times = repeat_count(spec.source, step["repeat"], hparams, f"{where}{i}")
                for inner in range(times):
                    yield from visit(step["steps"], inner, f"{where}{i}.")
                continue
            kind = step.get("op") if isinstance(step, Mapping) else None
            if kind not in _GROUPS or not isinstance(step.get("prefix"), str):
                continue
            if kind == "MLP" and not (step.get("gated") and not step.get("fused_gate")):
                continue
            parts, joined = _GROUPS[kind]
            yield step["prefix"].replace("{layer}", str(layer)), parts, joined

    yield from visit(spec.forward, 0, "")


def _stack(values: list[Any]) -> Any | None:
    """The values stacked along their first axis, or None when they cannot be stacked as is."""
    first = values[0]
    if isinstance(first, QuantizedArray):
        if not all(isinstance(v, QuantizedArray) and v.format == first.format
                   and len(v.shape) == 2 and v.shape[1:] == first.shape[1:] for v in values):
            return None
        blocks = np.concatenate([v.blocks for v in values])
        rows = sum(v.shape[0] for v in values)
        return QuantizedArray(seal(blocks), first.format, (rows, *first.shape[1:]))
    arrays = [v for v in values if isinstance(v, np.ndarray)]
    if len(arrays) != len(values) or any(
            a.dtype != first.dtype or a.ndim != first.ndim or a.ndim not in (1, 2)
            or a.shape[1:] != first.shape[1:] for a in arrays):
        return None
    # (written straight into aligned memory: `seal` then keeps it without a copy)
    out = aligned_empty((sum(a.shape[0] for a in arrays), *first.shape[1:]), first.dtype)
    return seal(np.concatenate(arrays, out=out))


def _release(value: Any) -> None:
    release(value.blocks if isinstance(value, QuantizedArray) else np.asarray(value))
