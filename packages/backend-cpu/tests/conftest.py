"""Shared helpers of the cpu backend's tests: a backend instance and small program builders."""

from __future__ import annotations

import pytest

from omnitensor_backend_cpu.backend import CpuBackend


@pytest.fixture(scope="session")
def backend() -> CpuBackend:
    """One backend for the session (creating it applies the thread settings)."""
    return CpuBackend()
