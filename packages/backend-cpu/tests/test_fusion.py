"""Fusion grouping and fused-kernel results against the reference interpreter."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from omnitensor.dtypes import DType, float32, float64
from omnitensor.ir.builder import Builder
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.types import TensorType
from omnitensor_backend_cpu.backend import CpuBackend


def _chain(shape: tuple[int, ...], dtype=float32):  # type: ignore[no-untyped-def]
    b = Builder()
    x = b.input(TensorType(shape, dtype))
    y = b.input(TensorType(shape, dtype))
    half = b.emit("broadcast_in_dim", b.constant(0.5, dtype.name), shape=shape, dims=())
    v = b.emit("mul", x, half)
    v = b.emit("tanh", v)
    v = b.emit("add", v, y)
    v = b.emit("exp", v)
    v = b.emit("sub", v, x)
    return b.build([v])


@pytest.mark.parametrize("dtype", [float32, float64])
def test_chain_of_five_elementwise_ops_is_one_kernel(backend: CpuBackend, dtype) -> None:  # type: ignore[no-untyped-def]
    fn = _chain((7, 33), dtype)
    exe = backend.compile(fn)
    assert exe.plan.kinds == ["fused"]
    assert len(exe.plan.groups) == 1 and len(exe.plan.groups[0].insts) == 5
    assert exe.plan.groups[0].literals  # the 0.5 is inlined, not a broadcast buffer
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(7, 33)).astype(dtype.np) for _ in range(2)]
    (got,) = backend.run(exe, [backend.upload(a) for a in xs])
    (want,) = evaluate(fn, xs)
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == float32 else 1e-12)


def test_strided_and_broadcast_inputs_use_the_strided_kernel(backend: CpuBackend) -> None:
    b = Builder()
    x = b.input(TensorType((5, 6), float32))
    bias = b.input(TensorType((6,), float32))
    xt = b.emit("transpose", x, perm=(1, 0))  # (6, 5), strided
    bb = b.emit("broadcast_in_dim", bias, shape=(6, 5), dims=(0,))
    v = b.emit("add", xt, bb)
    v = b.emit("max", v, b.emit("broadcast_in_dim", b.constant(0.0, "float32"), shape=(6, 5),
                                dims=()))
    fn = b.build([v])
    exe = backend.compile(fn)
    assert exe.plan.kinds.count("fused") == 1
    rng = np.random.default_rng(1)
    xs = [rng.normal(size=(5, 6)).astype(np.float32), rng.normal(size=(6,)).astype(np.float32)]
    (got,) = backend.run(exe, xs)
    np.testing.assert_array_equal(got, evaluate(fn, xs)[0])


def test_nan_and_inf_survive_fusion(backend: CpuBackend) -> None:
    fn = _chain((4,))
    x = np.array([np.nan, np.inf, -np.inf, 1.0], np.float32)
    (got,) = backend.run(backend.compile(fn), [x, x])
    (want,) = evaluate(fn, [x, x])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-6)


def test_intermediate_used_later_is_materialized(backend: CpuBackend) -> None:
    b = Builder()
    x = b.input(TensorType((3, 4), float32))
    e = b.emit("exp", x)
    t = b.emit("tanh", e)
    s = b.emit("reduce_sum", e, axes=(1,))  # reads e after the group
    fn = b.build([t, s])
    exe = backend.compile(fn)
    xs = [np.random.default_rng(2).normal(size=(3, 4)).astype(np.float32)]
    got = backend.run(exe, xs)
    for g, w in zip(got, evaluate(fn, xs), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5)


@pytest.mark.parametrize("dtype", [float32, float64])
@pytest.mark.parametrize("shape", [(3, 7), (2, 3, 5), (1, 300000)])
def test_softmax_pattern_is_one_row_kernel(backend: CpuBackend, compile_optimized: Any,
                                           dtype: DType, shape: tuple[int, ...]) -> None:
    b = Builder()
    x = b.input(TensorType(shape, dtype))
    lead = tuple(range(len(shape) - 1))
    m = b.emit("reduce_max", x, axes=(len(shape) - 1,))
    e = b.emit("exp", b.emit("sub", x, b.emit("broadcast_in_dim", m, shape=shape, dims=lead)))
    s = b.emit("reduce_sum", e, axes=(len(shape) - 1,))
    y = b.emit("div", e, b.emit("broadcast_in_dim", s, shape=shape, dims=lead))
    fn = b.build([y])
    exe = compile_optimized(fn)
    assert exe.plan.kinds == ["rows"]
    xs = np.random.default_rng(4).normal(size=shape).astype(dtype.np) * 5
    xs.reshape(-1)[0] = np.nan
    (got,) = backend.run(exe, [xs])
    (want,) = evaluate(fn, [xs])
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == float32 else 1e-12, atol=1e-30)


def test_a_long_chain_is_split_into_bounded_kernels(backend: CpuBackend) -> None:
    from omnitensor_backend_cpu.plan import MAX_FUSED

    n = 2 * MAX_FUSED + 7
    b = Builder()
    x = b.input(TensorType((3,), float32))
    one = b.emit("broadcast_in_dim", b.constant(1.0, "float32"), shape=(3,), dims=())
    v = x
    for _ in range(n):
        v = b.emit("add", v, one)
    fn = b.build([v])
    exe = backend.compile(fn)
    sizes = [len(g.insts) for g in exe.plan.groups]
    assert sum(sizes) == n and max(sizes) <= MAX_FUSED and len(sizes) == 3
    # parts of the same structure are one kernel source: one compile, not one per part
    assert exe.plan.groups[0].source() == exe.plan.groups[1].source()
    (got,) = backend.run(exe, [backend.upload(np.zeros(3, np.float32))])
    np.testing.assert_array_equal(got, np.full(3, n, np.float32))


@pytest.mark.parametrize("dtype", [float32, float64])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_bias_add_and_gelu_are_one_kernel_reading_the_bias_as_a_row(
        backend: CpuBackend, dtype: DType, approximate: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from omnitensor_backend_cpu import codegen

    b = Builder()
    x = b.input(TensorType((4, 9, 40), dtype))
    bias = b.input(TensorType((40,), dtype))
    up = b.input(TensorType((4, 9, 40), dtype))
    v = b.emit("add", x, b.emit("broadcast_in_dim", bias, shape=(4, 9, 40), dims=(2,)))
    v = b.emit("gelu", v, approximate=approximate)
    v = b.emit("swiglu", v, up)
    fn = b.build([v])
    exe = backend.compile(fn)
    assert exe.plan.kinds == ["ref", "fused"]  # the broadcast (a view), then one kernel
    assert [i.op for i in exe.plan.groups[0].insts] == ["add", "gelu", "swiglu"]
    loads: list[tuple[bool, ...]] = []
    original = codegen.kernel_for
    monkeypatch.setattr(codegen, "kernel_for", lambda g, vectors=(), scalars=(), columns=(): (
        loads.append(tuple(vectors)) or original(g, vectors, scalars, columns)))
    rng = np.random.default_rng(2)
    xs = [(rng.normal(size=s) * 3).astype(dtype.np) for s in ((4, 9, 40), (40,), (4, 9, 40))]
    (got,) = backend.run(backend.compile(fn), xs)
    (want,) = evaluate(fn, xs)
    np.testing.assert_allclose(got, want, rtol=2e-6 if dtype == float32 else 1e-12, atol=1e-6)
    assert (False, True, False) in loads  # the bias, and only it, read as one row


@pytest.mark.parametrize("with_bias", [False, True])  # the flat kernel; the rows kernel
def test_runtime_scalars_are_read_once_not_broadcast_out(
        backend: CpuBackend, with_bias: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # an optimizer's per-step factors: 0-d inputs broadcast to the group's shape
    from omnitensor_backend_cpu import codegen

    shape = (4, 9, 40)
    b = Builder()
    x = b.input(TensorType(shape, float32))
    scale = b.input(TensorType((), float32))
    shift = b.input(TensorType((), float32))
    bias = b.input(TensorType((40,), float32))
    v = b.emit("mul", x, b.emit("broadcast_in_dim", scale, shape=shape, dims=()))
    if with_bias:
        v = b.emit("add", v, b.emit("broadcast_in_dim", bias, shape=shape, dims=(2,)))
    v = b.emit("sub", b.emit("tanh", v), b.emit("broadcast_in_dim", shift, shape=shape,
                                                   dims=()))
    fn = b.build([v])
    calls: list[tuple[tuple[bool, ...], tuple[bool, ...]]] = []
    original = codegen.kernel_for
    monkeypatch.setattr(codegen, "kernel_for", lambda g, vectors=(), scalars=(), columns=(): (
        calls.append((tuple(vectors), tuple(scalars))) or original(g, vectors, scalars, columns)))
    rng = np.random.default_rng(3)
    xs = [rng.normal(size=shape).astype(np.float32), np.asarray(1.7, np.float32),
          np.asarray(-0.25, np.float32), rng.normal(size=(40,)).astype(np.float32)]
    exe = backend.compile(fn)
    assert exe.plan.kinds.count("fused") == 1
    for _ in range(2):  # new values each call: the scalars are read at run time
        (got,) = backend.run(exe, xs)
        np.testing.assert_allclose(got, evaluate(fn, xs)[0], rtol=2e-6, atol=1e-6)
        xs[1], xs[2] = xs[1] * 2, xs[2] - 1
    # one kernel, made once; x, the scale, (the bias,) the shift
    scalars = (False, True, False, True) if with_bias else (False, True, True)
    assert [c[1] for c in calls] == [scalars]
    assert [c[0] for c in calls] == [(False, False, True, False) if with_bias else ()]


def _normalized(shape: tuple[int, ...]):  # type: ignore[no-untyped-def]
    # (x - mean) * rstd * gamma: per-row statistics and a per-column weight, all broadcast
    b = Builder()
    x = b.input(TensorType(shape, float32))
    mean = b.input(TensorType((*shape[:-1], 1), float32))
    rstd = b.input(TensorType((*shape[:-1], 1), float32))
    gamma = b.input(TensorType(shape[-1:], float32))
    dims = tuple(range(len(shape)))
    v = b.emit("sub", x, b.emit("broadcast_in_dim", mean, shape=shape, dims=dims))
    v = b.emit("mul", v, b.emit("broadcast_in_dim", rstd, shape=shape, dims=dims))
    v = b.emit("mul", v, b.emit("broadcast_in_dim", gamma, shape=shape, dims=(len(shape) - 1,)))
    return b.build([v])


def test_per_row_values_are_read_as_columns_not_broadcast_out(
        backend: CpuBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    from omnitensor_backend_cpu import codegen

    shape = (4, 9, 40)
    fn = _normalized(shape)
    calls: list[tuple[tuple[bool, ...], tuple[bool, ...]]] = []
    original = codegen.kernel_for
    monkeypatch.setattr(codegen, "kernel_for", lambda g, vectors=(), scalars=(), columns=(): (
        calls.append((tuple(vectors), tuple(columns))) or original(g, vectors, scalars, columns)))
    rng = np.random.default_rng(4)
    xs = [rng.normal(size=s).astype(np.float32)
          for s in (shape, (4, 9, 1), (4, 9, 1), (40,))]
    exe = backend.compile(fn)
    assert exe.plan.kinds.count("fused") == 1
    (got,) = backend.run(exe, xs)
    np.testing.assert_allclose(got, evaluate(fn, xs)[0], rtol=2e-6, atol=1e-6)
    # x whole, the statistics one per row, gamma one row
    assert calls == [((False, False, False, True), (False, True, True, False))]


@pytest.mark.parametrize("program", ["flat", "rows"])
@pytest.mark.parametrize("n", [1, 63, 1000])
def test_large_groups_split_on_the_openmp_workers_where_products_do(
        backend: CpuBackend, monkeypatch: pytest.MonkeyPatch, program: str, n: int) -> None:
    from omnitensor_backend_cpu import pool, threads

    monkeypatch.setattr(threads, "wide_products", lambda: True)
    monkeypatch.setattr(threads, "count", lambda: 2)
    monkeypatch.setattr(pool, "MIN_SPLIT", 1)
    monkeypatch.setattr(pool, "MIN_WORKER_SPLIT", 1)
    pooled: list[int] = []
    monkeypatch.setattr(pool, "parallel_for", lambda count, body, *a, **k: (
        pooled.append(count), body(0, count)))
    shape = (n, 3, 40)
    fn = _chain(shape) if program == "flat" else _normalized(shape)
    rng = np.random.default_rng(5)
    xs = [rng.normal(size=v.value.type.shape).astype(np.float32) for v in fn.inputs]
    exe = backend.compile(fn)
    (got,) = backend.run(exe, xs)
    # every range written (an odd count of rows or elements splits unevenly), none twice
    np.testing.assert_allclose(got, evaluate(fn, xs)[0], rtol=2e-6, atol=1e-6)
    # on the workers, not the pool (but 120 elements are less than two 64-element ranges)
    assert pooled == ([120] if program == "flat" and n == 1 else [])


def test_independent_chains_of_a_group_run_as_loops_of_their_own(backend: CpuBackend) -> None:
    # three AdamW-like updates of one shape: one group, one loop per parameter's chain (one
    # loop over all 24 arrays stayed scalar); chains that share an array share a loop
    b = Builder()
    shape = (4, 37)
    step = b.input(TensorType((), float32))
    factor = b.emit("broadcast_in_dim", b.emit("mul", step, step), shape=shape, dims=())
    outs = []
    for _ in range(3):
        p, g, m = (b.input(TensorType(shape, float32)) for _ in range(3))
        m2 = b.emit("add", b.emit("mul", m, factor), g)
        outs += [m2, b.emit("sub", p, b.emit("div", m2, b.emit("sqrt", b.emit("abs", m2))))]
    shared = outs[0]  # read again: its chain's loop grows, no new one
    outs.append(b.emit("mul", b.emit("neg", shared), shared))
    fn = b.build(outs)
    exe = backend.compile(fn)
    (group,) = [g for g in exe.plan.groups if len(g.outputs) >= 6]
    # (the broadcast factor is one element at run time: a scalar, read before the loops)
    scalars = [v == factor.id for v in group.inputs]
    assert any(scalars) and group.source(scalars=scalars).count("for i in range(n):") == 3
    assert group.source().count("for i in range(n):") == 1  # (every chain reads the factor)
    rng = np.random.default_rng(2)
    xs = [np.float32(0.5), *(rng.normal(size=shape).astype(np.float32) for _ in range(9))]
    got = backend.run(exe, [backend.upload(np.asarray(a)) for a in xs])
    for g_, w in zip(got, evaluate(fn, [np.asarray(a) for a in xs]), strict=True):
        np.testing.assert_allclose(g_, w, rtol=1e-5, atol=1e-7)  # (contracted: fma)
