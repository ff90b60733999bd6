"""Accuracy of the vectorizable float32 exp/tanh/erf/logistic against the reference kernels."""

from __future__ import annotations

import numpy as np
import pytest

from omnitensor.dtypes import float32
from omnitensor.ir.builder import Builder
from omnitensor.ir.opdef import get_op
from omnitensor.ir.types import TensorType
from omnitensor_backend_cpu.backend import CpuBackend


def _ulps(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    def ordered(x: np.ndarray) -> np.ndarray:
        raw = x.view(np.int32).astype(np.int64)
        magnitude = raw & 0x7FFFFFFF
        return np.where(raw < 0, -magnitude, magnitude)

    nan = np.isnan(actual) | np.isnan(expected)
    return np.where(nan, 0, np.abs(ordered(actual) - ordered(expected)))


def _samples() -> np.ndarray:
    rng = np.random.default_rng(0)
    scales = (1e-30, 1e-8, 1e-3, 0.1, 1.0, 3.0, 10.0, 100.0)
    xs = [rng.normal(size=20000) * s for s in scales]
    edges = [0.0, -0.0, np.inf, -np.inf, np.nan, 88.7, 89.0, -103.0, -110.0, 1e-40, -1e-40]
    return np.concatenate(xs + [np.array(edges)]).astype(np.float32)


@pytest.mark.parametrize("op", ["exp", "tanh", "erf", "logistic"])
def test_fast_float32_math_is_within_the_op_ulp_budget(backend: CpuBackend, op: str) -> None:
    x = _samples()
    b = Builder()
    fn = b.build([b.emit(op, b.input(TensorType(x.shape, float32)))])
    exe = backend.compile(fn)
    assert exe.plan.kinds == ["fused"]  # the approximation, not numpy
    (got,) = backend.run(exe, [x])
    with np.errstate(all="ignore"):
        want = get_op(op).reference(x)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    worst = int(_ulps(got, want).max())
    assert worst <= get_op(op).ulp, f"{op}: {worst} ulp"


def test_softmax_weights_are_exp_above_minus_87_and_zero_below() -> None:
    import numba

    from omnitensor_backend_cpu.mathlib import exp32f, softmax_weight32f

    @numba.njit(cache=False)
    def both(x, a, b):  # type: ignore[no-untyped-def]
        for i in range(x.shape[0]):
            a[i] = softmax_weight32f(x[i])
            b[i] = exp32f(x[i])

    x = np.concatenate([np.linspace(-87, 0, 5001), [-87.01, -100.0, -3.4e38, -np.inf, np.nan]])
    x = x.astype(np.float32)
    weight, exp = np.empty_like(x), np.empty_like(x)
    both(x, weight, exp)
    np.testing.assert_array_equal(weight[:5001], exp[:5001])
    np.testing.assert_array_equal(weight[5001:-1], 0.0)  # no denormals, no slow path
    assert np.isnan(weight[-1])
