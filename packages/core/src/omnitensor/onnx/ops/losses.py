"""ONNX loss ops: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ... import dtypes as dt
from ...functional import log_softmax
from ...tensor.math import where
from ...tensor.tensor import Tensor
from ..registry import Ctx, Value, handler

Attrs = Mapping[str, Any]


def _reduction_check(attrs: Attrs) -> str | None:
    reduction = attrs.get("reduction", "mean")
    return None if reduction in ("none", "sum", "mean") else f"reduction={reduction!r}"


def _nll(logp: Tensor, target: Tensor, weight: Tensor | None, attrs: Attrs) -> Tensor:
    """-logp[n, target[n, ...], ...] weighted, with ignore_index and the reduction."""
    classes = logp.shape[1]
    target = target.astype(dt.int32)
    ignore = attrs.get("ignore_index")
    valid = None if ignore is None else Tensor._apply("ne", target, target * 0 + int(ignore))
    safe = target if valid is None else where(valid, target, target * 0)
    shape = (target.shape[0], classes, *target.shape[1:])
    pos = Tensor._apply("iota", shape=shape, dimension=1, dtype=dt.int32)
    onehot = (pos == safe.reshape(target.shape[0], 1, *target.shape[1:]).expand(*shape))
    picked = -(where(onehot, logp, logp * 0.0).sum(1))  # (N, d...)
    w = (picked * 0.0 + 1.0) if weight is None else Tensor._apply(
        "gather", weight, safe, axis=0)
    if valid is not None:
        w = where(valid, w, w * 0.0)
    loss = picked * w
    reduction = attrs.get("reduction", "mean")
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / w.sum()


@handler("NegativeLogLikelihoodLoss", since=12, attributes=("ignore_index", "reduction"),
         check=_reduction_check)
def _negative_log_likelihood(ctx: Ctx, attrs: Attrs, x: Value, target: Value,
                             weight: Value = None) -> Tensor:
    w = None if weight is None else ctx.tensor(weight)
    return _nll(ctx.tensor(x), ctx.tensor(target), w, attrs)


@handler("SoftmaxCrossEntropyLoss", since=12, attributes=("ignore_index", "reduction"),
         check=_reduction_check)
def _softmax_cross_entropy(ctx: Ctx, attrs: Attrs, scores: Value, labels: Value,
                           weight: Value = None) -> list[Tensor]:
    logp = log_softmax(ctx.tensor(scores), axis=1)
    w = None if weight is None else ctx.tensor(weight)
    loss = _nll(logp, ctx.tensor(labels), w, attrs)
    return [loss, logp]
