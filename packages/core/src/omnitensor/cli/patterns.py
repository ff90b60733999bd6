"""``omnitensor patterns``: list the PTIR ops (``--ops``) and the optimizer's rewrites.

The listings are rendered from the registries (`ir.docs`, `optimizer.registry`); this module only
parses the options and prints.
"""

from __future__ import annotations

import argparse
import importlib
import logging
from typing import Any

__all__ = ["register", "render_rewrites", "run"]

_logger = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``patterns`` verb."""
    parser = subparsers.add_parser(
        "patterns",
        help="list PTIR ops and rewrite patterns",
        description="List every PTIR op (--ops, the default) or the optimizer's rewrite patterns "
        "(--rewrites).",
    )
    parser.add_argument("--ops", action="store_true", help="list every primitive op")
    parser.add_argument("--rewrites", action="store_true", help="list rewrite patterns by pass")
    parser.add_argument("--markdown", action="store_true", help="render --ops as markdown")
    parser.set_defaults(func=run)


def _all_patterns() -> list[Any]:
    """The optimizer's patterns, or none when the optimizer is not installed."""
    try:
        registry = importlib.import_module("omnitensor.optimizer.registry")
        return list(registry.all_patterns())
    except ModuleNotFoundError as exc:
        if exc.name in ("omnitensor.optimizer", "omnitensor.optimizer.registry"):
            return []
        if exc.name is not None and exc.name.startswith("omnitensor.optimizer."):
            # A partly installed optimizer: list nothing rather than fail the whole verb.
            _logger.warning("rewrite patterns unavailable: %s", exc)
            return []
        raise


def render_rewrites() -> str:
    """Registered rewrite patterns as ``pass  name  doc`` lines (or a one-line notice)."""
    patterns = _all_patterns()
    if not patterns:
        return "no rewrite patterns registered\n"
    rows = [("pass", "pattern", "rewrites")] + [(p.pass_name, p.name, p.doc) for p in patterns]
    widths = [max(len(r[i]) for r in rows) for i in range(2)]
    lines = [f"{r[0].ljust(widths[0])}  {r[1].ljust(widths[1])}  {r[2]}".rstrip() for r in rows]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    """Print the listings `args` asks for; returns the exit status."""
    from ..ir.docs import render_ops_markdown, render_ops_table

    show_ops = args.ops or not args.rewrites
    if show_ops:
        print(render_ops_markdown() if args.markdown else render_ops_table(), end="")
    if args.rewrites:
        if show_ops:
            print()
        print(render_rewrites(), end="")
    return 0
