"""The one adapter around CuPy (untyped): import, device facts, kernels, strided views.

Everything CuPy-specific goes through here, so ``mypy --strict`` needs ``ignore_missing_imports``
for cupy only, and the probe can turn any CuPy failure into a one-line reason.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["as_strided", "device_facts", "import_cupy", "selected_device"]


def import_cupy() -> Any:
    """``import cupy`` (raises ImportError when no cupy-cuda1Nx wheel is installed)."""
    import cupy

    return cupy


def selected_device() -> int:
    """The device index from ``OMNITENSOR_CUDA_DEVICE`` (default 0)."""
    raw = os.environ.get("OMNITENSOR_CUDA_DEVICE", "0").strip() or "0"
    try:
        return int(raw)
    except ValueError:
        from omnitensor.errors import BackendUnavailableError

        raise BackendUnavailableError(
            f"cuda: OMNITENSOR_CUDA_DEVICE must be a device index (got {raw!r}, expected an "
            f"integer such as 0)", backend="cuda") from None


def device_facts(cupy: Any, index: int) -> dict[str, str]:
    """Name, memory and compute capability of device `index` (raises if there is none)."""
    count = cupy.cuda.runtime.getDeviceCount()
    if index >= count:
        raise RuntimeError(f"OMNITENSOR_CUDA_DEVICE={index} but only {count} device(s) exist")
    props = cupy.cuda.runtime.getDeviceProperties(index)
    name = props["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    return {"device": f"{index}: {name}",
            "memory": f"{props['totalGlobalMem'] / 2**30:.1f} GiB",
            "compute capability": f"{props['major']}.{props['minor']}",
            "cupy": str(cupy.__version__)}


def as_strided(cupy: Any, base: Any, shape: tuple[int, ...], strides: tuple[int, ...],
               offset: int) -> Any:
    """A zero-copy view of `base` (a flat or strided CuPy array) in element units."""
    item = base.dtype.itemsize
    flat = base.reshape(-1) if base.flags.c_contiguous else base
    start = flat[offset:] if offset >= 0 else flat
    return cupy.lib.stride_tricks.as_strided(start, shape, tuple(s * item for s in strides))
