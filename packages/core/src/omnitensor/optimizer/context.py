"""The pass model: the `Pass` protocol, the `PassContext` it runs in and its `PassResult`.

Kept apart from `pipeline` so that passes (and backend plugins) can import it without importing
the pipeline that runs them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..ir.program import Function, Instruction

if TYPE_CHECKING:
    from .dump import Trace

__all__ = ["Pass", "PassContext", "PassResult"]


@dataclass
class PassResult:
    """What one run of a pass did.

    Attributes:
        changed: True when the function was modified.
        rewrites: rewrites (pattern applications, folded or merged instructions) performed.
        erased: instructions removed.
        counts: finer counts by name (per pattern, per kind), for stats and traces.
        events: ``(what, instruction id)`` pairs in order, for the dump trace.
    """

    changed: bool = False
    rewrites: int = 0
    erased: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    events: list[tuple[str, int]] = field(default_factory=list)


@runtime_checkable
class Pass(Protocol):
    """A transformation of a `Function` in place.

    A pass must keep the function's results equal (on the reference interpreter) for every
    input, keep SSA order and types valid, and report honestly whether it changed anything
    (the pipeline's fixed-point loops stop on that).
    """

    name: str

    def run(self, fn: Function, ctx: PassContext) -> PassResult:
        """Transform `fn` in place and say what changed."""
        ...


@dataclass
class PassContext:
    """Settings and sinks shared by the passes of one optimization.

    Attributes:
        backend: name of the backend the program is for (None: portable).
        backend_passes: passes a backend contributes (from the plugin hook), run once between
            the two fixed-point loops, in order. Objects with ``name`` and ``run(fn, ctx)``.
        hoist: split param-only work into a prelude (see `passes.hoist.split_param_only`).
        fold_limit: largest number of result elements constant folding may create.
        cse_constant_limit: constants up to this many elements are merged by value in CSE.
        trace: where pass and rewrite events go (a `dump.Trace`), or None.
        options: free-form settings for backend passes.
        supports: the backend's ``supports`` (instruction -> reason or None); composites it
            rejects are expanded (`passes.composites`). None: portable, nothing is expanded.
    """

    backend: str | None = None
    backend_passes: Sequence[Any] = ()
    hoist: bool = False
    fold_limit: int = 4096
    cse_constant_limit: int = 1024
    trace: Trace | None = None
    options: dict[str, Any] = field(default_factory=dict)
    supports: Callable[[Instruction], str | None] | None = None
