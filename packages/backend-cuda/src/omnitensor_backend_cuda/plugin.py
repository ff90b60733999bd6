"""Hook implementations of the ``cuda`` backend: light on purpose (discovery imports this).

Nothing here imports CuPy at module level. The probe imports it lazily, once, and turns every
failure (no wheel, no driver, no device) into "no CUDA device: <reason>"; the factory creates
the backend on ``OMNITENSOR_CUDA_DEVICE`` (default 0).
"""

from __future__ import annotations

import functools
from typing import Any

from omnitensor.backend import Backend, BackendSpec, hookimpl

__all__ = ["omnitensor_register_backends"]

#: The backend contract version this distribution implements (a literal on purpose).
CONTRACT = 1


@functools.cache
def _device() -> dict[str, str] | str:
    """Facts about the selected device, or the reason there is none (cached per process)."""
    try:
        from ._compat import device_facts, import_cupy, selected_device

        cupy = import_cupy()
    except ImportError as exc:
        return (f"no CUDA device: CuPy is not importable ({exc}); pip install "
                f"'omnitensor-backend-cuda[cuda12]' (or [cuda13])")
    try:
        index = selected_device()
        if not cupy.is_available():
            count = cupy.cuda.runtime.getDeviceCount()  # raises the driver's own reason
            return f"no CUDA device: cupy.is_available() is False ({count} device(s))"
        return device_facts(cupy, index)
    except Exception as exc:  # noqa: BLE001 - any CuPy/driver failure is the reason, never a crash
        return f"no CUDA device: {_explain(f'{type(exc).__name__}: {exc}')}"


def _explain(error: str) -> str:
    """CUDA's error with what it means here: "insufficient driver" is also "no driver at all"."""
    if "InsufficientDriver" not in error:
        return error
    import ctypes.util

    if ctypes.util.find_library("cuda") is None:
        return f"this machine has no NVIDIA driver (no libcuda; CUDA says {error})"
    return f"the NVIDIA driver is older than this CUDA runtime needs; update it ({error})"


def _probe() -> str | None:
    found = _device()
    return found if isinstance(found, str) else None


def _devices() -> dict[str, str]:
    found = _device()
    return {} if isinstance(found, str) else dict(found)


def _make() -> Backend:
    found = _device()
    if isinstance(found, str):
        from omnitensor.errors import BackendUnavailableError

        raise BackendUnavailableError(f"backend 'cuda' cannot run: {found}", backend="cuda")
    from .backend import CudaBackend

    return CudaBackend()


@hookimpl
def omnitensor_register_backends() -> list[BackendSpec]:
    """Register ``cuda``: priority 100 (the highest default) when a device is usable."""
    return [
        BackendSpec(
            name="cuda",
            contract_version=CONTRACT,
            priority=100,
            probe=_probe,
            factory=_make,
            devices=_devices,
            distribution="omnitensor-backend-cuda",
        )
    ]


def _reset_probe() -> Any:
    """Forget the cached probe (tests)."""
    _device.cache_clear()
