"""custom_call: result types from the decomposition, operand checks, reference = decomposition."""

from __future__ import annotations

import numpy as np
import pytest

from omnitensor import dtypes
from omnitensor.errors import DTypeError, OmnitensorError, ShapeError
from omnitensor.ir import Builder, Function, TensorType, get_op
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.opdef import Trait

F32 = TensorType((2, 3), dtypes.float32)


def _mul_add() -> Function:
    """(a, b) -> (a * b + a, a * b): a two-result fused kernel."""
    b = Builder("mul_add")
    x, y = b.input(F32), b.input(F32)
    prod = b.emit("mul", x, y)
    return b.build([b.emit("add", prod, x), prod])


def _constant_only() -> Function:
    b = Builder("ones")
    return b.build([b.constant(np.ones((2,), np.float32))])


def test_declaration() -> None:
    opdef = get_op("custom_call")
    assert opdef.has(Trait.MULTI_RESULT)
    assert opdef.operands[0].variadic and opdef.operands[0].min_count == 0


def test_multi_result_through_builder_and_interpreter() -> None:
    b = Builder()
    x, y = b.input(F32), b.input(F32)
    fused, prod = b.emit_multi("custom_call", x, y, name="fused_mul_add",
                               decomposition=_mul_add())
    assert fused.type == F32 and prod.type == F32
    fn = b.build([fused, prod])
    xs = np.arange(6, dtype=np.float32).reshape(2, 3)
    ys = np.full((2, 3), 2, np.float32)
    out_fused, out_prod = evaluate(fn, [xs, ys])
    np.testing.assert_array_equal(out_fused, xs * ys + xs)
    np.testing.assert_array_equal(out_prod, xs * ys)


def test_single_result_and_no_operands() -> None:
    b = Builder()
    out = b.emit("custom_call", name="ones", decomposition=_constant_only())
    assert out.type == TensorType((2,), dtypes.float32)
    np.testing.assert_array_equal(evaluate(b.build([out]), [])[0], [1, 1])


def test_emit_refuses_several_results() -> None:
    b = Builder()
    x, y = b.input(F32), b.input(F32)
    with pytest.raises(OmnitensorError, match="custom_call: has 2 results; use emit_multi"):
        b.emit("custom_call", x, y, name="fused_mul_add", decomposition=_mul_add())


def test_operand_mismatches() -> None:
    b = Builder()
    x = b.input(F32)
    wrong_shape = b.input(TensorType((3, 2), dtypes.float32))
    wrong_dtype = b.input(TensorType((2, 3), dtypes.float16))
    decomposition = _mul_add()
    with pytest.raises(ShapeError, match=r"custom_call\[k\]: operand 1 has type f32\[3,2\] "
                                         r"\(expected f32\[2,3\]"):
        b.emit_multi("custom_call", x, wrong_shape, name="k", decomposition=decomposition)
    with pytest.raises(DTypeError, match=r"custom_call\[k\]: operand 1 has dtype float16 "
                                         r"\(expected float32"):
        b.emit_multi("custom_call", x, wrong_dtype, name="k", decomposition=decomposition)
    with pytest.raises(ShapeError, match=r"wrong number of operands \(got 1, expected 2"):
        b.emit_multi("custom_call", x, name="k", decomposition=decomposition)


def test_attribute_errors() -> None:
    b = Builder()
    x, y = b.input(F32), b.input(F32)
    with pytest.raises(OmnitensorError, match="custom_call: name must be a non-empty str"):
        b.emit_multi("custom_call", x, y, name="", decomposition=_mul_add())
    with pytest.raises(OmnitensorError, match="decomposition must be a PTIR Function"):
        b.emit_multi("custom_call", x, y, name="k", decomposition="mul")
    empty = Builder().build([])
    with pytest.raises(OmnitensorError, match="decomposition has no outputs"):
        b.emit_multi("custom_call", name="k", decomposition=empty)
