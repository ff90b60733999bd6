"""The coverage matrix (op × dtype: pass / fail / unsupported / xfail) and its renderings.

JSON and Markdown forms, and the one-line summary printed at the end of a session.
"""

from __future__ import annotations

import json
import pathlib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from omnitensor.dtypes import ALL

__all__ = ["CELL_ORDER", "Matrix", "PerfRow"]

#: Cell statuses, worst first: a cell shows the worst status among its samples, except that a
#: cell with passes and unsupported samples is ``partial``.
CELL_ORDER = ("fail", "xfail", "partial", "pass", "expanded", "unsupported")
_SYMBOL = {"pass": "✅", "fail": "❌", "unsupported": "·", "xfail": "⚠️", "partial": "◐",
           "expanded": "⤵"}


@dataclass(frozen=True)
class PerfRow:
    """One perf-mode measurement."""

    case: str
    op: str
    dtype: str
    backend_s: float
    reference_s: float
    bytes_moved: int
    flops: float | None

    def rate(self, seconds: float) -> str:
        """GFLOP/s when the case counts flops, else GB/s."""
        if self.flops:
            return f"{self.flops / seconds / 1e9:.2f} GFLOP/s"
        return f"{self.bytes_moved / seconds / 1e9:.2f} GB/s"


@dataclass
class Matrix:
    """Outcomes of one session, per case, aggregated into op × dtype cells.

    Attributes:
        backend: the backend's name.
        mode: the session's mode.
        loosened: dtype -> factor the backend asked for (after the cap).
        capped: dtypes whose requested factor exceeded the cap.
        outcomes: case id -> (op, dtype, status).
        stale_xfails: known-failure entries that passed or match no case, with the reason.
        perf: perf-mode rows.
    """

    backend: str
    mode: str = "test"
    loosened: dict[str, float] = field(default_factory=dict)
    capped: list[str] = field(default_factory=list)
    outcomes: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    stale_xfails: dict[str, str] = field(default_factory=dict)
    perf: list[PerfRow] = field(default_factory=list)

    def record(self, case_id: str, op: str, dtype: str, status: str) -> None:
        """Record one case's status.

        One of ``pass``, ``fail``, ``unsupported``, ``xfail`` or ``expanded`` (a composite the
        backend does not lower, run as its decomposition).
        """
        self.outcomes[case_id] = (op, dtype, status)

    def cells(self) -> dict[str, dict[str, str]]:
        """Op -> dtype -> cell status."""
        grouped: dict[str, dict[str, list[str]]] = {}
        for op, dtype, status in self.outcomes.values():
            grouped.setdefault(op, {}).setdefault(dtype, []).append(status)
        out: dict[str, dict[str, str]] = {}
        for op, by_dtype in grouped.items():
            out[op] = {}
            for dtype, statuses in by_dtype.items():
                kinds = set(statuses)
                if "fail" in kinds:
                    cell = "fail"
                elif "xfail" in kinds:
                    cell = "xfail"
                elif kinds == {"pass"}:
                    cell = "pass"
                elif kinds == {"expanded"}:
                    cell = "expanded"
                elif kinds <= {"pass", "expanded"}:
                    cell = "pass"
                elif kinds & {"pass", "expanded"}:
                    cell = "partial"
                else:
                    cell = "unsupported"
                out[op][dtype] = cell
        return out

    def counts(self) -> Counter[str]:
        """Case counts by status."""
        return Counter(status for _, _, status in self.outcomes.values())

    def summary(self) -> str:
        """The one-line summary: ``conformance[cpu] test: 812 pass, 0 fail, ...``."""
        counts = self.counts()
        cells = Counter(c for row in self.cells().values() for c in row.values())
        parts = [f"{counts.get(s, 0)} {s}" for s in ("pass", "fail", "unsupported", "xfail")]
        if counts.get("expanded"):
            parts.append(f"{counts['expanded']} expanded")
        line = (f"conformance[{self.backend}] {self.mode}: {', '.join(parts)} cases; "
                f"{len(self.cells())} ops, {sum(cells.values())} op×dtype cells "
                f"({cells.get('pass', 0)} pass, {cells.get('partial', 0)} partial, "
                f"{cells.get('fail', 0)} fail, {cells.get('unsupported', 0)} unsupported, "
                f"{cells.get('xfail', 0)} xfail)")
        if self.loosened:
            line += "; loosened " + ", ".join(f"{d} x{f:g}" for d, f in self.loosened.items())
        if self.stale_xfails:
            line += f"; {len(self.stale_xfails)} stale xfail entries"
        return line

    def to_json(self) -> dict[str, Any]:
        """The matrix as a JSON-ready dict (cells, per-case statuses, counts, loosening)."""
        return {
            "backend": self.backend,
            "mode": self.mode,
            "summary": self.summary(),
            "loosened": self.loosened,
            "loosen_capped": self.capped,
            "counts": dict(self.counts()),
            "matrix": self.cells(),
            "cases": {cid: status for cid, (_, _, status) in sorted(self.outcomes.items())},
            "stale_xfails": self.stale_xfails,
            "perf": [vars(row) for row in self.perf],
        }

    def to_markdown(self) -> str:
        """The matrix as a Markdown table with a legend (ops as rows, dtypes as columns)."""
        cells = self.cells()
        used = {d for row in cells.values() for d in row}
        dtypes = [d.name for d in ALL if d.name in used] + sorted(used - {d.name for d in ALL})
        lines = [f"# Conformance of `{self.backend}` ({self.mode} mode)", "", self.summary(), "",
                 "Legend: ✅ pass · ❌ fail · ⚠️ known failure (xfail) · ◐ partial (some "
                 "samples unsupported) · ⤵ expanded (no lowering: the decomposition ran) · `·` "
                 "unsupported · blank: the op does not declare the "
                 "dtype.", ""]
        if self.loosened:
            lines += ["Loosened tolerances: " + ", ".join(
                f"{d} ×{f:g}" + (" (capped)" if d in self.capped else "")
                for d, f in self.loosened.items()), ""]
        lines.append("| op | " + " | ".join(dtypes) + " |")
        lines.append("|---|" + "---|" * len(dtypes))
        for op in sorted(cells):
            row = [_SYMBOL[cells[op][d]] if d in cells[op] else "" for d in dtypes]
            lines.append(f"| `{op}` | " + " | ".join(row) + " |")
        if self.stale_xfails:
            lines += ["", "## Stale known-failure entries", ""]
            lines += [f"- `{cid}`: {why}" for cid, why in sorted(self.stale_xfails.items())]
        if self.perf:
            lines += ["", "## Performance", "", "| case | backend | rate | reference | ratio |",
                      "|---|---|---|---|---|"]
            for r in self.perf:
                lines.append(f"| `{r.case}` | {r.backend_s * 1e3:.3f} ms | {r.rate(r.backend_s)} "
                             f"| {r.reference_s * 1e3:.3f} ms | "
                             f"{r.reference_s / max(r.backend_s, 1e-12):.2f}x |")
        failing = sorted(cid for cid, (_, _, s) in self.outcomes.items() if s == "fail")
        if failing:
            lines += ["", "## Failing cases", ""] + [f"- `{cid}`" for cid in failing]
        return "\n".join(lines) + "\n"

    def write(self, directory: str | pathlib.Path) -> list[pathlib.Path]:
        """Write ``conformance-<backend>.json`` and ``.md`` into `directory` (created)."""
        root = pathlib.Path(directory)
        root.mkdir(parents=True, exist_ok=True)
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.backend)
        json_path = root / f"conformance-{safe}.json"
        md_path = root / f"conformance-{safe}.md"
        json_path.write_text(json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n")
        md_path.write_text(self.to_markdown())
        return [json_path, md_path]


def loosen_table(requested: Mapping[str, float], cap: float) -> tuple[dict[str, float], list[str]]:
    """Clamp a backend's requested loosening factors to `cap`; also return the capped dtypes."""
    out, capped = {}, []
    for dtype, factor in requested.items():
        if factor > cap:
            capped.append(dtype)
        if factor > 1.0:
            out[dtype] = min(float(factor), cap)
    return out, capped
