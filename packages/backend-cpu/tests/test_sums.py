"""`reduce_sum` over leading or trailing axes as a product with ones (`steps.sum_step`)."""

from __future__ import annotations

import numpy as np
import pytest

from omnitensor.dtypes import float32, float64
from omnitensor.ir.builder import Builder
from omnitensor.ir.types import TensorType
from omnitensor_backend_cpu.backend import CpuBackend


@pytest.mark.parametrize("dtype", [float32, float64])
@pytest.mark.parametrize("axes", [(2,), (1, 2), (0,), (0, 1), (1,)])  # (1,): the reference
@pytest.mark.parametrize("strided", [False, True])
def test_sums_over_leading_or_trailing_axes(backend: CpuBackend, dtype: object,
                                            axes: tuple[int, ...], strided: bool) -> None:
    shape = (6, 9, 16)
    b = Builder()
    x = b.input(TensorType(shape[::-1] if strided else shape, dtype))  # type: ignore[arg-type]
    if strided:  # a transposed view reaches the step: summed by numpy into the same buffer
        x = b.emit("transpose", x, perm=(2, 1, 0))
    fn = b.build([b.emit("reduce_sum", x, axes=axes)])
    exe = backend.compile(fn)
    assert ("blas" in exe.plan.kinds) == (axes != (1,))
    rng = np.random.default_rng(5)
    value = rng.normal(size=shape).astype(dtype.np)  # type: ignore[attr-defined]
    value[1, 2, 3], value[4, 0, 0], value[4, 0, 1] = np.nan, np.inf, -np.inf
    given = np.ascontiguousarray(value.transpose(2, 1, 0)) if strided else value
    for _ in range(2):  # the step's buffer is reused
        (got,) = backend.run(exe, [given])
        with np.errstate(invalid="ignore"):  # inf + -inf
            want = value.sum(axis=axes)
        np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == float32 else 1e-12,
                                   atol=1e-5)
