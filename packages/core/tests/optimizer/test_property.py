"""Property test: random well-typed programs keep their results under every pass and the pipeline.

The generator favours what the passes rewrite: splat constants 0/1/-0.0, repeated operands
(x - x), chains of the same op (neg(neg x)), convert chains, movement chains and duplicates.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omnitensor.dtypes import DType, bool_, float16, float32, float64, int8, int32
from omnitensor.ir.builder import Builder
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.program import Function, Role
from omnitensor.ir.types import TensorType, Value
from omnitensor.ir.verify import verify
from omnitensor.optimizer import PassContext, optimize, plan_hoist
from omnitensor.optimizer.passes import CSEPass, DCEPass, PatternPass

from .conftest import same_arrays, sample_inputs

_FLOAT_UNARY = ("neg", "exp", "tanh", "abs")
_INT_UNARY = ("neg", "abs", "not")
_NUM_BINARY = ("add", "sub", "mul", "max", "min")
_SHAPES6 = ((2, 3), (3, 2), (6,), (1, 6))
_DTYPES = (float32, int32, bool_)


class _Gen:
    """Builds a random program from hypothesis draws."""

    def __init__(self, data: st.DataObject) -> None:
        self.data = data
        self.b = Builder()
        self.pool: dict[tuple[tuple[int, ...], DType], list[Value]] = {}
        for t, role, name in ((TensorType((2, 3), float32), Role.DATA, "x"),
                              (TensorType((2, 3), float32), Role.PARAMETER, "w"),
                              (TensorType((2, 3), int32), Role.DATA, "i"),
                              (TensorType((2, 3), int32), Role.PARAMETER, "j"),
                              (TensorType((2, 3), bool_), Role.DATA, "p")):
            self.add(self.b.input(t, role, name))

    def add(self, v: Value) -> Value:
        assert isinstance(v.type, TensorType)
        self.pool.setdefault((v.type.shape, v.type.dtype), []).append(v)
        return v

    def draw(self, strategy: st.SearchStrategy[Any]) -> Any:
        return self.data.draw(strategy)

    def pick(self, key: tuple[tuple[int, ...], DType] | None = None) -> Value:
        if key is None:
            key = self.draw(st.sampled_from(sorted(self.pool, key=str)))
        values = self.pool[key]
        # favour recent values so that chains (neg(neg x)) form
        back: int = self.draw(st.integers(0, min(3, len(values) - 1)))
        return values[-1 - back]

    def splat(self, t: TensorType) -> Value:
        if t.dtype.is_bool:
            scalar: Any = self.draw(st.booleans())
        elif t.dtype.is_floating:
            scalar = self.draw(st.sampled_from([0.0, -0.0, 1.0, 2.5, -1.0]))
        else:
            scalar = self.draw(st.sampled_from([0, 1, -2, 3]))
        c = self.b.constant(np.asarray(scalar, dtype=t.dtype.np))
        return self.b.emit("broadcast_in_dim", c, shape=t.shape, dims=())

    def step(self) -> None:
        x = self.pick()
        t = x.type
        assert isinstance(t, TensorType)
        kind = self.draw(st.sampled_from(
            ["unary", "binary", "binary_splat", "compare", "select", "convert", "reshape",
             "transpose", "slice", "broadcast", "constant_math", "dup"]))
        b = self.b
        if kind == "unary" and not t.dtype.is_bool:
            ops = _FLOAT_UNARY if t.dtype.is_floating else _INT_UNARY
            self.add(b.emit(self.draw(st.sampled_from(ops)), x))
        elif kind == "unary":
            self.add(b.emit("not", x))
        elif kind in ("binary", "binary_splat") and not t.dtype.is_bool:
            y = self.splat(t) if kind == "binary_splat" else self.pick((t.shape, t.dtype))
            op = self.draw(st.sampled_from(_NUM_BINARY))
            self.add(b.emit(op, *((y, x) if self.draw(st.booleans()) else (x, y))))
        elif kind in ("binary", "binary_splat", "compare"):
            op = "and" if t.dtype.is_bool else self.draw(st.sampled_from(["lt", "eq", "ne"]))
            self.add(b.emit(op, x, self.pick((t.shape, t.dtype))))
        elif kind == "select":
            preds = self.pool.get((t.shape, bool_))
            pred = self.pick((t.shape, bool_)) if preds and self.draw(st.booleans()) else (
                self.splat(TensorType(t.shape, bool_)))
            self.add(b.emit("select", pred, x, self.pick((t.shape, t.dtype))))
        elif kind == "convert":
            mid = self.draw(st.sampled_from([float32, float64, float16, int32, int8, bool_]))
            y = b.emit("convert", x, dtype=mid)
            if self.draw(st.booleans()):
                y = b.emit("convert", y, dtype=self.draw(st.sampled_from(_DTYPES)))
            self.add(y)
        elif kind == "reshape" and t.size == 6:
            shape = self.draw(st.sampled_from(_SHAPES6))
            self.add(b.emit("reshape", x, shape=shape))
        elif kind == "transpose":
            perm = tuple(self.draw(st.permutations(range(t.ndim))))
            self.add(b.emit("transpose", x, perm=perm))
        elif kind == "slice" and t.ndim:
            start = tuple(self.draw(st.integers(0, max(d - 1, 0))) for d in t.shape)
            stride = tuple(self.draw(st.integers(1, 2)) for _ in t.shape)
            self.add(b.emit("slice", x, start=start, limit=t.shape, stride=stride))
        elif kind == "broadcast" and t.ndim <= 2:
            shape = (2, *t.shape)
            self.add(b.emit("broadcast_in_dim", x, shape=shape, dims=tuple(range(1, t.ndim + 1))))
        elif kind == "constant_math" and not t.dtype.is_bool:
            self.add(b.emit("add", self.splat(t), self.splat(t)))
        else:  # an exact duplicate of the last instruction, as a tracer may record
            last = b._body[-1] if b._body else None
            if last is not None and len(last.results) == 1:
                self.add(b.emit(last.op, *last.operands, **last.attrs))

    def build(self) -> Function:
        n = self.draw(st.integers(1, 14))
        for _ in range(n):
            self.step()
        count = self.draw(st.integers(1, 3))
        outs = [self.pick() for _ in range(count)]
        return self.b.build(outs)


@st.composite
def programs(draw: st.DrawFn) -> Function:
    return _Gen(draw(st.data())).build()


def _check_equal(before: Function, after: Function) -> None:
    verify(after)
    for seed in (0, 7):
        inputs = sample_inputs(before, seed)
        expected = evaluate(before, inputs)
        actual = evaluate(after, inputs)
        for e, a in zip(expected, actual, strict=True):
            assert same_arrays(e, a), f"{before.text()}\n--- became\n{after.text()}"


_PASSES: dict[str, Callable[[], Any]] = {
    "canonicalize": lambda: PatternPass("canonicalize"),
    "fold": lambda: PatternPass("fold"),
    "cse": CSEPass,
    "dce": DCEPass,
}
_SETTINGS = settings(max_examples=60, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("name", sorted(_PASSES))
def test_each_pass_alone_preserves_results(name: str) -> None:
    @_SETTINGS
    @given(programs())
    def run(fn: Function) -> None:
        verify(fn)
        after = fn.copy()
        _PASSES[name]().run(after, PassContext())
        _check_equal(fn, after)

    run()


@_SETTINGS
@given(programs())
def test_pipeline_preserves_results(fn: Function) -> None:
    out, _ = optimize(fn)
    _check_equal(fn, out)


@_SETTINGS
@given(programs())
def test_hoisted_pipeline_preserves_results(fn: Function) -> None:
    out, st_ = optimize(fn, PassContext(hoist=True))
    verify(out)
    for seed in (0, 3):
        inputs = sample_inputs(fn, seed)
        extra = [] if st_.prelude is None else evaluate(
            st_.prelude, [inputs[i] for i in st_.prelude_inputs])
        for e, a in zip(evaluate(fn, inputs), evaluate(out, [*inputs, *extra]), strict=True):
            assert same_arrays(e, a)
    split = plan_hoist(fn)
    if split.prelude is not None:
        verify(split.prelude)
