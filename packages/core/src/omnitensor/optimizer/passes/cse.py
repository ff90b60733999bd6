"""Common-subexpression elimination over straight-line SSA.

Two instructions are the same when op, operands, attributes (constants compared by value up to
a size limit) and result types are equal; the later one is replaced by the earlier, which
dominates it in a straight-line body. `rng` merges too: the same key gives the same bits.
"""

from __future__ import annotations

import struct
from collections.abc import Hashable
from typing import Any, final

import numpy as np

from ...dtypes import DType
from ...ir.program import Function, Instruction
from ..context import PassContext, PassResult
from ..rewrite import Rewriter, is_pure

__all__ = ["CSEPass", "instruction_key"]


def _attr_key(value: Any, constant_limit: int) -> Hashable:
    if isinstance(value, np.ndarray):
        if value.size <= constant_limit:
            return ("array", str(value.dtype), value.shape, np.ascontiguousarray(value).tobytes())
        return ("array-id", id(value))
    if isinstance(value, float):
        # NOTE: by bits, so that -0.0 != 0.0 and nan == nan (a == comparison gets both wrong).
        return ("float", struct.pack("<d", value))
    if isinstance(value, (tuple, list)):
        return ("tuple", tuple(_attr_key(v, constant_limit) for v in value))
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, str, DType)) or value is None:
        return (type(value).__name__, value)
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, _attr_key(v, constant_limit)) for k, v in value.items())))
    try:
        hash(value)
    except TypeError:
        return ("object", id(value))
    return ("object", type(value).__name__, value)


def instruction_key(inst: Instruction, *, constant_limit: int = 1024) -> Hashable:
    """The structural identity of `inst` within its function (operands by value id)."""
    attrs = tuple(sorted((k, _attr_key(v, constant_limit)) for k, v in inst.attrs.items()))
    return (inst.op, tuple(v.id for v in inst.operands), attrs,
            tuple(str(v.type) for v in inst.results))


@final
class CSEPass:
    """Merge instructions that compute the same thing (see the module docstring)."""

    name = "cse"

    def run(self, fn: Function, ctx: PassContext) -> PassResult:
        """Merge duplicates in `fn` in place."""
        rw = Rewriter(fn)
        seen: dict[Hashable, Instruction] = {}
        result = PassResult()
        for inst in rw:
            if not is_pure(inst.op):
                continue
            # Operands were already canonicalized to their first occurrence (program order).
            key = instruction_key(inst, constant_limit=ctx.cse_constant_limit)
            first = seen.get(key)
            if first is None:
                seen[key] = inst
                continue
            for old, new in zip(inst.results, first.results, strict=True):
                rw.replace_all_uses(old, new)
            rw.erase(inst)
            result.rewrites += 1
            result.erased += 1
            result.events.append(("cse", inst.id))
        rw.commit()
        result.changed = result.rewrites > 0
        result.counts["merged"] = result.rewrites
        return result
