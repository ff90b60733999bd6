"""Op-specific samples of the reduction family: argmax/argmin (ties, NaN) and cumsum.

reduce_sum/prod/max/min get their samples from the traits (see `generate`).
"""

from __future__ import annotations

from collections.abc import Iterator

from omnitensor.dtypes import DType
from omnitensor.ir.types import TensorType

from ..case import Arg, Sample, cases, sample


def _arg_samples(op: str) -> None:
    """Register the samples of argmax or argmin (ties and NaN: the first index wins)."""

    @cases(op)
    def _samples(dtype: DType) -> Iterator[Sample]:
        for axis in (0, 1, -1):
            yield sample(f"axis{axis}", [TensorType((6, 9), dtype)],
                         lambda b, x, axis=axis: b.emit(op, x, axis=axis))
        yield sample("ties", [Arg(TensorType((16, 12), dtype), "small")],
                     lambda b, x: b.emit(op, x, axis=1))
        yield sample("edges", [Arg(TensorType((40, 7), dtype), "edges")],
                     lambda b, x: b.emit(op, x, axis=1))
        yield sample("large", [TensorType((2, 30001), dtype)], lambda b, x: b.emit(op, x, axis=1))
        yield sample("length1", [TensorType((1,), dtype)], lambda b, x: b.emit(op, x, axis=0))


_arg_samples("argmax")
_arg_samples("argmin")


@cases("cumsum")
def _cumsum(dtype: DType) -> Iterator[Sample]:
    for reverse in (False, True):
        tag = "rev" if reverse else "fwd"
        yield sample(f"{tag}_last", [TensorType((5, 33), dtype)], lambda b, x, r=reverse: b.emit(
            "cumsum", x, axis=1, reverse=r), check="nmse")
        yield sample(f"{tag}_first", [TensorType((17, 3), dtype)], lambda b, x, r=reverse: b.emit(
            "cumsum", x, axis=0, reverse=r), check="nmse")
    yield sample("edges", [Arg(TensorType((8, 12), dtype), "edges")],
                 lambda b, x: b.emit("cumsum", x, axis=1), check="nmse")
    yield sample("empty", [TensorType((0, 4), dtype)], lambda b, x: b.emit("cumsum", x, axis=1))
    yield sample("long", [TensorType((4097,), dtype)], lambda b, x: b.emit("cumsum", x, axis=0),
                 check="nmse")
