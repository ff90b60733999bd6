"""The PTIR verifier: `verify(fn)` checks the invariants every pass and backend may rely on.

SSA (each value defined once, by an input or one instruction, before any use), unique instruction
ids, complete attributes per the op's declaration, and every result type equal to what the op's
own rule (`builder.infer_types`, the same one the builder ran) infers. Nested functions in
attributes (``custom_call``'s decomposition) are verified too. Semantics are not checked here.
"""

from __future__ import annotations

from typing import Any

from ..errors import OmnitensorError, VerificationError
from .builder import infer_types
from .opdef import get_op
from .program import Function, Input, Instruction, Role
from .types import QTensorType, TensorType, Value

__all__ = ["verify"]


def _fail(fn: Function, where: str, problem: str, op: str | None = None) -> VerificationError:
    return VerificationError(f"{where}: {problem} (in function @{fn.name})", op=op)


def _where(inst: Instruction) -> str:
    return f"{inst.op} #{inst.id}"


def _check_inputs(fn: Function, defined: dict[int, Value]) -> None:
    for position, spec in enumerate(fn.inputs):
        where = f"input {position}"
        if not isinstance(spec, Input) or not isinstance(spec.value, Value):
            raise _fail(fn, where, f"not an Input holding a Value (got {spec!r})")
        if not isinstance(spec.role, Role):
            raise _fail(
                fn,
                where,
                f"invalid role (got {spec.role!r}, expected one of "
                f"{', '.join(r.name for r in Role)})",
            )
        if not isinstance(spec.name, str):
            raise _fail(fn, where, f"name must be a str (got {spec.name!r})")
        if not isinstance(spec.value.type, (TensorType, QTensorType)):
            raise _fail(
                fn, where, f"type must be a TensorType or QTensorType (got {spec.value.type!r})"
            )
        if spec.value.id in defined:
            raise _fail(fn, where, f"value %{spec.value.id} is defined twice")
        defined[spec.value.id] = spec.value


def _check_use(
    fn: Function,
    where: str,
    what: str,
    value: Any,
    defined: dict[int, Value],
    op: str | None = None,
) -> None:
    if not isinstance(value, Value):
        raise _fail(fn, where, f"{what} is not a Value (got {value!r})", op)
    known = defined.get(value.id)
    if known is None:
        raise _fail(
            fn, where, f"{what} %{value.id} is not defined before it is used (SSA order)", op
        )
    if known is not value:
        raise _fail(
            fn,
            where,
            f"{what} %{value.id} is not the value defined under that id (two values share the id)",
            op,
        )


def _check_attrs(fn: Function, inst: Instruction, declared: list[str]) -> None:
    where = _where(inst)
    unknown = sorted(set(inst.attrs) - set(declared))
    missing = [name for name in declared if name not in inst.attrs]
    if unknown:
        raise _fail(fn, where, f"unknown attribute(s) {unknown} (expected {declared})", inst.op)
    if missing:
        raise _fail(
            fn,
            where,
            f"missing attribute(s) {missing} (expected {declared}); attributes are "
            f"stored complete, with defaults filled",
            inst.op,
        )
    for name, value in inst.attrs.items():
        if isinstance(value, list):
            raise _fail(fn, where, f"attribute {name!r} is a list (expected a tuple)", inst.op)
        if isinstance(value, Function):
            try:
                verify(value)
            except VerificationError as exc:
                raise _fail(
                    fn,
                    where,
                    f"attribute {name!r} holds an invalid function: {exc.message}",
                    inst.op,
                ) from exc


def _check_instruction(fn: Function, inst: Instruction, defined: dict[int, Value]) -> None:
    where = _where(inst)
    try:
        opdef = get_op(inst.op)
    except OmnitensorError as exc:
        raise _fail(fn, where, exc.message, inst.op) from exc
    for index, operand in enumerate(inst.operands):
        _check_use(fn, where, f"operand {index}", operand, defined, inst.op)
    _check_attrs(fn, inst, [a.name for a in opdef.attributes])
    try:
        inferred = infer_types(opdef, [v.type for v in inst.operands], inst.attrs)
    except OmnitensorError as exc:
        raise _fail(fn, where, f"the op's rule rejects it: {exc.message}", inst.op) from exc
    except (TypeError, ValueError, IndexError, KeyError, AttributeError) as exc:
        # A rule handed attributes of the wrong kind may fail in Python before it can say so.
        raise _fail(fn, where, f"the op's rule rejects it ({exc!r})", inst.op) from exc
    recorded = [v.type if isinstance(v, Value) else v for v in inst.results]
    if list(inferred) != recorded:
        raise _fail(
            fn,
            where,
            f"result types differ from the op's rule (got "
            f"({', '.join(map(str, recorded))}), expected ({', '.join(map(str, inferred))}))",
            inst.op,
        )
    for result in inst.results:
        if result.id in defined:
            raise _fail(fn, where, f"result %{result.id} is defined twice", inst.op)
        defined[result.id] = result


def verify(fn: Function) -> None:
    """Check that `fn` is a well-formed PTIR function.

    Args:
        fn: the function to check.

    Raises:
        VerificationError: for the first broken invariant, naming the instruction id, the op and
            the problem (``"add #3: operand 1 %7 is not defined before it is used ..."``).
    """
    defined: dict[int, Value] = {}
    _check_inputs(fn, defined)
    seen_ids: set[int] = set()
    for inst in fn.body:
        if not isinstance(inst, Instruction):
            raise _fail(fn, "body", f"not an Instruction (got {inst!r})")
        if inst.id in seen_ids:
            raise _fail(fn, _where(inst), f"instruction id #{inst.id} is used twice", inst.op)
        seen_ids.add(inst.id)
        _check_instruction(fn, inst, defined)
    for index, value in enumerate(fn.outputs):
        _check_use(fn, "return", f"output {index}", value, defined)
