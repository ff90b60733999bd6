"""argparse wiring of the ``omnitensor`` command: global options and one subcommand per verb.

Each verb is a module ``omnitensor.cli.<verb>`` exposing ``register(subparsers) -> None``, which
adds its parser and sets the ``func`` default (``(argparse.Namespace) -> int``). A verb whose
module is not installed (yet) is skipped, so one missing verb never breaks the others.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import Final, TextIO

__all__ = ["VERBS", "build_parser", "main"]

VERBS: Final[tuple[str, ...]] = (
    "backends",
    "patterns",
    "conformance",
    "generate",
    "embed",
    "inspect",
    "run",
    "models",
    "chat",
    "serve",
)

_LEVELS: Final = ("debug", "info", "warning", "error")
_logger = logging.getLogger(__name__)


def _load_verbs(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> list[str]:
    """Register every importable verb module; return the names registered."""
    registered = []
    for verb in VERBS:
        module_name = f"{__package__}.{verb}"
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue  # this verb is not part of the installed omnitensor
            _logger.warning("omnitensor %s: unavailable (%s)", verb, exc)
            continue
        except ImportError as exc:
            _logger.warning("omnitensor %s: unavailable (%s)", verb, exc)
            continue
        register = getattr(module, "register", None)
        if register is None:
            _logger.warning("omnitensor %s: module %s has no register()", verb, module_name)
            continue
        register(subparsers)
        registered.append(verb)
    return registered


def build_parser() -> argparse.ArgumentParser:
    """The ``omnitensor`` parser with every available verb."""
    parser = argparse.ArgumentParser(
        prog="omnitensor",
        description="Portable tensors and models: run models (generate, chat, serve, embed), "
        "inspect weight files, backends, ops, rewrites and conformance.",
    )
    parser.add_argument("--version", action="version", version=f"omnitensor {_version()}",
                        help="print the installed omnitensor version and exit")
    default = os.environ.get("OMNITENSOR_LOG", "warning").strip().lower()
    parser.add_argument(
        "--log-level",
        choices=_LEVELS,
        default=default if default in _LEVELS else "warning",
        help="logging level of the omnitensor loggers (default: $OMNITENSOR_LOG or warning)",
    )
    parser.add_argument(
        "--dump-dir",
        metavar="DIR",
        default=None,
        help="write every program before/after optimization and a trace JSON per realization "
        "to DIR (same as OMNITENSOR_DUMP_DIR)",
    )
    subparsers = parser.add_subparsers(dest="verb", metavar="VERB")
    _load_verbs(subparsers)
    return parser


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("omnitensor")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever `sys.stderr` is at emit time (tests and pipes replace it)."""

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        """Ignored: the stream is always the current `sys.stderr`."""


def _configure_logging(level: str) -> None:
    logger = logging.getLogger("omnitensor")
    logger.setLevel(level.upper())
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(name)s: %(levelname)s: %(message)s"))
        logger.addHandler(handler)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``omnitensor`` command.

    Args:
        argv: arguments without the program name; None reads ``sys.argv[1:]``.

    Returns:
        The process exit status (0 on success).
    """
    # Logging first, so that problems while importing verb modules are shown at the asked level.
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--log-level", choices=_LEVELS, default=None)
    known, _ = early.parse_known_args(argv)
    env_level = os.environ.get("OMNITENSOR_LOG", "warning").strip().lower()
    _configure_logging(known.log_level or (env_level if env_level in _LEVELS else "warning"))
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.dump_dir:
        from ..optimizer.dump import set_dump_dir

        set_dump_dir(args.dump_dir)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    status: int = func(args)
    return status
