"""The pytest plugin (``pytest11`` entry point): options, case collection, outcomes and reports.

Inert unless the suite's own test module is collected: ``pytest --pyargs omnitensor_conformance
--omnitensor-backend=NAME`` (``omnitensor conformance NAME``). Options:

``--omnitensor-backend``  registry name or ``module:Backend`` (or $OMNITENSOR_CONFORMANCE_BACKEND)
``--omnitensor-mode``     ``test`` (default), ``grad``, ``perf``, ``support``
``--omnitensor-ops``      comma-separated op names or globs (``add,reduce_*,graph.*``)
``--omnitensor-case``     exact case ids (comma-separated) to run
``--omnitensor-list-ops`` list ops, dtypes and case counts, run nothing
``--omnitensor-xfails``   known-failures file (one case id per line, ``#`` comments)
``--omnitensor-report``   directory for ``conformance-<backend>.json`` / ``.md``
``--omnitensor-seed``     base seed mixed into every case's seed (default 0)
"""

from __future__ import annotations

import fnmatch
import os
import pathlib
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import pytest

from omnitensor.backend.contract import Backend
from omnitensor.errors import OmnitensorError

from .case import Case, all_cases, case_sources
from .compare import MAX_LOOSEN
from .report import Matrix, PerfRow, loosen_table

__all__ = ["ConformanceState", "get_state"]

MODES = ("test", "grad", "perf", "support")
_STATE = pytest.StashKey["ConformanceState"]()
_UNSUPPORTED = "unsupported: "
_NOTHING = "nothing to run: "


@dataclass
class ConformanceState:
    """Per-session state: the backend under test, the selected cases and the matrix."""

    backend_name: str
    backend: Backend
    mode: str
    seed: int
    matrix: Matrix
    ops: list[str] = field(default_factory=list)
    case_ids: set[str] = field(default_factory=set)
    xfails: dict[str, str] = field(default_factory=dict)
    list_ops: bool = False
    report_dir: str | None = None
    listing: list[str] = field(default_factory=list)
    nothing_to_run: str = ""
    expanded: set[str] = field(default_factory=set)  # passed through the decomposition

    def selected(self) -> list[Case]:
        """The cases of this session's mode after ``--omnitensor-ops``/``--omnitensor-case``."""
        cases = all_cases("test" if self.mode == "support" else self.mode)
        if self.ops:
            cases = [c for c in cases if any(fnmatch.fnmatchcase(c.op, p) for p in self.ops)]
        if self.case_ids:
            cases = [c for c in cases if c.id in self.case_ids]
        if not self.backend.capabilities().strided_inputs:
            # layout cases do not apply: such a backend never receives strided buffers (its
            # programs get views as ops, which the in-program samples cover)
            cases = [c for c in cases if not c.layouts]
        return cases

    def run(self, case: Case) -> None:
        """Run `case` (test and grad modes); fail, skip as unsupported, or return on a pass."""
        from .runner import run_case

        outcome = run_case(self.backend, case, seed=case.seed(self.seed),
                           backend_name=self.backend_name, loosened=self.matrix.loosened)
        if outcome.status == "unsupported":
            pytest.skip(_UNSUPPORTED + outcome.message)
        if outcome.status == "expanded":
            self.expanded.add(case.id)
        if outcome.status == "fail":
            pytest.fail(outcome.message, pytrace=False)

    def time(self, case: Case) -> None:
        """Time `case` (perf mode) and record the row."""
        from omnitensor.errors import UnsupportedError

        from .runner import time_case

        try:
            timing = time_case(self.backend, case, seed=case.seed(self.seed))
        except UnsupportedError as exc:
            pytest.skip(_UNSUPPORTED + str(exc))
        self.matrix.perf.append(PerfRow(case.id, case.op, case.dtype, timing.backend_s,
                                        timing.reference_s, timing.bytes_moved, timing.flops))


def get_state(config: pytest.Config) -> ConformanceState | None:
    """The session's state, or None when no backend was given."""
    return config.stash.get(_STATE, None)


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add the ``--omnitensor-*`` options."""
    group = parser.getgroup("omnitensor", "omnitensor conformance suite")
    group.addoption("--omnitensor-backend", default=None,
                    help="backend under test: a registry name or module:BackendClass "
                    "(default: $OMNITENSOR_CONFORMANCE_BACKEND)")
    group.addoption("--omnitensor-mode", default="test", choices=MODES,
                    help="test (default), grad, perf or support")
    group.addoption("--omnitensor-ops", default="",
                    help="comma-separated op names or globs to run (default: all)")
    group.addoption("--omnitensor-case", default="", help="comma-separated exact case ids")
    group.addoption("--omnitensor-list-ops", action="store_true",
                    help="list ops, dtypes and case counts; run nothing")
    group.addoption("--omnitensor-xfails", default=None,
                    help="known-failures file: one case id per line")
    group.addoption("--omnitensor-report", default=None,
                    help="write the coverage matrix as JSON and Markdown into this directory")
    group.addoption("--omnitensor-seed", default=0, type=int, help="base seed (default 0)")


def _read_xfails(path: str) -> dict[str, str]:
    """Case ids from a known-failures file; a full node id keeps only its ``[...]`` part."""
    out = {}
    for number, raw in enumerate(pathlib.Path(path).read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.endswith("]") and "[" in line:
            line = line[line.index("[") + 1 : -1]
        out[line] = f"{path}:{number}"
    return out


def pytest_configure(config: pytest.Config) -> None:
    """Create the backend under test and the session state when a backend is named."""
    spec = config.getoption("omnitensor_backend") or os.environ.get(
        "OMNITENSOR_CONFORMANCE_BACKEND")
    if not spec:
        return
    from .backends import resolve_backend

    try:
        backend = resolve_backend(spec)
        requested = dict(backend.capabilities().loosened)
    except OmnitensorError as exc:
        raise pytest.UsageError(f"omnitensor conformance: {exc}") from exc
    loosened, capped = loosen_table(requested, MAX_LOOSEN)
    mode = config.getoption("omnitensor_mode")
    state = ConformanceState(
        backend_name=spec, backend=backend, mode=mode, seed=config.getoption("omnitensor_seed"),
        matrix=Matrix(spec, mode=mode, loosened=loosened, capped=capped),
        ops=[p.strip() for p in config.getoption("omnitensor_ops").split(",") if p.strip()],
        case_ids={c.strip() for c in config.getoption("omnitensor_case").split(",") if c.strip()},
        list_ops=config.getoption("omnitensor_list_ops"),
        report_dir=config.getoption("omnitensor_report"),
    )
    xfail_file = config.getoption("omnitensor_xfails")
    if xfail_file:
        try:
            state.xfails = _read_xfails(xfail_file)
        except OSError as exc:
            raise pytest.UsageError(
                f"omnitensor conformance: cannot read {xfail_file}: {exc}") from exc
    _check_op_filter(state)
    config.stash[_STATE] = state


def _check_op_filter(state: ConformanceState) -> None:
    from omnitensor.ir.opdef import all_ops

    known = set(all_ops()) | {c.op for c in all_cases("test")}
    for pattern in state.ops:
        if not any(fnmatch.fnmatchcase(name, pattern) for name in known):
            import difflib

            close = difflib.get_close_matches(pattern, sorted(known), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise pytest.UsageError(f"omnitensor conformance: --omnitensor-ops names unknown op "
                                    f"{pattern!r}{hint}")


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Name the backend, mode, seed and case sources in the session header."""
    state = get_state(config)
    if state is None:
        return []
    sources = ", ".join(case_sources("test" if state.mode == "support" else state.mode))
    return [f"omnitensor conformance: backend {state.backend_name!r} ({state.backend!r}), "
            f"mode {state.mode}, seed {state.seed}, sources: {sources or 'none'}"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize the suite's test functions with this session's cases."""
    if "conformance_case" not in metafunc.fixturenames:
        return
    state = get_state(metafunc.config)
    wanted = getattr(metafunc.function, "conformance_modes", ("test",))
    if state is None:
        params = [pytest.param(None, marks=pytest.mark.skip(
            reason="no backend: pass --omnitensor-backend=NAME (or set "
            "OMNITENSOR_CONFORMANCE_BACKEND)"), id="no-backend")]
    elif state.mode not in wanted:
        params = []
    else:
        cases = state.selected()
        params = [pytest.param(c, id=c.id) for c in cases]
        if not cases and state.mode == "grad" and not case_sources("grad"):
            state.nothing_to_run = ("grad mode: no gradient case source is registered (register "
                                    "one with omnitensor_conformance.register_case_source(name, "
                                    "fn, mode='grad'))")
        elif not cases:
            state.nothing_to_run = f"{state.mode} mode: no case matches the selection"
        if state.nothing_to_run:
            params = [pytest.param(None, marks=pytest.mark.skip(
                reason=_NOTHING + state.nothing_to_run), id="nothing-to-run")]
    if params:
        metafunc.parametrize("conformance_case", params)
    else:
        metafunc.parametrize("conformance_case", [pytest.param(None, marks=pytest.mark.skip(
            reason="not part of this mode"), id="other-mode")])


def _case_of(item: pytest.Item) -> Case | None:
    callspec = getattr(item, "callspec", None)
    case = callspec.params.get("conformance_case") if callspec is not None else None
    return case if isinstance(case, Case) else None


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    """Mark known failures; in support and list modes, fill the matrix and run nothing."""
    state = get_state(config)
    if state is None:
        return
    for item in items:
        case = _case_of(item)
        if case is not None and case.id in state.xfails:
            item.add_marker(pytest.mark.xfail(
                reason=f"known failure ({state.xfails[case.id]})", strict=False))
    if not (state.mode == "support" or state.list_ops):
        return
    suite = [(item, case) for item in items if (case := _case_of(item)) is not None]
    if state.list_ops:
        state.listing = _listing(state, [case for _, case in suite])
    else:
        from .runner import first_unsupported, for_backend

        for _, case in suite:
            fn, expanded = for_backend(state.backend, case)
            reason = first_unsupported(state.backend, fn)
            status = "unsupported" if reason is not None else "expanded" if expanded else "pass"
            state.matrix.record(case.id, case.op, case.dtype, status)
    config.hook.pytest_deselected(items=list(items))
    items[:] = []


def _listing(state: ConformanceState, cases: list[Case]) -> list[str]:
    from omnitensor.ir.opdef import all_ops

    per_op: dict[str, list[Case]] = {}
    for case in cases:
        per_op.setdefault(case.op, []).append(case)
    lines = []
    ops = all_ops()
    for op in sorted(per_op):
        dtypes = sorted({c.dtype for c in per_op[op]})
        kind = "op" if op in ops else "graph"
        lines.append(f"{op:<24} {kind:<5} {len(per_op[op]):>4} cases  {','.join(dtypes)}")
    return lines


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    """Record each case's outcome in the matrix (pass, fail, unsupported, xfail)."""
    report: pytest.TestReport = yield
    state = get_state(item.config)
    case = _case_of(item)
    if state is None or case is None:
        return report
    if report.when == "call" or (report.when == "setup" and not report.passed):
        status = None
        if hasattr(report, "wasxfail"):
            status = "pass" if report.passed else "xfail"
            if report.passed:
                state.matrix.stale_xfails[case.id] = "listed as a known failure but passed"
        elif report.passed:
            status = "expanded" if case.id in state.expanded else "pass"
        elif report.failed:
            status = "fail"
        elif report.skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
            if _UNSUPPORTED in str(reason):
                status = "unsupported"
                if case.id in state.xfails:
                    state.matrix.stale_xfails[case.id] = "listed as a known failure but unsupported"
        if status is not None:
            state.matrix.record(case.id, case.op, case.dtype, status)
    return report


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Find stale known-failure entries, write the report, fix the exit status of listings."""
    state = get_state(session.config)
    if state is None:
        return
    if state.xfails and state.mode != "support":
        known = {c.id for c in all_cases("test" if state.mode == "support" else state.mode)}
        for case_id, where in state.xfails.items():
            if case_id not in known:
                state.matrix.stale_xfails[case_id] = f"matches no case ({where})"
    if state.report_dir:
        state.matrix.write(state.report_dir)
    listing = state.mode == "support" or state.list_ops
    if listing and exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.OK
    if state.nothing_to_run and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Print the listing, support matrix, perf table, stale entries and the one-line summary."""
    state = get_state(config)
    if state is None:
        return
    write = terminalreporter.write_line
    if state.list_ops:
        terminalreporter.section("omnitensor conformance: ops")
        for line in state.listing:
            write(line)
        return
    if state.mode == "support":
        terminalreporter.section(f"omnitensor conformance: support matrix of {state.backend_name}")
        for line in state.matrix.to_markdown().splitlines():
            write(line)
    if state.matrix.perf:
        terminalreporter.section(f"omnitensor conformance: perf of {state.backend_name}")
        write(f"{'case':<36} {'backend':>11} {'rate':>18} {'reference':>11} {'ratio':>8}")
        for r in state.matrix.perf:
            write(f"{r.case:<36} {r.backend_s * 1e3:>9.3f}ms {r.rate(r.backend_s):>18} "
                  f"{r.reference_s * 1e3:>9.3f}ms {r.reference_s / max(r.backend_s, 1e-12):>7.2f}x")
    if state.matrix.stale_xfails:
        terminalreporter.section("omnitensor conformance: stale known-failure entries")
        for case_id, why in sorted(state.matrix.stale_xfails.items()):
            write(f"STALE {case_id}: {why}")
    if state.nothing_to_run:
        write(f"omnitensor conformance: {state.nothing_to_run}", yellow=True)
    if state.report_dir:
        write(f"omnitensor conformance: report written to {state.report_dir}")
    write(state.matrix.summary(), bold=True)
