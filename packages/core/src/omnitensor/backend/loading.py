"""Loading plugins: entry points one by one, hook validation, the contract check, name claims.

`PluginLoader` is the part of the registry that turns entry points (or in-process objects) into
`records.PluginRecord` and `records.BackendEntry` rows: each import and hook call runs through
`isolation.call_plugin`, a plugin failing any step keeps the failure as its reason, the contract
version is checked before any other hook of the plugin can run, and backend names are claimed
first come, first served (first-party names only by their own distributions, `rules`).
Selection and the other hooks are `registry`'s.
"""

from __future__ import annotations

import difflib
import importlib.metadata as metadata
import logging
import os
import threading
from collections.abc import Callable
from typing import Any, Final

import pluggy

from .._logging import configure_logging
from . import hookspecs
from .contract import CONTRACT_VERSION
from .hookspecs import PROJECT_NAME
from .isolation import PluginFailure, call_plugin, describe
from .messages import contract_message
from .records import BackendEntry as _Entry
from .records import PluginRecord as _Plugin
from .rules import check_specs, reserved_name_owner

__all__ = ["NO_IMPL", "PluginLoader", "env_names"]

# NOTE: the registry's logger: one name to filter for everything about plugins and selection
logger = logging.getLogger("omnitensor.backend.registry")

#: What `PluginLoader._call_one` returns when the plugin does not implement the hook.
NO_IMPL: Final = object()
_NO_IMPL = NO_IMPL


def env_names(variable: str) -> list[str]:
    """The comma-separated names of an environment variable, stripped, empty ones dropped."""
    raw = os.environ.get(variable, "")
    return [part.strip() for part in raw.split(",") if part.strip()]


class PluginLoader:
    """Plugins and the backend names they claimed.

    Args:
        entry_points: load installed entry points (False: only in-process plugins, for tests).
        find_entry_points: lists the entry points of the group, in load order.
        distribution_of: an entry point's (distribution name, version), or (None, None).
    """

    def __init__(self, *, entry_points: bool,
                 find_entry_points: Callable[[], list[metadata.EntryPoint]],
                 distribution_of: Callable[[metadata.EntryPoint],
                                           tuple[str | None, str | None]]) -> None:
        self._use_entry_points = entry_points
        self._find_entry_points = find_entry_points
        self._distribution_of = distribution_of
        self._lock = threading.RLock()
        self._discovered = False
        self._pm = pluggy.PluginManager(PROJECT_NAME)
        self._pm.add_hookspecs(hookspecs)
        self._plugins: dict[str, _Plugin] = {}
        self._entries: dict[str, _Entry] = {}
        self._shadowed: list[_Entry] = []

    def discover(self) -> None:
        """Load every entry point once (isolated); cheap after the first call."""
        if self._discovered:
            return
        with self._lock:
            if not self._discovered:  # another thread may have finished while we waited
                configure_logging()
                if self._use_entry_points:
                    for ep in self._find_entry_points():
                        self._load_entry_point(ep)
                self._discovered = True

    def _load_entry_point(self, ep: metadata.EntryPoint) -> None:
        dist, version = self._distribution_of(ep)
        plugin = _Plugin(ep.name, ep.value, dist, version)
        if ep.name in self._plugins:
            other = self._plugins[ep.name]
            plugin.error = (
                f"entry point name {ep.name!r} is also used by {other.distribution or other.value}"
                f"; uninstall one of them"
            )
            self._shadowed.append(_Entry(ep.name, plugin, None, plugin.error))
            logger.error("plugin %r: %s", ep.name, plugin.error)
            return
        if self._disabled(plugin):
            return
        try:
            # NOTE: any import-time failure, SystemExit included, is the plugin's reason
            obj = call_plugin(ep.load)
        except PluginFailure as failure:
            plugin.error = f"import of {ep.value} failed: {failure.reason}"
            logger.info("plugin %r unavailable: %s", ep.name, plugin.error)
            self._add_failed(plugin)
            return
        self._register(plugin, obj)

    def _disabled(self, plugin: _Plugin) -> bool:
        if plugin.name not in env_names("OMNITENSOR_DISABLE_PLUGINS"):
            return False
        plugin.error = "disabled by OMNITENSOR_DISABLE_PLUGINS"
        self._add_failed(plugin)
        return True

    def _add_failed(self, plugin: _Plugin) -> None:
        """Record a plugin that never registered backends; its entry-point name stands for one."""
        self._plugins[plugin.name] = plugin
        if plugin.name not in self._entries:
            self._entries[plugin.name] = _Entry(plugin.name, plugin, None)

    def _register(self, plugin: _Plugin, obj: object) -> None:
        plugin.obj = obj
        self._plugins[plugin.name] = plugin
        try:
            self._pm.register(obj, name=plugin.name)
        except Exception as exc:  # pluggy.PluginValidationError and friends
            plugin.error = f"does not follow the omnitensor hook specs: {describe(exc)}"
            plugin.obj = None
            self._add_failed(plugin)
            return
        callers = self._pm.get_hookcallers(obj) or []
        unknown = sorted(c.name for c in callers if c.spec is None)
        if unknown or not callers:
            known = [n for n in dir(hookspecs) if n.startswith("omnitensor_")]
            if unknown:
                close = difflib.get_close_matches(unknown[0], known, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                plugin.error = f"implements unknown hook(s) {unknown}{hint}"
            else:
                plugin.error = "has no @omnitensor.hookimpl functions (expected e.g. " + (
                    "omnitensor_register_backends)"
                )
            self._unregister(plugin)
            self._add_failed(plugin)
            return
        try:
            result = self._call_one(plugin, "omnitensor_register_backends")
            specs = [] if result is _NO_IMPL else check_specs(result)
        except (PluginFailure, TypeError) as exc:
            reason = exc.reason if isinstance(exc, PluginFailure) else str(exc)
            plugin.error = f"omnitensor_register_backends failed: {reason}"
            self._unregister(plugin)
            self._add_failed(plugin)
            return
        # NOTE: the contract check comes before any other hook of this plugin can run.
        for spec in specs:
            plugin.contract_version = spec.contract_version
            if spec.contract_version != CONTRACT_VERSION:
                plugin.contract_ok = False
                plugin.error = contract_message(spec, plugin.distribution)
        if not plugin.contract_ok:
            self._unregister(plugin)
        if not specs and plugin.error is not None:
            self._add_failed(plugin)
        for spec in specs:
            self._claim(plugin, _Entry(spec.name, plugin, spec))

    def _claim(self, plugin: _Plugin, entry: _Entry) -> None:
        """Give `entry` its name: first registrant wins; first-party names stay their owners'.

        A refused claim is kept (listed with its reason by `list_backends`) and logged as an
        error: two plugins fighting over a name is a broken installation.
        """
        name = entry.name
        owner = reserved_name_owner(name, entry.distribution,
                                    in_process=plugin.value.startswith("in-process "))
        if owner is not None:
            entry.reason = (f"name {name!r} is reserved for {owner}; plugin {plugin.name!r} "
                            f"({entry.distribution or plugin.value}) may not register it")
        elif name in self._entries and self._entries[name].plugin is not plugin:
            first = self._entries[name].plugin
            if first.error is not None and first.obj is None and self._entries[name].spec is None:
                # a placeholder of a plugin that failed to load under this entry-point name
                self._entries[name] = entry
                return
            entry.reason = (f"name {name!r} already registered by plugin {first.name!r} "
                            f"({first.distribution or first.value}); uninstall one of them")
        else:
            self._entries[name] = entry
            return
        self._shadowed.append(entry)
        logger.error("backend %r of plugin %r refused: %s", name, plugin.name, entry.reason)

    def _unregister(self, plugin: _Plugin) -> None:
        if plugin.obj is not None and self._pm.is_registered(plugin.obj):
            self._pm.unregister(plugin.obj)

    def _call_one(self, plugin: _Plugin, hook: str, **kwargs: Any) -> Any:
        """Call one plugin's implementation of `hook`, isolated (`isolation.call_plugin`).

        Raises:
            PluginFailure: the hook raised anything but KeyboardInterrupt.
        """
        caller = getattr(self._pm.hook, hook)
        for impl in caller.get_hookimpls():
            if impl.plugin_name == plugin.name:
                return call_plugin(impl.function, *(kwargs[arg] for arg in impl.argnames))
        return _NO_IMPL

    def _active_plugins(self) -> list[_Plugin]:
        self.discover()
        return [p for p in self._plugins.values() if p.active]

    def _hook_failed(self, plugin: _Plugin, hook: str, reason: str) -> None:
        plugin.error = f"{hook} failed: {reason}"
        logger.error("plugin %r disabled: %s", plugin.name, plugin.error)
        self._unregister(plugin)
