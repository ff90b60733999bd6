"""Cases derived from op declarations alone: every op × every declared dtype × trait samples.

An op whose operands are all plain dense tensors and whose attributes all have defaults gets
elementwise samples (scalars, zero-size, odd sizes, broadcast operands through
`broadcast_in_dim`, non-contiguous operands through `transpose`/`slice`, a large tensor, and
every combination of edge values). An op with `Trait.REDUCTION` and an ``axes`` attribute gets
reduction samples (each axis, all axes, none, empty, large). Everything else needs samples of its
own (``@cases`` in ``cases/<family>.py``); `missing_ops` names the ops nobody covers.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

from omnitensor.dtypes import DType
from omnitensor.ir.builder import Builder
from omnitensor.ir.opdef import MISSING, OpDef, Trait, all_ops
from omnitensor.ir.types import TensorType, Value

from . import values
from .case import Arg, Case, Fill, op_sample_functions, register_case_source, samples_to_cases

__all__ = ["generic_cases", "is_plain", "is_plain_reduction", "missing_ops", "operand_dtype"]

#: Ops that need no samples of their own beyond the trait-derived ones.
_SPECIAL = (Trait.MOVEMENT | Trait.CREATION | Trait.INDEXING | Trait.QUANTIZED | Trait.RANDOM
            | Trait.LINALG | Trait.MULTI_RESULT)


def _has(op: OpDef, name: str) -> bool:
    return any(a.name == name for a in op.attributes)


def is_plain(op: OpDef) -> bool:
    """True when `op` takes fixed dense operands, has no required attribute and no special trait."""
    return (
        bool(op.operands)
        and all(not s.variadic and not s.quantized for s in op.operands)
        and all(a.default is not MISSING for a in op.attributes)
        and not op.traits & _SPECIAL
        and op.has(Trait.ELEMENTWISE)
    )


def is_plain_reduction(op: OpDef) -> bool:
    """True for a one-operand reduction whose only required attribute is ``axes``."""
    required = [a.name for a in op.attributes if a.default is MISSING]
    return (op.has(Trait.REDUCTION) and len(op.operands) == 1 and required == ["axes"]
            and not op.operands[0].variadic and not op.operands[0].quantized)


def operand_dtype(op: OpDef, index: int, dtype: DType) -> DType:
    """The dtype operand `index` takes when the op is tested at `dtype` (e.g. bool for a pred)."""
    allowed = op.operands[index].dtypes
    if allowed is None or dtype in allowed:
        return dtype
    return allowed[0]


def _have(*names: str) -> bool:
    ops = all_ops()
    return all(n in ops for n in names)


# --- graph helpers: inputs that reach the op through movement ops ---------------------------------


def _direct(b: Builder, x: Value, shape: tuple[int, ...]) -> Value:
    return x


def _via_broadcast(b: Builder, x: Value, shape: tuple[int, ...], dims: tuple[int, ...]) -> Value:
    return b.emit("broadcast_in_dim", x, shape=shape, dims=dims)


def _elementwise_samples(op: OpDef, dtype: DType) -> Iterator[Case]:
    n = len(op.operands)
    types = [operand_dtype(op, i, dtype) for i in range(n)]
    # Domain-sensitive fills: divisors and exponents away from the wrap-around cliff.
    fills: list[Fill] = ["normal"] * n
    if op.name in ("pow",):
        fills = ["normal", "small"]

    def case(sample: str, args: Sequence[Arg], build: Any) -> Case:
        return Case(op.name, dtype.name, sample, tuple(args), build, source="generic")

    def apply(b: Builder, *xs: Value) -> Value:
        return b.emit(op.name, *xs)

    def same(shape: tuple[int, ...], sample: str, how: Sequence[Fill] | None = None) -> Case:
        args = [Arg(TensorType(shape, t), f) for t, f in zip(types, how or fills, strict=True)]
        return case(sample, args, apply)

    yield same((), "scalar")
    yield same((0, 3), "empty")
    yield same((7, 13), "odd")
    yield same((257, 129), "large")
    yield same((3, 1, 5), "unit_dim", ["full"] * n)
    sizes = tuple(len(values.edge_values(t)) for t in types)
    if math.prod(sizes) <= 20000:
        grid: list[Fill] = [values.edge_grid(i, sizes) for i in range(n)]
        yield same((math.prod(sizes),), "edges", grid)
    else:
        yield same((4096,), "edges", ["edges"] * n)
    if _have("broadcast_in_dim"):
        # operand i is a lower-rank input broadcast into (5, 6): row vectors, column vectors, 0-d.
        patterns = [((6,), (1,)), ((5,), (0,)), ((), ()), ((5, 1), (0, 1))]
        bargs = [Arg(TensorType(patterns[i % 4][0], types[i]), fills[i]) for i in range(n)]

        def broadcast(b: Builder, *xs: Value) -> Value:
            wide = [_via_broadcast(b, x, (5, 6), patterns[i % 4][1]) for i, x in enumerate(xs)]
            return b.emit(op.name, *wide)

        yield case("broadcast", bargs, broadcast)
    if _have("transpose", "slice"):
        # operand 0 is a transpose (column-major view); the others are stride-2 slices.
        targs = [Arg(TensorType((9, 6) if i == 0 else (12, 18), types[i]), fills[i])
                 for i in range(n)]

        def strided(b: Builder, *xs: Value) -> Value:
            views = [b.emit("transpose", xs[0], perm=(1, 0))]
            views += [b.emit("slice", x, start=(0, 1), limit=(12, 10), stride=(2, 1))
                      for x in xs[1:]]
            return b.emit(op.name, *views)

        yield case("strided", targs, strided)
    if _have("transpose", "slice", "reverse") and dtype == op.dtypes[0]:
        # Every operand position in every in-program layout (one dtype: the layout is under
        # test): sliced first and transposed after it, all reversed (negative steps), and all
        # transposed at a square shape (where a dropped transpose still type-checks).
        sargs = [Arg(TensorType((12, 18) if i == 0 else (9, 6), types[i]), fills[i])
                 for i in range(n)]

        def swapped(b: Builder, *xs: Value) -> Value:
            views = [b.emit("slice", xs[0], start=(0, 1), limit=(12, 10), stride=(2, 1))]
            views += [b.emit("transpose", x, perm=(1, 0)) for x in xs[1:]]
            return b.emit(op.name, *views)

        yield case("strided_swapped", sargs, swapped)
        rargs = [Arg(TensorType((6, 9), t), f) for t, f in zip(types, fills, strict=True)]
        yield case("reversed", rargs, lambda b, *xs: b.emit(
            op.name, *(b.emit("reverse", x, axes=(0, 1) if i % 2 == 0 else (1,))
                       for i, x in enumerate(xs))))
        qargs = [Arg(TensorType((7, 7), t), f) for t, f in zip(types, fills, strict=True)]
        yield case("transposed_square", qargs, lambda b, *xs: b.emit(
            op.name, *(b.emit("transpose", x, perm=(1, 0)) if i % 2 == 1 or len(xs) == 1
                       else x for i, x in enumerate(xs))))


def _reduction_samples(op: OpDef, dtype: DType) -> Iterator[Case]:
    def case(sample: str, shape: tuple[int, ...], axes: tuple[int, ...], fill: Fill = "normal",
             transpose: bool = False) -> Case:
        def build(b: Builder, x: Value) -> Value:
            if transpose:
                x = b.emit("transpose", x, perm=(1, 0))
            return b.emit(op.name, x, axes=axes)

        return Case(op.name, dtype.name, sample, (Arg(TensorType(shape, dtype), fill),), build,
                    source="generic")

    long = "near_one" if op.name == "reduce_prod" else "normal"
    yield case("all", (5, 7), (0, 1))
    yield case("first", (6, 9), (0,))
    yield case("last", (6, 9), (1,))
    yield case("middle", (3, 4, 5), (1,))
    yield case("negative_axis", (3, 4, 5), (-1,))
    yield case("two_axes", (3, 4, 5), (0, 2))
    yield case("scalar", (), ())
    yield case("no_axes", (4, 5), ())
    yield case("empty_kept", (0, 5), (1,))
    yield case("empty_reduced", (4, 0), (1,))
    yield case("edges", (40, 3), (1,), "edges")
    yield case("wide_ints", (16, 33), (1,), "full")
    yield case("large", (3, 20000) if op.name != "reduce_prod" else (3, 4096), (1,), long)
    yield case("large_all", (256, 257), (0, 1), long)
    if _have("transpose"):
        yield case("strided", (9, 6), (1,), transpose=True)
    if _have("reverse", "slice") and dtype == op.dtypes[0]:
        def reversed_(b: Builder, x: Value) -> Value:
            return b.emit(op.name, b.emit("reverse", x, axes=(0, 1)), axes=(1,))

        def stepped(b: Builder, x: Value) -> Value:
            view = b.emit("slice", x, start=(1, 0), limit=(12, 18), stride=(2, 3))
            return b.emit(op.name, view, axes=(0,))

        for name, shape, build in (("reversed", (6, 9), reversed_), ("stepped", (12, 18), stepped)):
            yield Case(op.name, dtype.name, name, (Arg(TensorType(shape, dtype), "normal"),),
                       build, source="generic")


def generic_cases() -> Iterator[Case]:
    """Trait-derived cases for every plain op and plain reduction, over its declared dtypes."""
    for op in all_ops().values():
        if is_plain(op):
            for dtype in op.dtypes:
                yield from _elementwise_samples(op, dtype)
        elif is_plain_reduction(op):
            for dtype in op.dtypes:
                yield from _reduction_samples(op, dtype)


def op_sample_cases() -> Iterator[Case]:
    """Cases of every ``@cases`` sample function, for every dtype its op declares."""
    ops = all_ops()
    for name in op_sample_functions():
        if name in ops:
            yield from samples_to_cases(name, ops[name].dtypes, "samples")


def _perf_cases() -> Iterator[Case]:
    ops = all_ops()
    for op in ops.values():
        dtype = op.dtypes[0]
        if is_plain(op):
            types = [operand_dtype(op, i, dtype) for i in range(len(op.operands))]
            args = tuple(Arg(TensorType((1024, 1024), t)) for t in types)
            yield Case(op.name, dtype.name, "1M", args,
                       lambda b, *xs, name=op.name: b.emit(name, *xs), source="generic",
                       mode="perf")
        elif is_plain_reduction(op):
            yield Case(op.name, dtype.name, "1Mx1", (Arg(TensorType((1024, 1024), dtype)),),
                       lambda b, x, name=op.name: b.emit(name, x, axes=(1,)), source="generic",
                       mode="perf")
    for name in op_sample_functions():
        if name in ops:
            # one dtype per op: perf compares backends, not dtypes, and must stay quick
            yield from samples_to_cases(name, ops[name].dtypes[:1], "samples", mode="perf")


def missing_ops() -> list[str]:
    """Ops with no case source at all (the meta-test fails while this is not empty)."""
    covered = set(op_sample_functions())
    return sorted(
        name for name, op in all_ops().items()
        if name not in covered and not is_plain(op) and not is_plain_reduction(op)
    )


register_case_source("generic", generic_cases)
register_case_source("samples", op_sample_cases)
register_case_source("perf", _perf_cases, mode="perf")
