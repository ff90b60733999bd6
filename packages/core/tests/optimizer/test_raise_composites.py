"""raise_composites: every equivalent form of softmax / layer_norm / rms_norm is raised."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from omnitensor.dtypes import float32
from omnitensor.ir.builder import Builder
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.types import TensorType, Value
from omnitensor.optimizer.passes.raise_composites import raise_composites

SHAPE = (4, 6)


def _c(b: Builder, value: float) -> Value:
    return b.emit("broadcast_in_dim", b.constant(np.float32(value)), shape=SHAPE, dims=())


def _row(b: Builder, op: str, x: Value, keep: str) -> Value:
    """A row reduction broadcast back to SHAPE: keepdims via reshape or via broadcast dims."""
    r = b.emit(op, x, axes=(1,))
    if keep == "reshape":
        return b.emit("broadcast_in_dim", b.emit("reshape", r, shape=(4, 1)), shape=SHAPE,
                      dims=(0, 1))
    return b.emit("broadcast_in_dim", r, shape=SHAPE, dims=(0,))


def _mean(b: Builder, x: Value, keep: str, form: str) -> Value:
    total = _row(b, "reduce_sum", x, keep)
    if form == "div":
        return b.emit("div", total, _c(b, 6.0))
    return b.emit("mul", total, _c(b, 1.0 / 6.0))


def _scale(b: Builder, x: Value, ms: Value, form: str) -> Value:
    v = b.emit("add", ms, _c(b, 1e-5))
    if form == "rsqrt":
        return b.emit("mul", x, b.emit("rsqrt", v))
    return b.emit("div", x, b.emit("sqrt", v))


def _softmax(shift: bool, keep: str) -> Callable[[Builder, Value, Value, Value], Value]:
    def build(b: Builder, x: Value, w: Value, bias: Value) -> Value:
        t = b.emit("sub", x, _row(b, "reduce_max", x, keep)) if shift else x
        e = b.emit("exp", t)
        return b.emit("div", e, _row(b, "reduce_sum", e, keep))

    return build


def _rms(keep: str, mean: str, scale: str, weight: str) -> Callable[..., Value]:
    def build(b: Builder, x: Value, w: Value, bias: Value) -> Value:
        out = _scale(b, x, _mean(b, b.emit("mul", x, x), keep, mean), scale)
        if weight == "row":
            return b.emit("mul", out, b.emit("broadcast_in_dim", w, shape=SHAPE, dims=(1,)))
        return out

    return build


def _layer(keep: str, mean: str, scale: str, affine: bool) -> Callable[..., Value]:
    def build(b: Builder, x: Value, w: Value, bias: Value) -> Value:
        c = b.emit("sub", x, _mean(b, x, keep, mean))
        out = _scale(b, c, _mean(b, b.emit("mul", c, c), keep, mean), scale)
        if affine:
            out = b.emit("mul", out, b.emit("broadcast_in_dim", w, shape=SHAPE, dims=(1,)))
            out = b.emit("add", out, b.emit("broadcast_in_dim", bias, shape=SHAPE, dims=(1,)))
        return out

    return build


FORMS = [(f"softmax-{s}-{k}", _softmax(s, k), "softmax", 1)
         for s in (True, False) for k in ("reshape", "dims")]
FORMS += [(f"rms-{k}-{m}-{sc}-{w}", _rms(k, m, sc, w), "rms_norm", 2 if w == "row" else 1)
          for k in ("reshape", "dims") for m in ("div", "mul") for sc in ("rsqrt", "sqrt")
          for w in ("none", "row")]
FORMS += [(f"layer-{k}-{m}-{sc}-{a}", _layer(k, m, sc, a), "layer_norm", 3 if a else 1)
          for k in ("reshape", "dims") for m in ("div", "mul") for sc in ("rsqrt", "sqrt")
          for a in (False, True)]


@pytest.mark.parametrize(("name", "build", "op", "arity"), FORMS, ids=[f[0] for f in FORMS])
def test_form_is_raised_and_keeps_its_values(name: str, build: Callable[..., Value], op: str,
                                            arity: int) -> None:
    b = Builder()
    x = b.input(TensorType(SHAPE, float32))
    w = b.input(TensorType((6,), float32))
    bias = b.input(TensorType((6,), float32))
    fn = b.build([build(b, x, w, bias)])
    rng = np.random.default_rng(0)
    inputs = [rng.normal(size=SHAPE).astype(np.float32), rng.normal(size=6).astype(np.float32),
              rng.normal(size=6).astype(np.float32)]
    want = evaluate(fn, inputs)[0]
    raised = fn.copy()
    assert raise_composites(raised) >= 1
    producer = {r.id: i for i in raised.body for r in i.results}[raised.outputs[0].id]
    assert producer.op == op and len(producer.operands) == arity
    np.testing.assert_allclose(evaluate(raised, inputs)[0], want, rtol=1e-5, atol=1e-5)


def test_a_reduction_over_a_leading_axis_is_not_raised() -> None:
    b = Builder()
    x = b.input(TensorType(SHAPE, float32))
    e = b.emit("exp", x)
    total = b.emit("broadcast_in_dim", b.emit("reduce_sum", e, axes=(0,)), shape=SHAPE, dims=(1,))
    fn = b.build([b.emit("div", e, total)])
    assert raise_composites(fn) == 0


def test_a_wrong_divisor_is_not_a_mean() -> None:
    b = Builder()
    x = b.input(TensorType(SHAPE, float32))
    ms = b.emit("div", _row(b, "reduce_sum", b.emit("mul", x, x), "dims"), _c(b, 5.0))
    fn = b.build([_scale(b, x, ms, "rsqrt")])
    assert raise_composites(fn) == 0
