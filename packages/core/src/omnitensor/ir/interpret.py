"""The reference interpreter: runs a PTIR function with the ops' numpy reference kernels.

It is the living definition of every op: each result is checked against the instruction's
declared type. Constant folding, the `ref` backend and other backends' fallbacks call it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import VerificationError
from .opdef import get_op
from .program import Function, Instruction
from .types import QTensorType, TensorType, Type

__all__ = ["check_result", "evaluate", "run_instruction"]

Array = np.ndarray[Any, Any]


def check_result(inst: Instruction, type: Type, array: Any) -> Array:
    """`array` as an ndarray of exactly `type`, or VerificationError naming the op.

    Kernels may return numpy scalars for 0-d results; those are wrapped, never re-typed.
    """
    out = np.asarray(array)
    if isinstance(type, QTensorType):
        expected_shape, expected_dtype = type.storage_shape, np.dtype(np.uint8)
    else:
        expected_shape, expected_dtype = type.shape, type.dtype.np
    if out.shape != expected_shape or out.dtype != expected_dtype:
        raise VerificationError(
            f"{inst.op}: reference kernel returned {out.dtype}{list(out.shape)} "
            f"(expected {expected_dtype}{list(expected_shape)})",
            op=inst.op,
        )
    return out


def run_instruction(inst: Instruction, operands: Sequence[Array]) -> list[Array]:
    """Apply the reference kernel of `inst` to host arrays and check every result."""
    opdef = get_op(inst.op)
    with np.errstate(all="ignore"):
        result = opdef.reference(*opdef.group(operands), **inst.attrs)
    results = result if isinstance(result, tuple) else (result,)
    return [check_result(inst, v.type, r) for v, r in zip(inst.results, results, strict=True)]


def evaluate(function: Function, inputs: Sequence[Array]) -> list[Array]:
    """Run `function` on host arrays with the reference kernels; return its outputs.

    Args:
        function: a verified PTIR function.
        inputs: one array per function input, of the input's type.
    """
    env: dict[int, Array] = {}
    for spec, array in zip(function.inputs, inputs, strict=True):
        env[spec.value.id] = check_result_input(spec.value.type, array)
    for inst in function.body:
        outs = run_instruction(inst, [env[v.id] for v in inst.operands])
        for value, out in zip(inst.results, outs, strict=True):
            env[value.id] = out
    return [env[v.id] for v in function.outputs]


def check_result_input(type: Type, array: Any) -> Array:
    """An input array checked against its declared type (shape and dtype)."""
    out = np.asarray(array)
    shape = type.storage_shape if isinstance(type, QTensorType) else type.shape
    dtype = np.dtype(np.uint8) if isinstance(type, QTensorType) else type.dtype.np
    if out.shape != shape or out.dtype != dtype:
        raise VerificationError(
            f"input: array {out.dtype}{list(out.shape)} does not match type {type}"
        )
    return out


def is_dense(type: Type) -> bool:
    """True for TensorType."""
    return isinstance(type, TensorType)
