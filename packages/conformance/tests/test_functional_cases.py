"""Functional alternatives are checked against the portable implementation."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from omnitensor import functional as F
from omnitensor.functional import registry
from omnitensor_conformance.case import all_cases
from omnitensor_conformance.cases.functional import functional_cases
from omnitensor_conformance.runner import run_case


@pytest.fixture
def alternatives() -> Iterator[None]:
    registry.register("softmax", "test.right", lambda x, axis=-1: F.softmax(x * 1.0, axis=axis))
    registry.register("softmax", "test.wrong", lambda x, axis=-1: F.softmax(x * 1.5, axis=axis))
    yield
    registry.unregister("softmax", "test.right")
    registry.unregister("softmax", "test.wrong")


def _ref_backend():  # type: ignore[no-untyped-def]
    pytest.importorskip("omnitensor_backend_ref")
    from omnitensor.backend.registry import get_backend

    return get_backend("ref")


def test_every_family_has_a_case() -> None:
    rows = {c.op for c in all_cases() if c.source == "functional"}
    missing = {f"functional.{f}" for f in registry.families()} - rows - {"functional.dropout"}
    assert not missing, f"functional families without conformance cases: {sorted(missing)}"


def test_alternatives_are_compared_with_the_portable_result(alternatives: None) -> None:
    backend = _ref_backend()
    cases = {c.sample: c for c in functional_cases()
             if c.op == "functional.softmax" and c.dtype == "float32"}
    assert {"portable-rows", "test.right-rows", "test.wrong-rows"} <= set(cases)
    right = run_case(backend, cases["test.right-rows"], seed=0, backend_name="ref")
    wrong = run_case(backend, cases["test.wrong-rows"], seed=0, backend_name="ref")
    assert right.status == "pass", right.message
    assert wrong.status == "fail" and "does not match" in wrong.message
