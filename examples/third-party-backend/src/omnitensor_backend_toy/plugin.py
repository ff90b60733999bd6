"""Entry point module of the ``toy`` backend: hook implementations only, nothing heavy."""

from __future__ import annotations

from omnitensor.backend import Backend, BackendSpec, hookimpl


def _make() -> Backend:
    from .backend import ToyBackend  # imported on first use, not at discovery

    return ToyBackend()


@hookimpl
def omnitensor_register_backends() -> list[BackendSpec]:
    """Register ``toy`` (priority 1: only used when asked for by name)."""
    return [
        BackendSpec(
            name="toy",
            contract_version=1,  # the omnitensor backend contract this code was written for
            priority=1,
            probe=lambda: None,  # always usable: it only needs numpy
            factory=_make,
            distribution="omnitensor-backend-toy",
        )
    ]
