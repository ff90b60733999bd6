"""Plugins that cannot take the core down: SystemExit at import, hung probes, factories that
return junk, name squatting and printing plugins (issue #19), each with a fake plugin."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from importlib import metadata

import pytest

from omnitensor.backend import registry
from omnitensor.backend.null import NullBackend, null_plugin
from omnitensor.cli.main import main
from omnitensor.errors import BackendUnavailableError

Install = Callable[[dict[str, str]], None]


def _plugin(name: str, *, priority: int = 30, probe: str = "None", factory: str = "",
            prelude: str = "", backend: str | None = None) -> str:
    """Source of a fake plugin module registering backend `backend` (default: `name`)."""
    make = factory or f"lambda: NullBackend({backend or name!r})"
    return f"""
        {prelude}
        from omnitensor.backend import BackendSpec, hookimpl
        from omnitensor.backend.null import NullBackend

        def _probe():
            return {probe}

        @hookimpl
        def omnitensor_register_backends():
            return [BackendSpec(name={backend or name!r}, contract_version=1,
                                priority={priority}, probe=_probe, factory={make})]
    """


def test_system_exit_at_import_is_a_reason_not_an_exit(fake_entry_points: Install,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    fake_entry_points({"aexit": "raise SystemExit(3)\n", "good": _plugin("good")})
    monkeypatch.setenv("OMNITENSOR_BACKEND", "good")
    assert registry.get_backend().name == "good"  # the program is still running
    rows = {row.name: row for row in registry.list_backends()}
    assert not rows["aexit"].available
    assert "SystemExit: 3" in (rows["aexit"].reason or "")


def test_base_exception_in_hooks_and_probe_is_contained(fake_entry_points: Install) -> None:
    fake_entry_points({
        "hookexit": """
            from omnitensor.backend import hookimpl

            @hookimpl
            def omnitensor_register_backends():
                raise SystemExit("bye")
        """,
        "probeexit": _plugin("probeexit", priority=90,
                             probe="(_ for _ in ()).throw(GeneratorExit())"),
        "good": _plugin("good"),
    })
    assert registry.get_backend().name == "good"
    rows = {row.name: row for row in registry.list_backends()}
    assert "SystemExit: bye" in (rows["hookexit"].reason or "")
    assert "GeneratorExit" in (rows["probeexit"].reason or "")


def test_keyboard_interrupt_still_interrupts(fake_entry_points: Install) -> None:
    fake_entry_points({"ctrlc": "raise KeyboardInterrupt\n"})
    with pytest.raises(KeyboardInterrupt):
        registry.list_backends()


def test_hung_probe_times_out_with_the_reason(fake_entry_points: Install,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMNITENSOR_PROBE_TIMEOUT", "0.3")
    fake_entry_points({
        "hang": _plugin("hang", priority=99, probe="__import__('time').sleep(30)"),
        "good": _plugin("good"),
    })
    start = time.perf_counter()
    assert registry.get_backend().name == "good"
    rows = {row.name: row for row in registry.list_backends()}
    assert time.perf_counter() - start < 5
    assert "timed out after 0.3 s" in (rows["hang"].reason or "")
    assert "OMNITENSOR_PROBE_TIMEOUT" in (rows["hang"].reason or "")


@pytest.mark.parametrize("junk", ["object()", "None", "NullBackend('')",
                                  "type('B', (NullBackend,), {'capabilities': lambda s: 1})('x')"])
def test_factory_result_checked_and_next_backend_takes_over(
        fake_entry_points: Install, caplog: pytest.LogCaptureFixture, junk: str) -> None:
    fake_entry_points({"bad": _plugin("bad", priority=99, factory=f"lambda: {junk}"),
                       "good": _plugin("good", priority=10)})
    with caplog.at_level(logging.WARNING, logger="omnitensor.backend.registry"):
        assert registry.get_backend().name == "good"
        assert registry.get_backend().name == "good"  # and stays so, without retrying
    assert "backend 'bad' could not be created" in caplog.text
    assert "using 'good'" in caplog.text
    rows = {row.name: row for row in registry.list_backends()}
    assert "factory failed" in (rows["bad"].reason or "")
    with pytest.raises(BackendUnavailableError, match="factory failed"):
        registry.get_backend("bad")  # asked by name: no silent substitute


def test_factory_failure_with_nothing_left_raises(fake_entry_points: Install) -> None:
    fake_entry_points({"bad": _plugin("bad", factory="lambda: 42")})
    with pytest.raises(BackendUnavailableError, match="factory returned int"):
        registry.get_backend()


def test_first_party_names_are_reserved(fake_entry_points: Install,
                                        monkeypatch: pytest.MonkeyPatch,
                                        caplog: pytest.LogCaptureFixture) -> None:
    dists = {"aaa": "evil-backends", "cpu": "omnitensor-backend-cpu"}
    monkeypatch.setattr(registry, "_distribution_of",
                        lambda ep: (dists.get(ep.name), "1.0"))
    fake_entry_points({"aaa": _plugin("aaa", backend="cpu", priority=99),
                       "cpu": _plugin("cpu", priority=50)})
    with caplog.at_level(logging.ERROR, logger="omnitensor.backend.registry"):
        backend = registry.get_backend("cpu")
    assert registry._registry()._entries["cpu"].plugin.name == "cpu"
    assert backend.name == "cpu"
    refused = [row for row in registry.list_backends() if row.plugin == "aaa"]
    assert refused and not refused[0].available
    assert "reserved for omnitensor-backend-cpu" in (refused[0].reason or "")
    assert "refused" in caplog.text  # a conflict is an error, not a silent shadow


def test_third_party_names_belong_to_their_first_registrant(fake_entry_points: Install) -> None:
    fake_entry_points({"one": _plugin("one", backend="same", priority=1),
                       "two": _plugin("two", backend="same", priority=99)})
    assert registry.get_backend("same").name == "same"
    rows = [row for row in registry.list_backends() if row.name == "same"]
    owner = [row for row in rows if row.available]
    assert [row.plugin for row in owner] == ["one"]
    assert any("already registered by plugin 'one'" in (row.reason or "") for row in rows)


def test_printing_plugin_keeps_json_output_valid(fake_entry_points: Install,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    fake_entry_points({
        "noisy": _plugin("noisy", prelude="print('hello from import')",
                         probe="print('hello from probe')"),
    })
    status = main(["backends", "--json", "--no-smoke"])
    captured = capsys.readouterr()
    data = json.loads(captured.out)  # nothing but JSON on stdout
    assert status == 0
    assert "hello from import" in captured.err and "hello from probe" in captured.err
    assert any(row["name"] == "noisy" for row in data["backends"])


def test_in_process_plugins_may_use_any_name() -> None:
    registry.register_plugin(null_plugin("cpu", priority=5), "mine")
    assert isinstance(registry.get_backend("cpu"), NullBackend)


def test_entry_point_type_is_the_stdlib_one() -> None:
    # the fixture builds stdlib EntryPoints; the registry must accept exactly those
    assert metadata.EntryPoint("x", "y", registry.ENTRY_POINT_GROUP).group == "omnitensor.backends"
