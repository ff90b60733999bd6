"""Tests here run on the reference backend."""

from collections.abc import Iterator

import pytest

import omnitensor as ot


@pytest.fixture(autouse=True)
def _ref_backend() -> Iterator[None]:
    pytest.importorskip("omnitensor_backend_ref")
    with ot.use_backend("ref"):
        yield
