"""Running plugin code so that it cannot take the core down.

Every call into a plugin (entry-point import, hooks, probe, priority, factory, devices) goes
through `call_plugin`: anything it raises except `KeyboardInterrupt` (``SystemExit`` and
``GeneratorExit`` included) becomes a `PluginFailure` carrying a one-line reason, what it prints
goes to stderr (so ``omnitensor backends --json`` stays valid JSON), and with a timeout it runs
in a daemon thread that is abandoned when it does not return in time. Nothing here knows about
backends; `registry` decides what a failure means.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, Final, TypeVar

__all__ = ["DEFAULT_PROBE_TIMEOUT", "PluginFailure", "call_plugin", "describe", "probe_timeout"]

T = TypeVar("T")

#: Seconds a probe (or a priority callable) may take before its backend is unavailable.
DEFAULT_PROBE_TIMEOUT: Final = 10.0
_QUIET_LOCK = threading.RLock()


class PluginFailure(Exception):
    """A plugin call failed; `reason` says how (``"SystemExit: 3"``, ``"timed out after 10 s"``).

    Internal to the registry: it is turned into a backend's unavailability reason or into a
    `omnitensor.errors.PluginError`, never shown raw.
    """

    def __init__(self, reason: str, *, timed_out: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.timed_out = timed_out


def describe(exc: BaseException) -> str:
    """``"TypeName: message"`` (the type alone when the message is empty)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def probe_timeout() -> float:
    """``OMNITENSOR_PROBE_TIMEOUT`` in seconds (default `DEFAULT_PROBE_TIMEOUT`)."""
    raw = os.environ.get("OMNITENSOR_PROBE_TIMEOUT", "")
    try:
        value = float(raw) if raw.strip() else DEFAULT_PROBE_TIMEOUT
    except ValueError:
        return DEFAULT_PROBE_TIMEOUT
    return value if value > 0 else DEFAULT_PROBE_TIMEOUT


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    # NOTE: sys.stdout is process-wide; the lock keeps nested and concurrent plugin calls from
    # restoring each other's stream out of order.
    with _QUIET_LOCK, contextlib.redirect_stdout(sys.stderr):
        yield


def call_plugin(fn: Callable[..., T], *args: Any, timeout: float | None = None,
                **kwargs: Any) -> T:
    """Call plugin code `fn(*args, **kwargs)` in isolation.

    Args:
        fn: the plugin's callable.
        *args: its positional arguments.
        timeout: seconds to wait for it (None: no limit, run in this thread).
        **kwargs: its keyword arguments.

    Returns:
        What `fn` returned.

    Raises:
        PluginFailure: `fn` raised anything but KeyboardInterrupt, or ran past `timeout`.
        KeyboardInterrupt: passed through (the user asked to stop).
    """
    if timeout is None:
        with _stdout_to_stderr():
            try:
                return fn(*args, **kwargs)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # noqa: BLE001 - SystemExit at import must not exit
                raise PluginFailure(describe(exc)) from exc
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - reported to the waiting thread
            box["error"] = exc

    with _stdout_to_stderr():
        worker = threading.Thread(target=target, name=f"omnitensor-plugin-{fn!r:.40}",
                                  daemon=True)
        worker.start()
        worker.join(timeout)
    if worker.is_alive():
        raise PluginFailure(f"timed out after {timeout:g} s (set OMNITENSOR_PROBE_TIMEOUT to "
                            "wait longer)", timed_out=True)
    if "error" in box:
        error: BaseException = box["error"]
        if isinstance(error, KeyboardInterrupt):
            raise error
        raise PluginFailure(describe(error)) from error
    return box["value"]  # type: ignore[no-any-return]
