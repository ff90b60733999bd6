"""The ``omnitensor`` command line: `main` is the console script's entry point.

The verbs live in one module each (``backends``, ``patterns``, ``conformance``); `main` wires
them into argparse. Only the CLI prints; library code logs.
"""

from __future__ import annotations

from .main import main as main

__all__ = ["main"]
