"""raise_composites: every equivalent form of each raisable composite is raised.

softmax, log_softmax, layer_norm, rms_norm (structural patterns over row statistics); gelu
(both forms), silu and the gated swiglu/geglu (recognized by value).
"""

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


def _log_softmax(shift: bool, keep: str) -> Callable[[Builder, Value, Value, Value], Value]:
    def build(b: Builder, x: Value, w: Value, bias: Value) -> Value:
        t = b.emit("sub", x, _row(b, "reduce_max", x, keep)) if shift else x
        total = b.emit("reduce_sum", b.emit("exp", t), axes=(1,))
        if keep == "reshape":
            lse = b.emit("broadcast_in_dim", b.emit("log", b.emit("reshape", total,
                                                                  shape=(4, 1))),
                         shape=SHAPE, dims=(0, 1))
        else:
            lse = b.emit("broadcast_in_dim", b.emit("log", total), shape=SHAPE, dims=(0,))
        return b.emit("sub", t, lse)

    return build


def _gelu_erf(form: str) -> Callable[..., Value]:
    def build(b: Builder, x: Value, w: Value, bias: Value) -> Value:
        if form == "div_sqrt2":  # 0.5 * x * (1 + erf(x / sqrt 2))
            phi = b.emit("add", _c(b, 1.0), b.emit("erf", b.emit("div", x, _c(b, 2 ** 0.5))))
            return b.emit("mul", b.emit("mul", _c(b, 0.5), x), phi)
        if form == "phi":  # x * Phi(x), Phi = 0.5 * (1 + erf(x * 0.70710678))
            erf = b.emit("erf", b.emit("mul", x, _c(b, 0.70710678)))
            return b.emit("mul", x, b.emit("mul", _c(b, 0.5), b.emit("add", erf, _c(b, 1.0))))
        # x * 0.5 * (1 + erf(x * (1 / sqrt 2))), the product in the other order
        erf = b.emit("erf", b.emit("mul", _c(b, 2 ** -0.5), x))
        return b.emit("mul", b.emit("add", erf, _c(b, 1.0)), b.emit("mul", x, _c(b, 0.5)))

    return build


def _gelu_tanh(cube: str) -> Callable[..., Value]:
    def build(b: Builder, x: Value, w: Value, bias: Value) -> Value:
        if cube == "pow":
            x3 = b.emit("pow", x, _c(b, 3.0))
        elif cube == "x*x*x":
            x3 = b.emit("mul", b.emit("mul", x, x), x)
        else:  # the decomposition's (0.044715 x) x x, scaled inside
            x3 = b.emit("mul", b.emit("mul", x, x), x)
        inner = b.emit("add", x, b.emit("mul", _c(b, 0.044715), x3))
        t = b.emit("tanh", b.emit("mul", inner, _c(b, 0.7978845608)))
        return b.emit("mul", b.emit("mul", x, _c(b, 0.5)), b.emit("add", t, _c(b, 1.0)))

    return build


def _silu(form: str) -> Callable[..., Value]:
    def build(b: Builder, x: Value, w: Value, bias: Value) -> Value:
        if form == "logistic":
            return b.emit("mul", b.emit("logistic", x), x)
        denom = b.emit("add", _c(b, 1.0), b.emit("exp", b.emit("neg", x)))
        if form == "div":
            return b.emit("div", x, denom)
        return b.emit("mul", x, b.emit("div", _c(b, 1.0), denom))

    return build


def _gated(act: str) -> Callable[..., Value]:
    def build(b: Builder, x: Value, w: Value, bias: Value) -> Value:
        up = b.emit("tanh", x)  # any other value of x's type
        gate = _silu("div")(b, x, w, bias) if act == "silu" else _gelu_erf("phi")(b, x, w, bias)
        return b.emit("mul", up, gate)

    return build


def _gelu_of_sum(b: Builder, x: Value, w: Value, bias: Value) -> Value:
    s = b.emit("add", x, b.emit("broadcast_in_dim", w, shape=SHAPE, dims=(1,)))
    return _gelu_erf("div_sqrt2")(b, s, w, bias)


FORMS += [(f"log_softmax-{s}-{k}", _log_softmax(s, k), "log_softmax", 1)
          for s in (True, False) for k in ("reshape", "dims")]
FORMS += [(f"gelu-erf-{f}", _gelu_erf(f), "gelu", 1) for f in ("div_sqrt2", "phi", "swapped")]
FORMS += [(f"gelu-tanh-{f}", _gelu_tanh(f), "gelu", 1) for f in ("pow", "x*x*x", "scaled")]
FORMS += [(f"silu-{f}", _silu(f), "silu", 1) for f in ("logistic", "div", "reciprocal")]
FORMS += [("swiglu", _gated("silu"), "swiglu", 2), ("geglu", _gated("gelu"), "geglu", 2),
          ("gelu-of-a-sum", _gelu_of_sum, "gelu", 1)]


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


@pytest.mark.parametrize("which", ["x*tanh(x)", "erf-gelu-wrong-constant", "two-inputs"])
def test_other_expressions_with_the_markers_are_not_raised(which: str) -> None:
    b = Builder()
    x = b.input(TensorType(SHAPE, float32))
    y = b.input(TensorType(SHAPE, float32))
    if which == "x*tanh(x)":
        out = b.emit("mul", x, b.emit("tanh", x))
    elif which == "erf-gelu-wrong-constant":  # erf(x / 2): not Phi
        phi = b.emit("add", _c(b, 1.0), b.emit("erf", b.emit("div", x, _c(b, 2.0))))
        out = b.emit("mul", b.emit("mul", _c(b, 0.5), x), phi)
    else:  # x * logistic(y)
        out = b.emit("mul", x, b.emit("logistic", y))
    fn = b.build([out])
    assert raise_composites(fn) == 0
    assert not any(i.op in ("gelu", "silu") for i in fn.body)


QKV = ((2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6))  # q (B, H, T, D), k (B, H, S, D), v (.., Dv)


@pytest.mark.parametrize("scale", ["mul", "div", "none"])
@pytest.mark.parametrize("mask", [True, False])
@pytest.mark.parametrize("k_form", ["direct", "transposed"])
def test_attention_written_out_is_raised(scale: str, mask: bool, k_form: str) -> None:
    b = Builder()
    q, k, v = (b.input(TensorType(s, float32)) for s in QKV)
    m = b.input(TensorType((2, 3, 5, 7), float32))
    full = (2, 3, 5, 7)
    if k_form == "direct":
        s = b.emit("dot_general", q, k, contracting=((3,), (3,)), batch=((0, 1), (0, 1)))
    else:
        kt = b.emit("transpose", k, perm=(0, 1, 3, 2))
        s = b.emit("dot_general", q, kt, contracting=((3,), (2,)), batch=((0, 1), (0, 1)))
    splat = b.emit("broadcast_in_dim", b.constant(np.float32(2.0)), shape=full, dims=())
    if scale != "none":
        s = b.emit(scale, s, splat)
    if mask:
        s = b.emit("add", s, m)
    p = b.emit("softmax", s, axes=(3,))
    fn = b.build([b.emit("dot_general", p, v, contracting=((3,), (2,)), batch=((0, 1), (0, 1)))])
    rng = np.random.default_rng(1)
    inputs = [rng.normal(size=t).astype(np.float32) for t in (*QKV, full)]
    want = evaluate(fn, inputs)[0]
    assert raise_composites(fn) == 1
    root = {r.id: i for i in fn.body for r in i.results}[fn.outputs[0].id]
    assert root.op == "scaled_dot_product_attention"
    assert root.attrs["scale"] == {"mul": 2.0, "div": 0.5, "none": 1.0}[scale]
    assert root.attrs["mask_kind"] == ("additive" if mask else "none")
    np.testing.assert_allclose(evaluate(fn, inputs)[0], want, rtol=1e-5, atol=1e-6)


def test_attention_whose_probabilities_are_read_elsewhere_is_not_raised() -> None:
    b = Builder()
    q, k, v = (b.input(TensorType(s, float32)) for s in QKV)
    s = b.emit("dot_general", q, k, contracting=((3,), (3,)), batch=((0, 1), (0, 1)))
    p = b.emit("softmax", s, axes=(3,))
    out = b.emit("dot_general", p, v, contracting=((3,), (2,)), batch=((0, 1), (0, 1)))
    fn = b.build([out, p])  # the attention weights are an output too
    assert raise_composites(fn) == 0
