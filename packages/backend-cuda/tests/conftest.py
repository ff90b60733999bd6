"""Skips for the offline kernel checks: they need nvcc (the CUDA toolkit), not a GPU."""

from __future__ import annotations

import pytest

from omnitensor_backend_cuda.nvcc import nvcc_path


@pytest.fixture(scope="session")
def nvcc() -> str:
    """Path of nvcc, or a skip naming why the kernel checks cannot run."""
    path = nvcc_path()
    if path is None:
        pytest.skip("nvcc (CUDA toolkit) is not on PATH: CUDA C kernels cannot be compiled here")
    return path
