"""Prepared kernel calls and views kept from run to run (`kernel_step`, `steps._view_step`).

A step keeps what it prepared while it sees the same array objects; the arrays' contents
change between runs, so every run must still compute from the current values.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from omnitensor.dtypes import float32, int32
from omnitensor.ir.builder import Builder
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.types import TensorType
from omnitensor_backend_cpu import rowops
from omnitensor_backend_cpu.backend import CpuBackend


@pytest.fixture
def prepares(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Counts `rowops.prepare_norm` calls (one per norm step that prepared again)."""
    count = [0]
    original = rowops.prepare_norm

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        count[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(rowops, "prepare_norm", counting)
    yield count


def _residual_norm(strided: bool):  # type: ignore[no-untyped-def]
    """rms_norm(a + other) * other, or (`strided`) rms_norm of a (32, 16) input transposed and
    reshaped to (8, 64): a copy numpy makes at every run, which is never kept."""
    b = Builder()
    a = b.input(TensorType((32, 16) if strided else (8, 64), float32))
    other = b.input(TensorType((8, 64), float32))
    weight = b.input(TensorType((64,), float32))
    if strided:
        h = b.emit("reshape", b.emit("transpose", a, perm=(1, 0)), shape=(8, 64))
    else:
        h = b.emit("add", a, other)
    n = b.emit("rms_norm", h, weight, axes=(1,), eps=1e-6)
    return b.build([b.emit("mul", n, other)])


@pytest.mark.parametrize("strided", [False, True])
def test_kept_calls_compute_from_the_current_values(backend: CpuBackend, prepares: list[int],
                                                    strided: bool) -> None:
    fn = _residual_norm(strided)
    exe = backend.compile(fn)
    rng = np.random.default_rng(0)
    inputs = [rng.normal(size=t.value.type.shape).astype(np.float32) for t in fn.inputs]
    for run in range(3):
        for array in inputs:  # the same objects, new values (a decode step's arena)
            array[...] = rng.normal(size=array.shape)
        (got,) = backend.run(exe, inputs)
        np.testing.assert_allclose(got, evaluate(fn, inputs)[0], rtol=1e-5, atol=1e-6)
        # the norm reads the add's own buffer, the same array every run: prepared once;
        # the reshape numpy copied is a new array at every run
        assert prepares[0] == (run + 1 if strided else 1)


def test_new_input_objects_are_prepared_again(backend: CpuBackend, prepares: list[int]) -> None:
    fn = _residual_norm(False)
    exe = backend.compile(fn)
    rng = np.random.default_rng(1)
    weights = [rng.normal(size=(64,)).astype(np.float32) for _ in range(2)]
    a, other = (rng.normal(size=(8, 64)).astype(np.float32) for _ in range(2))
    for weight in [*weights, weights[0]]:
        inputs = [a, other, weight]
        (got,) = backend.run(exe, inputs)
        np.testing.assert_allclose(got, evaluate(fn, inputs)[0], rtol=1e-5, atol=1e-6)
    assert prepares[0] == 3


def test_a_cache_update_does_not_make_its_row_escape(backend: CpuBackend) -> None:
    # the row written into a donated cache is copied in: the product computing it keeps a
    # buffer of the plan's (the same array every run), not a fresh output per run
    b = Builder()
    cache = b.input(TensorType((1, 4, 16), float32))
    x = b.input(TensorType((1, 8), float32))
    w = b.input(TensorType((8, 16), float32))
    start = b.input(TensorType((), int32))
    row = b.emit("reshape", b.emit("dot_general", x, w, contracting=((1,), (0,))),
                 shape=(1, 1, 16))
    zero = b.emit("constant", value=np.zeros((), np.int32))
    updated = b.emit("dynamic_update_slice", cache, row, zero, start, zero)
    fn = b.build([updated])
    exe = backend.compile(fn)
    product = next(inst.results[0].id for inst in fn.body if inst.op == "dot_general")
    assert product in exe.plan.arena_spec
    rng = np.random.default_rng(2)
    state = np.zeros((1, 4, 16), np.float32)
    for pos in range(3):
        inputs = [state, rng.normal(size=(1, 8)).astype(np.float32),
                  rng.normal(size=(8, 16)).astype(np.float32), np.array(pos, np.int32)]
        expected = evaluate(fn, inputs)[0]
        (state,) = backend.run(exe, inputs, donated=frozenset({0}))
        np.testing.assert_allclose(state, expected, rtol=1e-5, atol=1e-6)
