"""omnitensor-conformance: every backend against the reference interpreter (DESIGN §9).

Public API for case authors: `Case`, `Sample`, `Arg`, `sample`, `cases` (per-op samples),
`register_case_source` (whole families), `register_fill`, `find_case` (reproduce a failure),
and `compare`/`tolerance_for`. The pytest plugin lives in `plugin`.
"""

from __future__ import annotations

from .case import Arg as Arg
from .case import Case as Case
from .case import Sample as Sample
from .case import all_cases as all_cases
from .case import case_sources as case_sources
from .case import cases as cases
from .case import find_case as find_case
from .case import register_case_source as register_case_source
from .case import sample as sample
from .compare import compare as compare
from .compare import tolerance_for as tolerance_for
from .values import register_fill as register_fill

__all__ = [
    "Arg", "Case", "Sample", "all_cases", "case_sources", "cases", "compare", "find_case",
    "register_case_source", "register_fill", "sample", "tolerance_for",
]
