"""FunctionalRegistry: portable default, named alternatives, scoped and config overrides."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import numpy as np
import pytest

import omnitensor as ot
from omnitensor import functional as F
from omnitensor.errors import OmnitensorError


@pytest.fixture
def doubled_softmax() -> Iterator[str]:
    """An alternative softmax computed another way (exp(log_softmax))."""
    F.registry.register("softmax", "test.via_log", lambda x, axis=-1: F.log_softmax(x, axis).exp())
    yield "test.via_log"
    F.registry.unregister("softmax", "test.via_log")


def test_portable_is_the_default() -> None:
    assert F.registry.chosen("softmax") == "portable"
    assert "portable" in F.registry.names("attention")
    assert {"softmax", "attention", "conv2d", "cross_entropy", "dropout"} <= set(
        F.registry.families())


def test_override_runs_the_alternative_and_matches_portable(doubled_softmax: str) -> None:
    x = ot.randn(3, 7)
    portable = F.softmax(x).numpy()
    before = F.stats[("softmax", doubled_softmax)]
    with F.overrides({"softmax": doubled_softmax}):
        assert F.registry.chosen("softmax") == doubled_softmax
        alternative = F.softmax(x).numpy()
    assert F.stats[("softmax", doubled_softmax)] == before + 1
    np.testing.assert_allclose(alternative, portable, rtol=1e-5, atol=1e-6)
    assert F.registry.chosen("softmax") == "portable"


def test_overrides_are_context_local(doubled_softmax: str) -> None:
    async def chosen_elsewhere() -> str:
        return F.registry.chosen("softmax")

    async def main() -> tuple[str, str]:
        other = asyncio.create_task(chosen_elsewhere())  # context copied before the scope
        with F.overrides({"softmax": doubled_softmax}):
            inside = F.registry.chosen("softmax")
        return inside, await other

    assert asyncio.run(main()) == (doubled_softmax, "portable")


def test_config_overrides(doubled_softmax: str) -> None:
    config = {"runtime": {"functional_overrides": {"softmax": doubled_softmax}}}
    with F.overrides_from_config(config):
        assert F.registry.chosen("softmax") == doubled_softmax
    F.registry.set_defaults({"softmax": doubled_softmax})
    try:
        assert F.registry.chosen("softmax") == doubled_softmax
    finally:
        F.registry.reset_defaults()


def test_unknown_names_list_the_known_ones() -> None:
    with pytest.raises(OmnitensorError, match=r"no implementation 'nope' \(known: portable"):
        with F.overrides({"attention": "nope"}):
            pass
    with pytest.raises(OmnitensorError, match="unknown family 'atention'.*attention"):
        with F.overrides({"atention": "portable"}):
            pass


def test_plugin_alternatives_are_picked_up() -> None:
    from omnitensor.backend.hookspecs import FunctionalAlternative
    from omnitensor.backend.registry import register_plugin, reset
    from omnitensor.functional.registry import FunctionalRegistry

    class Plugin:
        @ot.hookimpl
        def omnitensor_register_functionals(self) -> list[FunctionalAlternative]:
            return [FunctionalAlternative(family="relu", name="plug.relu",
                                          fn=lambda x: ot.maximum(x, 0.0))]

    register_plugin(Plugin(), "test-functionals")
    try:
        fresh = FunctionalRegistry()
        fresh.define("relu", F.relu.portable)  # type: ignore[attr-defined]
        assert "plug.relu" in fresh.names("relu")
    finally:
        reset()
