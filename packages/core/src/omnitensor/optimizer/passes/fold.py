"""Constant folding through the ops' reference kernels, bounded in size.

An instruction whose operands are all constants (or small `iota`s) is evaluated with
`ir.interpret.run_instruction` and replaced by `constant`s, when its results hold at most
`fold_limit` elements. `rng` with a constant key folds too: the same key gives the same bits.
Broadcasts of literals are never folded (they stay splats); instead an elementwise op of splats
is computed once on the scalars and broadcast (`fold_splats`).
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from ...ir.interpret import run_instruction
from ...ir.opdef import Trait
from ...ir.program import Instruction
from ...ir.types import TensorType, Value
from ..registry import pattern
from ..rewrite import Rewriter, constant_array, is_pure, opdef_or_none

__all__ = ["DEFAULT_FOLD_LIMIT", "PASS_NAME", "fold_limit"]

PASS_NAME = "fold"
DEFAULT_FOLD_LIMIT = 4096
# Operands bigger than this are not read, however small the result (a reduce over a huge literal).
_OPERAND_LIMIT = 1 << 20

_LIMIT: contextvars.ContextVar[int] = contextvars.ContextVar(
    "fold_limit", default=DEFAULT_FOLD_LIMIT
)

Array = np.ndarray[Any, Any]

# A broadcast of a literal is a splat every backend expresses for free; folding it would only
# turn a scalar into a big literal (which the plan cache then has to hash or pass as an input).
_NEVER_FOLD = frozenset({"constant", "iota", "broadcast_in_dim"})


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
    if not inst.operands or inst.op in _NEVER_FOLD or limit <= 0 or not is_pure(inst.op):
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
    results = run_instruction(inst, operands)
    for value, array in zip(inst.results, results, strict=True):
        # NOTE: kernels may return read-only views of their operands; a literal owns its data.
        literal = rw.emit_before(inst, "constant", value=np.array(array, copy=True, order="C"))
        rw.replace_all_uses(value, literal)
    return True


def _scalar_of_splat(rw: Rewriter, value: Value) -> Array | None:
    """The 0-d literal `value` broadcasts (``broadcast_in_dim(constant 0-d, dims=())``)."""
    inst = rw.producer(value)
    if inst is None or inst.op != "broadcast_in_dim" or tuple(inst.attrs.get("dims", ())) != ():
        return None
    data = constant_array(rw, inst.operands[0])
    return data if data is not None and data.ndim == 0 else None


@pattern("fold_splats", pass_name=PASS_NAME)
def fold_splats(rw: Rewriter, inst: Instruction) -> bool:
    """elementwise(splat a, splat b) -> splat(elementwise(a, b)): computed once, on scalars."""
    if not inst.operands or len(inst.results) != 1 or inst.op in _NEVER_FOLD:
        return False
    opdef = opdef_or_none(inst.op)
    result = inst.result.type
    if opdef is None or not opdef.has(Trait.ELEMENTWISE) or not isinstance(result, TensorType):
        return False
    scalars = []
    for v in inst.operands:
        scalar = _scalar_of_splat(rw, v)
        if scalar is None:
            return False
        scalars.append(scalar)
    # The same op on 0-d operands: the kernel and its result check run on one element.
    operands = [Value(-1 - k, TensorType((), v.type.dtype))
                for k, v in enumerate(inst.operands) if isinstance(v.type, TensorType)]
    scalar_inst = Instruction(inst.id, inst.op, operands, inst.attrs,
                              [Value(-1, TensorType((), result.dtype))])
    value = run_instruction(scalar_inst, scalars)[0]
    literal = rw.emit_before(inst, "constant", value=np.array(value, copy=True))
    splat = rw.emit_before(inst, "broadcast_in_dim", literal, shape=result.shape, dims=())
    rw.replace_all_uses(inst.result, splat)
    return True
