"""The suite against backends defined here: honest ones pass, wrong ones are caught."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).parent


def run_suite(tmp_path: pathlib.Path, backend: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``pytest --pyargs omnitensor_conformance --omnitensor-backend=fake_backends:<backend>``."""
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    )
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--pyargs",
        "omnitensor_conformance",
        f"--omnitensor-backend=fake_backends:{backend}",
        *args,
    ]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_honest_backend_passes(tmp_path: pathlib.Path) -> None:
    result = run_suite(
        tmp_path, "HonestBackend", "--omnitensor-ops=add,exp,convert,reduce_sum,dot_general,graph.*"
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert (
        " 0 fail" in result.stdout and "conformance[fake_backends:HonestBackend]" in result.stdout
    )


def test_perturbed_result_is_caught_with_a_reproducer(tmp_path: pathlib.Path) -> None:
    result = run_suite(tmp_path, "PerturbBackend", "--omnitensor-ops=mul")
    assert result.returncode == 1
    out = result.stdout
    assert "does not match the reference interpreter" in out
    assert "rerun:  omnitensor conformance fake_backends:PerturbBackend --case mul-" in out
    assert "seed:" in out and "PTIR:" in out
    assert "mul-float32-odd" in out and "mul-int32-odd" in out  # floats and ints both caught


def test_nan_writing_backend_is_caught(tmp_path: pathlib.Path) -> None:
    result = run_suite(tmp_path, "NaNBackend", "--omnitensor-ops=exp")
    assert result.returncode == 1
    assert "have NaN where the reference has none" in result.stdout


def test_claimed_support_that_raises_is_a_failure(tmp_path: pathlib.Path) -> None:
    result = run_suite(tmp_path, "LiarBackend", "--omnitensor-ops=tanh")
    assert result.returncode == 1
    assert "declares this case supported but raised UnsupportedError" in result.stdout
    assert " 0 pass" in result.stdout


def test_partial_support_is_reported_as_unsupported(tmp_path: pathlib.Path) -> None:
    report = tmp_path / "report"
    result = run_suite(
        tmp_path, "PartialBackend", "--omnitensor-ops=add,exp", f"--omnitensor-report={report}"
    )
    assert result.returncode == 0, result.stdout[-3000:]
    data = json.loads((report / "conformance-fake_backends_PartialBackend.json").read_text())
    assert data["matrix"]["add"]["float32"] == "pass"
    assert data["matrix"]["add"]["float16"] == "unsupported"
    assert set(data["matrix"]["exp"].values()) == {"unsupported"}
    assert data["counts"]["unsupported"] > 0 and "fail" not in data["counts"]
    assert data["loosened"] == {"float32": 2.0, "float16": 64.0}
    assert data["loosen_capped"] == ["float16"]
    markdown = (report / "conformance-fake_backends_PartialBackend.md").read_text()
    assert "| `add` |" in markdown and "float16 ×64 (capped)" in markdown


def test_known_failures_xfail_and_stale_entries(tmp_path: pathlib.Path) -> None:
    xfails = tmp_path / "xfails.txt"
    xfails.write_text(
        "# known bugs\nmul-float32-odd\nmul-bool-odd\nadd-float32-odd\n"
        "test_conformance.py::test_op[mul-float64-odd]\n"
    )
    result = run_suite(
        tmp_path,
        "PerturbBackend",
        "--omnitensor-ops=mul,add",
        f"--omnitensor-xfails={xfails}",
        "--omnitensor-case=mul-float32-odd,mul-float64-odd,add-float32-odd",
    )
    out = result.stdout
    assert result.returncode == 0, out[-3000:]
    assert "2 xfail" in out
    assert "STALE mul-bool-odd: matches no case" in out
    assert "STALE add-float32-odd: listed as a known failure but passed" in out


def test_support_mode_prints_the_matrix_only(tmp_path: pathlib.Path) -> None:
    result = run_suite(
        tmp_path, "PartialBackend", "--omnitensor-mode=support", "--omnitensor-ops=add,exp"
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert "support matrix" in result.stdout and "| `exp` |" in result.stdout
    assert "passed" not in result.stdout


def test_list_ops(tmp_path: pathlib.Path) -> None:
    result = run_suite(tmp_path, "HonestBackend", "--omnitensor-list-ops")
    assert result.returncode == 0
    assert "dot_general" in result.stdout and "graph.softmax" in result.stdout


def test_a_mode_with_nothing_to_run_says_so(tmp_path: pathlib.Path) -> None:
    result = run_suite(
        tmp_path, "HonestBackend", "--omnitensor-mode=grad", "--omnitensor-case=no-such-case"
    )
    assert result.returncode == pytest.ExitCode.NO_TESTS_COLLECTED
    assert "nothing to run" in result.stdout or "no case matches" in result.stdout


def test_perf_mode_prints_rates_and_ratio(tmp_path: pathlib.Path) -> None:
    result = run_suite(
        tmp_path, "HonestBackend", "--omnitensor-mode=perf", "--omnitensor-ops=add,dot_general"
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert "GB/s" in result.stdout and "GFLOP/s" in result.stdout


def test_unknown_op_is_a_usage_error(tmp_path: pathlib.Path) -> None:
    result = run_suite(tmp_path, "HonestBackend", "--omnitensor-ops=ad")
    assert result.returncode == pytest.ExitCode.USAGE_ERROR
    assert "did you mean" in result.stderr
