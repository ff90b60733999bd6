"""Shared helpers of the cpu backend's tests: a backend instance and small program builders."""

from __future__ import annotations

import os
from collections.abc import Callable

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
