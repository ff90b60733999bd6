"""ONNX neural-network ops: softmax, normalizations, convolution and pooling.

They call the functionals (which emit composites), so backends reach their fused kernels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ...errors import UnsupportedError
from ...functional import conv2d, layer_norm, log_softmax, rms_norm, softmax
from ...functional._ops import lowest, pad, strided_slice
from ...tensor.shape import stack
from ...tensor.tensor import Tensor
from ..registry import Ctx, Value, handler

Attrs = Mapping[str, Any]


def _axis(axis: int, ndim: int) -> int:
    return axis + ndim if axis < 0 else axis


def _coerced(ctx: Ctx, attrs: Attrs, x: Value, fn: Any) -> Tensor:
    """Softmax-family semantics: before opset 13, over the flattened dims from `axis` on."""
    t = ctx.tensor(x)
    if ctx.opset >= 13:
        out: Tensor = fn(t, axis=_axis(attrs.get("axis", -1), t.ndim))
        return out
    axis = _axis(attrs.get("axis", 1), t.ndim)
    flat = t.reshape(int(np.prod(t.shape[:axis])), int(np.prod(t.shape[axis:])))
    out = fn(flat, axis=1)
    return out.reshape(*t.shape)


@handler("Softmax", since=1, attributes=("axis",))
def _softmax(ctx: Ctx, attrs: Attrs, x: Value) -> Tensor:
    return _coerced(ctx, attrs, x, softmax)


@handler("LogSoftmax", since=1, attributes=("axis",))
def _log_softmax(ctx: Ctx, attrs: Attrs, x: Value) -> Tensor:
    return _coerced(ctx, attrs, x, log_softmax)


def _hardmax(t: Tensor, axis: int) -> Tensor:
    best = Tensor._apply("argmax", t, axis=axis)
    shape = list(best.shape)
    shape.insert(axis, 1)
    positions = np.arange(t.shape[axis]).reshape(
        [t.shape[axis] if i == axis else 1 for i in range(t.ndim)]).astype(np.int32)
    hit = best.reshape(*shape).expand(*t.shape) == Tensor._apply(
        "convert", Tensor._apply("broadcast_in_dim", _const(positions), shape=tuple(t.shape),
                                 dims=tuple(range(t.ndim))), dtype=best.dtype)
    return hit.astype(t.dtype)


def _const(array: np.ndarray[Any, Any]) -> Tensor:
    from ...tensor.interop import from_numpy

    return from_numpy(array)


@handler("Hardmax", since=1, attributes=("axis",))
def _hardmax_handler(ctx: Ctx, attrs: Attrs, x: Value) -> Tensor:
    return _coerced(ctx, attrs, x, lambda t, axis: _hardmax(t, axis))


def _layer_norm_check(attrs: Attrs) -> str | None:
    return None if attrs.get("stash_type", 1) == 1 else "stash_type other than float32"


@handler("LayerNormalization", since=17, attributes=("axis", "epsilon", "stash_type"),
         check=_layer_norm_check)
def _layer_norm(ctx: Ctx, attrs: Attrs, x: Value, scale: Value, bias: Value = None
                ) -> list[Tensor]:
    t = ctx.tensor(x)
    axis = _axis(attrs.get("axis", -1), t.ndim)
    shape = tuple(t.shape[axis:])
    eps = float(attrs.get("epsilon", 1e-5))
    if len([o for o in ctx.node.output if o]) > 1:
        return _layer_norm_with_stats(ctx, t, axis, scale, bias, eps)
    w = ctx.tensor(scale)
    b = None if bias is None else ctx.tensor(bias)
    if tuple(w.shape) != shape:
        w = w.expand(*shape) if len(w.shape) <= len(shape) else w
    if b is not None and tuple(b.shape) != shape:
        b = b.expand(*shape)
    return [layer_norm(t, shape, w, b, eps=eps)]


def _layer_norm_with_stats(ctx: Ctx, t: Tensor, axis: int, scale: Value, bias: Value,
                           eps: float) -> list[Tensor]:
    """LayerNormalization with its Mean and InvStdDev outputs (computed in float32)."""
    from ... import dtypes as dt

    axes = tuple(range(axis, t.ndim))
    x = t.astype(dt.float32) if t.dtype != dt.float64 else t
    mean = x.mean(axes, keepdims=True)
    centered = x - mean
    inv = Tensor._apply("rsqrt", (centered * centered).mean(axes, keepdims=True) + eps)
    out = (centered * inv).astype(t.dtype) * ctx.tensor(scale)
    if bias is not None:
        out = out + ctx.tensor(bias)
    return [out, mean, inv]


@handler("RMSNormalization", since=23, attributes=("axis", "epsilon", "stash_type"),
         check=_layer_norm_check)
def _rms_norm(ctx: Ctx, attrs: Attrs, x: Value, scale: Value) -> Tensor:
    t = ctx.tensor(x)
    axis = _axis(attrs.get("axis", -1), t.ndim)
    shape = tuple(t.shape[axis:])
    w = ctx.tensor(scale)
    if tuple(w.shape) != shape:
        w = w.expand(*shape)
    return rms_norm(t, shape, w, eps=float(attrs.get("epsilon", 1e-5)))


def _batch_norm_check(attrs: Attrs) -> str | None:
    if attrs.get("training_mode", 0):
        return "training_mode=1 (only inference is imported)"
    return None if attrs.get("spatial", 1) == 1 else "spatial=0"


@handler("BatchNormalization", since=7, attributes=("epsilon", "momentum", "training_mode",
                                                    "spatial"), check=_batch_norm_check)
def _batch_norm(ctx: Ctx, attrs: Attrs, x: Value, scale: Value, bias: Value, mean: Value,
                var: Value) -> Tensor:
    t = ctx.tensor(x)
    per_channel = [t.shape[1] if i == 1 else 1 for i in range(t.ndim)]

    def channel(v: Value) -> Tensor:
        return ctx.tensor(v).reshape(*per_channel)

    eps = float(attrs.get("epsilon", 1e-5))
    inv = Tensor._apply("rsqrt", channel(var) + eps)
    return (t - channel(mean)) * (inv * channel(scale)) + channel(bias)


@handler("InstanceNormalization", since=6, attributes=("epsilon",))
def _instance_norm(ctx: Ctx, attrs: Attrs, x: Value, scale: Value, bias: Value) -> Tensor:
    t = ctx.tensor(x)
    axes = tuple(range(2, t.ndim))
    per_channel = [t.shape[1] if i == 1 else 1 for i in range(t.ndim)]
    centered = t - t.mean(axes, keepdims=True)
    var = (centered * centered).mean(axes, keepdims=True)
    out = centered * Tensor._apply("rsqrt", var + float(attrs.get("epsilon", 1e-5)))
    return out * ctx.tensor(scale).reshape(*per_channel) + ctx.tensor(bias).reshape(
        *per_channel)


# -- convolution and pooling --------------------------------------------------------------

def _spatial(attrs: Attrs, name: str, rank: int, default: int) -> tuple[int, ...]:
    return tuple(attrs.get(name, [default] * rank))


def _pads(attrs: Attrs, kernel: Sequence[int], strides: Sequence[int],
          dilations: Sequence[int], sizes: Sequence[int], ceil_mode: bool = False
          ) -> tuple[list[int], list[int]]:
    rank = len(kernel)
    auto = attrs.get("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        low, high = [], []
        for k, s, d, n in zip(kernel, strides, dilations, sizes, strict=True):
            out = -(-n // s)
            total = max((out - 1) * s + (k - 1) * d + 1 - n, 0)
            small, big = total // 2, total - total // 2
            low.append(small if auto == "SAME_UPPER" else big)
            high.append(big if auto == "SAME_UPPER" else small)
        return low, high
    if auto == "VALID":
        return [0] * rank, [0] * rank
    pads = list(attrs.get("pads", [0] * (2 * rank)))
    low, high = pads[:rank], pads[rank:]
    if ceil_mode:
        for i, (k, s, d, n) in enumerate(zip(kernel, strides, dilations, sizes, strict=True)):
            span = n + low[i] + high[i] - (k - 1) * d - 1
            out = -(-span // s) + 1
            if (out - 1) * s >= n + low[i]:  # the last window must start inside the input
                out -= 1
            high[i] += max((out - 1) * s + (k - 1) * d + 1 - (n + low[i] + high[i]), 0)
    return low, high


def _conv_check(attrs: Attrs) -> str | None:
    auto = attrs.get("auto_pad", "NOTSET")
    return None if auto in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID") else (
        f"auto_pad={auto!r}")


def _as_2d(t: Tensor) -> Tensor:
    if t.ndim == 3:  # 1-D convolution: a height of 1
        return t.reshape(t.shape[0], t.shape[1], 1, t.shape[2])
    if t.ndim != 4:
        raise UnsupportedError(f"only 1-D and 2-D convolution and pooling are supported (got "
                               f"rank {t.ndim})", op="onnx")
    return t


def _pair(values: Sequence[int], one_d: bool, fill: int) -> tuple[int, int]:
    return (fill, values[0]) if one_d else (values[0], values[1])


@handler("Conv", since=1, attributes=("auto_pad", "dilations", "group", "kernel_shape", "pads",
                                      "strides"), check=_conv_check)
def _conv(ctx: Ctx, attrs: Attrs, x: Value, w: Value, b: Value = None) -> Tensor:
    t, weight = ctx.tensor(x), ctx.tensor(w)
    one_d = t.ndim == 3
    rank = t.ndim - 2
    kernel = tuple(weight.shape[2:])
    strides = _spatial(attrs, "strides", rank, 1)
    dilations = _spatial(attrs, "dilations", rank, 1)
    low, high = _pads(attrs, kernel, strides, dilations, t.shape[2:])
    t4, w4 = _as_2d(t), _as_2d(weight)
    low2, high2 = _pair(low, one_d, 0), _pair(high, one_d, 0)
    padded = pad(t4, (0, 0) + low2, (0, 0) + high2)
    out = conv2d(padded, w4, None if b is None else ctx.tensor(b),
                 stride=_pair(strides, one_d, 1), padding=0,
                 dilation=_pair(dilations, one_d, 1), groups=int(attrs.get("group", 1)))
    return out.reshape(out.shape[0], out.shape[1], out.shape[3]) if one_d else out


def _windows(t: Tensor, kernel: tuple[int, int], strides: tuple[int, int],
             dilations: tuple[int, int]) -> Tensor:
    """(N, C, KH*KW, OH, OW) windows of an already padded (N, C, H, W) input."""
    n, c, h, w = t.shape
    oh = (h - dilations[0] * (kernel[0] - 1) - 1) // strides[0] + 1
    ow = (w - dilations[1] * (kernel[1] - 1) - 1) // strides[1] + 1
    views = []
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            top, left = i * dilations[0], j * dilations[1]
            views.append(strided_slice(
                t, (0, 0, top, left),
                (n, c, top + (oh - 1) * strides[0] + 1, left + (ow - 1) * strides[1] + 1),
                (1, 1, strides[0], strides[1])))
    return stack(views, axis=2)


def _pool_check(attrs: Attrs) -> str | None:
    if attrs.get("storage_order", 0):
        return "storage_order=1"
    return _conv_check(attrs)


def _pool(ctx: Ctx, attrs: Attrs, x: Value, kind: str) -> Tensor:
    t = ctx.tensor(x)
    one_d = t.ndim == 3
    rank = t.ndim - 2
    kernel = tuple(attrs["kernel_shape"])
    strides = _spatial(attrs, "strides", rank, 1)
    dilations = _spatial(attrs, "dilations", rank, 1)
    low, high = _pads(attrs, kernel, strides, dilations, t.shape[2:],
                      bool(attrs.get("ceil_mode", 0)))
    t4 = _as_2d(t)
    k2, s2, d2 = _pair(kernel, one_d, 1), _pair(strides, one_d, 1), _pair(dilations, one_d, 1)
    low2, high2 = _pair(low, one_d, 0), _pair(high, one_d, 0)
    if kind == "max":
        fill = lowest(t.dtype) * 2.0 if t.dtype.is_floating else float(np.iinfo(
            t.dtype.np).min)
        out = _windows(pad(t4, (0, 0) + low2, (0, 0) + high2, fill), k2, s2, d2).max(axis=2)
    else:
        total = _windows(pad(t4, (0, 0) + low2, (0, 0) + high2), k2, s2, d2).sum(axis=2)
        if attrs.get("count_include_pad", 0):
            # Only the explicit pads count; the extra ceil_mode cells never do.
            base_low, base_high = _pads({**attrs, "ceil_mode": 0}, kernel, strides, dilations,
                                        t.shape[2:])
            ones = _ones_like_hw(t4, _pair(base_low, one_d, 0), _pair(base_high, one_d, 0))
            extra_low = tuple(a - b for a, b in zip(low2, _pair(base_low, one_d, 0),
                                                    strict=True))
            extra_high = tuple(a - b for a, b in zip(high2, _pair(base_high, one_d, 0),
                                                     strict=True))
            ones = pad(ones, (0, 0) + extra_low, (0, 0) + extra_high)
        else:
            ones = pad(_ones_like_hw(t4, (0, 0), (0, 0)), (0, 0) + low2, (0, 0) + high2)
        count = _windows(ones, k2, s2, d2).sum(axis=2)
        out = total / count
    return out.reshape(out.shape[0], out.shape[1], out.shape[3]) if one_d else out


def _ones_like_hw(t: Tensor, low: Sequence[int], high: Sequence[int]) -> Tensor:
    """Ones of shape (1, 1, H + pads, W + pads) in t's dtype (window counts)."""
    h, w = t.shape[2] + low[0] + high[0], t.shape[3] + low[1] + high[1]
    return _const(np.ones((1, 1, h, w), dtype=t.dtype.np))


_POOL_ATTRS = ("auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "strides",
               "storage_order", "count_include_pad")


@handler("MaxPool", since=1, attributes=_POOL_ATTRS, check=_pool_check)
def _max_pool(ctx: Ctx, attrs: Attrs, x: Value) -> Tensor:
    if len([o for o in ctx.node.output if o]) > 1:
        raise UnsupportedError("MaxPool's Indices output is not supported", op="onnx")
    return _pool(ctx, attrs, x, "max")


@handler("AveragePool", since=1, attributes=_POOL_ATTRS, check=_pool_check)
def _avg_pool(ctx: Ctx, attrs: Attrs, x: Value) -> Tensor:
    return _pool(ctx, attrs, x, "avg")


@handler("GlobalAveragePool", since=1)
def _global_avg_pool(ctx: Ctx, attrs: Attrs, x: Value) -> Tensor:
    t = ctx.tensor(x)
    return t.mean(tuple(range(2, t.ndim)), keepdims=True)


@handler("GlobalMaxPool", since=1)
def _global_max_pool(ctx: Ctx, attrs: Attrs, x: Value) -> Tensor:
    t = ctx.tensor(x)
    return t.max(tuple(range(2, t.ndim)), keepdims=True)


@handler("LRN", since=1, attributes=("alpha", "beta", "bias", "size"))
def _lrn(ctx: Ctx, attrs: Attrs, x: Value) -> Tensor:
    t = ctx.tensor(x)
    size = int(attrs["size"])
    alpha, beta = float(attrs.get("alpha", 1e-4)), float(attrs.get("beta", 0.75))
    bias = float(attrs.get("bias", 1.0))
    c = t.shape[1]
    square = pad(t * t, (0, (size - 1) // 2) + (0,) * (t.ndim - 2),
                 (0, size - 1 - (size - 1) // 2) + (0,) * (t.ndim - 2))
    parts = [strided_slice(square, (0, i) + (0,) * (t.ndim - 2),
                           (t.shape[0], i + c) + tuple(t.shape[2:]), (1,) * t.ndim)
             for i in range(size)]
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    return t / (total * (alpha / size) + bias) ** beta


