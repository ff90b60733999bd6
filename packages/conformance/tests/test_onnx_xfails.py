"""The ONNX suite's list of known failures: listed, unlisted and unstable tests."""

from __future__ import annotations

from omnitensor_conformance.onnx_suite import XFAILS, OnnxReport, load_xfails


def _report(**outcomes: str) -> OnnxReport:
    report = OnnxReport()
    for name, outcome in outcomes.items():
        report.outcomes[name] = (outcome, "values differ" if outcome == "fail" else "")
    return report


def test_a_listed_pass_fails_the_run_unless_the_listing_says_unstable() -> None:
    report = _report(a="fail", b="pass", c="pass", d="fail", e="fail")
    report.apply_xfails({"a": "known", "b": "known", "c": "unstable: rounding",
                         "d": "unstable: rounding"})
    assert {k: v[0] for k, v in report.outcomes.items()} == {
        "a": "xfail", "b": "xpass", "c": "pass", "d": "xfail", "e": "fail"}


def test_the_shipped_list_parses_and_gives_every_entry_a_reason() -> None:
    entries = load_xfails(XFAILS)
    assert "test_squeezenet" in entries and entries["test_squeezenet"].startswith("unstable:")
    assert all(reason for reason in entries.values())
