"""Deliberately broken backends, one stride or layout hole each: the suite must catch every one.

Each runs the suite on the ops it breaks; the run must fail, and the failures must be the
samples that exercise the hole (a layout case or an in-program layout sample), so a hole the
suite stops covering is seen here first.
"""

from __future__ import annotations

import pathlib
import re

import pytest
from test_plugin import run_suite

# backend -> (ops to run, a failing case id must contain one of these)
BROKEN = {
    "DenseRhsDotBackend": ("dot_general", (".transposed1", ".reversed1", ".stepped1",
                                           ".broadcast1")),
    "ZeroStrideBackend": ("mul", (".broadcast1",)),
    "NegativeStrideReduceBackend": ("reduce_sum", (".reversed0",)),
    "FoldedTransposeDotBackend": ("dot_general", ("rhs_transposed_square",
                                                  "both_transposed_square")),
    "FoldedReverseBackend": ("add", ("-reversed",)),
}


@pytest.mark.parametrize("backend", sorted(BROKEN))
def test_broken_backend_is_caught(tmp_path: pathlib.Path, backend: str) -> None:
    ops, expected = BROKEN[backend]
    result = run_suite(tmp_path, backend, f"--omnitensor-ops={ops}")
    assert result.returncode == 1, result.stdout[-3000:]
    failed = re.findall(r"FAILED \S+\[([^\]]+)\]", result.stdout)
    assert failed, result.stdout[-3000:]
    assert any(marker in case for case in failed for marker in expected), failed


def test_strided_honest_backend_passes_the_layout_cases(tmp_path: pathlib.Path) -> None:
    result = run_suite(tmp_path, "StridedHonestBackend",
                       "--omnitensor-ops=dot_general,mul,reduce_sum,add,gather,concatenate")
    assert result.returncode == 0, result.stdout[-3000:]
    assert " 0 fail" in result.stdout and " 0 unsupported" in result.stdout, result.stdout[-2000:]
