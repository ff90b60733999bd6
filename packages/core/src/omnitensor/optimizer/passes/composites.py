"""`expand_composites`: inline the decomposition of every composite the backend cannot lower.

A composite stays when the backend's ``supports`` accepts it (its lowering table has an entry
in that dtype and the predicate agrees); otherwise its portable decomposition replaces it, so a
backend without a lowering still runs everything, and runs it as the reference defines it.
Without a backend (``PassContext.supports`` is None) nothing is expanded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import final

from ...ir.opdef import Trait, all_ops, decomposition
from ...ir.program import Function, Instruction
from ...ir.types import Value
from ..context import PassContext, PassResult

__all__ = ["ExpandCompositesPass", "expand_composites"]

#: ``instruction -> reason it is not supported, or None`` (a backend's ``supports``).
Supports = Callable[[Instruction], str | None]


def expand_composites(fn: Function, supports: Supports) -> int:
    """Inline, in place, every composite `supports` rejects; return how many were expanded.

    Decompositions are expanded recursively (a decomposition may itself use composites).
    """
    ops = all_ops()
    expanded = 0
    body: list[Instruction] = []

    def emit(inst: Instruction, operands: tuple[Value, ...], fresh: bool) -> tuple[Value, ...]:
        nonlocal expanded
        opdef = ops[inst.op]
        if opdef.has(Trait.COMPOSITE):
            probe = Instruction(inst.id, inst.op, operands, inst.attrs, inst.results)
            if supports(probe) is not None:
                expanded += 1
                inner = decomposition(opdef, [v.type for v in operands], dict(inst.attrs))
                local = {v.id: o for v, o in zip(inner.input_values, operands, strict=True)}
                for sub in inner.body:
                    outs = emit(sub, tuple(local[v.id] for v in sub.operands), True)
                    local.update({r.id: o for r, o in zip(sub.results, outs, strict=True)})
                return tuple(local[v.id] for v in inner.outputs)
        if fresh:
            inst = Instruction(fn.new_instruction_id(), inst.op, operands, dict(inst.attrs),
                               tuple(fn.new_value(r.type) for r in inst.results))
        elif operands != inst.operands:
            inst = Instruction(inst.id, inst.op, operands, inst.attrs, inst.results)
        body.append(inst)
        return inst.results

    subst: dict[int, Value] = {}
    for inst in fn.body:
        outs = emit(inst, tuple(subst.get(v.id, v) for v in inst.operands), False)
        subst.update({r.id: o for r, o in zip(inst.results, outs, strict=True) if r is not o})
    if expanded:
        fn.body = body
        fn.outputs = [subst.get(v.id, v) for v in fn.outputs]
    return expanded


@final
class ExpandCompositesPass:
    """The pipeline's expansion step, for the backend in the context (see the module doc)."""

    name = "expand_composites"

    def run(self, fn: Function, ctx: PassContext) -> PassResult:
        """Expand the composites `ctx.supports` rejects (nothing without a backend)."""
        if ctx.supports is None:
            return PassResult()
        count = expand_composites(fn, ctx.supports)
        return PassResult(changed=count > 0, rewrites=count, counts={"expanded": count})
