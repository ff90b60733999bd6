"""The optimizer's passes: pattern passes (canonicalize, fold), CSE, DCE and param-only hoisting.

`PatternPass` runs the registered patterns of one pass name through the greedy driver; the
other passes are plain classes implementing `context.Pass`.
"""

from __future__ import annotations

from typing import final

from ...ir.program import Function
from ..context import PassContext, PassResult
from ..registry import patterns_for
from ..rewrite import apply_patterns
from . import canonicalize as canonicalize
from . import fold as fold
from .composites import ExpandCompositesPass as ExpandCompositesPass
from .composites import expand_composites as expand_composites
from .cse import CSEPass as CSEPass
from .dce import DCEPass as DCEPass
from .hoist import HoistCache as HoistCache
from .hoist import HoistSplit as HoistSplit
from .hoist import plan_hoist as plan_hoist
from .hoist import split_param_only as split_param_only
from .raise_composites import RaiseCompositesPass as RaiseCompositesPass
from .raise_composites import raise_composites as raise_composites

__all__ = [
    "CSEPass",
    "DCEPass",
    "ExpandCompositesPass",
    "HoistCache",
    "HoistSplit",
    "PatternPass",
    "RaiseCompositesPass",
    "expand_composites",
    "plan_hoist",
    "raise_composites",
    "split_param_only",
]


@final
class PatternPass:
    """Applies every registered pattern whose ``pass_name`` is `name`, greedily, to fixed point.

    Args:
        name: the pass name (``"canonicalize"``, ``"fold"``).
        erase_dead: let the driver erase dead pure instructions as it meets them.
    """

    def __init__(self, name: str, *, erase_dead: bool = True) -> None:
        self.name = name
        self.erase_dead = erase_dead
        self.last_driver_result: object | None = None

    def run(self, fn: Function, ctx: PassContext) -> PassResult:
        """Rewrite `fn` in place with this pass's patterns."""
        with fold.fold_limit(ctx.fold_limit):
            driven = apply_patterns(fn, patterns_for(self.name), erase_dead=self.erase_dead)
        self.last_driver_result = driven
        counts = dict(driven.rewrites)
        counts["attempts"] = sum(driven.attempts.values())
        counts["cache_skips"] = sum(driven.cache_skips.values())
        return PassResult(
            changed=driven.changed,
            rewrites=driven.total_rewrites,
            erased=driven.erased_dead,
            counts=counts,
            events=list(driven.events),
        )
