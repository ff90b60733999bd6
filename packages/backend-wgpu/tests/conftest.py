"""One wgpu backend per test session (lavapipe is slow to start); skips when no adapter."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def backend() -> Iterator[Any]:
    """The session's `WgpuBackend` (created once), or a skip naming why wgpu cannot run."""
    from omnitensor_backend_wgpu import plugin

    reason = plugin._probe()
    if reason is not None:
        pytest.skip(f"wgpu unavailable: {reason}")
    from omnitensor_backend_wgpu.backend import WgpuBackend

    found = plugin._adapter()
    assert not isinstance(found, str)
    yield WgpuBackend(*found)
