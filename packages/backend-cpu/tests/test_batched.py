"""Fused groups of one structure run as one batched call (`batched`): an optimizer's updates."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from omnitensor.dtypes import float32
from omnitensor.ir.builder import Builder
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.program import Function
from omnitensor.ir.types import TensorType
from omnitensor_backend_cpu import codegen, pool, threads
from omnitensor_backend_cpu.backend import CpuBackend

SHAPES = [(40, 30), (7,), (64,), (3, 5, 4)]


def _update(b: Builder, shape: tuple[int, ...], lr: Any, param: Any = None) -> tuple[Any, Any]:
    """An AdamW-like chain over (param, grad, moment) and a runtime scalar broadcast."""
    p = b.input(TensorType(shape, float32)) if param is None else param
    g = b.input(TensorType(shape, float32))
    m = b.input(TensorType(shape, float32))
    rate = b.emit("broadcast_in_dim", lr, shape=shape, dims=())
    beta = b.emit("broadcast_in_dim", b.constant(0.9, "float32"), shape=shape, dims=())
    m2 = b.emit("add", b.emit("mul", m, beta), b.emit("mul", g, g))
    step = b.emit("div", b.emit("mul", rate, m2), b.emit("add", b.emit("sqrt", m2), beta))
    return b.emit("sub", p, step), m2


def _program(shapes: list[tuple[int, ...]], chained: bool = False) -> Function:
    b = Builder()
    lr = b.input(TensorType((), float32))
    outs: list[Any] = []
    previous = None
    for shape in shapes:
        p, m = _update(b, shape, lr, previous if chained else None)
        previous = p
        outs += [p, m]
    return b.build(outs)


def _inputs(fn: Function, seed: int = 0) -> list[np.ndarray[Any, Any]]:
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(i.value.type.shape).astype(np.float32) for i in fn.inputs]
    arrays[0] = np.float32(0.01) * np.ones((), np.float32)
    return arrays


def _check(backend: CpuBackend, fn: Function, xs: list[Any]) -> None:
    exe = backend.compile(fn)
    for _ in range(2):  # (the second run reuses the plan's buffers and kernels)
        for got, want in zip(backend.run(exe, xs), evaluate(fn, xs), strict=True):
            np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)


@pytest.fixture
def compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(codegen.MIN_ELEMENTS_ENV, "0")


@pytest.mark.usefixtures("compiled")
@pytest.mark.parametrize("split", [False, True])
def test_independent_updates_run_as_one_call(backend: CpuBackend, split: bool,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    original = codegen.batched_kernel

    def counted(group: Any, scalars: Any) -> Any:
        kernel = original(group, scalars)
        return lambda parts, ns, *ops: (calls.append(parts), kernel(parts, ns, *ops))

    monkeypatch.setattr(codegen, "batched_kernel", counted)
    if split:  # each group's elements split over two of numba's workers
        monkeypatch.setattr(threads, "wide_products", lambda: True)
        monkeypatch.setattr(threads, "_COUNT", [2])
        monkeypatch.setattr(pool, "MIN_SPLIT", 1)
        monkeypatch.setattr(pool, "MIN_WORKER_SPLIT", 1)
    fn = _program(SHAPES)
    exe = backend.compile(fn)
    assert exe.plan.kinds.count("fused") == 1
    assert exe.plan.labels[exe.plan.kinds.index("fused")].startswith(f"fused:{len(SHAPES)} x ")
    _check(backend, fn, _inputs(fn))
    assert calls and set(calls) == {2 if split else 1}


@pytest.mark.usefixtures("compiled")
def test_a_group_reading_another_ones_result_is_not_batched_with_it(backend: CpuBackend) -> None:
    # each update's parameter is the previous update's result: no two may run as one call
    fn = _program([(40, 30)] * 3, chained=True)
    exe = backend.compile(fn)
    assert not any(label.startswith("fused:") and " x " in label for label in exe.plan.labels)
    _check(backend, fn, _inputs(fn))


@pytest.mark.usefixtures("compiled")
def test_a_reader_between_closes_the_batch(backend: CpuBackend) -> None:
    b = Builder()
    lr = b.input(TensorType((), float32))
    p1, m1 = _update(b, (40, 30), lr)
    read = b.emit("reduce_sum", p1, axes=(0, 1))  # reads p1 before the second update
    p2, m2 = _update(b, (40, 30), lr)
    p3, m3 = _update(b, (8, 9), lr)
    fn = b.build([p1, m1, read, p2, m2, p3, m3])
    exe = backend.compile(fn)
    labels = [label for label in exe.plan.labels if label.startswith("fused")]
    assert " x " not in labels[0] and labels[1].startswith("fused:2 x "), labels
    _check(backend, fn, _inputs(fn))


@pytest.mark.usefixtures("compiled")
@pytest.mark.parametrize("odd", ["strided", "row", "read_only"])
def test_operands_outside_the_batched_form_run_each_group_alone(
        backend: CpuBackend, odd: str, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    original = codegen.batched_kernel
    monkeypatch.setattr(codegen, "batched_kernel",
                        lambda *a: calls.append(1) or original(*a))
    b = Builder()
    lr = b.input(TensorType((), float32))
    grad: Any = None
    if odd == "strided":  # a transposed view
        grad = b.emit("transpose", b.input(TensorType((30, 40), float32)), perm=(1, 0))
    elif odd == "row":  # one row repeated: the rows kernel reads it in place
        grad = b.emit("broadcast_in_dim", b.input(TensorType((30,), float32)), shape=(40, 30),
                      dims=(1,))
    outs: list[Any] = []
    for k, shape in enumerate([(40, 30), (7,), (40, 30), (7,)]):
        p = b.input(TensorType(shape, float32))
        g = grad if k == 0 and grad is not None else b.input(TensorType(shape, float32))
        rate = b.emit("broadcast_in_dim", lr, shape=shape, dims=())
        outs.append(b.emit("sub", p, b.emit("mul", rate, b.emit("mul", g, g))))
    fn = b.build(outs)
    xs = _inputs(fn, 1)
    if odd == "read_only":
        xs[1].flags.writeable = False
    exe = backend.compile(fn)
    assert exe.plan.labels[-1].startswith("fused:4 x mul+mul+sub(")
    _check(backend, fn, xs)
    assert calls == []  # every run took the groups' own steps
