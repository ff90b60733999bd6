"""Op-specific samples of `dot_general`: matmul, batched, multi-contracting, vectors, empty."""

from __future__ import annotations

from collections.abc import Iterator

from omnitensor.dtypes import DType
from omnitensor.ir.types import TensorType

from ..case import Arg, Sample, cases, sample


@cases("dot_general")
def _dot_general(dtype: DType) -> Iterator[Sample]:
    fill = "small" if dtype.is_integer else "normal"

    def t(*shape: int) -> Arg:
        return Arg(TensorType(shape, dtype), fill)

    dot = "dot_general"
    yield sample("matmul", [t(7, 13), t(13, 5)],
                 lambda b, x, y: b.emit(dot, x, y, contracting=((1,), (0,))))
    yield sample("rhs_transposed", [t(6, 16), t(9, 16)],
                 lambda b, x, y: b.emit(dot, x, y, contracting=((1,), (1,))))
    yield sample("batched", [t(3, 4, 8), t(3, 8, 5)],
                 lambda b, x, y: b.emit(dot, x, y, contracting=((2,), (1,)), batch=((0,), (0,))))
    yield sample("two_contracting", [t(4, 3, 5), t(3, 5, 6)],
                 lambda b, x, y: b.emit(dot, x, y, contracting=((1, 2), (0, 1))))
    yield sample("vector", [t(33), t(33)], lambda b, x, y: b.emit(dot, x, y,
                                                                  contracting=((0,), (0,))))
    yield sample("outer", [t(4), t(5)], lambda b, x, y: b.emit(dot, x, y, contracting=((), ())))
    yield sample("empty_k", [t(3, 0), t(0, 4)],
                 lambda b, x, y: b.emit(dot, x, y, contracting=((1,), (0,))))
    yield sample("negative_dims", [t(2, 5, 7), t(2, 7, 3)],
                 lambda b, x, y: b.emit(dot, x, y, contracting=((-1,), (-2,)),
                                        batch=((0,), (0,))))
    yield sample("strided", [t(13, 7), t(13, 5)], lambda b, x, y: b.emit(
        dot, b.emit("transpose", x, perm=(1, 0)), y, contracting=((1,), (0,))))
    # Layouts backends specialise on, inside the program (a transpose folded into the product,
    # a strided or reversed operand read in place), square so that dropping a transpose still
    # type-checks, and non-square; the input buffers themselves get every layout from
    # `layout.layout_cases`.
    mm = ((1,), (0,))
    yield sample("rhs_transposed_square", [t(8, 8), t(8, 8)], lambda b, x, y: b.emit(
        dot, x, b.emit("transpose", y, perm=(1, 0)), contracting=mm))
    yield sample("rhs_transposed_op", [t(6, 16), t(9, 16)], lambda b, x, y: b.emit(
        dot, x, b.emit("transpose", y, perm=(1, 0)), contracting=mm))
    yield sample("both_transposed_square", [t(8, 8), t(8, 8)], lambda b, x, y: b.emit(
        dot, b.emit("transpose", x, perm=(1, 0)), b.emit("transpose", y, perm=(1, 0)),
        contracting=mm))
    yield sample("rhs_stepped", [t(7, 13), t(26, 10)], lambda b, x, y: b.emit(
        dot, x, b.emit("slice", y, start=(0, 1), limit=(26, 10), stride=(2, 2)),
        contracting=mm))
    yield sample("rhs_reversed", [t(7, 13), t(13, 5)], lambda b, x, y: b.emit(
        dot, x, b.emit("reverse", y, axes=(0, 1)), contracting=mm))
    yield sample("lhs_reversed_square", [t(6, 6), t(6, 6)], lambda b, x, y: b.emit(
        dot, b.emit("reverse", x, axes=(1,)), y, contracting=mm))
    yield sample("rhs_broadcast_batch", [t(3, 4, 8), t(8, 5)], lambda b, x, y: b.emit(
        dot, x, b.emit("broadcast_in_dim", y, shape=(3, 8, 5), dims=(1, 2)),
        contracting=((2,), (1,)), batch=((0,), (0,))))
    yield sample("long_k", [t(4, 8192), t(8192, 3)],
                 lambda b, x, y: b.emit(dot, x, y, contracting=((1,), (0,))))
    n = 512
    yield sample("perf_512", [t(n, n), t(n, n)],
                 lambda b, x, y: b.emit(dot, x, y, contracting=((1,), (0,))),
                 perf=True, test=False, flops=2.0 * n**3)
