"""The rules a plugin's declarations and results must follow before the core uses them.

`check_specs` (what ``omnitensor_register_backends`` returned), `reserved_name_owner` (the
first-party names ``ref``, ``cpu``, ``cuda``, ``wgpu`` belong to their own distributions) and
`check_backend` (a factory's result honours the `Backend` contract). Each returns or raises a
one-line reason; `registry` records it as the backend's reason to be unavailable.
"""

from __future__ import annotations

from typing import Any, Final

from .contract import Backend, Capabilities
from .hookspecs import BackendSpec
from .isolation import PluginFailure, call_plugin

__all__ = ["FIRST_PARTY", "check_backend", "check_specs", "distribution_for",
           "reserved_name_owner"]

#: Backend names that belong to this project's own distributions (``omnitensor-backend-<name>``).
FIRST_PARTY: Final = ("cpu", "cuda", "ref", "wgpu")
#: Methods a backend must have, callable (the abstract methods of the contract).
_REQUIRED: Final = ("capabilities", "upload", "download", "compile", "run", "supports", "check",
                    "close")


def distribution_for(name: str) -> str:
    """The conventional distribution name of backend `name` (``omnitensor-backend-<name>``)."""
    return f"omnitensor-backend-{name}"


def check_specs(result: Any) -> list[BackendSpec]:
    """The specs a plugin returned, or TypeError naming what came back instead."""
    if not isinstance(result, list | tuple) or not all(
            isinstance(s, BackendSpec) for s in result):
        raise TypeError(f"returned {result!r:.80} (expected a list of omnitensor BackendSpec)")
    for spec in result:
        if not isinstance(spec.name, str) or not spec.name or not callable(spec.factory):
            raise TypeError(f"returned a BackendSpec with name {spec.name!r} and factory "
                            f"{spec.factory!r:.40} (expected a non-empty name and a callable)")
    return list(result)


def reserved_name_owner(name: str, distribution: str | None, *, in_process: bool) -> str | None:
    """The distribution that owns `name` when a plugin of `distribution` may not take it.

    First-party names are reserved for their own distribution. Plugins registered in-process
    (`register_plugin`, tests and notebooks) are an explicit choice and may use any name.
    """
    if in_process or name not in FIRST_PARTY:
        return None
    owner = distribution_for(name)
    normalized = (distribution or "").lower().replace("_", "-")
    return None if normalized == owner else owner


def check_backend(created: Any, name: str) -> Backend:
    """`created` if it honours the `Backend` contract, else PluginFailure with the reason.

    Checks the type, the ``name`` attribute, that every contract method is callable, and that
    `capabilities()` (called isolated) returns a `Capabilities`.
    """
    if not isinstance(created, Backend):
        raise PluginFailure(f"factory returned {type(created).__name__} (expected an "
                            "omnitensor.backend.Backend)")
    if not isinstance(getattr(created, "name", None), str) or not created.name:
        raise PluginFailure(f"factory returned a backend whose name is {created.name!r} "
                            "(expected a non-empty string)")
    missing = [m for m in _REQUIRED if not callable(getattr(created, m, None))]
    if missing:
        raise PluginFailure(f"factory returned a backend without callable {missing}")
    caps = call_plugin(created.capabilities)
    if not isinstance(caps, Capabilities):
        raise PluginFailure(f"capabilities() of backend {name!r} returned "
                            f"{type(caps).__name__} (expected omnitensor.backend.Capabilities)")
    return created
