"""Plugin discovery, backend availability and selection (DESIGN §5).

Entry points of the group ``omnitensor.backends`` are loaded one by one at first use, never at
import, and never through pluggy's ``load_setuptools_entrypoints`` (which stops at the first
failure): every failure is caught here, once, and kept as the reason a plugin is unavailable.
The backend is chosen by ``OMNITENSOR_BACKEND`` (read at each unscoped use), or for a scope by
`use_backend`. The hooks themselves are documented in `hookspecs`. Around this module:
`loading` imports plugins and claims names, `isolation` runs plugin code (nothing it raises or
prints escapes, probes time out), `rules` checks what plugins hand back, `records` holds the
plain records and `messages` the errors.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import importlib.metadata as metadata
import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..errors import BackendNotInstalledError, BackendUnavailableError, PluginError
from .contract import Backend
from .hookspecs import BackendSpec, CommunicatorSpec, FunctionalAlternative
from .isolation import PluginFailure, call_plugin, probe_timeout
from .loading import NO_IMPL as _NO_IMPL
from .loading import PluginLoader, env_names
from .messages import INSTALL_HINT, not_installed, unavailable
from .records import BackendEntry as _Entry
from .records import BackendInfo
from .records import PluginRecord as _Plugin
from .rules import (
    check_backend,
    distribution_for,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "BackendInfo",
    "CommunicatorEntry",
    "backend_passes",
    "communicator_entries",
    "current_backend_name",
    "functional_alternatives",
    "get_backend",
    "list_backends",
    "prepare_weight",
    "register_plugin",
    "reset",
    "use_backend",
]

logger = logging.getLogger(__name__)

#: The entry-point group every backend distribution declares.
ENTRY_POINT_GROUP: Final = "omnitensor.backends"

_SCOPE: contextvars.ContextVar[tuple[str, Backend] | None] = contextvars.ContextVar(
    "omnitensor_backend_scope", default=None
)


def _entry_points() -> list[metadata.EntryPoint]:
    """Entry points of the group, sorted by name for a stable load order."""
    return sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (e.name, e.value))


def _distribution_of(ep: metadata.EntryPoint) -> tuple[str | None, str | None]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return None, None
    return dist.metadata["Name"], dist.version


class _Registry(PluginLoader):
    """All discovery and selection state; one per process (`_REGISTRY`), rebuilt by `reset`.

    Loading plugins and claiming names is `loading.PluginLoader`'s part; this class adds
    availability, selection, instances and the lazily collected hooks.
    """

    def __init__(self, *, entry_points: bool = True) -> None:
        # NOTE: through lambdas, so that tests that replace the module functions are seen
        super().__init__(entry_points=entry_points,
                         find_entry_points=lambda: _entry_points(),
                         distribution_of=lambda ep: _distribution_of(ep))
        self._instances: dict[str, Backend] = {}
        self._resolved: dict[str, str] = {}
        self._functionals: list[FunctionalAlternative] | None = None
        self._passes: dict[str, list[Any]] = {}
        self._communicators: list[CommunicatorEntry] | None = None

    def register_object(self, obj: object, name: str, distribution: str | None) -> None:
        """Register an in-process plugin (tests, notebooks) exactly like an entry point."""
        self.discover()
        with self._lock:
            if name in self._plugins:
                raise PluginError(
                    f"register_plugin: name {name!r} is already registered; pick another name",
                    plugin=name,
                )
            where = getattr(obj, "__name__", None) or f"{type(obj).__module__}.{type(obj).__name__}"
            plugin = _Plugin(name, f"in-process {where}", distribution, None)
            if not self._disabled(plugin):
                self._register(plugin, obj)
            self._resolved.clear()
            self._functionals = None
            self._passes.clear()
            self._communicators = None

    # --- availability -----------------------------------------------------------------------

    def availability(self, entry: _Entry) -> str | None:
        """None when `entry` can be selected, else the reason (probes run once, lazily)."""
        if entry.plugin.error is not None:
            return entry.plugin.error
        if entry.reason is not None:
            return entry.reason
        if entry.spec is None:
            return "registered no backend"
        if not entry.probed:
            with self._lock:
                entry.probe_reason = self._probe(entry, entry.spec)
                entry.probed = True
        return entry.probe_reason

    def _probe(self, entry: _Entry, spec: BackendSpec) -> str | None:
        """Run the probe and the priority callable, each under `isolation.probe_timeout`."""
        timeout = probe_timeout()
        try:
            reason = call_plugin(spec.probe, timeout=timeout) if spec.probe is not None else None
        except PluginFailure as failure:
            if failure.timed_out:
                logger.warning("backend %r: probe %s", entry.name, failure.reason)
            return f"probe failed: {failure.reason}"
        if reason is not None:
            return str(reason)
        try:
            priority = (call_plugin(spec.priority, timeout=timeout) if callable(spec.priority)
                        else spec.priority)
            if isinstance(priority, bool) or not isinstance(priority, int):
                raise PluginFailure(f"returned {priority!r} (expected an int)")
            entry.priority = priority
        except PluginFailure as failure:
            return f"priority failed: {failure.reason}"
        return None

    # --- selection --------------------------------------------------------------------------

    def select(self, names: Sequence[str], source: str) -> str:
        """The first usable backend of `names` (an ordered preference), or raise."""
        self.discover()
        with self._lock:
            failures: list[tuple[str, str | None]] = []
            for asked in names:
                # names match case-insensitively: OMNITENSOR_BACKEND=CPU means cpu
                name = asked if asked in self._entries else next(
                    (n for n in self._entries if n.lower() == asked.lower()), asked)
                entry = self._entries.get(name)
                if entry is None:
                    failures.append((name, None))
                    continue
                reason = self.availability(entry)
                if reason is None:
                    return name
                failures.append((name, reason))
            if len(failures) == 1:
                name, reason = failures[0]
                if reason is None:
                    raise not_installed(name, source, self._entries)
                raise unavailable(name, reason, source)
            parts = [
                f"{n}: " + (r if r is not None else f"not installed (pip install "
                            f"{distribution_for(n)})")
                for n, r in failures
            ]
            error = (
                BackendNotInstalledError
                if all(r is None for _, r in failures)
                else BackendUnavailableError
            )
            raise error(
                f"{source}none of the backends {list(names)} can run here ({'; '.join(parts)}); "
                f"run `omnitensor backends` to see what is usable",
                backend=names[0] if names else None,
            )

    def default(self) -> str:
        """The highest-priority available backend, or raise naming what to install."""
        self.discover()
        with self._lock:
            usable = []
            reasons = []
            for name, entry in self._entries.items():
                reason = self.availability(entry)
                if reason is None:
                    usable.append((entry.priority or 0, name))
                else:
                    reasons.append(f"{name}: {reason}")
            if usable:
                # Highest priority first; ties go to the alphabetically first name (stable).
                usable.sort(key=lambda item: (-item[0], item[1]))
                return usable[0][1]
            if not self._entries:
                raise BackendNotInstalledError(
                    f"no omnitensor backend is installed; {INSTALL_HINT}"
                )
            raise BackendUnavailableError(
                f"no installed omnitensor backend can run here ({'; '.join(reasons)}); "
                f"{INSTALL_HINT}"
            )

    def resolve_env(self) -> str:
        """The backend ``OMNITENSOR_BACKEND`` selects now; logged once per distinct value."""
        raw = os.environ.get("OMNITENSOR_BACKEND", "")
        cached = self._resolved.get(raw)
        if cached is not None:
            return cached
        with self._lock:
            names = env_names("OMNITENSOR_BACKEND")
            if names:
                name = self.select(names, "OMNITENSOR_BACKEND: ")
                why = f"OMNITENSOR_BACKEND={raw.strip()!r}"
            else:
                name = self.default()
                ranked = sorted(
                    (e.priority or 0, n) for n, e in self._entries.items()
                    if self.availability(e) is None
                )
                why = "highest priority available: " + ", ".join(
                    f"{n}={p}" for p, n in reversed(ranked)
                ) + "; set OMNITENSOR_BACKEND to choose"
            if raw not in self._resolved:
                # the choice is news only at INFO; a better backend that cannot run is a warning
                logger.info("using backend %r (%s)", name, why)
                chosen = self._entries[name].priority or 0
                for other, entry in sorted(self._entries.items()):
                    declared = entry.spec.priority if entry.spec is not None else None
                    if names or not isinstance(declared, int) or declared <= chosen:
                        continue  # an explicit choice, or not a better backend
                    reason = self.availability(entry)
                    if reason is not None:
                        logger.warning("backend %r (priority %d) cannot run here (%s); using "
                                       "%r", other, declared, reason, name)
            self._resolved[raw] = name
            return name

    def instance(self, name: str) -> Backend:
        """The cached instance of backend `name` (factory + wrap hooks on first use)."""
        backend = self._instances.get(name)
        if backend is not None:
            return backend
        with self._lock:
            if name in self._instances:
                return self._instances[name]
            entry = self._entries[name]
            assert entry.spec is not None  # callers checked availability
            try:
                created = check_backend(call_plugin(entry.spec.factory), name)
            except PluginFailure as failure:
                # NOTE: the backend is unusable from now on; unscoped selection moves on
                entry.reason = f"factory failed: {failure.reason}"
                self._resolved.clear()
                raise unavailable(name, entry.reason, "") from failure
            backend = self._wrap(created)
            self._instances[name] = backend
            return backend

    def default_instance(self) -> Backend:
        """The unscoped backend; when its factory fails, the next of the order takes over.

        The failed backend keeps the factory's failure as its reason (``omnitensor backends``
        shows it) and the switch is logged as a warning naming both backends.
        """
        tried: list[str] = []
        while True:
            name = self.resolve_env()
            try:
                return self.instance(name)
            except BackendUnavailableError as error:
                if name in tried or self._entries[name].reason is None:
                    raise
                tried.append(name)
                try:
                    after = self.resolve_env()
                except BackendUnavailableError:
                    raise error from None
                logger.warning("backend %r could not be created (%s); using %r, the next "
                               "backend of the order", name, self._entries[name].reason, after)

    def _wrap(self, backend: Backend) -> Backend:
        for plugin in self._active_plugins():
            try:
                wrapped = self._call_one(plugin, "omnitensor_wrap_backend", backend=backend)
                if wrapped is _NO_IMPL or wrapped is None:
                    continue
                wrapped = check_backend(wrapped, backend.name)
            except PluginFailure as failure:
                self._hook_failed(plugin, "omnitensor_wrap_backend", failure.reason)
                continue
            backend = wrapped
        return backend

    # --- other hooks ------------------------------------------------------------------------

    def functional_alternatives(self) -> list[FunctionalAlternative]:
        """Every alternative from active plugins (collected once)."""
        with self._lock:
            if self._functionals is None:
                found: list[FunctionalAlternative] = []
                for plugin in self._active_plugins():
                    try:
                        items = self._call_one(plugin, "omnitensor_register_functionals")
                        if items is _NO_IMPL:
                            continue
                        if not isinstance(items, list | tuple) or not all(
                                isinstance(i, FunctionalAlternative) for i in items):
                            raise PluginFailure(f"returned {items!r:.80} (expected a list of "
                                                "FunctionalAlternative)")
                    except PluginFailure as failure:
                        self._hook_failed(plugin, "omnitensor_register_functionals",
                                          failure.reason)
                        continue
                    found.extend(items)
                self._functionals = found
            return list(self._functionals)

    def communicators(self) -> list[CommunicatorEntry]:
        """Every communicator spec of active plugins, with its static reason (collected once)."""
        from .communicators import COMMUNICATOR_CONTRACT_VERSION

        with self._lock:
            if self._communicators is None:
                found: list[CommunicatorEntry] = []
                for plugin in self._active_plugins():
                    try:
                        items = self._call_one(plugin, "omnitensor_register_communicators")
                        if items is _NO_IMPL:
                            continue
                        if not isinstance(items, list | tuple) or not all(
                                isinstance(i, CommunicatorSpec) for i in items):
                            raise PluginFailure(f"returned {items!r:.80} (expected a list of "
                                                "CommunicatorSpec)")
                    except PluginFailure as failure:
                        self._hook_failed(plugin, "omnitensor_register_communicators",
                                          failure.reason)
                        found.append(CommunicatorEntry(plugin.name, plugin.name, None,
                                                       plugin.distribution, plugin.error))
                        continue
                    for spec in items:
                        reason = None
                        if spec.contract_version != COMMUNICATOR_CONTRACT_VERSION:
                            remedy = ("upgrade omnitensor" if spec.contract_version
                                      > COMMUNICATOR_CONTRACT_VERSION else
                                      f"upgrade {spec.distribution or plugin.distribution}")
                            reason = (f"incompatible communicator contract (got version "
                                      f"{spec.contract_version}, expected "
                                      f"{COMMUNICATOR_CONTRACT_VERSION} by omnitensor); {remedy}")
                        if any(e.name == spec.name for e in found):
                            reason = f"name {spec.name!r} already registered by another plugin"
                        found.append(CommunicatorEntry(
                            spec.name, plugin.name, spec,
                            spec.distribution or plugin.distribution, reason))
                self._communicators = found
            return list(self._communicators)

    def passes(self, backend_name: str) -> list[Any]:
        """Passes contributed for `backend_name` (collected once per name)."""
        with self._lock:
            if backend_name not in self._passes:
                found: list[Any] = []
                for plugin in self._active_plugins():
                    try:
                        items = self._call_one(
                            plugin, "omnitensor_register_passes", backend_name=backend_name
                        )
                        if items is _NO_IMPL:
                            continue
                        if not isinstance(items, list | tuple):
                            raise PluginFailure(f"returned {items!r:.80} (expected a list)")
                        found.extend(items)
                    except PluginFailure as failure:
                        self._hook_failed(plugin, "omnitensor_register_passes", failure.reason)
                self._passes[backend_name] = found
            return list(self._passes[backend_name])

    def prepare_weight(self, backend: Backend, name: str, array: Any, type: Any) -> Any | None:
        """First non-None `omnitensor_prepare_weight` result, in plugin load order."""
        for plugin in self._active_plugins():
            try:
                result = self._call_one(
                    plugin, "omnitensor_prepare_weight",
                    backend=backend, name=name, array=array, type=type,
                )
            except PluginFailure as failure:
                raise PluginError(
                    f"{name}: omnitensor_prepare_weight of plugin {plugin.name!r} failed "
                    f"({failure.reason}); fix or disable it with OMNITENSOR_DISABLE_PLUGINS",
                    plugin=plugin.name,
                ) from failure
            if result is not _NO_IMPL and result is not None:
                return result
        return None

    # --- listing ----------------------------------------------------------------------------

    def infos(self) -> list[BackendInfo]:
        """Every backend and every failed plugin, with availability (runs the probes)."""
        self.discover()
        try:
            selected: str | None = self.resolve_env()
        except BackendUnavailableError:
            selected = None
        rows = []
        for entry in [*self._entries.values(), *self._shadowed]:
            reason = entry.reason if entry in self._shadowed else self.availability(entry)
            devices: Mapping[str, Any] | Sequence[str] = {}
            if reason is None and entry.spec is not None and entry.spec.devices is not None:
                try:
                    devices = call_plugin(entry.spec.devices, timeout=probe_timeout())
                except PluginFailure as failure:
                    devices = {"error": failure.reason}
            rows.append(BackendInfo(
                name=entry.name,
                plugin=entry.plugin.name,
                value=entry.plugin.value,
                distribution=entry.distribution,
                version=entry.plugin.version,
                contract_version=(
                    entry.spec.contract_version if entry.spec else entry.plugin.contract_version
                ),
                contract_ok=entry.plugin.contract_ok,
                available=reason is None,
                reason=reason,
                priority=entry.priority if reason is None else None,
                devices=devices,
                selected=reason is None and entry.name == selected
                and entry not in self._shadowed,
            ))
        return rows

    def close(self) -> None:
        """Close every created backend (errors are logged, never raised)."""
        for name, backend in list(self._instances.items()):
            try:
                call_plugin(backend.close)
            except PluginFailure as failure:
                logger.error("closing backend %r failed: %s", name, failure.reason)
        self._instances.clear()


@dataclass(frozen=True)
class CommunicatorEntry:
    """A communicator found by discovery (`communicators` module reads these)."""

    name: str
    plugin: str
    spec: CommunicatorSpec | None
    distribution: str | None
    reason: str | None


def communicator_entries() -> list[CommunicatorEntry]:
    """Every communicator registered by compatible plugins (see ``backend.communicators``)."""
    return _registry().communicators()


_REGISTRY = _Registry()
_REGISTRY_LOCK = threading.Lock()


@atexit.register
def _close_at_exit() -> None:
    _REGISTRY.close()


def _registry() -> _Registry:
    return _REGISTRY


# --- public API ---------------------------------------------------------------------------


def get_backend(name: str | None = None) -> Backend:
    """The backend instance to run on.

    Args:
        name: a backend name; None means the current scope's backend (`use_backend`), else the
            one ``OMNITENSOR_BACKEND`` selects (read now, at use), else the highest-priority
            available one.

    Returns:
        The backend, created once per name (the factory's result passed through the
        ``omnitensor_wrap_backend`` hooks) and cached.

    Raises:
        BackendNotInstalledError: the backend (or any backend) is not installed; names the
            distribution to ``pip install``.
        BackendUnavailableError: installed but cannot run here (with the reason).
    """
    registry = _registry()
    if name is None:
        scoped = _SCOPE.get()
        if scoped is not None:
            return scoped[1]
        return registry.default_instance()
    return registry.instance(registry.select([name], ""))


@contextlib.contextmanager
def use_backend(name_or_backend: str | Backend) -> Iterator[Backend]:
    """Run a scope on another backend: ``with omnitensor.use_backend("ref"): ...``.

    The choice is context-local (`contextvars`): other threads and asyncio tasks are unaffected,
    and scopes nest. The backend is resolved on entry, so an unusable name fails at the ``with``.

    Args:
        name_or_backend: a backend name (``"ref"``) or a `Backend` instance.

    Yields:
        The backend in use inside the scope.

    Raises:
        BackendNotInstalledError, BackendUnavailableError: as `get_backend`.
    """
    if isinstance(name_or_backend, Backend):
        backend, name = name_or_backend, name_or_backend.name
    else:
        backend, name = get_backend(name_or_backend), name_or_backend
    token = _SCOPE.set((name, backend))
    try:
        yield backend
    finally:
        _SCOPE.reset(token)


def scoped_backend() -> Backend | None:
    """The backend of the innermost `use_backend` scope, or None outside any (never probes)."""
    scoped = _SCOPE.get()
    return None if scoped is None else scoped[1]


def current_backend_name() -> str:
    """Name of the backend `get_backend()` returns here (scope, else ``OMNITENSOR_BACKEND``).

    Raises:
        BackendNotInstalledError, BackendUnavailableError: when no backend can be selected.
    """
    scoped = _SCOPE.get()
    if scoped is not None:
        return scoped[0]
    return _registry().resolve_env()


def list_backends() -> list[BackendInfo]:
    """Every backend found (and every plugin that failed to load), with availability.

    Runs the probes (cheap) but creates no backend. Never raises for a broken plugin.
    """
    return _registry().infos()


def functional_alternatives() -> list[FunctionalAlternative]:
    """All functional alternatives registered by compatible plugins (DESIGN §6)."""
    return _registry().functional_alternatives()


def backend_passes(backend_name: str) -> list[Any]:
    """Optimizer passes plugins contribute for `backend_name` (opaque; see the hookspec)."""
    return _registry().passes(backend_name)


def prepare_weight(backend: Backend, name: str, array: Any, type: Any) -> Any | None:
    """Ask plugins to repack one parameter for `backend`; None when none does.

    Raises:
        PluginError: a plugin's ``omnitensor_prepare_weight`` raised (names the plugin).
    """
    return _registry().prepare_weight(backend, name, array, type)


def register_plugin(
    plugin: object, name: str, *, distribution: str | None = None
) -> None:
    """Register an in-process plugin (a module or an object with hookimpls), as an entry point.

    The same isolation applies: a plugin that fails is listed as unavailable, never raised.
    Used by tests and notebooks; `reset` forgets it.

    Args:
        plugin: a module or object holding ``@omnitensor.hookimpl`` functions.
        name: its plugin name (for ``OMNITENSOR_DISABLE_PLUGINS`` and listings).
        distribution: the distribution to name in listings, if any.

    Raises:
        PluginError: `name` is already registered.
    """
    _registry().register_object(plugin, name, distribution)


def reset(*, entry_points: bool = True) -> None:
    """Forget all discovery, selection and instances (for tests); created backends are closed.

    Args:
        entry_points: load installed entry points again on next use; False leaves only plugins
            registered later with `register_plugin` (tests of the registry itself).
    """
    global _REGISTRY
    with _REGISTRY_LOCK:
        old = _REGISTRY
        _REGISTRY = _Registry(entry_points=entry_points)
        old.close()
