"""``omnitensor backends``: listing, selection, reasons, smoke computation, JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from omnitensor.backend import registry
from omnitensor.backend.contract import Executable
from omnitensor.backend.null import NullBackend, null_plugin
from omnitensor.cli.main import main
from omnitensor.ir.interpret import evaluate


class _Exact(NullBackend):
    """Null bookkeeping, real answers (through the reference interpreter)."""

    def run(self, executable: Executable, inputs: Sequence[Any], *,
            donated: frozenset[int] = frozenset()) -> list[Any]:
        return evaluate(executable.function, list(inputs))


@pytest.fixture
def plugins() -> None:
    exact = null_plugin("exact", priority=40, devices=lambda: {"device": "host"})
    exact.spec = type(exact.spec)(**{**exact.spec.__dict__, "factory": lambda: _Exact("exact")})
    registry.register_plugin(exact, "exact")
    registry.register_plugin(null_plugin("zeros", priority=30), "zeros")
    registry.register_plugin(null_plugin("gpu", priority=99, probe=lambda: "no GPU here"), "gpu")
    registry.register_plugin(null_plugin("old", contract_version=0), "old")


@pytest.mark.usefixtures("plugins")
def test_text_listing(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["backends"])
    out = capsys.readouterr().out
    assert status == 1  # the "zeros" backend's smoke computation mismatches
    assert "* exact" in out and "omnitensor-backend-exact" in out and "priority 40" in out
    assert "devices: device=host" in out
    assert "reason: no GPU here" in out
    assert "INCOMPATIBLE" in out and "got version 0" in out
    assert "smoke: ok" in out and "smoke: mismatch" in out
    assert "selected: exact" in out


@pytest.mark.usefixtures("plugins")
def test_json_listing(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMNITENSOR_BACKEND", "gpu,exact")
    main(["backends", "--json"])
    doc = json.loads(capsys.readouterr().out)
    rows = {row["name"]: row for row in doc["backends"]}
    assert doc["selected"] == "exact" and rows["exact"]["selected"]
    assert doc["OMNITENSOR_BACKEND"] == "gpu,exact"
    assert rows["exact"]["smoke"]["status"] == "ok"
    assert rows["zeros"]["smoke"]["status"] == "mismatch"
    assert rows["gpu"]["available"] is False and rows["gpu"]["smoke"] is None
    assert rows["old"]["contract_ok"] is False


def test_no_backend(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["backends", "--no-smoke"]) == 1
    out = capsys.readouterr().out
    assert "no backend entry point found" in out
    assert "pip install omnitensor-backend-cpu" in out


def test_unknown_selection_is_reported(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    registry.register_plugin(null_plugin("exact"), "exact")
    monkeypatch.setenv("OMNITENSOR_BACKEND", "exakt")
    assert main(["backends", "--no-smoke"]) == 1
    assert "did you mean 'exact'" in capsys.readouterr().out
