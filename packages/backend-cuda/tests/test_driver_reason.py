"""The reason `omnitensor backends` gives when CUDA reports an insufficient driver."""

from __future__ import annotations

import ctypes.util

import pytest

from omnitensor_backend_cuda.plugin import _explain

ERROR = "CUDARuntimeError: cudaErrorInsufficientDriver: CUDA driver version is insufficient"


def test_no_driver_at_all_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    assert _explain(ERROR).startswith("this machine has no NVIDIA driver")


def test_an_old_driver_says_update_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: "libcuda.so.1")
    assert "older than this CUDA runtime" in _explain(ERROR)
    assert _explain("cudaErrorNoDevice: no device") == "cudaErrorNoDevice: no device"
