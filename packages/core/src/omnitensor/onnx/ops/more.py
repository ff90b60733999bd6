"""More elementwise and indexing ONNX ops: bitwise, rounding, trigonometry, scatters, layouts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ... import dtypes as dt
from ...errors import UnsupportedError
from ...tensor.creation import full
from ...tensor.math import where
from ...tensor.tensor import Tensor
from ..registry import Ctx, Value, handler
from .elementwise import _binary, _broadcast, _unary

Attrs = Mapping[str, Any]

handler("Round", since=11)(_unary("round"))
handler("BitwiseNot", since=18)(_unary("not"))
handler("BitwiseAnd", since=18)(_binary(lambda a, b: Tensor._apply("and", *_broadcast(a, b))))
handler("BitwiseOr", since=18)(_binary(lambda a, b: Tensor._apply("or", *_broadcast(a, b))))
handler("BitwiseXor", since=18)(_binary(lambda a, b: Tensor._apply("xor", *_broadcast(a, b))))


def _trig(fn: Any) -> Any:
    def run(ctx: Ctx, attrs: Attrs, x: Value) -> Tensor:
        out: Tensor = fn(ctx.tensor(x))
        return out
    return run


def _exp(t: Tensor) -> Tensor:
    return t.exp()


handler("Tan", since=7)(_trig(lambda t: Tensor._apply("sin", t) / Tensor._apply("cos", t)))
handler("Sinh", since=9)(_trig(lambda t: (Tensor._apply("expm1", t) - Tensor._apply(
    "expm1", -t)) * 0.5))
handler("Cosh", since=9)(_trig(lambda t: (_exp(t) + _exp(-t)) * 0.5))
handler("Atan", since=7)(_trig(lambda t: Tensor._apply("atan2", t, t * 0.0 + 1.0)))
handler("Asin", since=7)(_trig(lambda t: Tensor._apply(
    "atan2", t, Tensor._apply("sqrt", (1.0 - t) * (1.0 + t)))))
handler("Acos", since=7)(_trig(lambda t: Tensor._apply(
    "atan2", Tensor._apply("sqrt", (1.0 - t) * (1.0 + t)), t)))
handler("Asinh", since=9)(_trig(lambda t: where(
    t < 0, -(((-t) + Tensor._apply("sqrt", t * t + 1.0)).log()),
    (t + Tensor._apply("sqrt", t * t + 1.0)).log())))
handler("Acosh", since=9)(_trig(lambda t: (t + Tensor._apply("sqrt", (t - 1.0) * (t + 1.0)))
                                .log()))
handler("Atanh", since=9)(_trig(lambda t: ((1.0 + t) / (1.0 - t)).log() * 0.5))


@handler("Shrink", since=9, attributes=("bias", "lambd"))
def _shrink(ctx: Ctx, attrs: Attrs, x: Value) -> Tensor:
    t = ctx.tensor(x)
    bias, lambd = float(attrs.get("bias", 0.0)), float(attrs.get("lambd", 0.5))
    zero = t * 0
    return where(t < -lambd, t + bias, where(t > lambd, t - bias, zero))


@handler("EyeLike", since=9, attributes=("dtype", "k"))
def _eye_like(ctx: Ctx, attrs: Attrs, x: Value) -> Value:
    shape = np.shape(x) if isinstance(x, np.ndarray) else tuple(x.shape)
    from ..model import dtype_of

    target = dtype_of(int(attrs["dtype"]), "EyeLike's dtype") if "dtype" in attrs else (
        ctx.tensor(x).dtype)
    return np.eye(shape[0], shape[1], k=int(attrs.get("k", 0)), dtype=target.np)


@handler("OneHot", since=11, attributes=("axis",), static=(1, 2))
def _one_hot(ctx: Ctx, attrs: Attrs, indices: Value, depth: Value, values: Value) -> Tensor:
    idx = ctx.tensor(indices)
    n = int(np.asarray(depth).reshape(-1)[0])
    axis = attrs.get("axis", -1)
    axis = axis + idx.ndim + 1 if axis < 0 else axis
    off_on = np.asarray(values).reshape(-1)
    shape = list(idx.shape)
    shape.insert(axis, n)
    pos = Tensor._apply("iota", shape=tuple(shape), dimension=axis, dtype=dt.int64)
    wrapped = idx.astype(dt.int64)
    wrapped = where(wrapped < 0, wrapped + n, wrapped)
    hit = pos == wrapped.reshape(*[1 if i == axis else d for i, d in enumerate(shape)]
                                 ).expand(*shape)
    off = full(tuple(shape), off_on[0].item(), dtype=dt.as_dtype(off_on.dtype))
    on = full(tuple(shape), off_on[1].item(), dtype=dt.as_dtype(off_on.dtype))
    return where(hit, on, off)


def _depth_check(attrs: Attrs) -> str | None:
    return None if attrs.get("mode", "DCR") in ("DCR", "CRD") else "mode must be DCR or CRD"


@handler("DepthToSpace", since=11, attributes=("blocksize", "mode"), check=_depth_check)
def _depth_to_space(ctx: Ctx, attrs: Attrs, x: Value) -> Tensor:
    t = ctx.tensor(x)
    b = int(attrs["blocksize"])
    n, c, h, w = t.shape
    if attrs.get("mode", "DCR") == "DCR":
        out = t.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
    else:
        out = t.reshape(n, c // (b * b), b, b, h, w).permute(0, 1, 4, 2, 5, 3)
    return out.reshape(n, c // (b * b), h * b, w * b)


@handler("SpaceToDepth", since=1, attributes=("blocksize",))
def _space_to_depth(ctx: Ctx, attrs: Attrs, x: Value) -> Tensor:
    t = ctx.tensor(x)
    b = int(attrs["blocksize"])
    n, c, h, w = t.shape
    out = t.reshape(n, c, h // b, b, w // b, b).permute(0, 3, 5, 1, 2, 4)
    return out.reshape(n, c * b * b, h // b, w // b)


def _scatter_check(attrs: Attrs) -> str | None:
    reduction = attrs.get("reduction", "none")
    return None if reduction in ("none", "add") else f"reduction={reduction!r}"


@handler("ScatterElements", since=11, attributes=("axis", "reduction"), check=_scatter_check)
def _scatter_elements(ctx: Ctx, attrs: Attrs, x: Value, indices: Value, updates: Value
                      ) -> Tensor:
    t, upd = ctx.tensor(x), ctx.tensor(updates)
    idx = ctx.tensor(indices).astype(dt.int32)
    axis = attrs.get("axis", 0)
    axis = axis + t.ndim if axis < 0 else axis
    idx = where(idx < 0, idx + t.shape[axis], idx)
    # One-hot along `axis`: hit[..., j, ...] = (indices[...] == j) over the indices' block.
    size = t.shape[axis]
    block = list(idx.shape)
    expanded = block[:axis + 1] + [size] + block[axis + 1:]
    pos = Tensor._apply("iota", shape=tuple(expanded), dimension=axis + 1, dtype=dt.int32)
    hit = pos == idx.reshape(*(block[:axis + 1] + [1] + block[axis + 1:])).expand(*expanded)
    upd_e = upd.reshape(*(block[:axis + 1] + [1] + block[axis + 1:])).expand(*expanded)
    zero = upd_e * 0 if upd.dtype != dt.bool_ else Tensor._apply("ne", upd_e, upd_e)
    contrib = where(hit, upd_e, zero).sum(axis) if upd.dtype != dt.bool_ else None
    count = hit.astype(dt.int32).sum(axis)  # (block[:axis], size, block[axis+1:])
    if contrib is None:
        raise UnsupportedError("ScatterElements on bool", op="onnx")
    pad_to = [(0, t.shape[d] - count.shape[d]) for d in range(t.ndim)]
    if any(p[1] for p in pad_to):
        zero_i = Tensor._apply("convert", full((), 0, dtype=dt.int32), dtype=dt.int32)
        count = Tensor._apply("pad", count, zero_i, low=(0,) * t.ndim,
                              high=tuple(p[1] for p in pad_to), interior=(0,) * t.ndim)
        zero_v = Tensor._apply("convert", full((), 0, dtype=contrib.dtype), dtype=contrib.dtype)
        contrib = Tensor._apply("pad", contrib.astype(t.dtype), zero_v.astype(t.dtype),
                                low=(0,) * t.ndim, high=tuple(p[1] for p in pad_to),
                                interior=(0,) * t.ndim)
    contrib = contrib.astype(t.dtype)
    if attrs.get("reduction", "none") == "add":
        return t + contrib
    return where(count > 0, contrib, t)


@handler("GatherND", since=12, attributes=("batch_dims",), static=())
def _gather_nd(ctx: Ctx, attrs: Attrs, x: Value, indices: Value) -> Tensor:
    t, idx = ctx.tensor(x), ctx.tensor(indices).astype(dt.int32)
    batch = int(attrs.get("batch_dims", 0))
    k = idx.shape[-1]
    # Flatten the k indexed dims into one and gather along it.
    dims = t.shape[batch:batch + k]
    strides = [int(np.prod(dims[i + 1:])) for i in range(k)]
    flat_idx = None
    for i in range(k):
        part = idx[(slice(None),) * (idx.ndim - 1) + (i,)]
        part = where(part < 0, part + dims[i], part) * strides[i]
        flat_idx = part if flat_idx is None else flat_idx + part
    assert flat_idx is not None
    flat = t.reshape(*t.shape[:batch], int(np.prod(dims)), *t.shape[batch + k:])
    if batch:
        b = int(np.prod(t.shape[:batch]))
        flat = flat.reshape(b, *flat.shape[batch:])
        inner = flat_idx.reshape(b, *flat_idx.shape[batch:])
        out = Tensor._apply("gather", flat, inner, axis=1, batch_dims=1)
        return out.reshape(*idx.shape[:-1], *t.shape[batch + k:])
    return Tensor._apply("gather", flat, flat_idx, axis=0)


@handler("LpNormalization", since=1, attributes=("axis", "p"))
def _lp_normalization(ctx: Ctx, attrs: Attrs, x: Value) -> Tensor:
    t = ctx.tensor(x)
    axis = attrs.get("axis", -1)
    p = int(attrs.get("p", 2))
    if p == 1:
        norm = t.abs().sum(axis, keepdims=True)
    elif p == 2:
        norm = (t * t).sum(axis, keepdims=True).sqrt()
    else:
        raise UnsupportedError(f"LpNormalization with p={p} (supported: 1, 2)", op="onnx")
    return where(norm == 0, t * 0, t / norm)

