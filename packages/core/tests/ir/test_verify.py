"""The verifier accepts well-formed functions; otherwise it names the instruction, op, problem."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from omnitensor import dtypes as dt
from omnitensor.errors import VerificationError
from omnitensor.ir.builder import Builder
from omnitensor.ir.opdef import all_ops
from omnitensor.ir.program import Function, Input, Role
from omnitensor.ir.text import parse_function, print_function
from omnitensor.ir.types import TensorType, Value
from omnitensor.ir.verify import verify

F32 = TensorType((2, 3), dt.float32)


def _good() -> Function:
    """%0 param, %1 data; #0 add, #1 exp, #2 convert -> f16."""
    b = Builder()
    x = b.input(F32, Role.PARAMETER, "w")
    y = b.input(F32, Role.DATA, "x")
    s = b.emit("add", x, y)
    e = b.emit("exp", s)
    return b.build([b.emit("convert", e, dtype=dt.float16), s])


def test_good_function_verifies() -> None:
    verify(_good())
    verify(Function("empty", [], [], []))


def _swap_order(fn: Function) -> None:
    fn.body[0], fn.body[1] = fn.body[1], fn.body[0]


def _foreign_operand(fn: Function) -> None:
    fn.body[1].operands = (Value(99, F32),)


def _same_id_other_value(fn: Function) -> None:
    fn.body[1].operands = (Value(fn.body[0].result.id, F32),)


def _duplicate_result(fn: Function) -> None:
    fn.body[1].results = (Value(0, F32),)


def _duplicate_input(fn: Function) -> None:
    fn.inputs[1] = Input(Value(0, F32), Role.DATA, "again")


def _duplicate_inst_id(fn: Function) -> None:
    fn.body[2].id = fn.body[0].id


def _wrong_result_type(fn: Function) -> None:
    fn.body[1].results = (Value(fn.body[1].result.id, TensorType((3, 2), dt.float32)),)


def _wrong_result_count(fn: Function) -> None:
    fn.body[1].results = (*fn.body[1].results, Value(77, F32))


def _unknown_op(fn: Function) -> None:
    fn.body[1].op = "exq"


def _missing_attr(fn: Function) -> None:
    del fn.body[2].attrs["dtype"]


def _unknown_attr(fn: Function) -> None:
    fn.body[1].attrs["axis"] = 0


def _list_attr(fn: Function) -> None:
    fn.body[2].attrs["dtype"] = [dt.float16]


def _rule_rejects(fn: Function) -> None:
    other = Value(fn.inputs[1].value.id, TensorType((2, 3), dt.int32))
    fn.inputs[1] = Input(other, Role.DATA)
    fn.body[0].operands = (fn.inputs[0].value, other)


def _wrong_operand_count(fn: Function) -> None:
    fn.body[1].operands = (*fn.body[1].operands, fn.inputs[0].value)


def _bad_role(fn: Function) -> None:
    fn.inputs[0] = Input(fn.inputs[0].value, "param", "w")  # type: ignore[arg-type]


def _bad_name(fn: Function) -> None:
    fn.inputs[0] = Input(fn.inputs[0].value, Role.PARAMETER, None)  # type: ignore[arg-type]


def _undefined_output(fn: Function) -> None:
    fn.outputs.append(Value(123, F32))


def _non_value_operand(fn: Function) -> None:
    fn.body[1].operands = ("%2",)  # type: ignore[assignment]


BREAKAGES: list[tuple[Callable[[Function], None], str]] = [
    (_swap_order, r"exp #1: operand 0 %2 is not defined before it is used"),
    (_foreign_operand, r"exp #1: operand 0 %99 is not defined before it is used"),
    (_same_id_other_value, r"exp #1: operand 0 %2 is not the value defined under that id"),
    (_duplicate_result, r"exp #1: result %0 is defined twice"),
    (_duplicate_input, r"input 1: value %0 is defined twice"),
    (_duplicate_inst_id, r"convert #0: instruction id #0 is used twice"),
    (
        _wrong_result_type,
        r"exp #1: result types differ from the op's rule \(got \(f32\[3,2\]\), "
        r"expected \(f32\[2,3\]\)\)",
    ),
    (_wrong_result_count, r"exp #1: result types differ"),
    (_unknown_op, r"exq #1: unknown op 'exq'; did you mean .*exp"),
    (_missing_attr, r"convert #2: missing attribute\(s\) \['dtype'\]"),
    (_unknown_attr, r"exp #1: unknown attribute\(s\) \['axis'\]"),
    (_list_attr, r"convert #2: attribute 'dtype' is a list"),
    (_rule_rejects, r"add #0: the op's rule rejects it: add: operand dtypes differ"),
    (_wrong_operand_count, r"exp #1: the op's rule rejects it: exp: wrong number of operands"),
    (_bad_role, r"input 0: invalid role"),
    (_bad_name, r"input 0: name must be a str"),
    (_undefined_output, r"return: output 2 %123 is not defined"),
    (_non_value_operand, r"exp #1: operand 0 is not a Value"),
]


@pytest.mark.parametrize(
    ("breakage", "message"), BREAKAGES, ids=lambda x: getattr(x, "__name__", "")
)
def test_verifier_catches(breakage: Callable[[Function], None], message: str) -> None:
    fn = _good()
    breakage(fn)
    with pytest.raises(VerificationError, match=message) as info:
        verify(fn)
    assert "in function @main" in str(info.value)


def test_error_carries_the_op() -> None:
    fn = _good()
    _wrong_result_type(fn)
    with pytest.raises(VerificationError) as info:
        verify(fn)
    assert info.value.op == "exp"


def test_nested_decomposition_is_verified() -> None:
    if "custom_call" not in all_ops():
        pytest.skip("custom_call is not declared")
    inner = Builder("decomp")
    a = inner.input(F32)
    decomposition = inner.build([inner.emit("exp", a)])
    b = Builder()
    x = b.input(F32)
    fn = b.build(list(b.emit_multi("custom_call", x, name="fused", decomposition=decomposition)))
    verify(fn)
    decomposition.body[0].attrs["bogus"] = 1
    with pytest.raises(
        VerificationError,
        match=r"custom_call #0: attribute 'decomposition' "
        r"holds an invalid function: exp #0: unknown",
    ):
        verify(fn)


def test_verify_accepts_every_parsed_builder_program() -> None:
    b = Builder()
    x = b.input(TensorType((4,), dt.int32), Role.STATE, "counter")
    y = b.emit("add", x, x)
    z = b.emit("lt", y, x)
    w = b.emit("select", z, x, y)
    fn = b.build([w])
    verify(fn)
    verify(parse_function(print_function(fn)))
