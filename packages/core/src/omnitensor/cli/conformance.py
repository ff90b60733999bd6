"""``omnitensor conformance BACKEND``: run the conformance suite against a backend.

Exactly ``pytest --pyargs omnitensor_conformance --omnitensor-backend=BACKEND ...``; the suite
lives in the ``omnitensor-conformance`` distribution, imported only when this verb runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Sequence

__all__ = ["pytest_args", "register", "run"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``conformance`` verb."""
    parser = subparsers.add_parser(
        "conformance",
        help="check a backend against the reference interpreter",
        description="Run the omnitensor conformance suite against BACKEND (a registry name or "
        "module:BackendClass). Equivalent to `pytest --pyargs omnitensor_conformance "
        "--omnitensor-backend=BACKEND ...`; pass other pytest options through PYTEST_ADDOPTS.",
    )
    parser.add_argument("backend", metavar="BACKEND",
                        help="a backend registry name (see `omnitensor backends`) or "
                        "module:BackendClass")
    parser.add_argument("--mode", choices=("test", "grad", "perf", "support"), default="test",
                        help="test: every case against the reference (default); grad: the "
                        "gradient cases; perf: time each op against the reference; support: "
                        "print the support matrix only")
    parser.add_argument("--ops", default="", help="comma-separated ops or globs (add,reduce_*)")
    parser.add_argument("--case", default="", help="comma-separated case ids to run")
    parser.add_argument("--list-ops", action="store_true", help="list ops and case counts")
    parser.add_argument("--report", metavar="DIR", help="write the JSON/Markdown matrix here")
    parser.add_argument("--xfails", metavar="FILE", help="known-failures file (one id a line)")
    parser.add_argument("--seed", type=int, default=0, help="base seed (default 0)")
    parser.add_argument("--onnx", action="store_true",
                        help="run ONNX's own backend tests (node tests and the light model "
                        "zoo, from the installed onnx package) instead of the PTIR suite; "
                        "prints pass / fail / unsupported per op and in total")
    parser.add_argument("--onnx-filter", default="", metavar="TEXT",
                        help="with --onnx: only tests whose name contains TEXT")
    parser.add_argument("--onnx-min-claimed", type=float, default=0.0, metavar="PCT",
                        help="with --onnx: fail unless the importer claims at least PCT%% of "
                        "the tests")
    parser.set_defaults(func=run)


def pytest_args(args: argparse.Namespace) -> list[str]:
    """The pytest command line equivalent to the parsed verb arguments."""
    out = ["--pyargs", "omnitensor_conformance", f"--omnitensor-backend={args.backend}",
           f"--omnitensor-mode={args.mode}", f"--omnitensor-seed={args.seed}"]
    if args.ops:
        out.append(f"--omnitensor-ops={args.ops}")
    if args.case:
        out.append(f"--omnitensor-case={args.case}")
    if args.list_ops:
        out.append("--omnitensor-list-ops")
    if args.report:
        out.append(f"--omnitensor-report={args.report}")
    if args.xfails:
        out.append(f"--omnitensor-xfails={args.xfails}")
    return out


def run(args: argparse.Namespace, argv: Sequence[str] | None = None) -> int:
    """Run pytest with the suite; return its exit status."""
    if importlib.util.find_spec("omnitensor_conformance") is None:
        print("omnitensor conformance: the suite is not installed; from a checkout: "
              "pip install ./packages/conformance (distribution omnitensor-conformance)",
              file=sys.stderr)
        return 4
    if getattr(args, "onnx", False):
        return _run_onnx(args)
    import pytest

    return int(pytest.main(pytest_args(args)))


def _run_onnx(args: argparse.Namespace) -> int:
    """ONNX's backend tests on BACKEND: exit 1 on any failure or too little coverage."""
    from omnitensor_conformance.onnx_suite import XFAILS, load_xfails, run_onnx_suite

    xfails = load_xfails(XFAILS, *([args.xfails] if args.xfails else []))
    report = run_onnx_suite(args.backend, pattern=args.onnx_filter or None, xfails=xfails)
    print(report.format(verbose=True))
    if args.report:
        import json
        from pathlib import Path

        folder = Path(args.report)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "onnx.json").write_text(json.dumps(
            {name: {"outcome": o, "reason": r, "ops": report.ops[name]}
             for name, (o, r) in sorted(report.outcomes.items())}, indent=1))
    totals = report.totals()
    claimed = 100.0 * (sum(totals.values()) - totals["unsupported"]) / max(
        sum(totals.values()), 1)
    if claimed < args.onnx_min_claimed:
        print(f"onnx: the importer claims {claimed:.1f}% of the tests (required: "
              f"{args.onnx_min_claimed:.1f}%)", file=sys.stderr)
        return 1
    return 1 if totals["fail"] or totals["xpass"] else 0
