"""Unit tests of the comparison rules and the case registry (in-process, fast)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omnitensor.errors import OmnitensorError
from omnitensor_conformance import all_cases, register_case_source
from omnitensor_conformance.compare import compare, tolerance_for, ulp_distance
from omnitensor_conformance.generate import missing_ops


@settings(deadline=None, derandomize=True, max_examples=50)
@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_next_float_is_one_ulp_away(x: float) -> None:
    a = np.array([x], np.float32)
    b = np.nextafter(a, np.float32(np.inf))
    if np.isfinite(b).all():
        assert int(ulp_distance(b, a)[0]) == 1


def test_signed_zero_is_equal_and_inf_is_one_past_max() -> None:
    assert int(ulp_distance(np.array([-0.0], np.float32), np.array([0.0], np.float32))[0]) == 0
    top = np.array([np.finfo(np.float32).max], np.float32)
    assert int(ulp_distance(np.array([np.inf], np.float32), top)[0]) == 1


def test_ulp_budget_and_nan_positions() -> None:
    want = np.array([1.0, 2.0, np.nan], np.float32)
    near = np.nextafter(want, np.float32(9)).astype(np.float32)
    near[2] = np.nan
    assert compare(near, want, tolerance_for("float32", "ulp", ulp=1)) is None
    assert compare(near, want, tolerance_for("float32", "ulp", ulp=0)) is not None
    lost_nan = want.copy()
    lost_nan[2] = 0.0
    assert "NaN" in str(compare(lost_nan, want, tolerance_for("float32", "ulp", ulp=4)))


def test_integers_are_exact_and_masks_apply() -> None:
    want = np.array([1, 2, 3], np.int32)
    got = np.array([1, 2, 4], np.int32)
    tol = tolerance_for("int32", "nmse")
    assert tol.kind == "exact"
    assert compare(got, want, tol) is not None
    assert compare(got, want, tol, mask=np.array([False, False, True])) is None


def test_loosening_is_capped() -> None:
    assert tolerance_for("float16", "nmse", loosen=1e6).loosen == 64.0


def test_every_op_has_cases_and_ids_are_unique() -> None:
    assert missing_ops() == []
    ids = [c.id for c in all_cases()]
    assert len(ids) == len(set(ids))


def test_inputs_are_deterministic() -> None:
    case = next(c for c in all_cases() if c.id == "add-float32-edges")
    first, second = case.inputs(case.seed()), case.inputs(case.seed())
    assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(first, second, strict=True))


def test_duplicate_source_names_are_rejected() -> None:
    with pytest.raises(OmnitensorError, match="registered twice"):
        register_case_source("generic", lambda: [])
