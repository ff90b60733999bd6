"""Shared helpers of the cpu backend's tests: a backend instance and small program builders."""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
import pytest

# NOTE: the kernels compute the same at every size; small cases must reach them too.
os.environ.setdefault("OMNITENSOR_CPU_KERNEL_MIN_ELEMENTS", "0")

from omnitensor.ir.program import Function
from omnitensor_backend_cpu.backend import CpuBackend, CpuExecutable


def _compile_optimized(backend: CpuBackend, fn: Function) -> CpuExecutable:
    """`fn` through the default optimizer pipeline (raising composites), then compiled.

    The backend finds fused structure only as composites: a bare decomposition reaches a row or
    activation kernel through `raise_composites`, as it does on the user's path.
    """
    from omnitensor.backend.registry import backend_passes
    from omnitensor.optimizer.pipeline import optimize_for_backend

    return backend.compile(optimize_for_backend(fn, backend, passes=backend_passes("cpu")))


@pytest.fixture(scope="session")
def backend() -> CpuBackend:
    """One backend for the session (creating it applies the thread settings)."""
    return CpuBackend()


@pytest.fixture
def compile_optimized(backend: CpuBackend) -> Callable[[Function], CpuExecutable]:
    """``compile_optimized(fn)``: the user's path (pipeline, then compile) on `backend`."""
    return lambda fn: _compile_optimized(backend, fn)


def _assert_qmatmul_close(got: np.ndarray, want: np.ndarray) -> None:
    from omnitensor.ir.opdef import get_op

    # few activation rows are multiplied as int16-quantized integers: the op's NMSE budget
    err = float(np.sum((got - want) ** 2) / max(float(np.sum(want.astype(np.float64) ** 2)), 1e-30))
    assert err <= get_op("qmatmul").nmse, f"NMSE {err:.2e} over the qmatmul budget"
    scale = float(np.abs(want).max())
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale)


@pytest.fixture
def assert_qmatmul_close() -> Callable[[np.ndarray, np.ndarray], None]:
    """``assert_qmatmul_close(got, want)``: within qmatmul's declared precision."""
    return _assert_qmatmul_close


@pytest.fixture
def plan_labels(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The step labels of every plan the test runs (`Plan.labels`, in run order)."""
    from typing import Any

    from omnitensor_backend_cpu import plan as cpu_plan

    labels: list[str] = []
    original = cpu_plan.Plan.run

    def run(plan: Any, *args: Any, **kwargs: Any) -> Any:
        labels.extend(plan.labels)
        return original(plan, *args, **kwargs)

    monkeypatch.setattr(cpu_plan.Plan, "run", run)
    return labels
