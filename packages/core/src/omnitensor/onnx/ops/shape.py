"""ONNX ops that move data: shapes, reshapes, slices, gathers, concatenation, padding."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ... import dtypes as dt
from ...errors import ShapeError, UnsupportedError
from ...tensor.creation import full
from ...tensor.math import where
from ...tensor.shape import concatenate
from ...tensor.tensor import Tensor
from ..registry import Ctx, Value, handler

Attrs = Mapping[str, Any]


def _axis(axis: int, ndim: int) -> int:
    return axis + ndim if axis < 0 else axis


@handler("Constant", since=1, attributes=("value", "value_float", "value_floats", "value_int",
                                          "value_ints"))
def _constant(ctx: Ctx, attrs: Attrs) -> Value:
    if "value" in attrs:
        return np.asarray(attrs["value"])
    if "value_float" in attrs:
        return np.asarray(attrs["value_float"], np.float32)
    if "value_floats" in attrs:
        return np.asarray(attrs["value_floats"], np.float32)
    if "value_int" in attrs:
        return np.asarray(attrs["value_int"], np.int64)
    if "value_ints" in attrs:
        return np.asarray(attrs["value_ints"], np.int64)
    raise UnsupportedError("Constant without a value attribute", op="onnx")


@handler("Shape", since=1, attributes=("start", "end"))
def _shape(ctx: Ctx, attrs: Attrs, x: Value) -> Value:
    shape = list(np.shape(x) if isinstance(x, np.ndarray) else x.shape)
    start, end = attrs.get("start", 0), attrs.get("end", len(shape))
    return np.asarray(shape[start:end], np.int64)


@handler("Size", since=1)
def _size(ctx: Ctx, attrs: Attrs, x: Value) -> Value:
    shape = np.shape(x) if isinstance(x, np.ndarray) else x.shape
    return np.asarray(int(np.prod(shape)), np.int64)


def _reshape_target(shape: tuple[int, ...], dims: tuple[int, ...], allowzero: int) -> list[int]:
    out = [shape[i] if d == 0 and not allowzero and i < len(shape) else d
           for i, d in enumerate(dims)]
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1]))
        total = int(np.prod(shape))
        out[out.index(-1)] = total // known if known else 0
    return out


@handler("Reshape", since=5, attributes=("allowzero",), static=(1,))
def _reshape(ctx: Ctx, attrs: Attrs, x: Value, shape: Value) -> Value:
    t = ctx.tensor(x)
    target = _reshape_target(tuple(t.shape), ctx.ints(shape, "Reshape's shape"),
                             attrs.get("allowzero", 0))
    return t.reshape(*target)


@handler("Flatten", since=1, attributes=("axis",))
def _flatten(ctx: Ctx, attrs: Attrs, x: Value) -> Value:
    t = ctx.tensor(x)
    axis = _axis(attrs.get("axis", 1), t.ndim)
    outer = int(np.prod(t.shape[:axis]))
    return t.reshape(outer, int(np.prod(t.shape[axis:])))


@handler("Transpose", since=1, attributes=("perm",))
def _transpose(ctx: Ctx, attrs: Attrs, x: Value) -> Value:
    t = ctx.tensor(x)
    perm = attrs.get("perm", list(range(t.ndim))[::-1])
    return t.permute(*[_axis(p, t.ndim) for p in perm])


def _axes_input(ctx: Ctx, attrs: Attrs, axes: Value, what: str) -> tuple[int, ...] | None:
    if ctx.opset >= 13:
        return None if axes is None else ctx.ints(axes, f"{what}'s axes")
    return tuple(attrs["axes"]) if "axes" in attrs else None


@handler("Squeeze", since=1, attributes=("axes",), static=(1,))
def _squeeze(ctx: Ctx, attrs: Attrs, x: Value, axes: Value = None) -> Value:
    t = ctx.tensor(x)
    picked = _axes_input(ctx, attrs, axes, "Squeeze")
    if picked is None:
        picked = tuple(i for i, d in enumerate(t.shape) if d == 1)
    picked = tuple(_axis(a, t.ndim) for a in picked)
    return t.reshape(*[d for i, d in enumerate(t.shape) if i not in picked])


@handler("Unsqueeze", since=1, attributes=("axes",), static=(1,))
def _unsqueeze(ctx: Ctx, attrs: Attrs, x: Value, axes: Value = None) -> Value:
    t = ctx.tensor(x)
    picked = _axes_input(ctx, attrs, axes, "Unsqueeze")
    if picked is None:
        raise UnsupportedError("Unsqueeze without axes", op="onnx")
    ndim = t.ndim + len(picked)
    shape = list(t.shape)
    for a in sorted(_axis(a, ndim) for a in picked):
        shape.insert(a, 1)
    return t.reshape(*shape)


@handler("Concat", since=4, attributes=("axis",))
def _concat(ctx: Ctx, attrs: Attrs, *xs: Value) -> Value:
    tensors = [ctx.tensor(x) for x in xs]
    axis = _axis(attrs["axis"], tensors[0].ndim)
    return concatenate(tensors, axis=axis)


def _slice_tensor(t: Tensor, starts: tuple[int, ...], ends: tuple[int, ...],
                  axes: tuple[int, ...], steps: tuple[int, ...]) -> Tensor:
    index: list[slice] = [slice(None)] * t.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        if step == 0:
            raise ShapeError("Slice: a step of 0", op="onnx")
        dim = t.shape[_axis(axis, t.ndim)]
        # numpy clamps out-of-range bounds the way ONNX specifies.
        start = max(min(start, dim), -dim - 1) if abs(start) > dim else start
        end = max(min(end, dim), -dim - 1) if abs(end) > dim else end
        index[_axis(axis, t.ndim)] = slice(start, end, step)
    return t[tuple(index)]


@handler("Slice", since=10, static=(1, 2, 3, 4))
def _slice(ctx: Ctx, attrs: Attrs, x: Value, starts: Value, ends: Value, axes: Value = None,
           steps: Value = None) -> Value:
    t = ctx.tensor(x)
    s, e = ctx.ints(starts, "Slice's starts"), ctx.ints(ends, "Slice's ends")
    a = tuple(range(len(s))) if axes is None else ctx.ints(axes, "Slice's axes")
    st = (1,) * len(s) if steps is None else ctx.ints(steps, "Slice's steps")
    return _slice_tensor(t, s, e, a, st)


@handler("Split", since=13, attributes=("axis", "num_outputs"), static=(1,))
def _split(ctx: Ctx, attrs: Attrs, x: Value, split: Value = None) -> list[Value]:
    t = ctx.tensor(x)
    axis = _axis(attrs.get("axis", 0), t.ndim)
    dim = t.shape[axis]
    count = len(ctx.node.output)
    if split is not None:
        sizes = list(ctx.ints(split, "Split's split"))
    else:
        n = attrs.get("num_outputs", count)
        chunk = -(-dim // n)
        sizes = [min(chunk, dim - i * chunk) for i in range(n)]
    outs, start = [], 0
    for size in sizes:
        index: list[slice] = [slice(None)] * t.ndim
        index[axis] = slice(start, start + size)
        outs.append(t[tuple(index)])
        start += size
    return outs


@handler("Gather", since=1, attributes=("axis",))
def _gather(ctx: Ctx, attrs: Attrs, x: Value, indices: Value) -> Value:
    t = ctx.tensor(x)
    axis = _axis(attrs.get("axis", 0), t.ndim)
    idx = ctx.tensor(indices)
    if idx.dtype != dt.int32:
        idx = idx.astype(dt.int32)
    idx = where(idx < 0, idx + t.shape[axis], idx)  # ONNX counts negatives from the end
    return Tensor._apply("gather", t, idx, axis=axis)


@handler("GatherElements", since=11, attributes=("axis",))
def _gather_elements(ctx: Ctx, attrs: Attrs, x: Value, indices: Value) -> Value:
    t, idx = ctx.tensor(x), ctx.tensor(indices).astype(dt.int32)
    axis = _axis(attrs.get("axis", 0), t.ndim)
    idx = where(idx < 0, idx + t.shape[axis], idx)
    # take_along_axis: move `axis` last, gather with every other dim as a batch dim.
    perm = [d for d in range(t.ndim) if d != axis] + [axis]
    inverse = list(np.argsort(perm))
    tt, it = t.permute(*perm), idx.permute(*perm)
    if tuple(tt.shape[:-1]) != tuple(it.shape[:-1]):
        tt = tt[tuple(slice(0, d) for d in it.shape[:-1]) + (slice(None),)]
    out = Tensor._apply("gather", tt, it, axis=tt.ndim - 1, batch_dims=tt.ndim - 1)
    return out.permute(*inverse)


@handler("Expand", since=8, static=(1,))
def _expand(ctx: Ctx, attrs: Attrs, x: Value, shape: Value) -> Value:
    t = ctx.tensor(x)
    target = tuple(np.broadcast_shapes(tuple(t.shape), ctx.ints(shape, "Expand's shape")))
    if t.ndim < len(target):
        t = t.reshape(*((1,) * (len(target) - t.ndim) + tuple(t.shape)))
    return t.expand(*target) if tuple(t.shape) != target else t


@handler("ConstantOfShape", since=9, attributes=("value",), static=(0,))
def _constant_of_shape(ctx: Ctx, attrs: Attrs, shape: Value) -> Value:
    dims = ctx.ints(shape, "ConstantOfShape's shape")
    value = np.asarray(attrs.get("value", np.zeros(1, np.float32))).reshape(-1)
    if int(np.prod(dims)) <= 64:
        return np.full(dims, value[0], dtype=value.dtype)
    return full(dims, value[0].item(), dtype=dt.as_dtype(value.dtype))


@handler("Range", since=11, static=(0, 1, 2))
def _range(ctx: Ctx, attrs: Attrs, start: Value, limit: Value, delta: Value) -> Value:
    a, b, d = (np.asarray(v).reshape(()).item() for v in (start, limit, delta))
    count = max(int(np.ceil((b - a) / d)), 0)  # ONNX's formula (not numpy's float arange)
    dtype = np.asarray(start).dtype
    return (np.asarray(a, dtype) + np.arange(count, dtype=dtype) * np.asarray(d, dtype)
            ).astype(dtype)


@handler("Tile", since=6, static=(1,))
def _tile(ctx: Ctx, attrs: Attrs, x: Value, repeats: Value) -> Value:
    t = ctx.tensor(x)
    reps = ctx.ints(repeats, "Tile's repeats")
    shape = []
    expanded = []
    for d, r in zip(t.shape, reps, strict=True):
        shape += [1, d]
        expanded += [r, d]
    out = t.reshape(*shape).expand(*expanded)
    return out.reshape(*[d * r for d, r in zip(t.shape, reps, strict=True)])


def _pad_check(attrs: Attrs) -> str | None:
    mode = attrs.get("mode", "constant")
    return None if mode in ("constant", "reflect", "edge") else f"mode={mode!r}"


@handler("Pad", since=11, attributes=("mode",), check=_pad_check, static=(1, 3))
def _pad(ctx: Ctx, attrs: Attrs, x: Value, pads: Value, value: Value = None,
         axes: Value = None) -> Value:
    t = ctx.tensor(x)
    p = ctx.ints(pads, "Pad's pads")
    picked = tuple(range(t.ndim)) if axes is None else tuple(
        _axis(a, t.ndim) for a in ctx.ints(axes, "Pad's axes"))
    low, high = [0] * t.ndim, [0] * t.ndim
    for i, a in enumerate(picked):
        low[a], high[a] = p[i], p[i + len(picked)]
    mode = attrs.get("mode", "constant")
    if mode == "constant":
        fill = ctx.tensor(value).reshape() if value is not None else None
        if fill is None:
            fill = Tensor._apply("convert", full((), 0, dtype=t.dtype), dtype=t.dtype)
        return Tensor._apply("pad", t, fill.astype(t.dtype), low=tuple(low), high=tuple(high),
                             interior=(0,) * t.ndim)
    out = t
    for a in range(t.ndim):
        pieces: list[Tensor | None] = []
        n = out.shape[a]
        for side, count in (("low", low[a]), ("high", high[a])):
            if count <= 0:
                pieces.append(None)
                continue
            if mode == "edge":
                pos = [0] * count if side == "low" else [n - 1] * count
            else:  # reflect (the edge itself not repeated)
                pos = ([count - i for i in range(count)] if side == "low"
                       else [n - 2 - i for i in range(count)])
            idx = Tensor._apply("convert", full((count,), 0, dtype=dt.int32), dtype=dt.int32)
            idx = idx + np.asarray(pos, np.int32)
            pieces.append(Tensor._apply("gather", out, idx, axis=a))
        parts = [p for p in (pieces[0], out, pieces[1]) if p is not None]
        out = concatenate(parts, axis=a) if len(parts) > 1 else out
    return out


@handler("Trilu", since=14, attributes=("upper",), static=(1,))
def _trilu(ctx: Ctx, attrs: Attrs, x: Value, k: Value = None) -> Value:
    t = ctx.tensor(x)
    shift = 0 if k is None else ctx.ints(k, "Trilu's k")[0]
    rows, cols = t.shape[-2], t.shape[-1]
    i = np.arange(rows)[:, None]
    j = np.arange(cols)[None, :]
    keep = (j - i >= shift) if attrs.get("upper", 1) else (j - i <= shift)
    mask = ctx.tensor(keep)
    return where(mask, t, t * 0 if t.dtype != dt.bool_ else Tensor._apply("ne", t, t))


@handler("CumSum", since=11, attributes=("exclusive", "reverse"), static=(1,))
def _cumsum(ctx: Ctx, attrs: Attrs, x: Value, axis: Value) -> Value:
    t = ctx.tensor(x)
    a = _axis(ctx.ints(axis, "CumSum's axis")[0], t.ndim)
    reverse = bool(attrs.get("reverse", 0))
    out = Tensor._apply("cumsum", t, axis=a, reverse=reverse)
    if attrs.get("exclusive", 0):
        out = out - t
    return out


@handler("TopK", since=11, attributes=("axis", "largest", "sorted"), static=(1,))
def _top_k(ctx: Ctx, attrs: Attrs, x: Value, k: Value) -> list[Value]:
    t = ctx.tensor(x)
    axis = _axis(attrs.get("axis", -1), t.ndim)
    count = ctx.ints(k, "TopK's k")[0]
    moved = t if axis == t.ndim - 1 else t.permute(
        *[d for d in range(t.ndim) if d != axis], axis)
    largest = attrs.get("largest", 1)
    src = moved if largest else -moved
    values, indices = Tensor._apply_multi("top_k", src, k=count)
    if not largest:
        values = -values
    if axis != t.ndim - 1:
        back = list(range(t.ndim - 1))
        back.insert(axis, t.ndim - 1)
        values, indices = values.permute(*back), indices.permute(*back)
    return [values, indices.astype(dt.int64)]
