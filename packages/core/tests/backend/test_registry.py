"""Discovery, isolation of broken plugins, contract versions and backend selection."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import pytest

from omnitensor.backend import BackendSpec, FunctionalAlternative, hookimpl, registry
from omnitensor.backend.contract import CONTRACT_VERSION, Backend
from omnitensor.backend.null import NullBackend, null_plugin
from omnitensor.errors import BackendNotInstalledError, BackendUnavailableError, PluginError

Install = Callable[[dict[str, str]], None]

GOOD = """
    from omnitensor.backend import BackendSpec, hookimpl
    from omnitensor.backend.null import NullBackend

    @hookimpl
    def omnitensor_register_backends():
        return [BackendSpec(name="good", contract_version=1, priority=30,
                            factory=lambda: NullBackend("good"))]
"""


def _names(infos: list[registry.BackendInfo]) -> dict[str, registry.BackendInfo]:
    return {i.name: i for i in infos}


# --- no backend at all ------------------------------------------------------------------------


def test_core_alone_raises_not_installed_naming_distributions() -> None:
    with pytest.raises(BackendNotInstalledError) as info:
        registry.get_backend()
    message = str(info.value)
    assert "no omnitensor backend is installed" in message
    assert "pip install omnitensor-backend-cpu" in message
    assert "omnitensor-backend-ref" in message
    assert registry.list_backends() == []


def test_core_alone_with_no_entry_points(fake_entry_points: Install) -> None:
    fake_entry_points({})
    with pytest.raises(BackendNotInstalledError, match="pip install omnitensor-backend-cpu"):
        registry.current_backend_name()


# --- selection by environment variable ---------------------------------------------------------


@pytest.fixture
def three() -> None:
    registry.register_plugin(null_plugin("fast", priority=90, probe=lambda: "no device"), "fast")
    registry.register_plugin(null_plugin("mid", priority=50), "mid")
    registry.register_plugin(null_plugin("low", priority=10), "low")


@pytest.mark.usefixtures("three")
@pytest.mark.parametrize("value", [None, "", "  ", ","])
def test_unset_or_empty_picks_highest_priority_available(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is not None:
        monkeypatch.setenv("OMNITENSOR_BACKEND", value)
    assert registry.get_backend().name == "mid"  # "fast" is unavailable


@pytest.mark.usefixtures("three")
def test_single_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMNITENSOR_BACKEND", "low")
    assert registry.current_backend_name() == "low"
    assert registry.get_backend().name == "low"


@pytest.mark.usefixtures("three")
def test_env_is_read_at_use_not_import(monkeypatch: pytest.MonkeyPatch) -> None:
    assert registry.current_backend_name() == "mid"
    monkeypatch.setenv("OMNITENSOR_BACKEND", "low")
    assert registry.current_backend_name() == "low"


@pytest.mark.usefixtures("three")
@pytest.mark.parametrize(
    ("value", "expected"),
    [("fast,low", "low"), ("missing, mid", "mid"), ("low,mid", "low"), ("mid,low", "mid")],
)
def test_ordered_list_first_usable_wins(
    monkeypatch: pytest.MonkeyPatch, value: str, expected: str
) -> None:
    monkeypatch.setenv("OMNITENSOR_BACKEND", value)
    assert registry.get_backend().name == expected


@pytest.mark.usefixtures("three")
def test_named_unavailable_raises_with_reason_never_falls_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OMNITENSOR_BACKEND", "fast")
    with pytest.raises(BackendUnavailableError, match="no device") as info:
        registry.get_backend()
    assert not isinstance(info.value, BackendNotInstalledError)
    assert info.value.backend == "fast"


@pytest.mark.usefixtures("three")
def test_list_with_nothing_usable_lists_every_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMNITENSOR_BACKEND", "fast,cuda")
    with pytest.raises(BackendUnavailableError) as info:
        registry.get_backend()
    assert "fast: no device" in str(info.value)
    assert "cuda: not installed (pip install omnitensor-backend-cuda)" in str(info.value)


@pytest.mark.usefixtures("three")
def test_named_not_installed_names_distribution(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMNITENSOR_BACKEND", "cuda")
    with pytest.raises(BackendNotInstalledError) as info:
        registry.get_backend()
    assert "pip install omnitensor-backend-cuda" in str(info.value)
    assert "installed: fast, low, mid" in str(info.value)
    assert isinstance(info.value, ImportError)


@pytest.mark.usefixtures("three")
@pytest.mark.parametrize(("typo", "suggestion"), [("mdi", "mid"), ("loww", "low"), ("cpuu", "cpu")])
def test_typo_gets_did_you_mean(
    monkeypatch: pytest.MonkeyPatch, typo: str, suggestion: str
) -> None:
    monkeypatch.setenv("OMNITENSOR_BACKEND", typo)
    with pytest.raises(BackendNotInstalledError, match=f"did you mean '{suggestion}'"):
        registry.get_backend()


def test_explicit_name_argument() -> None:
    registry.register_plugin(null_plugin("a", priority=1), "a")
    registry.register_plugin(null_plugin("b", priority=2), "b")
    assert registry.get_backend("a").name == "a"
    with pytest.raises(BackendNotInstalledError, match="backend 'c' is not installed"):
        registry.get_backend("c")


def test_callable_priority_evaluated_after_probe() -> None:
    calls: list[str] = []

    def probe() -> str | None:
        calls.append("probe")
        return None

    def priority() -> int:
        calls.append("priority")
        return 80

    registry.register_plugin(null_plugin("gpu", priority=priority, probe=probe), "gpu")
    registry.register_plugin(null_plugin("cpu", priority=50), "cpu")
    assert registry.current_backend_name() == "gpu"
    assert calls == ["probe", "priority"]


def test_choice_logged_once_at_info(caplog: pytest.LogCaptureFixture) -> None:
    registry.register_plugin(null_plugin("only", priority=5), "only")
    with caplog.at_level(logging.INFO, logger="omnitensor"):
        for _ in range(3):
            registry.get_backend()
    records = [r for r in caplog.records if "using backend" in r.getMessage()]
    assert len(records) == 1
    assert records[0].levelno == logging.INFO
    assert "'only'" in records[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_backend_names_match_case_insensitively(monkeypatch: pytest.MonkeyPatch) -> None:
    registry.register_plugin(null_plugin("only", priority=5), "only")
    monkeypatch.setenv("OMNITENSOR_BACKEND", "ONLY")
    assert registry.current_backend_name() == "only"


def test_warns_when_a_better_backend_cannot_run(caplog: pytest.LogCaptureFixture) -> None:
    registry.register_plugin(null_plugin("fast", priority=90, probe=lambda: "no device"), "fast")
    registry.register_plugin(null_plugin("slow", priority=5), "slow")
    with caplog.at_level(logging.INFO, logger="omnitensor"):
        registry.get_backend()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "'fast'" in warnings[0] and "no device" in warnings[0]


def test_omnitensor_log_sets_level(monkeypatch: pytest.MonkeyPatch) -> None:
    from omnitensor._logging import configure_logging

    logger = logging.getLogger("omnitensor")
    monkeypatch.setattr(logger, "level", logging.NOTSET)
    monkeypatch.setattr(logger, "handlers", [])
    monkeypatch.setenv("OMNITENSOR_LOG", "error")
    configure_logging()
    assert logger.level == logging.ERROR
    monkeypatch.setattr(logger, "level", logging.NOTSET)
    monkeypatch.setenv("OMNITENSOR_LOG", "info")
    configure_logging()
    assert logger.level == logging.INFO and len(logger.handlers) == 1


def test_instances_cached_and_wrapped_once() -> None:
    plugin = null_plugin("n", priority=1)
    registry.register_plugin(plugin, "n")
    assert registry.get_backend() is registry.get_backend("n")
    assert len(plugin.created) == 1


# --- scoped selection --------------------------------------------------------------------------


def test_use_backend_scope_nests_and_restores() -> None:
    registry.register_plugin(null_plugin("a", priority=2), "a")
    registry.register_plugin(null_plugin("b", priority=1), "b")
    assert registry.current_backend_name() == "a"
    with registry.use_backend("b") as backend:
        assert backend.name == "b" and registry.get_backend() is backend
        with registry.use_backend("a"):
            assert registry.current_backend_name() == "a"
        assert registry.current_backend_name() == "b"
    assert registry.current_backend_name() == "a"


def test_use_backend_accepts_an_instance() -> None:
    mine = NullBackend("mine")
    with registry.use_backend(mine):
        assert registry.get_backend() is mine
        assert registry.current_backend_name() == "mine"


def test_use_backend_unknown_fails_at_with() -> None:
    registry.register_plugin(null_plugin("a"), "a")
    with pytest.raises(BackendNotInstalledError):
        with registry.use_backend("nope"):
            pytest.fail("entered")


def test_use_backend_is_thread_local() -> None:
    for name in ("a", "b", "c"):
        registry.register_plugin(null_plugin(name, priority=ord(name)), name)
    barrier = threading.Barrier(2)
    seen: dict[str, list[str]] = {"a": [], "b": []}

    def worker(name: str) -> None:
        with registry.use_backend(name):
            barrier.wait()
            for _ in range(50):
                seen[name].append(registry.get_backend().name)
            barrier.wait()

    threads = [threading.Thread(target=worker, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(seen["a"]) == {"a"} and set(seen["b"]) == {"b"}
    assert registry.current_backend_name() == "c"  # the main thread never entered a scope


# --- broken, incompatible and disabled plugins -------------------------------------------------


def test_broken_plugins_listed_with_reasons_while_others_work(fake_entry_points: Install) -> None:
    fake_entry_points({
        "good": GOOD,
        "importfail": "import does_not_exist_anywhere\n",
        "raises": """
            from omnitensor.backend import hookimpl

            @hookimpl
            def omnitensor_register_backends():
                raise RuntimeError("boom in hook")
        """,
        "oldcontract": """
            from omnitensor.backend import BackendSpec, hookimpl
            from omnitensor.backend.null import NullBackend

            CALLED = []

            @hookimpl
            def omnitensor_register_backends():
                return [BackendSpec(name="oldcontract", contract_version=0,
                                    factory=lambda: NullBackend("oldcontract"),
                                    distribution="omnitensor-backend-old")]

            @hookimpl
            def omnitensor_register_functionals():
                CALLED.append("functionals")
                return []
        """,
        "newcontract": """
            from omnitensor.backend import BackendSpec, hookimpl
            from omnitensor.backend.null import NullBackend

            @hookimpl
            def omnitensor_register_backends():
                return [BackendSpec(name="newcontract", contract_version=99,
                                    factory=lambda: NullBackend("x"))]
        """,
        "badreturn": """
            from omnitensor.backend import hookimpl

            @hookimpl
            def omnitensor_register_backends():
                return ["not a spec"]
        """,
        "typo": """
            from omnitensor.backend import hookimpl

            @hookimpl
            def omnitensor_register_backend():
                return []
        """,
        "unmarked": "def omnitensor_register_backends():\n    return []\n",
    })
    infos = _names(registry.list_backends())
    assert infos["good"].available and infos["good"].selected
    assert registry.get_backend().name == "good"
    assert "import of" in str(infos["importfail"].reason)
    assert "does_not_exist_anywhere" in str(infos["importfail"].reason)
    assert "boom in hook" in str(infos["raises"].reason)
    assert "expected a list of omnitensor BackendSpec" in str(infos["badreturn"].reason)
    assert "did you mean 'omnitensor_register_backends'" in str(infos["typo"].reason)
    assert "no @omnitensor.hookimpl" in str(infos["unmarked"].reason)
    old = infos["oldcontract"]
    assert not old.contract_ok and not old.available
    assert f"got version 0 from omnitensor-backend-old, expected {CONTRACT_VERSION}" in str(
        old.reason
    )
    assert "pip install -U omnitensor-backend-old" in str(old.reason)
    assert "pip install -U omnitensor)" in str(infos["newcontract"].reason)
    # the incompatible plugin's other hooks never ran
    registry.functional_alternatives()
    import sys

    module = next(m for n, m in sys.modules.items() if n.startswith("fake_plugin_oldcontract"))
    assert module.CALLED == []
    for name in ("importfail", "raises", "oldcontract"):
        with pytest.raises(BackendUnavailableError) as info:
            registry.get_backend(name)
        assert not isinstance(info.value, BackendNotInstalledError)


def test_disabled_plugins_are_skipped(
    fake_entry_points: Install, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMNITENSOR_DISABLE_PLUGINS", "good, other")
    fake_entry_points({"good": GOOD, "explode": "raise SystemError('never imported')\n"})
    infos = _names(registry.list_backends())
    assert infos["good"].reason == "disabled by OMNITENSOR_DISABLE_PLUGINS"
    with pytest.raises(BackendUnavailableError, match="disabled by OMNITENSOR_DISABLE_PLUGINS"):
        registry.get_backend("good")


def test_disabled_in_process_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMNITENSOR_DISABLE_PLUGINS", "x")
    registry.reset(entry_points=False)
    registry.register_plugin(null_plugin("x"), "x")
    registry.register_plugin(null_plugin("y"), "y")
    assert registry.current_backend_name() == "y"


def test_factory_failure_is_unavailable_with_reason() -> None:
    def factory() -> Backend:
        raise OSError("driver missing")

    class Plugin:
        @hookimpl
        def omnitensor_register_backends(self) -> list[BackendSpec]:
            return [BackendSpec(name="f", contract_version=CONTRACT_VERSION, factory=factory)]

    registry.register_plugin(Plugin(), "f")
    with pytest.raises(BackendUnavailableError, match="factory failed: OSError: driver missing"):
        registry.get_backend()
    assert "driver missing" in str(_names(registry.list_backends())["f"].reason)


def test_probe_exception_is_a_reason() -> None:
    def probe() -> str | None:
        raise RuntimeError("probe exploded")

    registry.register_plugin(null_plugin("p", probe=probe), "p")
    assert "probe failed: RuntimeError: probe exploded" in str(
        _names(registry.list_backends())["p"].reason
    )


def test_duplicate_backend_name_second_is_shadowed() -> None:
    registry.register_plugin(null_plugin("same", priority=1), "one")
    registry.register_plugin(null_plugin("same", priority=2), "two")
    infos = registry.list_backends()
    assert [i.plugin for i in infos if i.available] == ["one"]
    assert any("already registered by plugin 'one'" in str(i.reason) for i in infos)
    with pytest.raises(PluginError):
        registry.register_plugin(null_plugin("z"), "one")


# --- other hooks -------------------------------------------------------------------------------


class _Extras:
    def __init__(self) -> None:
        self.wrapped: list[str] = []

    @hookimpl
    def omnitensor_register_functionals(self) -> list[FunctionalAlternative]:
        return [FunctionalAlternative(family="softmax", name="fused", fn=lambda x: x)]

    @hookimpl
    def omnitensor_register_passes(self, backend_name: str) -> list[str]:
        return [f"pass-for-{backend_name}"] if backend_name == "n" else []

    @hookimpl
    def omnitensor_prepare_weight(self, backend: Backend, name: str) -> str | None:
        return f"packed:{name}" if backend.name == "n" else None

    @hookimpl
    def omnitensor_wrap_backend(self, backend: Backend) -> Backend | None:
        self.wrapped.append(backend.name)
        return None


def test_functionals_passes_weights_and_wrapping() -> None:
    extras = _Extras()
    registry.register_plugin(null_plugin("n"), "n")
    registry.register_plugin(extras, "extras")
    assert [(f.family, f.name) for f in registry.functional_alternatives()] == [
        ("softmax", "fused")
    ]
    assert registry.backend_passes("n") == ["pass-for-n"]
    assert registry.backend_passes("other") == []
    backend = registry.get_backend("n")
    assert extras.wrapped == ["n"]
    assert registry.prepare_weight(backend, "w", None, None) == "packed:w"
    assert registry.prepare_weight(NullBackend("m"), "w", None, None) is None


def test_wrapper_replaces_backend_and_broken_wrapper_is_skipped() -> None:
    class Wrapper:
        @hookimpl
        def omnitensor_wrap_backend(self, backend: Backend) -> Backend:
            return NullBackend(f"wrapped-{backend.name}")

    class Broken:
        @hookimpl
        def omnitensor_wrap_backend(self, backend: Backend) -> Backend:
            raise ValueError("wrapper bug")

    registry.register_plugin(null_plugin("n"), "n")
    registry.register_plugin(Broken(), "broken")
    registry.register_plugin(Wrapper(), "wrapper")
    backend = registry.get_backend("n")
    assert isinstance(backend, NullBackend) and backend.name == "wrapped-n"
    assert registry.backend_passes("n") == []  # the broken plugin's hooks are not called again


def test_prepare_weight_error_names_plugin() -> None:
    class Bad:
        @hookimpl
        def omnitensor_prepare_weight(self) -> None:
            raise KeyError("oops")

    registry.register_plugin(Bad(), "bad")
    with pytest.raises(PluginError, match="plugin 'bad'") as info:
        registry.prepare_weight(NullBackend(), "w", None, None)
    assert info.value.plugin == "bad"


# --- the real environment ----------------------------------------------------------------------


def test_installed_environment_is_consistent() -> None:
    """With installed entry points: none -> a clear not-installed error; some -> a listing."""
    from importlib import metadata

    registry.reset()
    if not list(metadata.entry_points(group=registry.ENTRY_POINT_GROUP)):  # core alone
        with pytest.raises(BackendNotInstalledError) as info:
            registry.get_backend()
        assert "pip install omnitensor-backend-cpu" in str(info.value)
        assert registry.list_backends() == []
    else:
        infos = registry.list_backends()
        assert infos and all(i.available or i.reason for i in infos)
        assert sum(i.selected for i in infos) <= 1
