"""Composite families: every composite's lowering against its decomposition on the reference.

A backend with a lowering of the composite runs it; one without gets the decomposition inlined
(`expand_composites`) and the case is reported ``expanded``. Samples cover odd and long rows,
several trailing axes, strided (transposed) and broadcast operands, the edge values and empty
inputs. Gradient cases come from `omnitensor.autograd.samples` (mode ``grad``, rows
``grad.<composite>``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from omnitensor.dtypes import DType
from omnitensor.ir.builder import Builder
from omnitensor.ir.types import TensorType, Value

from ..case import Arg, Sample, cases, sample

Emit = Callable[..., Value]


def _shapes(emit: Emit, dtype: DType, nparams: int) -> Iterator[Sample]:
    """Samples of a row composite ``emit(b, x, *params, axes=...)`` with `nparams` params."""

    def args(shape: tuple[int, ...], naxes: int, fill: str = "normal") -> list[Arg]:
        row = shape[len(shape) - naxes:]
        return [Arg(TensorType(shape, dtype), fill)] + [
            Arg(TensorType(row, dtype), "normal") for _ in range(nparams)]

    def plain(naxes: int) -> Callable[..., Value]:
        def build(b: Builder, x: Value, *params: Value) -> Value:
            rank = len(x.type.shape)
            return emit(b, x, *params, axes=tuple(range(rank - naxes, rank)))

        return build

    def strided(b: Builder, x: Value, *params: Value) -> Value:
        return emit(b, b.emit("transpose", x, perm=(1, 0)), *params, axes=(1,))

    def broadcast(b: Builder, x: Value, *params: Value) -> Value:
        wide = b.emit("broadcast_in_dim", x, shape=(4, 5, 9), dims=(1, 2))
        return emit(b, wide, *params, axes=(2,))

    yield sample("odd", args((7, 13), 1), plain(1))
    yield sample("long_row", args((3, 4099), 1), plain(1), check="nmse")
    yield sample("two_axes", args((2, 3, 5), 2), plain(2))
    yield sample("one_row", args((17,), 1), plain(1))
    yield sample("edges", args((8, 16), 1, "edges"), plain(1))
    yield sample("empty", args((0, 8), 1), plain(1))
    t_args = [Arg(TensorType((11, 6), dtype))] + [  # rows of 11 read with stride 6
        Arg(TensorType((11,), dtype)) for _ in range(nparams)]
    yield sample("strided", t_args, strided)
    b_args = [Arg(TensorType((5, 9), dtype))] + [
        Arg(TensorType((9,), dtype)) for _ in range(nparams)]
    yield sample("broadcast", b_args, broadcast)


@cases("softmax")
def _softmax(dtype: DType) -> Iterator[Sample]:
    yield from _shapes(lambda b, x, axes: b.emit("softmax", x, axes=axes), dtype, 0)


@cases("log_softmax")
def _log_softmax(dtype: DType) -> Iterator[Sample]:
    yield from _shapes(lambda b, x, axes: b.emit("log_softmax", x, axes=axes), dtype, 0)


@cases("layer_norm")
def _layer_norm(dtype: DType) -> Iterator[Sample]:
    for n, tag in ((0, "plain"), (1, "weight"), (2, "affine")):
        for s in _shapes(lambda b, x, *p, axes: b.emit("layer_norm", x, *p, axes=axes,
                                                        eps=1e-5), dtype, n):
            yield sample(f"{tag}_{s.name}", s.args, s.build, check=s.check)


@cases("rms_norm")
def _rms_norm(dtype: DType) -> Iterator[Sample]:
    for n, tag in ((0, "plain"), (1, "weight")):
        for s in _shapes(lambda b, x, *p, axes: b.emit("rms_norm", x, *p, axes=axes,
                                                        eps=1e-6), dtype, n):
            yield sample(f"{tag}_{s.name}", s.args, s.build, check=s.check)


def _norm_backward(op: str, eps: float, tags: tuple[str, ...]
                   ) -> Callable[[DType], Iterator[Sample]]:
    """Samples of a norm's backward composite: (x, grad, *params), as the forward's shapes."""

    def samples(dtype: DType) -> Iterator[Sample]:
        def args(shape: tuple[int, ...], naxes: int, nparams: int,
                 fill: str = "normal") -> list[Arg]:
            row = shape[len(shape) - naxes:]
            return [Arg(TensorType(shape, dtype), fill), Arg(TensorType(shape, dtype))] + [
                Arg(TensorType(row, dtype)) for _ in range(nparams)]

        def plain(naxes: int) -> Callable[..., tuple[Value, ...]]:
            def build(b: Builder, x: Value, g: Value, *params: Value) -> tuple[Value, ...]:
                rank = len(x.type.shape)
                return b.emit_multi(op, x, g, *params, axes=tuple(range(rank - naxes, rank)),
                                    eps=eps)

            return build

        def strided(b: Builder, x: Value, g: Value, *params: Value) -> tuple[Value, ...]:
            xt = b.emit("transpose", x, perm=(1, 0))  # rows of 11 read with stride 6
            return b.emit_multi(op, xt, g, *params, axes=(1,), eps=eps)

        for n, tag in enumerate(tags):
            yield sample(f"{tag}_odd", args((7, 13), 1, n), plain(1))
            yield sample(f"{tag}_batch", args((4, 9, 32), 1, n), plain(1))
            yield sample(f"{tag}_long_row", args((3, 4099), 1, n), plain(1), check="nmse")
            yield sample(f"{tag}_two_axes", args((2, 3, 5), 2, n), plain(2))
            yield sample(f"{tag}_one_row", args((17,), 1, n), plain(1))
            yield sample(f"{tag}_edges", args((8, 16), 1, n, "edges"), plain(1))
            yield sample(f"{tag}_empty", args((0, 8), 1, n), plain(1))
            yield sample(f"{tag}_strided", [Arg(TensorType((6, 11), dtype)),
                                            Arg(TensorType((11, 6), dtype))]
                         + [Arg(TensorType((6,), dtype)) for _ in range(n)], strided)

    return samples


cases("layer_norm_backward")(_norm_backward("layer_norm_backward", 1e-5,
                                            ("plain", "weight", "affine")))
cases("rms_norm_backward")(_norm_backward("rms_norm_backward", 1e-6, ("plain", "weight")))


def _elementwise(op: str, **attrs: object) -> Callable[[DType], Iterator[Sample]]:
    def samples(dtype: DType) -> Iterator[Sample]:
        def apply(b: Builder, x: Value) -> Value:
            return b.emit(op, x, **attrs)

        yield sample("odd", [TensorType((7, 13), dtype)], apply)
        yield sample("scalar", [TensorType((), dtype)], apply)
        yield sample("empty", [TensorType((0, 3), dtype)], apply)
        yield sample("edges", [Arg(TensorType((64,), dtype), "edges")], apply)
        yield sample("strided", [TensorType((9, 6), dtype)],
                     lambda b, x: b.emit(op, b.emit("transpose", x, perm=(1, 0)), **attrs))
        yield sample("broadcast", [TensorType((6,), dtype)], lambda b, x: b.emit(
            op, b.emit("broadcast_in_dim", x, shape=(5, 6), dims=(1,)), **attrs))

    return samples


@cases("gelu")
def _gelu(dtype: DType) -> Iterator[Sample]:
    for approximate in ("none", "tanh"):
        for s in _elementwise("gelu", approximate=approximate)(dtype):
            yield sample(f"{approximate}_{s.name}", s.args, s.build)


cases("silu")(_elementwise("silu"))


def _gated(op: str, **attrs: object) -> Callable[[DType], Iterator[Sample]]:
    def samples(dtype: DType) -> Iterator[Sample]:
        def apply(b: Builder, g: Value, u: Value) -> Value:
            return b.emit(op, g, u, **attrs)

        yield sample("odd", [TensorType((7, 13), dtype)] * 2, apply)
        yield sample("empty", [TensorType((0, 3), dtype)] * 2, apply)
        yield sample("edges", [Arg(TensorType((64,), dtype), "edges"),
                               Arg(TensorType((64,), dtype))], apply)
        yield sample("strided", [TensorType((9, 6), dtype), TensorType((6, 9), dtype)],
                     lambda b, g, u: b.emit(op, b.emit("transpose", g, perm=(1, 0)), u, **attrs))
        yield sample("broadcast", [TensorType((6,), dtype), TensorType((5, 6), dtype)],
                     lambda b, g, u: b.emit(op, b.emit("broadcast_in_dim", g, shape=(5, 6),
                                                       dims=(1,)), u, **attrs))

    return samples


cases("swiglu")(_gated("swiglu"))


@cases("geglu")
def _geglu(dtype: DType) -> Iterator[Sample]:
    for approximate in ("none", "tanh"):
        for s in _gated("geglu", approximate=approximate)(dtype):
            yield sample(f"{approximate}_{s.name}", s.args, s.build)


@cases("rotary_embedding")
def _rotary(dtype: DType) -> Iterator[Sample]:
    for interleaved in (False, True):
        tag = "interleaved" if interleaved else "halves"

        def apply(b: Builder, x: Value, c: Value, s: Value, i: bool = interleaved) -> Value:
            return b.emit("rotary_embedding", x, c, s, interleaved=i)

        def strided(b: Builder, x: Value, c: Value, s: Value, i: bool = interleaved) -> Value:
            xt = b.emit("transpose", x, perm=(1, 0, 2))  # (H, T, D) read as (T, H, D)
            return b.emit("rotary_embedding", xt, c, s, interleaved=i)

        tables = [Arg(TensorType((5, 4), dtype), "small")] * 2
        yield sample(f"{tag}_heads", [TensorType((2, 3, 5, 8), dtype), *tables], apply)
        yield sample(f"{tag}_strided", [TensorType((3, 5, 8), dtype),
                                        Arg(TensorType((5, 1, 4), dtype), "small"),
                                        Arg(TensorType((5, 1, 4), dtype), "small")], strided)
        yield sample(f"{tag}_edges", [Arg(TensorType((5, 8), dtype), "edges"), *tables], apply)


@cases("scaled_dot_product_attention")
def _attention(dtype: DType) -> Iterator[Sample]:
    def attend(causal: bool) -> Callable[..., Value]:
        def build(b: Builder, q: Value, k: Value, v: Value) -> Value:
            return b.emit("scaled_dot_product_attention", q, k, v, scale=0.35, is_causal=causal)

        return build

    def strided(b: Builder, q: Value, k: Value, v: Value) -> Value:
        qt = b.emit("transpose", q, perm=(0, 2, 1, 3))  # (B, T, H, D) read as (B, H, T, D)
        return b.emit("scaled_dot_product_attention", qt, k, v, scale=0.35, is_causal=True)

    def broadcast(b: Builder, q: Value, k: Value, v: Value) -> Value:
        kb = b.emit("broadcast_in_dim", k, shape=(2, 2, 7, 8), dims=(1, 2, 3))
        return b.emit("scaled_dot_product_attention", q, kb, v, scale=0.35)

    def qkv(t: int, s: int, hq: int = 4, hkv: int = 2) -> list[TensorType]:
        return [TensorType((2, hq, t, 8), dtype), TensorType((2, hkv, s, 8), dtype),
                TensorType((2, hkv, s, 8), dtype)]

    yield sample("mha", qkv(5, 5, 2, 2), attend(False), check="nmse")
    yield sample("gqa_causal", qkv(5, 5), attend(True), check="nmse")
    yield sample("decode", qkv(1, 9), attend(True), check="nmse")
    yield sample("chunk_against_cache", qkv(3, 11), attend(True), check="nmse")
    yield sample("strided", [TensorType((2, 5, 4, 8), dtype), *qkv(5, 5)[1:]], strided,
                 check="nmse")
    yield sample("broadcast", [TensorType((2, 4, 3, 8), dtype), TensorType((2, 7, 8), dtype),
                               TensorType((2, 2, 7, 8), dtype)], broadcast, check="nmse")
    q, k, v = qkv(4, 4, 2, 1)
    yield sample("edges", [Arg(q, "edges"), Arg(k), Arg(v)], attend(True), check="nmse")
    yield from _attention_extras(dtype)


def _attention_extras(dtype: DType) -> Iterator[Sample]:
    """Masks (bool padding, additive), query positions, cache lengths and soft-capping."""
    from omnitensor.dtypes import bool_, int32

    def ints(*values: int) -> Callable[[np.random.Generator, TensorType], np.ndarray]:
        return lambda rng, t: np.asarray(values, np.int32).reshape(t.shape)

    def keep(rng: np.random.Generator, t: TensorType) -> np.ndarray:
        mask = rng.random(t.shape) > 0.3
        mask.reshape(-1, t.shape[-1])[0] = False  # one row with no key left: uniform
        return mask

    def attend(**attrs: object) -> Callable[..., Value]:
        def build(b: Builder, q: Value, k: Value, v: Value, *extras: Value) -> Value:
            return b.emit("scaled_dot_product_attention", q, k, v, *extras, scale=0.35,
                          **attrs)

        return build

    q, k, v = (TensorType((2, 4, 3, 8), dtype), TensorType((2, 2, 9, 8), dtype),
               TensorType((2, 2, 9, 8), dtype))
    padding = Arg(TensorType((2, 1, 1, 9), bool_), keep)
    yield sample("bool_padding", [q, k, v, padding], attend(mask_kind="bool"), check="nmse")
    yield sample("additive_mask", [q, k, v, Arg(TensorType((2, 1, 3, 9), dtype), "small")],
                 attend(mask_kind="additive"), check="nmse")
    yield sample("softcap_causal", [q, k, v], attend(is_causal=True, softcap=1.5),
                 check="nmse")
    # A decode chunk written at slots 4..6 of a 9-slot cache filled up to 7.
    cache = [Arg(TensorType((3,), int32), ints(4, 5, 6)), Arg(TensorType((), int32), ints(7))]
    yield sample("cache_positions", [q, k, v, *cache],
                 attend(is_causal=True, has_q_positions=True, has_kv_length=True),
                 check="nmse")
    yield sample("everything", [q, k, v, padding, *cache],
                 attend(is_causal=True, mask_kind="bool", has_q_positions=True,
                        has_kv_length=True, softcap=2.0), check="nmse")
    # 17 query rows: long enough for backends that switch to matrix products for prefill
    long_q, long_kv = TensorType((2, 4, 17, 8), dtype), TensorType((2, 2, 17, 8), dtype)
    yield sample("prefill_padding_softcap",
                 [long_q, long_kv, long_kv, Arg(TensorType((2, 1, 1, 17), bool_), keep)],
                 attend(is_causal=True, mask_kind="bool", softcap=2.0), check="nmse")
    yield sample("prefill_additive", [long_q, long_kv, long_kv,
                                      Arg(TensorType((2, 1, 17, 17), dtype), "small")],
                 attend(mask_kind="additive"), check="nmse")
    yield sample("cache_length_only", [TensorType((1, 2, 1, 8), dtype),
                                       TensorType((1, 1, 9, 8), dtype),
                                       TensorType((1, 1, 9, 8), dtype),
                                       Arg(TensorType((), int32), ints(3))],
                 attend(has_kv_length=True), check="nmse")


@cases("scaled_dot_product_attention_backward")
def _attention_backward(dtype: DType) -> Iterator[Sample]:
    """The fused backward on the forward's layouts, masks and edge rows (cotangent `grad`)."""
    from omnitensor.dtypes import bool_, int32

    def grads(**attrs: object) -> Callable[..., tuple[Value, ...]]:
        def build(b: Builder, q: Value, k: Value, v: Value, g: Value,
                  *extras: Value) -> tuple[Value, ...]:
            return b.emit_multi("scaled_dot_product_attention_backward", q, k, v, g, *extras,
                                scale=0.35, **attrs)

        return build

    def strided(b: Builder, q: Value, k: Value, v: Value, g: Value) -> tuple[Value, ...]:
        qt = b.emit("transpose", q, perm=(0, 2, 1, 3))  # (B, T, H, D) read as (B, H, T, D)
        return b.emit_multi("scaled_dot_product_attention_backward", qt, k, v, g, scale=0.35,
                            is_causal=True)

    def keep(rng: np.random.Generator, t: TensorType) -> np.ndarray:
        mask = rng.random(t.shape) > 0.3
        mask.reshape(-1, t.shape[-1])[0] = False  # one row with no key left
        return mask

    def ints(*values: int) -> Callable[[np.random.Generator, TensorType], np.ndarray]:
        return lambda rng, t: np.asarray(values, np.int32).reshape(t.shape)

    def qkvg(t: int, s: int, hq: int = 4, hkv: int = 2, d: int = 8,
             dv: int = 8) -> list[TensorType]:
        return [TensorType((2, hq, t, d), dtype), TensorType((2, hkv, s, d), dtype),
                TensorType((2, hkv, s, dv), dtype), TensorType((2, hq, t, dv), dtype)]

    yield sample("mha", qkvg(5, 5, 2, 2), grads(), check="nmse")
    yield sample("gqa_causal", qkvg(9, 9), grads(is_causal=True), check="nmse")
    yield sample("value_width", qkvg(4, 7, 2, 1, 8, 5), grads(is_causal=True), check="nmse")
    yield sample("long_keys", qkvg(3, 70, 2, 1), grads(), check="nmse")
    yield sample("strided", [TensorType((2, 5, 4, 8), dtype), *qkvg(5, 5)[1:]], strided,
                 check="nmse")
    q, k, v, g = qkvg(4, 4, 2, 1)
    yield sample("edges", [Arg(q, "edges"), k, v, g], grads(is_causal=True), check="nmse")
    q, k, v, g = qkvg(3, 9)
    padding = Arg(TensorType((2, 1, 1, 9), bool_), keep)
    yield sample("bool_padding", [q, k, v, g, padding], grads(mask_kind="bool"), check="nmse")
    yield sample("additive_softcap", [q, k, v, g, Arg(TensorType((2, 1, 3, 9), dtype),
                                                      "small")],
                 grads(mask_kind="additive", softcap=1.5), check="nmse")
    cache = [Arg(TensorType((3,), int32), ints(4, 5, 6)), Arg(TensorType((), int32), ints(7))]
    yield sample("everything", [q, k, v, g, padding, *cache],
                 grads(is_causal=True, mask_kind="bool", has_q_positions=True,
                       has_kv_length=True, softcap=2.0), check="nmse")
    yield sample("empty", qkvg(0, 5), grads(), check="nmse")


@cases("cross_entropy")
def _cross_entropy(dtype: DType) -> Iterator[Sample]:
    from omnitensor.dtypes import int32

    def classes(count: int, ignore: int = -100) -> Callable[[np.random.Generator, TensorType],
                                                            np.ndarray]:
        def make(rng: np.random.Generator, t: TensorType) -> np.ndarray:
            target = rng.integers(0, count, size=t.shape).astype(np.int32)
            flat = target.reshape(-1)
            if flat.size > 2:  # one ignored row and one class out of range
                flat[1], flat[2] = ignore, count + 3
            return target

        return make

    def loss(**attrs: object) -> Callable[..., Value]:
        return lambda b, x, t: b.emit("cross_entropy", x, t, **attrs)

    def strided(b: Builder, x: Value, t: Value) -> Value:
        return b.emit("cross_entropy", b.emit("transpose", x, perm=(1, 0)), t)

    yield sample("rows", [TensorType((9, 13), dtype), Arg(TensorType((9,), int32), classes(13))],
                 loss(), check="nmse")
    yield sample("smoothed", [TensorType((2, 5, 7), dtype),
                              Arg(TensorType((2, 5), int32), classes(7, ignore=0))],
                 loss(ignore_index=0, label_smoothing=0.1), check="nmse")
    yield sample("long_row", [TensorType((3, 4099), dtype),
                              Arg(TensorType((3,), int32), classes(4099))], loss(), check="nmse")
    yield sample("one_row", [TensorType((6,), dtype), Arg(TensorType((), int32), classes(6))],
                 loss(), check="nmse")
    yield sample("edges", [Arg(TensorType((8, 16), dtype), "edges"),
                           Arg(TensorType((8,), int32), classes(16))], loss(), check="nmse")
    yield sample("empty", [TensorType((0, 8), dtype), Arg(TensorType((0,), int32), classes(8))],
                 loss())
    yield sample("strided", [TensorType((11, 6), dtype),
                             Arg(TensorType((6,), int32), classes(11))], strided, check="nmse")
