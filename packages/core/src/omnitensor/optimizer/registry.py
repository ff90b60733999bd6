"""The rewrite-pattern registry: every pattern the optimizer's passes apply, with its pass.

Patterns register themselves when their pass module is imported (`@pattern(...)`);
`all_patterns()` imports the passes first, so `omnitensor patterns --rewrites` sees all of them.
The greedy driver that applies them lives in `rewrite`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, final

if TYPE_CHECKING:
    from ..ir.program import Instruction
    from .rewrite import Rewriter

__all__ = ["Pattern", "PatternFn", "all_patterns", "pattern", "patterns_for", "register_pattern"]

PatternFn = Callable[["Rewriter", "Instruction"], bool]


@final
@dataclass(frozen=True)
class Pattern:
    """One rewrite rule applied by the greedy driver.

    Attributes:
        name: unique name (``"add_zero"``); used in stats, traces and the failure cache.
        pass_name: the pass that applies it (``"canonicalize"``, ``"fold"``).
        fn: ``(rewriter, instruction) -> bool``; True only when it changed the IR.
        ops: the op names of the root instructions it can fire on; None means any op.
        doc: one line saying what it rewrites (``"add(x, 0) -> x"``).
    """

    name: str
    pass_name: str
    fn: PatternFn
    ops: frozenset[str] | None
    doc: str

    def __call__(self, rewriter: Rewriter, inst: Instruction) -> bool:
        """Try the pattern on `inst`; True when the IR changed."""
        return self.fn(rewriter, inst)


_PATTERNS: dict[str, Pattern] = {}


def register_pattern(p: Pattern) -> Pattern:
    """Add `p` to the registry.

    Raises:
        ValueError: when another pattern already has its name.
    """
    if p.name in _PATTERNS and _PATTERNS[p.name] is not p:
        raise ValueError(f"pattern {p.name!r} is registered twice")
    _PATTERNS[p.name] = p
    return p


def pattern(name: str, *, pass_name: str, ops: Sequence[str] | None = None,
            doc: str | None = None) -> Callable[[PatternFn], Pattern]:
    """Decorator registering a pattern function.

    Args:
        name: the pattern's unique name.
        pass_name: the pass that applies it.
        ops: root op names it can fire on (None: any op).
        doc: one-line description; defaults to the function's docstring's first line.
    """

    def wrap(fn: PatternFn) -> Pattern:
        text = doc if doc is not None else (inspect.getdoc(fn) or "").strip().split("\n")[0]
        return register_pattern(
            Pattern(name, pass_name, fn, None if ops is None else frozenset(ops), text)
        )

    return wrap


def _load_passes() -> None:
    # Importing the pass modules registers their patterns.
    from .passes import canonicalize, fold  # noqa: F401


def all_patterns() -> list[Pattern]:
    """Every registered pattern, sorted by (pass, name)."""
    _load_passes()
    return sorted(_PATTERNS.values(), key=lambda p: (p.pass_name, p.name))


def patterns_for(pass_name: str) -> list[Pattern]:
    """The registered patterns a pass applies, in registration order."""
    _load_passes()
    return [p for p in _PATTERNS.values() if p.pass_name == pass_name]
