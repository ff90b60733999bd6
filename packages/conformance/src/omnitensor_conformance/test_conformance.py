"""The suite itself, collected by ``pytest --pyargs omnitensor_conformance``.

The plugin parametrizes these functions with the session's cases (see `plugin`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest

from omnitensor_conformance.case import Case
from omnitensor_conformance.generate import missing_ops
from omnitensor_conformance.plugin import get_state

_F = TypeVar("_F", bound=Callable[..., None])


def _modes(*modes: str) -> Callable[[_F], _F]:
    """Say in which modes the plugin parametrizes a test function with cases."""

    def mark(fn: _F) -> _F:
        fn.conformance_modes = modes  # type: ignore[attr-defined]
        return fn

    return mark


@_modes("test", "grad", "support")
def test_op(conformance_case: Case | None, request: pytest.FixtureRequest) -> None:
    """One case against the reference interpreter."""
    state = get_state(request.config)
    assert state is not None and conformance_case is not None
    state.run(conformance_case)


@_modes("perf")
def test_perf(conformance_case: Case | None, request: pytest.FixtureRequest) -> None:
    """Time one case on the backend and on the reference."""
    state = get_state(request.config)
    assert state is not None and conformance_case is not None
    state.time(conformance_case)


def test_every_op_has_cases() -> None:
    """Meta-test: every registered op has at least one case source."""
    missing = missing_ops()
    assert not missing, f"ops without conformance cases: {', '.join(missing)}; add @cases(...)"
