"""Fixtures for registry tests: a clean environment and a registry without installed plugins."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path

import pytest

from omnitensor.backend import registry

_VARS = ("OMNITENSOR_BACKEND", "OMNITENSOR_DISABLE_PLUGINS", "OMNITENSOR_LOG")


@pytest.fixture(autouse=True)
def clean_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No OMNITENSOR_* selection variables; a registry that loads no installed entry point."""
    for var in _VARS:
        monkeypatch.delenv(var, raising=False)
    registry.reset(entry_points=False)
    yield
    registry.reset()


@pytest.fixture
def fake_entry_points(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Callable[[dict[str, str]], None]:
    """Install fake entry points: ``{name: module source}``, each module importable from tmp_path.

    The registry is reset to load entry points again, and sees only these.
    """

    def install(modules: dict[str, str]) -> None:
        eps = []
        for name, source in modules.items():
            module = f"fake_plugin_{name}_{abs(hash(tmp_path)) % 10**8}"
            (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
            eps.append(metadata.EntryPoint(name, module, registry.ENTRY_POINT_GROUP))
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.setattr(registry, "_entry_points", lambda: eps)
        registry.reset()

    return install
