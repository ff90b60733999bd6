"""Hook implementations of the ``cpu`` backend: light on purpose (discovery imports this).

Nothing here imports numba or the backend module; the probe only asks whether numba is
installed, and the factory does the heavy work on first use.
"""

from __future__ import annotations

import importlib.util
import os

from omnitensor.backend import Backend, BackendSpec, hookimpl

__all__ = ["omnitensor_register_backends"]

#: The backend contract version this distribution implements (a literal on purpose: the core
#: compares it with its own `CONTRACT_VERSION`).
CONTRACT = 1


def _probe() -> str | None:
    for module in ("numba", "scipy"):
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
