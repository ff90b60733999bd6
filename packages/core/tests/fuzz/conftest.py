"""The fuzz harness (``benchmarks/fuzz.py``) as a fixture, and the ref backend for builds."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import omnitensor as ot

BENCHMARKS = Path(__file__).resolve().parents[4] / "benchmarks"


@pytest.fixture(scope="session")
def fuzz() -> ModuleType:
    """``benchmarks/fuzz.py`` imported as ``fuzz`` (its workers import it by that name)."""
    if not (BENCHMARKS / "fuzz.py").is_file():
        pytest.skip("benchmarks/fuzz.py is not in this checkout")
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module("fuzz")


@pytest.fixture(autouse=True)
def _ref_backend() -> Iterator[None]:
    pytest.importorskip("omnitensor_backend_ref")
    with ot.use_backend("ref"):
        yield
