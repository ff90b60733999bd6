"""Dead-code elimination: pure instructions none of whose results reaches an output."""

from __future__ import annotations

from typing import final

from ...ir.program import Function
from ..context import PassContext, PassResult
from ..rewrite import is_pure

__all__ = ["DCEPass", "eliminate_dead_code"]


def eliminate_dead_code(fn: Function) -> int:
    """Remove dead pure instructions from `fn` in place; return how many were removed."""
    live: set[int] = {v.id for v in fn.outputs}
    keep = []
    for inst in reversed(fn.body):
        if not is_pure(inst.op) or any(v.id in live for v in inst.results):
            keep.append(inst)
            live.update(v.id for v in inst.operands)
    removed = len(fn.body) - len(keep)
    if removed:
        keep.reverse()
        fn.body = keep
    return removed


@final
class DCEPass:
    """Remove instructions whose results are never used (one backward sweep)."""

    name = "dce"

    def run(self, fn: Function, ctx: PassContext) -> PassResult:
        """Remove dead code from `fn` in place."""
        removed = eliminate_dead_code(fn)
        return PassResult(changed=removed > 0, rewrites=removed, erased=removed,
                          counts={"erased": removed})
