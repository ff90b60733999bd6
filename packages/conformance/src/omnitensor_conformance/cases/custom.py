"""Op-specific samples of `custom_call`: a fused kernel must agree with its decomposition."""

from __future__ import annotations

from collections.abc import Iterator

from omnitensor.dtypes import DType
from omnitensor.ir.builder import Builder
from omnitensor.ir.program import Function
from omnitensor.ir.types import TensorType, Value

from ..case import Sample, cases, sample


def _decomposition(dtype: DType, shape: tuple[int, ...]) -> Function:
    """``(x, y) -> (x * y + x, max(x, y))``: two results, a few primitives."""
    b = Builder("fused_mul_add")
    x = b.input(TensorType(shape, dtype))
    y = b.input(TensorType(shape, dtype))
    if dtype.is_bool:
        return b.build([b.emit("and", x, y), b.emit("or", x, y)])
    return b.build([b.emit("add", b.emit("mul", x, y), x), b.emit("max", x, y)])


@cases("custom_call")
def _custom_call(dtype: DType) -> Iterator[Sample]:
    for name, shape in (("small", (5, 7)), ("scalar", ())):
        decomposition = _decomposition(dtype, shape)

        def build(b: Builder, x: Value, y: Value, d: Function = decomposition) -> tuple[Value, ...]:
            return b.emit_multi("custom_call", x, y, name="conformance.mul_add_max",
                                decomposition=d)

        yield sample(name, [TensorType(shape, dtype), TensorType(shape, dtype)], build)
