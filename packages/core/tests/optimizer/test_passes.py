"""Tests of constant folding, CSE and DCE (each pass alone, PTIR before/after, same results)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from omnitensor.dtypes import float32, int32, uint32
from omnitensor.ir.builder import Builder
from omnitensor.ir.program import Function
from omnitensor.ir.types import TensorType
from omnitensor.ir.verify import verify
from omnitensor.optimizer.context import PassContext
from omnitensor.optimizer.passes import CSEPass, DCEPass, PatternPass

F = TensorType((2, 3), float32)
Check = Callable[[Function, Function], None]


def _run(pass_: object, fn: Function, ctx: PassContext | None = None) -> tuple[Function, object]:
    after = fn.copy()
    result = pass_.run(after, ctx or PassContext())  # type: ignore[attr-defined]
    print(f"--- before\n{fn.text()}\n--- after\n{after.text()}")
    verify(after)
    return after, result


def test_fold_evaluates_constant_subgraphs(check: Check) -> None:
    b = Builder()
    x = b.input(F)
    c = b.constant(np.arange(6, dtype=np.float32).reshape(2, 3))
    e = b.emit("exp", b.emit("neg", c))
    t = b.emit("transpose", e, perm=(1, 0))
    fn = b.build([b.emit("add", x, b.emit("transpose", t, perm=(1, 0)))])
    after, result = _run(PatternPass("fold"), fn)
    assert result.changed and result.counts["fold_constants"] == 4  # type: ignore[attr-defined]
    assert [i.op for i in after.body] == ["constant", "add"]
    check(fn, after)


def test_fold_respects_the_size_limit() -> None:
    b = Builder()
    i = b.emit("iota", shape=(100, 100), dimension=1, dtype=int32)
    fn = b.build([b.emit("convert", i, dtype=float32)])
    after, result = _run(PatternPass("fold"), fn, PassContext(fold_limit=4096))
    assert not result.changed  # type: ignore[attr-defined]
    after, result = _run(PatternPass("fold"), fn, PassContext(fold_limit=10_000))
    assert result.changed and after.body[-1].op == "constant"  # type: ignore[attr-defined]


def test_fold_leaves_broadcasts_of_literals_alone() -> None:
    b = Builder()
    c = b.constant(np.ones((3,), np.float32))
    fn = b.build([b.emit("broadcast_in_dim", c, shape=(2, 3), dims=(1,))])
    _, result = _run(PatternPass("fold"), fn)
    assert not result.changed  # type: ignore[attr-defined]


def test_fold_rng_with_constant_key_is_deterministic() -> None:
    b = Builder()
    key = b.constant(np.array([1, 2], np.uint32))
    fn = b.build([b.emit("rng", key, shape=(4,), dtype=float32)])
    after, _ = _run(PatternPass("fold"), fn)
    assert [i.op for i in after.body] == ["constant"]
    from omnitensor.ir.interpret import evaluate

    np.testing.assert_array_equal(evaluate(fn, [])[0], evaluate(after, [])[0])


def test_fold_through_iota(check: Check) -> None:
    b = Builder()
    i = b.emit("iota", shape=(4,), dimension=0, dtype=int32)
    fn = b.build([b.emit("convert", i, dtype=float32)])
    after, _ = _run(PatternPass("fold"), fn)
    assert [i.op for i in after.body] == ["constant"]
    check(fn, after)


def test_cse_merges_same_op_operands_and_attrs(check: Check) -> None:
    b = Builder()
    w = b.input(TensorType((3, 4), float32))
    t1 = b.emit("transpose", w, perm=(1, 0))
    t2 = b.emit("transpose", w, perm=(1, 0))
    c1 = b.constant(np.array([1.0, 2.0], np.float32))
    c2 = b.constant(np.array([1.0, 2.0], np.float32))
    c3 = b.constant(np.array([1.0, -2.0], np.float32))
    z1 = b.constant(np.float32(0.0))
    z2 = b.constant(np.float32(-0.0))  # a different literal: -0.0 is not 0.0
    fn = b.build([b.emit("add", t1, t2), b.emit("add", c1, c2), c3, z1, z2])
    after, result = _run(CSEPass(), fn)
    assert result.rewrites == 2  # type: ignore[attr-defined]
    assert [i.op for i in after.body].count("transpose") == 1
    assert [i.op for i in after.body].count("constant") == 4
    check(fn, after)


def test_cse_merges_rng_with_the_same_key() -> None:
    b = Builder()
    key = b.input(TensorType((2,), uint32))
    r1 = b.emit("rng", key, shape=(3,), dtype=float32)
    r2 = b.emit("rng", key, shape=(3,), dtype=float32)
    r3 = b.emit("rng", key, shape=(3,), dtype=float32, stream=1)
    fn = b.build([r1, r2, r3])
    after, result = _run(CSEPass(), fn)
    assert result.rewrites == 1  # type: ignore[attr-defined]
    assert after.outputs[0] is after.outputs[1] and after.outputs[2] is not after.outputs[0]


def test_dce_removes_unused_work(check: Check) -> None:
    b = Builder()
    x = b.input(F)
    b.emit("exp", b.emit("neg", x))
    keep = b.emit("tanh", x)
    fn = b.build([keep])
    after, result = _run(DCEPass(), fn)
    assert result.erased == 2 and [i.op for i in after.body] == ["tanh"]  # type: ignore[attr-defined]
    check(fn, after)
    _, again = _run(DCEPass(), after)
    assert not again.changed  # type: ignore[attr-defined]


def test_fold_splats_computes_once_on_scalars(check: Check) -> None:
    b = Builder()
    x = b.input(F)
    two = b.emit("broadcast_in_dim", b.constant(np.float32(2.0)), shape=(2, 3), dims=())
    three = b.emit("broadcast_in_dim", b.constant(np.float32(3.0)), shape=(2, 3), dims=())
    fn = b.build([b.emit("mul", x, b.emit("rsqrt", b.emit("add", two, three)))])
    after, result = _run(PatternPass("fold"), fn)
    assert result.counts["fold_splats"] == 2  # type: ignore[attr-defined]
    assert [i.op for i in after.body] == ["constant", "broadcast_in_dim", "mul"]
    assert after.body[0].attrs["value"].shape == ()
    check(fn, after)
