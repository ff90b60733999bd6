"""Shared helpers of the cpu backend's tests: a backend instance and small program builders."""

from __future__ import annotations

import os

import pytest

# NOTE: the kernels compute the same at every size; small cases must reach them too.
os.environ.setdefault("OMNITENSOR_CPU_KERNEL_MIN_ELEMENTS", "0")

from omnitensor_backend_cpu.backend import CpuBackend


@pytest.fixture(scope="session")
def backend() -> CpuBackend:
    """One backend for the session (creating it applies the thread settings)."""
    return CpuBackend()
