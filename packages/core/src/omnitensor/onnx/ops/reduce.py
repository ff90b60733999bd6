"""ONNX reductions, argmax/argmin and matrix products."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ... import dtypes as dt
from ...tensor.reduce import _reduce
from ...tensor.tensor import Tensor
from ..registry import Ctx, Value, handler

Attrs = Mapping[str, Any]

# Opset at which each reduction's axes moved from an attribute to the second input.
_AXES_INPUT_SINCE = {"ReduceSum": 13}


def _reduction(op_type: str, finish: Callable[[Tensor, tuple[int, ...], bool], Tensor]
               ) -> None:
    def run(ctx: Ctx, attrs: Attrs, x: Value, axes: Value = None) -> Tensor:
        t = ctx.tensor(x)
        if ctx.opset >= _AXES_INPUT_SINCE.get(op_type, 18):
            picked = None if axes is None else ctx.ints(axes, f"{op_type}'s axes")
        else:
            picked = tuple(attrs["axes"]) if "axes" in attrs else None
        if not picked:
            if attrs.get("noop_with_empty_axes", 0):
                return t
            picked = tuple(range(t.ndim))
        picked = tuple(a + t.ndim if a < 0 else a for a in picked)
        return finish(t, picked, bool(attrs.get("keepdims", 1)))

    handler(op_type, since=1, attributes=("axes", "keepdims", "noop_with_empty_axes"),
            static=(1,))(run)


def _sum(t: Tensor, axes: tuple[int, ...], keep: bool) -> Tensor:
    return t.sum(axes, keepdims=keep)


def _extreme(op: str) -> Callable[[Tensor, tuple[int, ...], bool], Tensor]:
    # NOTE: not `Tensor.max`: the Array API makes an empty max an error, while ONNX defines it
    # as the reduction's identity (-inf / the dtype's lowest; +inf / highest for min), which is
    # what the primitive computes.
    def finish(t: Tensor, axes: tuple[int, ...], keep: bool) -> Tensor:
        return _reduce(op, f"reduce_{op}", t, axes, keep)

    return finish


def _log_sum_exp(t: Tensor, axes: tuple[int, ...], keep: bool) -> Tensor:
    peak = _extreme("max")(t, axes, True)
    peak = Tensor._apply("select", peak == peak, peak, peak * 0.0)  # keep NaN out of the shift
    finite = Tensor._apply("select", Tensor._apply("ne", peak.abs(), peak.abs() * 0 + float(
        "inf")), peak, peak * 0.0) if t.dtype.is_floating else peak
    out = (t - finite).exp().sum(axes, keepdims=True).log() + finite
    return out if keep else out.reshape(*[d for i, d in enumerate(out.shape) if i not in axes])


_reduction("ReduceSum", _sum)
_reduction("ReduceMean", lambda t, a, k: t.mean(a, keepdims=k))
_reduction("ReduceMax", _extreme("max"))
_reduction("ReduceMin", _extreme("min"))
_reduction("ReduceProd", lambda t, a, k: t.prod(a, keepdims=k))
_reduction("ReduceL1", lambda t, a, k: t.abs().sum(a, keepdims=k))
_reduction("ReduceL2", lambda t, a, k: (t * t).sum(a, keepdims=k).astype(t.dtype).sqrt()
           if t.dtype.is_floating else
           (t * t).sum(a, keepdims=k).astype(dt.float32).sqrt().astype(t.dtype))
_reduction("ReduceSumSquare", lambda t, a, k: (t * t).sum(a, keepdims=k))
_reduction("ReduceLogSum", lambda t, a, k: t.sum(a, keepdims=k).log())
_reduction("ReduceLogSumExp", _log_sum_exp)


def _arg(op: str) -> Callable[..., Tensor]:
    def run(ctx: Ctx, attrs: Attrs, x: Value) -> Tensor:
        t = ctx.tensor(x)
        axis = attrs.get("axis", 0)
        axis = axis + t.ndim if axis < 0 else axis
        if attrs.get("select_last_index", 0):
            flipped = Tensor._apply("reverse", t, axes=(axis,))
            out = (t.shape[axis] - 1) - Tensor._apply(op, flipped, axis=axis)
        else:
            out = Tensor._apply(op, t, axis=axis)
        if attrs.get("keepdims", 1):
            shape = list(out.shape)
            shape.insert(axis, 1)
            out = out.reshape(*shape)
        return out.astype(dt.int64)
    return run


handler("ArgMax", since=1, attributes=("axis", "keepdims", "select_last_index"))(
    _arg("argmax"))
handler("ArgMin", since=1, attributes=("axis", "keepdims", "select_last_index"))(
    _arg("argmin"))


@handler("MatMul", since=1)
def _matmul(ctx: Ctx, attrs: Attrs, a: Value, b: Value) -> Tensor:
    return ctx.tensor(a) @ ctx.tensor(b)


@handler("Gemm", since=7, attributes=("alpha", "beta", "transA", "transB"))
def _gemm(ctx: Ctx, attrs: Attrs, a: Value, b: Value, c: Value = None) -> Tensor:
    x, w = ctx.tensor(a), ctx.tensor(b)
    if attrs.get("transA", 0):
        x = x.T
    if attrs.get("transB", 0):
        w = w.T
    out = x @ w
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    if alpha != 1.0:
        out = out * alpha
    if c is not None:
        bias = ctx.tensor(c)
        out = out + (bias * beta if beta != 1.0 else bias)
    return out
