"""Model cases: a whole tiny transformer forward (llama and GPT-2 specs) and a training step.

The programs are traced from the same code users run (`omnitensor.models` steps, autograd and
an SGD update), with every weight a case input, so a backend that runs these runs real models.
Rows are ``model.<name>``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from omnitensor.dtypes import DType, float32, float64, int32
from omnitensor.ir.builder import Builder
from omnitensor.ir.types import TensorType, Value

from ..case import Arg, Case, register_case_source
from ._trace import emit, placeholder

_VOCAB, _WIDTH, _HEADS, _KV, _FFN, _LAYERS, _T = 13, 16, 4, 2, 24, 2, 6


def _tokens(rng: np.random.Generator, type: Any) -> Any:
    return rng.integers(0, _VOCAB, type.shape).astype(type.dtype.np)


def _small(rng: np.random.Generator, type: Any) -> Any:
    return (rng.normal(size=type.shape) * 0.3).astype(type.dtype.np)


def _near_one(rng: np.random.Generator, type: Any) -> Any:
    return (1 + rng.normal(size=type.shape) * 0.1).astype(type.dtype.np)


def _weights(arch: str) -> dict[str, tuple[tuple[int, ...], Callable[..., Any]]]:
    c, f, d = _WIDTH, _FFN, _WIDTH // _HEADS
    out: dict[str, tuple[tuple[int, ...], Callable[..., Any]]] = {
        "token_embd.weight": ((_VOCAB, c), _small), "output_norm.weight": ((c,), _near_one)}
    if arch == "gpt2":
        out["position_embd.weight"] = ((16, c), _small)
        out["output_norm.bias"] = ((c,), _small)
    for i in range(_LAYERS):
        p = f"blk.{i}."
        out[p + "attn_norm.weight"] = ((c,), _near_one)
        out[p + "ffn_norm.weight"] = ((c,), _near_one)
        out[p + "attn_output.weight"] = ((c, c), _small)
        out[p + "ffn_up.weight"] = ((f, c), _small)
        out[p + "ffn_down.weight"] = ((c, f), _small)
        if arch == "gpt2":
            out[p + "attn_qkv.weight"] = ((3 * c, c), _small)
            for name, n in (("attn_norm", c), ("ffn_norm", c), ("attn_qkv", 3 * c),
                            ("attn_output", c), ("ffn_up", f), ("ffn_down", c)):
                out[p + name + ".bias"] = ((n,), _small)
        else:
            out[p + "attn_q.weight"] = ((c, c), _small)
            out[p + "attn_k.weight"] = ((_KV * d, c), _small)
            out[p + "attn_v.weight"] = ((_KV * d, c), _small)
            out[p + "ffn_gate.weight"] = ((f, c), _small)
    return out


def _forward_case(arch: str, dtype: DType) -> Case:
    weights = _weights(arch)
    names = list(weights)
    types = [TensorType((1, _T), int32)] + [TensorType(weights[n][0], dtype) for n in names]
    args = (Arg(types[0], _tokens),) + tuple(Arg(t, weights[n][1]) for t, n in
                                             zip(types[1:], names, strict=True))
    hparams = {"embedding_length": _WIDTH, "head_count": _HEADS,
               "head_count_kv": _KV if arch == "llama" else _HEADS, "block_count": _LAYERS,
               "feed_forward_length": _FFN, "rope_freq_base": 10000.0, "norm_epsilon": 1e-5,
               "context_length": 16, "vocab_size": _VOCAB}

    def build(builder: Builder, *values: Value) -> list[Value]:
        from omnitensor.models.spec import builtin_spec
        from omnitensor.models.steps import StepContext, run_steps
        from omnitensor.tensor.creation import arange

        holders = [placeholder(i, t) for i, t in enumerate(types)]
        ctx = StepContext(hparams, dict(zip(names, holders[1:], strict=True)),
                          {"tokens": holders[0]}, arange(_T, dtype=int32).reshape(1, _T),
                          arange(_T, dtype=int32))
        run_steps(ctx, builtin_spec(arch).forward)
        return emit(builder, values, [ctx.values["logits"]])

    return Case(f"model.{arch}_forward", dtype.name, "tiny", args, build, source="model",
                check="nmse")


def _train_step_case(dtype: DType) -> Case:
    """Loss and SGD-updated parameters of a 2-layer MLP classifier (forward + backward)."""
    shapes = [(8, 5), (5, 7), (7,), (7, 3), (3,)]
    types = [TensorType(s, dtype) for s in shapes] + [TensorType((8,), int32)]
    args = tuple(Arg(t, _small) for t in types[:-1]) + (
        Arg(types[-1], lambda rng, t: rng.integers(0, 3, t.shape).astype(np.int32)),)

    def build(builder: Builder, *values: Value) -> list[Value]:
        from omnitensor import functional as F
        from omnitensor.autograd.engine import run_backward
        from omnitensor.autograd.mode import enable_grad

        x, w1, b1, w2, b2, y = (placeholder(i, t) for i, t in enumerate(types))
        params = [w1, b1, w2, b2]
        for p in params:
            p.requires_grad = True
        with enable_grad():
            loss = F.cross_entropy(F.relu(x @ w1 + b1) @ w2 + b2, y)
        from omnitensor.tensor.creation import ones_like

        found = run_backward([loss], [ones_like(loss)])
        updated = [(p - found[id(p._grad_fn)][1] * 0.1).detach() for p in params]
        return emit(builder, values, [loss.detach(), *updated])

    return Case("model.train_step", dtype.name, "mlp_sgd", args, build, source="model",
                check="nmse")


def model_cases() -> Iterator[Case]:
    """The tiny transformer forwards and the training step, in float32 and float64."""
    for dtype in (float32, float64):
        yield _forward_case("llama", dtype)
        yield _forward_case("gpt2", dtype)
        yield _train_step_case(dtype)


register_case_source("model", model_cases)
