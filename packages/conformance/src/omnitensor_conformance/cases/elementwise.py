"""Op-specific samples of the elementwise family: `convert` and `bitcast` (they carry a dtype).

Every other elementwise op is covered by the trait-derived samples of `generate`.
"""

from __future__ import annotations

from collections.abc import Iterator

from omnitensor.dtypes import ALL, DType
from omnitensor.ir.builder import Builder
from omnitensor.ir.types import TensorType, Value

from ..case import Arg, Sample, cases, sample


@cases("convert")
def _convert(dtype: DType) -> Iterator[Sample]:
    for target in ALL:
        def build(b: Builder, x: Value, target: DType = target) -> Value:
            return b.emit("convert", x, dtype=target)

        yield sample(f"to_{target.name}", [TensorType((5, 7), dtype)], build)
        # NaN, inf, -0.0, integer extremes: out-of-range float->int results are masked.
        yield sample(f"edges_to_{target.name}", [Arg(TensorType((64,), dtype), "edges")], build)
    yield sample("wide_to_float32", [Arg(TensorType((33,), dtype), "full")],
                 lambda b, x: b.emit("convert", x, dtype=ALL[0]))


@cases("bitcast")
def _bitcast(dtype: DType) -> Iterator[Sample]:
    for target in ALL:
        if target.bits != dtype.bits or (target.is_bool != dtype.is_bool):
            continue

        def build(b: Builder, x: Value, target: DType = target) -> Value:
            return b.emit("bitcast", x, dtype=target)

        yield sample(f"to_{target.name}", [Arg(TensorType((4, 9), dtype), "full")], build,
                     check="exact")
