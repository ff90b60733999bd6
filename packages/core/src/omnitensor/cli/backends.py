"""``omnitensor backends``: what is installed, what can run, what is selected, and a smoke test.

Lists every entry point of ``omnitensor.backends`` (distribution, version, contract, availability
with its reason, devices, priority), names the backend ``OMNITENSOR_BACKEND`` selects now, and
runs ``exp(x) + x`` on each available backend against the reference interpreter. Communicators
(``omnitensor_register_communicators``) are listed after the backends, with how this process was
launched (mpiexec, srun or a single process).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..backend import registry
from ..backend.communicators import detect_launch, list_communicators
from ..backend.contract import CONTRACT_VERSION
from ..dtypes import float32
from ..errors import OmnitensorError
from ..ir.builder import Builder
from ..ir.interpret import evaluate
from ..ir.program import Function
from ..ir.types import TensorType

__all__ = ["register", "run", "smoke"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``backends`` verb."""
    parser = subparsers.add_parser(
        "backends",
        help="list installed backends, their availability and the selected one",
        description="List every backend entry point with its distribution, version, contract "
        "compatibility, availability (and why not), devices and priority; show which backend "
        "OMNITENSOR_BACKEND selects now; run a tiny computation on each available backend and "
        "compare it with the reference interpreter.",
    )
    parser.add_argument("--json", action="store_true", help="print JSON for machines")
    parser.add_argument("--no-smoke", action="store_true", help="skip the smoke computation")
    parser.set_defaults(func=run)


def _smoke_program() -> tuple[Function, np.ndarray[Any, Any]]:
    builder = Builder("smoke")
    x = builder.input(TensorType((8,), float32), name="x")
    y = builder.emit("add", builder.emit("exp", x), x)
    return builder.build([y]), np.linspace(-2.0, 2.0, 8, dtype=np.float32)


def smoke(name: str) -> dict[str, Any]:
    """Run ``exp(x) + x`` (float32[8]) on backend `name`; compare with the reference interpreter.

    Returns:
        ``{"status": "ok" | "mismatch" | "unsupported" | "error", "detail": str,
        "max_abs_err": float | None}``.
    """
    function, x = _smoke_program()
    (expected,) = evaluate(function, [x])
    try:
        backend = registry.get_backend(name)
        backend.check(function)
    except OmnitensorError as exc:
        status = "unsupported" if isinstance(exc, NotImplementedError) else "error"
        return {"status": status, "detail": str(exc), "max_abs_err": None}
    try:
        executable = backend.compile(function)
        (out,) = backend.run(executable, [backend.upload(x)])
        actual = backend.download(out)
    except Exception as exc:  # the CLI reports any backend failure instead of crashing
        return {"status": "error", "detail": f"{type(exc).__name__}: {exc}", "max_abs_err": None}
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return {
            "status": "mismatch",
            "detail": f"got {actual.dtype}{list(actual.shape)}, expected "
            f"{expected.dtype}{list(expected.shape)}",
            "max_abs_err": None,
        }
    err = float(np.max(np.abs(actual.astype(np.float64) - expected.astype(np.float64))))
    ok = bool(np.allclose(actual, expected, rtol=1e-5, atol=1e-6))
    return {
        "status": "ok" if ok else "mismatch",
        "detail": "exp(x)+x on float32[8] vs the reference interpreter",
        "max_abs_err": err,
    }


def _devices_text(devices: Mapping[str, Any] | Sequence[str]) -> str:
    if isinstance(devices, Mapping):
        return ", ".join(f"{k}={v}" for k, v in devices.items())
    return ", ".join(str(d) for d in devices)


def _selection() -> tuple[str | None, str | None]:
    try:
        return registry.current_backend_name(), None
    except OmnitensorError as exc:
        return None, str(exc)


def collect(*, with_smoke: bool = True) -> dict[str, Any]:
    """Everything the verb shows, as plain data (the ``--json`` document)."""
    infos = registry.list_backends()
    selected, selection_error = _selection()
    rows = []
    for info in infos:
        row = dataclasses.asdict(info)
        row["devices"] = dict(info.devices) if isinstance(info.devices, Mapping) else list(
            info.devices
        )
        row["smoke"] = smoke(info.name) if with_smoke and info.available else None
        rows.append(row)
    launch = detect_launch()
    return {
        "launch": dataclasses.asdict(launch),
        "communicators": [dataclasses.asdict(c) for c in list_communicators()],
        "contract_version": CONTRACT_VERSION,
        "OMNITENSOR_BACKEND": os.environ.get("OMNITENSOR_BACKEND"),
        "OMNITENSOR_DISABLE_PLUGINS": os.environ.get("OMNITENSOR_DISABLE_PLUGINS"),
        "selected": selected,
        "selection_error": selection_error,
        "backends": rows,
    }


def render(doc: Mapping[str, Any]) -> str:
    """The human-readable listing of a `collect` document."""
    env = doc["OMNITENSOR_BACKEND"]
    lines = [
        f"omnitensor backends (backend contract {doc['contract_version']}; "
        f"OMNITENSOR_BACKEND={env!r})" if env else
        f"omnitensor backends (backend contract {doc['contract_version']}; "
        f"OMNITENSOR_BACKEND unset: highest priority wins)",
        "",
    ]
    if not doc["backends"]:
        lines.append("  (no backend entry point found)")
    for row in doc["backends"]:
        mark = "*" if row["selected"] else " "
        dist = f"{row['distribution'] or '?'} {row['version'] or ''}".strip()
        contract = "ok" if row["contract_ok"] else "INCOMPATIBLE"
        state = f"priority {row['priority']}" if row["available"] else "UNAVAILABLE"
        lines.append(
            f"{mark} {row['name']:<8} {dist:<32} contract {row['contract_version']} {contract:<4}"
            f"  {state}"
        )
        lines.append(f"      entry point: {row['plugin']} = {row['value']}")
        if not row["available"]:
            lines.append(f"      reason: {row['reason']}")
        if row["devices"]:
            lines.append(f"      devices: {_devices_text(row['devices'])}")
        if row["smoke"] is not None:
            s = row["smoke"]
            err = "" if s["max_abs_err"] is None else f" (max abs err {s['max_abs_err']:.2e})"
            lines.append(f"      smoke: {s['status']}{err}: {s['detail']}")
    lines.append("")
    if doc["selected"] is not None:
        lines.append(f"selected: {doc['selected']}")
    else:
        lines.append(f"selected: none: {doc['selection_error']}")
    lines.extend(_communicator_lines(doc))
    return "\n".join(lines)


def _communicator_lines(doc: Mapping[str, Any]) -> list[str]:
    launch = doc.get("launch") or {}
    lines = ["", "communicators (multi-process; omnitensor.distributed):"]
    if not doc.get("communicators"):
        lines.append("  (none installed: pip install omnitensor-comm-mpi for mpiexec/srun jobs)")
    for row in doc.get("communicators", []):
        state = f"priority {row['priority']}" if row["available"] else "UNAVAILABLE"
        lines.append(f"  {row['name']:<8} {row['distribution'] or '?':<32} contract "
                     f"{row['contract_version']}  {state}")
        if not row["available"]:
            lines.append(f"      reason: {row['reason']}")
    if launch.get("launcher"):
        lines.append(f"launched by: {launch['launcher']} ({launch['variable']}={launch['rank']},"
                     f" world size {launch['world_size']})")
    else:
        lines.append("launched by: nothing (a single process: world size 1)")
    return lines


def run(args: argparse.Namespace) -> int:
    """Print the listing (or JSON).

    Returns:
        0; 1 when no backend can be selected or a smoke computation failed or mismatched.
    """
    doc = collect(with_smoke=not getattr(args, "no_smoke", False))
    if getattr(args, "json", False):
        sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
    else:
        sys.stdout.write(render(doc) + "\n")
    failed = any(
        row["smoke"] is not None and row["smoke"]["status"] in ("mismatch", "error")
        for row in doc["backends"]
    )
    return 1 if failed or doc["selected"] is None else 0
