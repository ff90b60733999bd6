"""Hook implementations of the ``ref`` backend: light on purpose (discovery imports this).

Nothing here imports the backend module; the factory does, on first use.
"""

from __future__ import annotations

from omnitensor.backend import Backend, BackendSpec, hookimpl

__all__ = ["omnitensor_register_backends"]

#: The backend contract version this distribution implements (a literal on purpose: the core
#: compares it with its own `CONTRACT_VERSION`).
CONTRACT = 1


def _make() -> Backend:
    from .backend import RefBackend

    return RefBackend()


@hookimpl
def omnitensor_register_backends() -> list[BackendSpec]:
    """Register ``ref``: always usable, lowest default priority (10)."""
    return [
        BackendSpec(
            name="ref",
            contract_version=CONTRACT,
            priority=10,
            probe=None,
            factory=_make,
            devices=lambda: {"device": "host (numpy reference kernels)"},
            distribution="omnitensor-backend-ref",
        )
    ]
