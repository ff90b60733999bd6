"""Skips for the offline kernel checks (they need nvcc, not a GPU) and a recording backend."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from omnitensor.backend.contract import Executable
from omnitensor.backend.null import NullBackend, NullExecutable
from omnitensor.ir.interpret import evaluate
from omnitensor_backend_cuda.nvcc import nvcc_path


@pytest.fixture(scope="session")
def nvcc() -> str:
    """Path of nvcc, or a skip naming why the kernel checks cannot run."""
    path = nvcc_path()
    if path is None:
        pytest.skip("nvcc (CUDA toolkit) is not on PATH: CUDA C kernels cannot be compiled here")
    return path


class Recorder(NullBackend):
    """Records every compiled function (as a backend receives it) and runs it on the reference."""

    def run(self, executable: Executable, inputs: Sequence[Any], *,
            donated: frozenset[int] = frozenset()) -> list[Any]:
        assert isinstance(executable, NullExecutable)
        self.runs.append((executable, [np.array(i) for i in inputs], donated))
        return list(evaluate(executable.function, [np.asarray(i) for i in inputs]))


@pytest.fixture(scope="session")
def recorder_type() -> type[Recorder]:
    """The recording backend class (tensors go to an instance with ``.to(backend)``)."""
    return Recorder
