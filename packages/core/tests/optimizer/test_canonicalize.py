"""Each canonicalization pattern fires on a small program, which keeps its results.

Run with ``-s`` to see the PTIR before and after each rewrite.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from omnitensor.dtypes import bool_, float16, float32, float64, int8, int32
from omnitensor.ir.builder import Builder
from omnitensor.ir.program import Function
from omnitensor.ir.types import TensorType, Value
from omnitensor.ir.verify import verify
from omnitensor.optimizer.context import PassContext
from omnitensor.optimizer.passes import PatternPass
from omnitensor.optimizer.passes.canonicalize import is_lossless_convert
from omnitensor.optimizer.registry import patterns_for

F = TensorType((2, 3), float32)
INT = TensorType((2, 3), int32)
B = TensorType((2, 3), bool_)


def _splat(b: Builder, scalar: Any, t: TensorType) -> Value:
    c = b.constant(np.asarray(scalar, dtype=t.dtype.np))
    return b.emit("broadcast_in_dim", c, shape=t.shape, dims=())


def _unary_chain(op: str, t: TensorType) -> Callable[[Builder], list[Value]]:
    def build(b: Builder) -> list[Value]:
        x = b.input(t)
        return [b.emit(op, b.emit(op, x))]

    return build


def _binary_with(op: str, scalar: Any, t: TensorType, *, left: bool = False
                 ) -> Callable[[Builder], list[Value]]:
    def build(b: Builder) -> list[Value]:
        x = b.input(t)
        c = _splat(b, scalar, t)
        return [b.emit(op, c, x) if left else b.emit(op, x, c)]

    return build


def _sub_self(b: Builder) -> list[Value]:
    x = b.input(INT)
    return [b.emit("sub", x, x)]


def _select_const(value: bool) -> Callable[[Builder], list[Value]]:
    def build(b: Builder) -> list[Value]:
        x, y = b.input(F), b.input(F)
        return [b.emit("select", _splat(b, value, B), x, y)]

    return build


def _select_same(b: Builder) -> list[Value]:
    p, x = b.input(B), b.input(F)
    return [b.emit("select", p, x, x)]


def _convert_same(b: Builder) -> list[Value]:
    return [b.emit("convert", b.input(F), dtype=float32)]


def _convert_convert(b: Builder) -> list[Value]:
    x = b.input(TensorType((2, 3), int8))
    return [b.emit("convert", b.emit("convert", x, dtype=float32), dtype=int32)]


def _convert_roundtrip(b: Builder) -> list[Value]:
    x = b.input(TensorType((2, 3), float16))
    return [b.emit("convert", b.emit("convert", x, dtype=float32), dtype=float16)]


def _reshape_reshape(b: Builder) -> list[Value]:
    x = b.input(F)
    return [b.emit("reshape", b.emit("reshape", x, shape=(6,)), shape=(3, 2))]


def _reshape_same(b: Builder) -> list[Value]:
    return [b.emit("reshape", b.input(F), shape=(2, 3))]


def _transpose_pair(b: Builder) -> list[Value]:
    x = b.input(TensorType((2, 3, 4), float32))
    t = b.emit("transpose", x, perm=(1, 2, 0))
    return [b.emit("transpose", t, perm=(0, 2, 1))]


def _transpose_inverse(b: Builder) -> list[Value]:
    x = b.input(TensorType((2, 3, 4), float32))
    t = b.emit("transpose", x, perm=(1, 2, 0))
    return [b.emit("transpose", t, perm=(2, 0, 1))]


def _transpose_identity(b: Builder) -> list[Value]:
    return [b.emit("transpose", b.input(F), perm=(0, 1))]


def _broadcast_identity(b: Builder) -> list[Value]:
    return [b.emit("broadcast_in_dim", b.input(F), shape=(2, 3), dims=(0, 1))]


def _broadcast_broadcast(b: Builder) -> list[Value]:
    x = b.input(TensorType((3,), float32))
    m = b.emit("broadcast_in_dim", x, shape=(2, 3), dims=(1,))
    return [b.emit("broadcast_in_dim", m, shape=(3, 4, 2), dims=(2, 0))]


def _slice_slice(b: Builder) -> list[Value]:
    x = b.input(TensorType((10, 7), float32))
    s = b.emit("slice", x, start=(1, 0), limit=(10, 7), stride=(2, 1))
    return [b.emit("slice", s, start=(1, 2), limit=(4, 7), stride=(2, 3))]


def _slice_full(b: Builder) -> list[Value]:
    return [b.emit("slice", b.input(F), start=(0, 0), limit=(2, 3), stride=(1, 1))]


def _reshape_of_splat(b: Builder) -> list[Value]:
    return [b.emit("reshape", _splat(b, 2.0, F), shape=(3, 2))]


CASES: list[tuple[str, Callable[[Builder], list[Value]], list[str]]] = [
    ("add_zero", _binary_with("add", -0.0, F), []),
    ("add_zero", _binary_with("add", 0, INT, left=True), []),
    ("sub_zero", _binary_with("sub", 0.0, F), []),
    ("mul_one", _binary_with("mul", 1.0, F, left=True), []),
    ("div_one", _binary_with("div", 1.0, F), []),
    ("mul_zero_int", _binary_with("mul", 0, INT), ["constant", "broadcast_in_dim"]),
    ("sub_self_int", _sub_self, ["constant"]),
    ("neg_neg", _unary_chain("neg", F), []),
    ("not_not", _unary_chain("not", B), []),
    ("select_const_pred", _select_const(True), []),
    ("select_const_pred", _select_const(False), []),
    ("select_same", _select_same, []),
    ("convert_same_dtype", _convert_same, []),
    ("convert_convert", _convert_convert, ["convert"]),
    ("convert_convert", _convert_roundtrip, []),
    ("reshape_reshape", _reshape_reshape, ["reshape"]),
    ("reshape_same_shape", _reshape_same, []),
    ("transpose_transpose", _transpose_pair, ["transpose"]),
    ("transpose_transpose", _transpose_inverse, []),
    ("transpose_identity", _transpose_identity, []),
    ("broadcast_identity", _broadcast_identity, []),
    ("broadcast_broadcast", _broadcast_broadcast, ["broadcast_in_dim"]),
    ("slice_slice", _slice_slice, ["slice"]),
    ("slice_full", _slice_full, []),
    ("reshape_of_broadcast_scalar", _reshape_of_splat, ["constant", "broadcast_in_dim"]),
]


@pytest.mark.parametrize(("name", "build", "ops_after"), CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_pattern_fires(name: str, build: Callable[[Builder], list[Value]], ops_after: list[str],
                       check: Callable[[Function, Function], None]) -> None:
    b = Builder()
    before = b.build(build(b))
    verify(before)
    after = before.copy()
    result = PatternPass("canonicalize").run(after, PassContext())
    print(f"--- {name}: before\n{before.text()}\n--- after\n{after.text()}")
    verify(after)
    assert result.changed
    assert result.counts.get(name, 0) >= 1, result.counts
    assert [i.op for i in after.body] == ops_after
    check(before, after)


@pytest.mark.parametrize("scalar", [0.0, np.nan])
def test_float_identities_that_would_be_inexact_do_not_fire(scalar: float) -> None:
    # x + (+0.0) turns -0.0 into +0.0, x * 0.0 is NaN for inf: neither may fold.
    b = Builder()
    x = b.input(F)
    fn = b.build([b.emit("add", x, _splat(b, scalar, F)), b.emit("mul", x, _splat(b, 0.0, F)),
                  b.emit("sub", x, x)])
    result = PatternPass("canonicalize").run(fn, PassContext())
    assert not result.changed
    assert [i.op for i in fn.body].count("add") == 1


def test_convert_convert_needs_a_lossless_first_step() -> None:
    b = Builder()
    x = b.input(F)
    fn = b.build([b.emit("convert", b.emit("convert", x, dtype=float16), dtype=float32)])
    assert not PatternPass("canonicalize").run(fn, PassContext()).changed


def test_lossless_table() -> None:
    assert is_lossless_convert(float16, float64)
    assert is_lossless_convert(int8, float16)
    assert not is_lossless_convert(int32, float32)
    assert not is_lossless_convert(float32, float16)


def test_every_canonicalize_pattern_has_a_case() -> None:
    covered = {c[0] for c in CASES}
    assert {p.name for p in patterns_for("canonicalize")} <= covered
