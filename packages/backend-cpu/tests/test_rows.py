"""Row kernels: layer norm and softmax, written as bare primitives, reach the row kernels.

The backend never re-matches decompositions: these graphs reach the kernels only because the
optimizer's `raise_composites` turns them into composites first (the user's path).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import omnitensor as ot
import omnitensor.functional as F
from omnitensor.dtypes import DType, float32, float64
from omnitensor.ir.builder import Builder
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.program import Function
from omnitensor.ir.types import TensorType
from omnitensor.optimizer.passes import expand_composites
from omnitensor.tensor.graph import capture
from omnitensor_backend_cpu.backend import CpuBackend


def _layer_norm(shape: tuple[int, ...], dtype: DType, *, weight: bool, bias: bool,
                early_broadcast: bool = False, centred_out: bool = False) -> Function:
    """Layer norm over the last axis; `early_broadcast` broadcasts the variance before ``+ eps``."""
    b = Builder()
    x = b.input(TensorType(shape, dtype))
    keep = (*shape[:-1], 1)
    dims = tuple(range(len(shape)))
    last = (len(shape) - 1,)

    def lit(value: float, to: tuple[int, ...]) -> Any:
        return b.emit("broadcast_in_dim", b.constant(value, dtype.name), shape=to, dims=())

    def mean(v: Any) -> Any:
        s = b.emit("reshape", b.emit("reduce_sum", v, axes=last), shape=keep)
        return b.emit("div", s, lit(float(shape[-1]), keep))

    c = b.emit("sub", x, b.emit("broadcast_in_dim", mean(x), shape=shape, dims=dims))
    var = mean(b.emit("mul", c, c))
    if early_broadcast:
        var = b.emit("broadcast_in_dim", var, shape=shape, dims=dims)
        r = b.emit("rsqrt", b.emit("add", var, lit(1e-5, shape)))
    else:
        r = b.emit("broadcast_in_dim", b.emit("rsqrt", b.emit("add", var, lit(1e-5, keep))),
                   shape=shape, dims=dims)
    y = b.emit("mul", c, r)
    if weight:
        w = b.input(TensorType(shape[-1:], dtype))
        y = b.emit("mul", y, b.emit("broadcast_in_dim", w, shape=shape, dims=last))
    if bias:
        bb = b.input(TensorType(shape[-1:], dtype))
        y = b.emit("add", y, b.emit("broadcast_in_dim", bb, shape=shape, dims=last))
    return b.build([y, c] if centred_out else [y])


@pytest.mark.parametrize("dtype", [float32, float64])
@pytest.mark.parametrize("shape", [(5, 33), (2, 3, 64), (512, 512)])
@pytest.mark.parametrize("weight,bias", [(True, True), (True, False), (False, True),
                                         (False, False)])
@pytest.mark.parametrize("early", [False, True])
def test_layer_norm_is_one_row_kernel(backend: CpuBackend, compile_optimized: Any, dtype: DType,
                                      shape: tuple[int, ...], weight: bool, bias: bool,
                                      early: bool) -> None:
    fn = _layer_norm(shape, dtype, weight=weight, bias=bias, early_broadcast=early)
    exe = compile_optimized(fn)
    # (a bias alone stays an `add` after the composite: numpy's, or fused when large)
    assert [k for k in exe.plan.kinds if k not in ("ref", "fused")] == ["rows"]
    assert any("layer_norm" in label for label in exe.plan.labels)
    rng = np.random.default_rng(0)
    xs = [(rng.normal(size=shape) * 3 + 1).astype(dtype.np)]
    xs += [rng.normal(size=shape[-1:]).astype(dtype.np) for _ in range(weight + bias)]
    (got,) = backend.run(exe, xs)
    (want,) = evaluate(fn, xs)
    tol = 2e-5 if dtype == float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_functional_layer_norm_decomposition_is_matched(backend: CpuBackend) -> None:
    rng = np.random.default_rng(1)
    arrays = [rng.normal(size=(6, 40)).astype(np.float32), rng.normal(size=40).astype(np.float32),
              rng.normal(size=40).astype(np.float32)]
    x, w, bias = (ot.tensor(a) for a in arrays)
    y = F.layer_norm(x, 40, w, bias)
    fn = capture([(y._node, y._index)]).function()
    expand_composites(fn, backend.supports)  # the pipeline's step: cpu has no lowering yet
    exe = backend.compile(fn)
    assert any("layer_norm" in label for label in exe.plan.labels)
    assert exe.plan.kinds.count("rows") == 1 and "fused" not in exe.plan.kinds
    inputs = list(arrays)  # weight and bias are (40,) operands of the composite
    (got,) = backend.run(exe, inputs)
    (want,) = evaluate(fn, inputs)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def test_layer_norm_whose_centred_value_is_an_output_keeps_both_outputs(
        backend: CpuBackend, compile_optimized: Any) -> None:
    # NOTE: the raise pass may take the norm into a composite; the centred value, read
    # outside, must still come out right.
    fn = _layer_norm((4, 16), float32, weight=True, bias=True, centred_out=True)
    exe = compile_optimized(fn)
    rng = np.random.default_rng(3)
    xs = [rng.normal(size=(4, 16)).astype(np.float32) for _ in range(1)]
    xs += [rng.normal(size=16).astype(np.float32) for _ in range(2)]
    for got, want in zip(backend.run(exe, xs), evaluate(fn, xs), strict=True):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def _softmax(shape: tuple[int, int], dtype: DType) -> Function:
    b = Builder()
    x = b.input(TensorType(shape, dtype))
    m = b.emit("reduce_max", x, axes=(1,))
    e = b.emit("exp", b.emit("sub", x, b.emit("broadcast_in_dim", m, shape=shape, dims=(0,))))
    s = b.emit("reduce_sum", e, axes=(1,))
    return b.build([b.emit("div", e, b.emit("broadcast_in_dim", s, shape=shape, dims=(0,)))])


@pytest.mark.parametrize("dtype", [float32, float64])
@pytest.mark.parametrize("shape", [(3, 7), (600, 300)])
def test_softmax_rows_match_the_reference_with_nan_and_inf(backend: CpuBackend,
                                                           compile_optimized: Any, dtype: DType,
                                                           shape: tuple[int, int]) -> None:
    fn = _softmax(shape, dtype)
    exe = compile_optimized(fn)
    assert exe.plan.kinds == ["rows"]
    rng = np.random.default_rng(2)
    x = (rng.normal(size=shape) * 20).astype(dtype.np)
    x[0, 1] = np.nan
    x[1, 2] = np.inf
    x[2, :] = -np.inf
    x[-1, 0] = -200.0  # exp underflows to a denormal or zero
    (got,) = backend.run(exe, [x])
    with np.errstate(all="ignore"):
        (want,) = evaluate(fn, [x])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=2e-6 if dtype == float32 else 1e-13, atol=1e-30)


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 15, 16, 17, 31, 40])
def test_row_max_over_eight_running_maxima_sees_every_element(n: int) -> None:
    from omnitensor_backend_cpu._compat import jit
    from omnitensor_backend_cpu.rowops import _row_max32

    row_max = jit()(lambda x: _row_max32(x))
    rng = np.random.default_rng(n)
    for at in range(n):  # the largest value at every position, the tail's included
        x = rng.standard_normal(n).astype(np.float32)
        x[at] = np.float32(50.0)
        assert row_max(x) == np.float32(50.0)
        if n > 1:  # a NaN is skipped, as by the one running maximum it replaces
            x[at] = np.nan
            assert row_max(x) == np.nanmax(x)
    assert row_max(np.full(n, -np.inf, np.float32)) == -np.inf


@pytest.mark.parametrize("rows", [1, 7, 257])
def test_large_norms_split_on_the_openmp_workers_where_products_do(
        backend: CpuBackend, compile_optimized: Any, monkeypatch: pytest.MonkeyPatch,
        rows: int) -> None:
    from omnitensor_backend_cpu import pool, rowops, threads

    monkeypatch.setattr(threads, "wide_products", lambda: True)
    monkeypatch.setattr(threads, "count", lambda: 2)
    monkeypatch.setattr(pool, "MIN_WORKER_SPLIT", 1)
    pooled: list[int] = []
    monkeypatch.setattr(pool, "parallel_for", lambda count, body, *a, **k: (
        pooled.append(count), body(0, count)))
    twin = rowops._norm32_parts
    ranges: list[tuple[int, int]] = []
    monkeypatch.setattr(rowops, "_norm32_parts", lambda parts, step, *args: (
        ranges.append((parts, step)), twin(parts, step, *args)))
    shape = (rows, 96)
    fn = _layer_norm(shape, float32, weight=True, bias=True)
    exe = compile_optimized(fn)
    rng = np.random.default_rng(3)
    xs = [(rng.normal(size=shape) * 3 + 1).astype(np.float32)]
    xs += [rng.normal(size=shape[-1:]).astype(np.float32) for _ in range(2)]
    (got,) = backend.run(exe, xs)
    # every row written once (an odd count splits unevenly), on the workers, not the pool
    np.testing.assert_allclose(got, evaluate(fn, xs)[0], rtol=2e-5, atol=2e-5)
    assert pooled == []
    assert ranges == ([] if rows == 1 else [(2, -(-rows // 2))])
