"""`scatter_add` (an embedding's gradient) as the cpu backend's one-pass kernel."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from omnitensor.dtypes import DType, float16, float32, float64, int32
from omnitensor.ir.builder import Builder
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.types import TensorType
from omnitensor_backend_cpu.backend import CpuBackend


def _scatter(operand: tuple[int, ...], indices: tuple[int, ...], axis: int, batch_dims: int,
             dtype: DType):  # type: ignore[no-untyped-def]
    updates = operand[:axis] + indices[batch_dims:] + operand[axis + 1:]
    b = Builder()
    x = b.input(TensorType(operand, dtype))
    i = b.input(TensorType(indices, int32))
    u = b.input(TensorType(updates, dtype))
    return b.build([b.emit("scatter_add", x, i, u, axis=axis, batch_dims=batch_dims)]), updates


@pytest.mark.parametrize("dtype", [float32, float64])
@pytest.mark.parametrize("operand,indices,axis,batch_dims", [
    ((14, 128), (64, 9), 0, 0),  # a character model's embedding gradient: many duplicates
    ((3, 7, 5), (3, 4), 1, 1),   # per-batch indices
    ((2, 6, 4, 3), (5,), 1, 0),  # an axis between others
])
def test_scatter_add_is_one_kernel(backend: CpuBackend, dtype: DType, operand: Any,
                                   indices: Any, axis: int, batch_dims: int) -> None:
    fn, updates = _scatter(operand, indices, axis, batch_dims, dtype)
    exe = backend.compile(fn)
    assert exe.plan.kinds == ["scatter"]
    rng = np.random.default_rng(0)
    n = operand[axis]
    args = [rng.normal(size=operand).astype(dtype.np),
            rng.integers(-2, n + 2, size=indices).astype(np.int32),  # clamped at both ends
            rng.normal(size=updates).astype(dtype.np)]
    (got,) = backend.run(exe, args)
    (want,) = evaluate(fn, args)
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == float32 else 1e-12, atol=1e-5)


def test_half_precision_keeps_the_reference(backend: CpuBackend) -> None:
    """float16 accumulates in float32 and rounds once (the reference's rule): not this kernel."""
    fn, _ = _scatter((14, 16), (20,), 0, 0, float16)
    assert backend.compile(fn).plan.kinds == ["ref"]
