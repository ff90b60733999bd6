"""Functional cases: every family of the FunctionalRegistry, and every registered alternative.

Rows are ``functional.<family>``; the sample name starts with the implementation name. The
portable implementation is checked like any program (backend vs reference). An alternative is
checked against the *portable* implementation: its case's oracle is the portable program, so a
fused kernel that drifts from the portable math fails here on every backend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from omnitensor.dtypes import DType, float32, float64, int32
from omnitensor.ir.builder import Builder
from omnitensor.ir.types import TensorType, Value

from ..case import Arg, Case, register_case_source
from ._trace import emit, placeholder

_DTYPES = (float32, float64)


@dataclass(frozen=True)
class _Family:
    """How to call one family: input shapes (None dtype = the case's float dtype) and a call."""

    family: str
    sample: str
    inputs: tuple[tuple[tuple[int, ...], DType | None, Any], ...]
    call: Callable[..., Any]


def _indices(high: int) -> Callable[[np.random.Generator, Any], Any]:
    def fill(rng: np.random.Generator, type: Any) -> Any:
        return rng.integers(0, high, type.shape).astype(type.dtype.np)

    return fill


def _families() -> list[_Family]:
    from omnitensor import functional as F

    x = ((3, 5, 8), None, "normal")
    cos_sin = ((5, 4), None, "normal")
    q = ((2, 4, 5, 8), None, "normal")
    kv = ((2, 2, 5, 8), None, "normal")
    return [
        _Family("softmax", "rows", (x,), lambda f, a: f(a, axis=-1)),
        _Family("log_softmax", "rows", (x,), lambda f, a: f(a, axis=-1)),
        _Family("gelu", "exact", (x,), lambda f, a: f(a)),
        _Family("gelu", "tanh", (x,), lambda f, a: f(a, approximate="tanh")),
        _Family("silu", "plain", (x,), lambda f, a: f(a)),
        _Family("swiglu", "plain", (x, x), lambda f, g, u: f(g, u)),
        _Family("geglu", "tanh", (x, x), lambda f, g, u: f(g, u, approximate="tanh")),
        _Family("relu", "plain", (x,), lambda f, a: f(a)),
        _Family("layer_norm", "affine", (x, ((8,), None, "normal"), ((8,), None, "normal")),
                lambda f, a, w, b: f(a, 8, w, b, eps=1e-5)),
        _Family("rms_norm", "affine", (x, ((8,), None, "normal")),
                lambda f, a, w: f(a, 8, w, eps=1e-6)),
        _Family("linear", "bias", (x, ((6, 8), None, "normal"), ((6,), None, "normal")),
                lambda f, a, w, b: f(a, w, b)),
        _Family("embedding", "rows", (((2, 7), int32, _indices(11)),
                                      ((11, 8), None, "normal")),
                lambda f, i, w: f(i, w)),
        _Family("rotary_embedding", "halves", (((2, 4, 5, 8), None, "normal"), cos_sin,
                                               cos_sin),
                lambda f, a, c, s: f(a, c, s)),
        # a GGUF llama's q/k rows kept in llama.cpp's pairs rotate so (models.steps)
        _Family("rotary_embedding", "interleaved", (((2, 4, 5, 8), None, "normal"), cos_sin,
                                                    cos_sin),
                lambda f, a, c, s: f(a, c, s, interleaved=True)),
        _Family("attention", "causal_gqa", (q, kv, kv),
                lambda f, a, k, v: f(a, k, v, is_causal=True)),
        _Family("attention", "full", (q, kv, kv), lambda f, a, k, v: f(a, k, v)),
        _Family("cross_entropy", "mean", (((6, 9), None, "normal"), ((6,), int32, _indices(9))),
                lambda f, logits, t: f(logits, t)),
        _Family("mse", "mean", (x, x), lambda f, a, b: f(a, b)),
        _Family("conv2d", "stride_pad", (((2, 3, 9, 9), None, "normal"),
                                         ((4, 3, 3, 3), None, "normal"), ((4,), None, "normal")),
                lambda f, a, w, b: f(a, w, b, stride=2, padding=1)),
        _Family("max_pool2d", "k2", (((2, 3, 8, 8), None, "normal"),),
                lambda f, a: f(a, 2)),
        _Family("avg_pool2d", "k2", (((2, 3, 8, 8), None, "normal"),),
                lambda f, a: f(a, 2)),
        _Family("attention", "softcap", (q, kv, kv),
                lambda f, a, k, v: f(a, k, v, is_causal=True, softcap=2.0)),
        _Family("pool", "mean", (x,), lambda f, a: f(a, None, "mean")),
        _Family("pool", "max", (x,), lambda f, a: f(a, None, "max")),
        _Family("pool", "lasttoken", (x,), lambda f, a: f(a, None, "lasttoken")),
        _Family("l2_normalize", "rows", (x,), lambda f, a: f(a)),
        _Family("softcap", "cap3", (x,), lambda f, a: f(a, 3.0)),
    ] if hasattr(F, "registry") else []


def _build(spec: _Family, impl: Callable[..., Any], types: list[TensorType]
           ) -> Callable[..., list[Value]]:
    def build(builder: Builder, *values: Value) -> list[Value]:
        holders = [placeholder(i, t) for i, t in enumerate(types)]
        out = spec.call(impl, *holders)
        return emit(builder, values, list(out) if isinstance(out, tuple) else [out])

    return build


def functional_cases() -> Iterator[Case]:
    """One case per (family sample, implementation, float dtype)."""
    from omnitensor.functional import registry

    known = set(registry.families())
    for spec in _families():
        if spec.family not in known:
            continue
        portable = registry.get(spec.family).fn
        for name in registry.names(spec.family):
            impl = registry.get(spec.family, name).fn
            for dtype in _DTYPES:
                types = [TensorType(shape, d or dtype) for shape, d, _ in spec.inputs]
                args = tuple(Arg(t, fill) for t, (_, _, fill) in zip(types, spec.inputs,
                                                                      strict=True))
                oracle = None if name == "portable" else _build(spec, portable, types)
                yield Case(f"functional.{spec.family}", dtype.name, f"{name}-{spec.sample}",
                           args, _build(spec, impl, types), source="functional",
                           check="nmse", oracle=oracle)


register_case_source("functional", functional_cases)
