"""gather, scatter_add, dynamic slices, pad, cumsum, sort/top_k and rng: PTX + host vs reference.

All programs of this module are lowered first; their kernels compile to PTX and into one host
library together (two nvcc runs in all), then each launch list runs on the host.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import pytest

from omnitensor.dtypes import (
    DType,
    bfloat16,
    bool_,
    float16,
    float32,
    float64,
    int8,
    int32,
    int64,
    uint8,
    uint32,
)
from omnitensor.ir.builder import Builder
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.program import Function
from omnitensor.ir.types import TensorType, Value
from omnitensor_backend_cuda.lower import lower
from omnitensor_backend_cuda.nvcc import HostLibrary, compile_checked, run_on_host

Array = np.ndarray[Any, Any]
RNG = np.random.default_rng(7)
Case = tuple[Function, list[Array], float]  # program, inputs, rtol (0: bit-exact)


def _normal(shape: tuple[int, ...], dtype: DType, scale: float = 1.0) -> Array:
    return (RNG.normal(size=shape) * scale).astype(dtype.np)


def _build(types: list[TensorType], body: Callable[..., list[Value]]) -> Function:
    b = Builder()
    return b.build(body(b, *[b.input(t) for t in types]))


def _gather(dtype: DType, index: DType, batch_dims: int) -> Case:
    shape = (4, 5, 3)
    fn = _build([TensorType(shape, dtype), TensorType((4, 6), index)],
                lambda b, x, i: [b.emit("gather", x, i, axis=1, batch_dims=batch_dims)])
    idx = RNG.integers(-2, 8, (4, 6)) if index != uint8 else RNG.integers(0, 8, (4, 6))
    x = RNG.integers(0, 2, shape).astype(bool) if dtype == bool_ else _normal(shape, dtype)
    return fn, [x, idx.astype(index.np)], 0.0


def _scatter(dtype: DType, index: DType, axis: int) -> Case:
    shape, idx_shape = (3, 4, 5), (7,)
    upd_shape = shape[:axis] + idx_shape + shape[axis + 1:]
    fn = _build([TensorType(shape, dtype), TensorType(idx_shape, index),
                 TensorType(upd_shape, dtype)],
                lambda b, x, i, u: [b.emit("scatter_add", x, i, u, axis=axis)])
    scale = 60.0 if dtype == int8 else 1.0  # int8: sums wrap
    idx = RNG.integers(0, shape[axis] + 2, idx_shape).astype(index.np)  # duplicates, clamped
    # the order in which duplicates add up is unspecified (the op's contract): floats may
    # differ from the reference in their last bits, integers not at all
    tol = 0.0 if dtype == int8 else 1e-3 if dtype == float16 else 1e-6
    return fn, [_normal(shape, dtype, scale), idx, _normal(upd_shape, dtype, scale)], tol


def _dynamic(start: int, index: DType) -> Case:
    def body(b: Builder, cache: Value, new: Value, pos: Value) -> list[Value]:
        zero = b.constant(np.array(0, index.np))
        updated = b.emit("dynamic_update_slice", cache, b.emit("mul", new, new), zero, pos, zero)
        window = b.emit("dynamic_slice", updated, zero, pos, zero, sizes=(2, 3, 4))
        fixed = b.emit("dynamic_slice", updated, zero, zero, zero, sizes=(1, 2, 4))
        return [updated, window, b.emit("neg", fixed)]

    fn = _build([TensorType((2, 8, 4), float32), TensorType((2, 2, 4), float32),
                 TensorType((), index)], body)
    return fn, [_normal((2, 8, 4), float32), _normal((2, 2, 4), float32),
                np.array(start, index.np)], 0.0


def _pad(dtype: DType) -> Case:
    def body(b: Builder, x: Value, v: Value) -> list[Value]:
        xt = b.emit("transpose", x, perm=(1, 0))  # (4, 3), strided
        return [b.emit("pad", xt, v, low=(1, -1), high=(-2, 2), interior=(1, 0)),
                b.emit("pad", x, v, low=(-5, 0), high=(4, 1), interior=(0, 2))]

    fn = _build([TensorType((3, 4), dtype), TensorType((), dtype)], body)
    x = _normal((3, 4), dtype, 50.0) if dtype != bool_ else RNG.integers(0, 2, (3, 4)) > 0
    return fn, [np.asarray(x), np.array(7 if dtype != bool_ else True, dtype.np)], 0.0


def _cumsum(dtype: DType) -> Case:
    def body(b: Builder, x: Value) -> list[Value]:
        return [b.emit("cumsum", x, axis=0, reverse=True),
                b.emit("cumsum", b.emit("transpose", x, perm=(1, 0)), axis=1)]

    return _build([TensorType((6, 5), dtype)], body), [_normal((6, 5), dtype, 40.0)], 0.0


def _sort(dtype: DType) -> Case:
    def body(b: Builder, x: Value) -> list[Value]:
        return [*b.emit_multi("sort", x, axis=0, descending=True),
                *b.emit_multi("sort", x, axis=1), *b.emit_multi("top_k", x, k=3)]

    x = RNG.integers(0, 4, (5, 9)).astype(np.float64)
    if dtype in (float32, bfloat16, float64):
        x[0, 2] = x[1, 1] = x[1, 5] = x[3, 0] = np.nan
        x[2, 3] = -0.0
    return _build([TensorType((5, 9), dtype)], body), [x.astype(dtype.np)], 0.0


def _rng(dtype: DType, distribution: str) -> Case:
    def body(b: Builder, key: Value) -> list[Value]:
        view = b.emit("slice", key, start=(1,), limit=(5,), stride=(2,))  # a strided key
        return [b.emit("rng", view, shape=(3, 70), dtype=dtype, distribution=distribution,
                       stream=11)]

    # NOTE: normal draws use log/cos, which need not be correctly rounded (the op's ULP budget)
    tol = 0.0 if distribution != "normal" else (1e-12 if dtype == float64 else 2e-2)
    key = np.array([5, 123, 9, 45678, 1], np.uint32)
    return _build([TensorType((5,), uint32)], body), [key], tol


CASES: dict[str, Callable[[], Case]] = {
    "gather-f32-i32": lambda: _gather(float32, int32, 0),
    "gather-bool-i64-batch": lambda: _gather(bool_, int64, 1),
    "gather-bf16-u8": lambda: _gather(bfloat16, uint8, 0),
    "scatter_add-f16-i64": lambda: _scatter(float16, int64, 1),
    "scatter_add-f32-i32": lambda: _scatter(float32, int32, 2),
    "scatter_add-i8-u32-wraps": lambda: _scatter(int8, uint32, 0),
    "dynamic-slices-i32": lambda: _dynamic(5, int32),
    "dynamic-slices-clamped-i64": lambda: _dynamic(100, int64),
    "dynamic-slices-negative-i8": lambda: _dynamic(-3, int8),
    "pad-i8": lambda: _pad(int8),
    "pad-f16": lambda: _pad(float16),
    "pad-bool": lambda: _pad(bool_),
    **{f"cumsum-{d.name}": partial(_cumsum, d) for d in (float32, float16, int8, uint8)},
    **{f"sort-{d.name}": partial(_sort, d) for d in (float32, bfloat16, int32, uint8)},
    "rng-bits": lambda: _rng(uint32, "bits"),
    **{f"rng-{dist}-{d.name}": partial(_rng, d, dist)
       for dist in ("uniform", "normal") for d in (float32, float16, bfloat16, float64)},
}


@pytest.fixture(scope="module")
def built(nvcc: str) -> tuple[dict[str, tuple[Case, Any]], HostLibrary]:
    cases = {name: make() for name, make in CASES.items()}
    lowered = {name: (case, lower(case[0])) for name, case in cases.items()}
    sources = {s.name: s.source for _, low in lowered.values() for s in low.steps}
    return lowered, compile_checked(sources)


@pytest.mark.parametrize("name", list(CASES))
def test_launch_list_matches_reference(built: Any, name: str) -> None:
    lowered, library = built
    (fn, inputs, tol), low = lowered[name]
    want = evaluate(fn, [np.array(x) for x in inputs])
    got = run_on_host(low, [np.array(x) for x in inputs], library=library)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        if tol == 0.0:
            np.testing.assert_array_equal(g.view(np.uint8), np.ascontiguousarray(w).view(np.uint8))
        else:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol,
                                       atol=tol)


def test_donated_operand_is_updated_in_place(built: Any) -> None:
    lowered, library = built
    (fn, inputs, _), low = lowered["dynamic-slices-i32"]
    copies = [s for s in low.steps if s.donor == 0]
    assert len(copies) == 1 and low.aliases == {copies[0].slots[-1]: 0}
    steps, bound = low.plan(frozenset({0}))
    assert copies[0] not in steps and bound == low.aliases
    want = evaluate(fn, [np.array(x) for x in inputs])
    cache = np.array(inputs[0])
    got = run_on_host(low, [cache, *inputs[1:]], donated=frozenset({0}), library=library)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(cache, want[0])  # written in place: no copy of the cache
    kept = np.array(inputs[0])
    run_on_host(low, [kept, *inputs[1:]], library=library)
    np.testing.assert_array_equal(kept, inputs[0])  # not donated: never written


def test_update_in_place_when_the_operand_is_dead() -> None:
    b = Builder()
    x, u = b.input(TensorType((4, 4), float32)), b.input(TensorType((1, 4), float32))
    zero = b.constant(np.array(0, np.int32))
    tmp = b.emit("exp", x)  # an intermediate slot nothing else reads: written in place
    fn = b.build([b.emit("dynamic_update_slice", tmp, u, zero, zero)])
    low = lower(fn)
    assert len(low.steps) == 2 and low.steps[0].slots[-1] == low.steps[1].slots[-1]
    b = Builder()
    x, u = b.input(TensorType((4, 4), float32)), b.input(TensorType((1, 4), float32))
    zero = b.constant(np.array(0, np.int32))
    tmp = b.emit("exp", x)
    fn = b.build([b.emit("dynamic_update_slice", tmp, u, zero, zero), tmp])  # tmp stays live
    low = lower(fn)
    assert len(low.steps) == 3 and low.outputs[0].slot != low.outputs[1].slot
