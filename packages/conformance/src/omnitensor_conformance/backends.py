"""Finding the backend under test from ``--omnitensor-backend``.

A plain name (``cpu``) goes through the core's registry, exactly as users select backends, so
the suite names no backend itself. ``package.module:attr`` imports a `Backend` subclass or
factory directly: for a backend under development that is not installed as a plugin yet (and
for the suite's own deliberately wrong test backends).
"""

from __future__ import annotations

import importlib
from typing import Any

from omnitensor.backend.contract import Backend
from omnitensor.errors import OmnitensorError

__all__ = ["resolve_backend"]


def resolve_backend(spec: str) -> Backend:
    """The backend named by `spec` (a registry name or ``module:attr``).

    Raises:
        OmnitensorError: when `spec` names nothing usable (the registry's own errors, such as
            `BackendNotInstalledError`, pass through with their remedies).
    """
    if ":" in spec:
        module_name, _, attr = spec.partition(":")
        try:
            target: Any = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise OmnitensorError(
                f"conformance: cannot import backend {spec!r} ({exc}); expected "
                f"'package.module:BackendClassOrFactory'"
            ) from exc
        backend = target() if callable(target) and not isinstance(target, Backend) else target
        if not isinstance(backend, Backend):
            raise OmnitensorError(
                f"conformance: {spec!r} gave {type(backend).__name__} (expected an "
                f"omnitensor.backend.contract.Backend)"
            )
        return backend
    try:
        from omnitensor.backend.registry import get_backend
    except ImportError as exc:  # an older core without discovery
        raise OmnitensorError(
            f"conformance: this omnitensor has no backend registry ({exc}); pass "
            f"--omnitensor-backend=module:BackendClass"
        ) from exc
    return get_backend(spec)
