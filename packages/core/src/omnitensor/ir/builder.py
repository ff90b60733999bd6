"""`Builder`: records instructions into a new `Function`, checking each one as it is recorded.

Bad shapes or dtypes fail here, in the op's own `infer`, naming the op; never inside a kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, final

import numpy as np

from ..dtypes import DType, as_dtype
from ..errors import OmnitensorError
from .opdef import OpDef, get_op
from .program import Function, Input, Instruction, Role
from .types import QTensorType, TensorType, Type, Value

__all__ = ["Builder", "infer_types", "normalize_attrs"]


def normalize_attr(value: Any) -> Any:
    """One canonical form per attribute value: tuples not lists, Python scalars not numpy ones."""
    if isinstance(value, (list, tuple)):
        return tuple(normalize_attr(v) for v in value)
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.dtype):
        return as_dtype(value)
    return value


def normalize_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    """`normalize_attr` applied to every value."""
    return {k: normalize_attr(v) for k, v in attrs.items()}


def infer_types(opdef: OpDef, operand_types: Sequence[Type], attrs: dict[str, Any]) -> tuple[
        Type, ...]:
    """Check operands and attributes of one application of `opdef` and infer its result types.

    Args:
        opdef: the op.
        operand_types: types of the flat operand list.
        attrs: complete, normalized attributes.

    Returns:
        The result types (a 1-tuple for single-result ops).

    Raises:
        ShapeError, DTypeError, OmnitensorError: naming the op and what does not fit.
    """
    fixed = sum(1 for s in opdef.operands if not s.variadic)
    variadic = next((s for s in opdef.operands if s.variadic), None)
    n = len(operand_types)
    if n < fixed or (variadic is None and n != fixed) or (
        variadic is not None and n - fixed < variadic.min_count
    ):
        expected = f"{fixed}" if variadic is None else f"at least {fixed + variadic.min_count}"
        raise OmnitensorError(
            f"{opdef.name}: wrong number of operands (got {n}, expected {expected})", op=opdef.name
        )
    for spec, value in zip(opdef.operands, opdef.group(operand_types), strict=True):
        for t in value if spec.variadic else (value,):
            if spec.quantized != isinstance(t, QTensorType):
                want = "a quantized" if spec.quantized else "a dense"
                raise OmnitensorError(
                    f"{opdef.name}: operand {spec.name!r} must be {want} tensor (got {t})",
                    op=opdef.name,
                )
    opdef.check_dtypes(operand_types, attrs)
    result = opdef.infer(*opdef.group(operand_types), **attrs)
    return tuple(result) if isinstance(result, tuple) else (result,)


@final
class Builder:
    """Records a PTIR function instruction by instruction.

    Example:
        >>> b = Builder()
        >>> x = b.input(TensorType((2, 3), float32))
        >>> y = b.emit("exp", x)
        >>> fn = b.build([y])
    """

    def __init__(self, name: str = "main") -> None:
        self.name = name
        self._inputs: list[Input] = []
        self._body: list[Instruction] = []
        self._next_value = 0

    def _value(self, type: Type) -> Value:
        value = Value(self._next_value, type)
        self._next_value += 1
        return value

    def input(self, type: Type, role: Role = Role.DATA, name: str = "") -> Value:
        """Add a function input of `type` with `role`."""
        value = self._value(type)
        self._inputs.append(Input(value, role, name))
        return value

    def emit_multi(self, op: str, *operands: Value, **attrs: Any) -> tuple[Value, ...]:
        """Record ``op(*operands, **attrs)`` and return all of its results."""
        opdef = get_op(op)
        full = opdef.attr_defaults(normalize_attrs(attrs))
        types = infer_types(opdef, [v.type for v in operands], full)
        results = tuple(self._value(t) for t in types)
        self._body.append(Instruction(len(self._body), op, operands, full, results))
        return results

    def emit(self, op: str, *operands: Value, **attrs: Any) -> Value:
        """Record ``op(*operands, **attrs)`` and return its single result."""
        results = self.emit_multi(op, *operands, **attrs)
        if len(results) != 1:
            raise OmnitensorError(f"{op}: has {len(results)} results; use emit_multi", op=op)
        return results[0]

    def constant(self, value: Any, dtype: DType | str | None = None) -> Value:
        """Record a `constant` holding `value` (converted to `dtype` when given)."""
        array = np.asarray(value, dtype=None if dtype is None else as_dtype(dtype).np)
        return self.emit("constant", value=array)

    def build(self, outputs: Sequence[Value]) -> Function:
        """Finish the function with `outputs`."""
        return Function(self.name, self._inputs, self._body, list(outputs))


def dense(type: Type) -> TensorType:
    """`type` as a TensorType (for rules that do not take quantized operands)."""
    assert isinstance(type, TensorType), type
    return type
