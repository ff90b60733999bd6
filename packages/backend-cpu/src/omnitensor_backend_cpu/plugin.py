"""Hook implementations of the ``cpu`` backend: light on purpose (discovery imports this).

Nothing here imports numba or the backend module; the probe only asks whether numba is
installed, and the factory does the heavy work on first use.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from omnitensor.backend import Backend, BackendSpec, hookimpl

__all__ = ["omnitensor_prepare_weight", "omnitensor_register_backends"]

#: The backend contract version this distribution implements (a literal on purpose: the core
#: compares it with its own `CONTRACT_VERSION`).
CONTRACT = 1


def _probe() -> str | None:
    for module in ("numba",):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed; pip install omnitensor-backend-cpu pulls it in"
    return None


def _make() -> Backend:
    from .backend import CpuBackend

    return CpuBackend()


def _devices() -> dict[str, str]:
    return {"device": f"host CPU ({os.cpu_count()} logical cores)"}


@hookimpl
def omnitensor_register_backends() -> list[BackendSpec]:
    """Register ``cpu``: usable wherever numba imports; default priority 50."""
    return [
        BackendSpec(
            name="cpu",
            contract_version=CONTRACT,
            priority=50,
            probe=_probe,
            factory=_make,
            devices=_devices,
            distribution="omnitensor-backend-cpu",
        )
    ]


@hookimpl
def omnitensor_prepare_weight(backend: Backend, name: str, array: Any, type: Any) -> Any | None:
    """Repack quantized weights of the ``cpu`` backend once, at load (see `quant`, `half`).

    The plan finds the repacked form by the buffer's identity, so the buffer itself is returned
    unchanged (reference kernels such as `dequantize` keep reading the ggml blocks).
    """
    if getattr(backend, "name", None) != "cpu":
        return None
    fmt = getattr(type, "format", None)
    shape = tuple(getattr(type, "logical_shape", ()))
    if fmt is None or len(shape) != 2:
        return None
    from . import half, quant

    if fmt in half.FORMATS:  # computed on as stored
        if fmt == "f16" and not half.HALF_CONVERSION:  # rows needing the exact pass, once
            half.row_flags(array, fmt)
        return array
    if fmt not in quant.FORMATS:
        return None
    quant.packed_for(array, fmt, shape)
    return array
