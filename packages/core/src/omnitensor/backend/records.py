"""The registry's records: plugins, the backends they declared, and `list_backends` rows.

`PluginRecord`, `BackendEntry` and the public `BackendInfo` are plain data; `registry` fills
them in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .hookspecs import BackendSpec

__all__ = ["BackendEntry", "BackendInfo", "PluginRecord"]


@dataclass(frozen=True)
class BackendInfo:
    """One row of `list_backends`: what is installed and whether it can run.

    Attributes:
        name: the backend name (or the entry-point name of a plugin that failed to load).
        plugin: the entry-point (or in-process) name of the plugin providing it.
        value: what the entry point points at (``"omnitensor_backend_ref.plugin"``).
        distribution: the distribution providing it, when known.
        version: that distribution's version, when known.
        contract_version: the contract version the plugin declared (None if it never said).
        contract_ok: the declared version matches `CONTRACT_VERSION`.
        available: the backend can be selected here.
        reason: why it cannot (None when available).
        priority: its priority after the probe (None when unavailable).
        devices: facts from the spec's ``devices`` callable (empty when unavailable).
        selected: it is the backend unscoped code uses now (``OMNITENSOR_BACKEND`` or default).
    """

    name: str
    plugin: str
    value: str
    distribution: str | None
    version: str | None
    contract_version: int | None
    contract_ok: bool
    available: bool
    reason: str | None
    priority: int | None
    devices: Mapping[str, Any] | Sequence[str]
    selected: bool


@dataclass
class PluginRecord:
    """One plugin: where it comes from, the loaded object, and why it failed (if it did)."""

    name: str
    value: str
    distribution: str | None
    version: str | None
    obj: object | None = None
    error: str | None = None
    contract_ok: bool = True
    contract_version: int | None = None

    @property
    def active(self) -> bool:
        """Registered, loaded, compatible and not broken: its hooks may be called."""
        return self.obj is not None and self.error is None and self.contract_ok


@dataclass
class BackendEntry:
    """One backend name a plugin declared, with its probe result once probed."""

    name: str
    plugin: PluginRecord
    spec: BackendSpec | None
    reason: str | None = None  # static: set at registration or when the factory failed
    probed: bool = False
    probe_reason: str | None = None
    priority: int | None = None

    @property
    def distribution(self) -> str | None:
        """The spec's distribution, else the plugin's."""
        spec_dist = self.spec.distribution if self.spec is not None else None
        return spec_dist or self.plugin.distribution
