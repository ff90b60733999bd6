"""Shared helpers for the optimizer tests: evaluate and compare programs on the reference."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from omnitensor.ir.interpret import evaluate
from omnitensor.ir.program import Function
from omnitensor.ir.types import TensorType

Array = np.ndarray[Any, Any]


def sample_inputs(fn: Function, seed: int = 0) -> list[Array]:
    """Small deterministic inputs for every input of `fn` (floats in [-3, 3], ints in [-5, 5])."""
    rng = np.random.default_rng(seed)
    out = []
    for inp in fn.inputs:
        t = inp.value.type
        assert isinstance(t, TensorType)
        if t.dtype.is_bool:
            out.append(rng.random(t.shape) < 0.5)
        elif t.dtype.is_integer:
            lo = 0 if t.dtype.kind == "u" else -5
            out.append(rng.integers(lo, 6, size=t.shape).astype(t.dtype.np))
        else:
            out.append(rng.uniform(-3, 3, size=t.shape).astype(t.dtype.np))
    return out


def same_arrays(a: Array, b: Array) -> bool:
    """Equal shape, dtype and values; NaN equals NaN."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind in "fV":
        x, y = a.astype(np.float64), b.astype(np.float64)
        return bool(np.all((x == y) | (np.isnan(x) & np.isnan(y))))
    return bool(np.array_equal(a, b))


def assert_same_results(before: Function, after: Function, inputs: Sequence[Array]) -> None:
    """`after` computes what `before` does on `inputs` (outputs compared one by one)."""
    expected = evaluate(before, inputs)
    actual = evaluate(after, inputs)
    assert len(expected) == len(actual)
    for k, (e, a) in enumerate(zip(expected, actual, strict=True)):
        assert same_arrays(np.asarray(e), np.asarray(a)), f"output {k}: {a} != {e}"


@pytest.fixture
def check() -> Callable[[Function, Function], None]:
    """``check(before, after)``: same results on sampled inputs (two seeds)."""

    def run(before: Function, after: Function) -> None:
        for seed in (0, 1):
            assert_same_results(before, after, sample_inputs(before, seed))

    return run
