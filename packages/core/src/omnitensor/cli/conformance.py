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
    parser.add_argument("backend", metavar="BACKEND")
    parser.add_argument("--mode", choices=("test", "grad", "perf", "support"), default="test")
    parser.add_argument("--ops", default="", help="comma-separated ops or globs (add,reduce_*)")
    parser.add_argument("--case", default="", help="comma-separated case ids to run")
    parser.add_argument("--list-ops", action="store_true", help="list ops and case counts")
    parser.add_argument("--report", metavar="DIR", help="write the JSON/Markdown matrix here")
    parser.add_argument("--xfails", metavar="FILE", help="known-failures file (one id a line)")
    parser.add_argument("--seed", type=int, default=0, help="base seed (default 0)")
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
        print("omnitensor conformance: the suite is not installed; "
              "pip install omnitensor-conformance", file=sys.stderr)
        return 4
    import pytest

    return int(pytest.main(pytest_args(args)))
