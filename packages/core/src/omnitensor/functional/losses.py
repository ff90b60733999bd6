"""Losses: cross_entropy and mse (PyTorch's names; the class axis is `axis`, default last)."""

from __future__ import annotations

from ..dtypes import int32
from ..errors import OmnitensorError, ShapeError
from ..tensor.math import where
from ..tensor.tensor import Tensor
from .activations import log_softmax
from .registry import functional

__all__ = ["cross_entropy", "mse_loss"]


def _reduce(loss: Tensor, reduction: str, fn: str, count: Tensor | None = None) -> Tensor:
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.sum() / count if count is not None else loss.mean()
    raise OmnitensorError(f"{fn}: unknown reduction {reduction!r} (expected mean, sum or none)",
                          op=fn)


@functional("cross_entropy")
def cross_entropy(input: Tensor, target: Tensor, *, axis: int = -1, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """Softmax cross-entropy of logits `input` against class indices or probabilities.

    Args:
        input: logits with classes along `axis`.
        target: integer classes of shape ``input.shape`` without `axis`, or float
            probabilities of the same shape as `input`.
        axis: the class axis (default last: (..., C)).
        ignore_index: integer targets equal to it contribute nothing (and are not counted).
        reduction: ``mean`` (over counted elements), ``sum`` or ``none``.
        label_smoothing: mixes the target with the uniform distribution.
    """
    axis = axis % input.ndim
    logp = log_softmax(input, axis=axis)
    classes = input.shape[axis]
    if target.dtype.is_floating:
        if target.shape != input.shape:
            raise ShapeError(f"cross_entropy: probability targets must match the input (got "
                             f"{target.shape} and {input.shape})", op="cross_entropy")
        probs = target * (1.0 - label_smoothing) + label_smoothing / classes
        return _reduce(-(probs * logp).sum(axis), reduction, "cross_entropy")
    expected = input.shape[:axis] + input.shape[axis + 1 :]
    if target.shape != expected:
        raise ShapeError(f"cross_entropy: target shape {target.shape} does not match the input "
                         f"{input.shape} without axis {axis} (expected {expected})",
                         op="cross_entropy", shapes=[target.shape, input.shape])
    target = target.astype(int32)
    if axis == input.ndim - 1 and input.dtype.is_floating:
        # one composite per row: log-softmax, the picked class, smoothing and ignore_index
        nll = Tensor._apply("cross_entropy", input, target, ignore_index=int(ignore_index),
                            label_smoothing=float(label_smoothing))
        if reduction != "mean":
            return _reduce(nll, reduction, "cross_entropy")
        count = (target != ignore_index).astype(input.dtype).sum()
        return _reduce(nll, reduction, "cross_entropy", count)
    iota = Tensor._apply("iota", shape=input.shape, dimension=axis, dtype=int32)
    onehot = (iota == target.unsqueeze(axis)).astype(logp.dtype)
    nll = -(logp * onehot).sum(axis)
    if label_smoothing:
        nll = nll * (1.0 - label_smoothing) - logp.mean(axis) * label_smoothing
    valid = target != ignore_index
    nll = where(valid, nll, 0.0)
    count = valid.astype(logp.dtype).sum()
    return _reduce(nll, reduction, "cross_entropy", count if reduction == "mean" else None)


@functional("mse")
def mse_loss(input: Tensor, target: Tensor, *, reduction: str = "mean") -> Tensor:
    """Mean squared error."""
    diff = input - target
    return _reduce(diff * diff, reduction, "mse_loss")
