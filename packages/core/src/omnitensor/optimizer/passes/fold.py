"""Constant folding through the ops' reference kernels, bounded in size.

An instruction whose operands are all constants (or small `iota`s) is evaluated with
`ir.interpret.run_instruction` and replaced by `constant`s, when its results hold at most
`fold_limit` elements. `rng` with a constant key folds too: the same key gives the same bits.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from ...ir.interpret import run_instruction
from ...ir.opdef import get_op
from ...ir.program import Instruction
from ...ir.types import TensorType, Value
from ..registry import pattern
from ..rewrite import Rewriter, constant_array

__all__ = ["DEFAULT_FOLD_LIMIT", "PASS_NAME", "fold_limit"]

PASS_NAME = "fold"
DEFAULT_FOLD_LIMIT = 4096
# Operands bigger than this are not read, however small the result (a reduce over a huge literal).
_OPERAND_LIMIT = 1 << 20

_LIMIT: contextvars.ContextVar[int] = contextvars.ContextVar("fold_limit", default=DEFAULT_FOLD_LIMIT)

Array = np.ndarray[Any, Any]


@contextmanager
def fold_limit(elements: int) -> Iterator[None]:
    """Within the block, fold only results of at most `elements` elements (0 disables folding)."""
    token = _LIMIT.set(elements)
    try:
        yield
    finally:
        _LIMIT.reset(token)


def _literal(rw: Rewriter, value: Value, limit: int) -> Array | None:
    data = constant_array(rw, value)
    if data is not None:
        return data
    inst = rw.producer(value)
    if inst is not None and inst.op == "iota" and isinstance(value.type, TensorType) and (
        value.type.size <= limit
    ):
        return run_instruction(inst, [])[0]
    return None


@pattern("fold_constants", pass_name=PASS_NAME)
def fold_constants(rw: Rewriter, inst: Instruction) -> bool:
    """op(constants...) -> constant, evaluated by the reference kernel (results <= fold limit)."""
    limit = _LIMIT.get()
    if not inst.operands or inst.op in ("constant", "iota") or limit <= 0:
        return False
    if not all(isinstance(v.type, TensorType) for v in inst.results):
        return False
    if sum(v.type.size for v in inst.results if isinstance(v.type, TensorType)) > limit:
        return False
    if sum(getattr(v.type, "size", _OPERAND_LIMIT) for v in inst.operands) > _OPERAND_LIMIT:
        return False
    operands = []
    for v in inst.operands:
        data = _literal(rw, v, limit)
        if data is None:
            return False
        operands.append(data)
    get_op(inst.op)  # an unknown op raises here, naming it, rather than inside the kernel
    results = run_instruction(inst, operands)
    for value, array in zip(inst.results, results, strict=True):
        # NOTE: kernels may return read-only views of their operands; a literal owns its data.
        literal = rw.emit_before(inst, "constant", value=np.array(array, copy=True, order="C"))
        rw.replace_all_uses(value, literal)
    return True
