"""Hook implementations of the ``wgpu`` backend: light on purpose (discovery imports this).

The probe imports wgpu lazily and enumerates adapters once per process (cached); it never
creates a device. The factory creates the one device of the process.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

from omnitensor.backend import Backend, BackendSpec, hookimpl

__all__ = ["omnitensor_register_backends"]

#: The backend contract version this distribution implements (a literal on purpose).
CONTRACT = 1
_LAVAPIPE_ICD = "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json"


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Capture what native code writes to fd 2 meanwhile and log it at DEBUG.

    Vulkan loaders and drivers print to the process's stderr while adapters are enumerated
    (``error: XDG_RUNTIME_DIR is invalid or not set``, several times): that is noise in every
    omnitensor command, which probes wgpu to rank the backends even when it will not use it.
    """
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to redirect
        yield
        return
    with tempfile.TemporaryFile() as sink:
        sys.stderr.flush()
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            text = sink.read().decode("utf-8", "replace").strip()
            if text:
                logging.getLogger(__name__).debug("native output while probing: %s", text)


@functools.cache
def _adapter() -> tuple[Any, Any] | str:
    """(adapter, info) of the best adapter, or the reason there is none (cached)."""
    try:
        from ._compat import find_adapter
    except ImportError as exc:  # pragma: no cover - the package itself is broken
        return f"omnitensor_backend_wgpu cannot import: {exc}"
    try:
        with _quiet_stderr():
            return find_adapter()
    except ImportError as exc:
        return f"wgpu is not importable ({exc}); pip install wgpu"
    except RuntimeError as exc:
        hint = ""
        if not os.environ.get("VK_ICD_FILENAMES") and os.path.exists(_LAVAPIPE_ICD):
            hint = f"; for lavapipe set VK_ICD_FILENAMES={_LAVAPIPE_ICD}"
        return f"{exc}{hint}"


def _probe() -> str | None:
    found = _adapter()
    return found if isinstance(found, str) else None


def _priority() -> int:
    found = _adapter()
    if isinstance(found, str):
        return 0
    return 20 if found[1].software else 80


def _devices() -> dict[str, str]:
    found = _adapter()
    if isinstance(found, str):
        return {}
    info = found[1]
    return {"device": info.device, "api": info.backend, "type": info.adapter_type,
            "shader-f16": str(info.shader_f16)}


def _make() -> Backend:
    from .backend import WgpuBackend

    found = _adapter()
    if isinstance(found, str):
        from omnitensor.errors import BackendUnavailableError

        raise BackendUnavailableError(f"backend 'wgpu' cannot run: {found}", backend="wgpu")
    return WgpuBackend(*found)


@hookimpl
def omnitensor_register_backends() -> list[BackendSpec]:
    """Register ``wgpu``: priority 80 on a hardware adapter, 20 on a software one."""
    return [
        BackendSpec(
            name="wgpu",
            contract_version=CONTRACT,
            priority=_priority,
            probe=_probe,
            factory=_make,
            devices=_devices,
            distribution="omnitensor-backend-wgpu",
        )
    ]
