"""Figures a benchmark hands to `run.py`: one JSON line each, appended to ``$OMNI_BENCH_FIGURES``.

A benchmark run on its own prints its tables and records nothing; `run.py` sets the variable,
runs every benchmark in its own process, then reads the figures back to print one table.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

ENV = "OMNI_BENCH_FIGURES"
#: A prefix `run.py` gives the figures of one run of a benchmark (``cold``, ``p128``...).
TAG_ENV = "OMNI_BENCH_TAG"


def threads() -> int:
    """Threads every system of a benchmark gets: ``OMNITENSOR_NUM_THREADS``, else all cores."""
    raw = os.environ.get("OMNITENSOR_NUM_THREADS", "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else os.cpu_count() or 1


def record(name: str, value: float, **details: Any) -> None:
    """Append the figure `name` (with optional details) when `run.py` collects figures."""
    path = os.environ.get(ENV)
    if not path:
        return
    tag = os.environ.get(TAG_ENV)
    name = f"{tag}.{name}" if tag else name
    with Path(path).open("a") as out:
        out.write(json.dumps({"name": name, "value": value, **details}) + "\n")


def read(path: Path) -> dict[str, dict[str, Any]]:
    """Every recorded figure by name (a later record of a name replaces an earlier one)."""
    figures: dict[str, dict[str, Any]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            figures[entry["name"]] = entry
    return figures
