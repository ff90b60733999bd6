"""Loss composites: cross_entropy (softmax cross-entropy of logits against class indices).

The reduction over rows (mean over counted rows, sum) stays with the functional: the
composite gives one loss per row, so a backend's kernel never needs the whole batch at once.
"""

from __future__ import annotations

import numpy as np

from ....dtypes import FLOATING, int32
from ....errors import DTypeError, ShapeError
from ...builder import Builder, dense
from ...opdef import OpView, attribute, composite, operand
from ...types import TensorType, Value
from ._emit import binary, scalar, trailing

__all__ = ["CrossEntropyView"]


@composite("cross_entropy", dtypes=FLOATING, ulp=16)
class CrossEntropyView(OpView):
    """Per-row softmax cross-entropy of logits `x` (..., C) against int32 classes `target` (...).

    ``loss = -(1 - s) logp[target] - s mean(logp)`` with ``logp = log_softmax(x)`` over the
    last axis and s = `label_smoothing`; rows whose target equals `ignore_index` give 0. A
    target outside [0, C) picks nothing (its term is 0). Any non-finite log-probability in a
    row (a NaN or infinite logit) makes that row's loss NaN, as the decomposition computes it
    (``-inf * 0``). Result (...), x's dtype.
    """

    x = operand()
    target = operand(dtypes=(int32,))
    ignore_index: int = attribute(-100)
    label_smoothing: float = attribute(0.0)

    @staticmethod
    def infer(x: TensorType, target: TensorType, *, ignore_index: int,
              label_smoothing: float) -> TensorType:
        op = "cross_entropy"
        trailing(op, len(x.shape), (len(x.shape) - 1,) if x.shape else ())
        if target.shape != x.shape[:-1]:
            raise ShapeError(f"{op}: target shape {target.shape} does not match the logits "
                             f"{x.shape} without the class axis (expected {x.shape[:-1]})",
                             op=op, shapes=[x.shape, target.shape])
        if target.dtype != int32:
            raise DTypeError(f"{op}: target has dtype {target.dtype} (expected int32)", op=op,
                             dtype=target.dtype.name)
        if not 0.0 <= label_smoothing <= 1.0:
            raise ShapeError(f"{op}: label_smoothing must be in [0, 1] (got {label_smoothing})",
                             op=op)
        return TensorType(x.shape[:-1], x.dtype)

    @staticmethod
    def decompose(b: Builder, x: Value, target: Value, *, ignore_index: int,
                  label_smoothing: float) -> Value:
        shape = dense(x.type).shape
        last = len(shape) - 1
        logp = b.emit("log_softmax", x, axes=(last,))  # a composite, as F.log_softmax records
        classes = b.emit("iota", shape=shape, dimension=last, dtype=int32)
        wanted = b.emit("broadcast_in_dim", b.emit("reshape", target, shape=(*shape[:-1], 1)),
                        shape=shape, dims=tuple(range(len(shape))))
        onehot = b.emit("convert", b.emit("eq", classes, wanted), dtype=dense(x.type).dtype)
        nll = b.emit("neg", b.emit("reduce_sum", b.emit("mul", logp, onehot), axes=(last,)))
        if label_smoothing:
            mean = binary(b, "div", b.emit("reduce_sum", logp, axes=(last,)), float(shape[-1]))
            nll = binary(b, "sub", binary(b, "mul", nll, 1.0 - label_smoothing),
                         binary(b, "mul", mean, float(label_smoothing)))
        ignored = b.emit("constant", value=np.asarray(ignore_index, np.int32))
        valid = binary(b, "ne", target, ignored)
        zero = b.emit("broadcast_in_dim", scalar(b, 0.0, x), shape=shape[:-1], dims=())
        return b.emit("select", valid, nll, zero)
