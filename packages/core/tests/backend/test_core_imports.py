"""The core never imports a backend package (DESIGN §1), nor names one in its selection logic."""

from __future__ import annotations

import ast
from pathlib import Path

import omnitensor.backend

SRC = Path(omnitensor.backend.__file__).resolve().parents[1]


def _imports(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def test_core_src_never_imports_a_backend_package() -> None:
    files = sorted(SRC.rglob("*.py"))
    assert len(files) > 10, SRC
    offenders = [
        f"{path.relative_to(SRC)}: import {name}"
        for path in files
        for name in _imports(path)
        if name.split(".")[0].startswith("omnitensor_backend")
    ]
    assert offenders == []


def test_core_src_never_imports_backend_packages_dynamically() -> None:
    offenders = [
        str(path.relative_to(SRC))
        for path in sorted(SRC.rglob("*.py"))
        if "import_module(\"omnitensor_backend" in path.read_text()
        or "import_module('omnitensor_backend" in path.read_text()
    ]
    assert offenders == []
