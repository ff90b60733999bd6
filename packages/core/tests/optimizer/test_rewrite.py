"""Tests of the Rewriter (SSA edits, use-lists, versions) and the greedy pattern driver."""

from __future__ import annotations

import numpy as np
import pytest

from omnitensor.dtypes import float32
from omnitensor.errors import VerificationError
from omnitensor.ir.builder import Builder
from omnitensor.ir.program import Function, Instruction
from omnitensor.ir.types import TensorType
from omnitensor.ir.verify import verify
from omnitensor.optimizer.registry import Pattern
from omnitensor.optimizer.rewrite import Rewriter, apply_patterns, splat_value

F = TensorType((2, 3), float32)


def _chain() -> Function:
    b = Builder()
    x = b.input(F)
    y = b.emit("exp", x)
    z = b.emit("add", y, y)
    w = b.emit("neg", z)
    return b.build([w, y])


def test_replace_all_uses_updates_users_outputs_and_versions() -> None:
    fn = _chain()
    rw = Rewriter(fn)
    exp, add, neg = fn.body
    x = fn.inputs[0].value
    assert rw.users(exp.result) == [add]
    assert rw.use_count(exp.result) == 3  # twice in add, once as an output
    rw.replace_all_uses(exp.result, x)
    assert add.operands == (x, x) and add.version == 1
    assert fn.outputs[1] is x
    assert rw.use_count(exp.result) == 0 and rw.is_dead(exp)
    rw.erase(exp)
    rw.commit()
    assert [i.op for i in fn.body] == ["add", "neg"]
    verify(fn)


def test_replace_rejects_another_type() -> None:
    fn = _chain()
    rw = Rewriter(fn)
    other = fn.new_value(TensorType((3,), float32))
    with pytest.raises(VerificationError, match="replacement type differs"):
        rw.replace_all_uses(fn.body[0].result, other)


def test_insert_before_infers_types_and_keeps_order() -> None:
    fn = _chain()
    rw = Rewriter(fn)
    add = fn.body[1]
    t = rw.emit_before(add, "tanh", fn.inputs[0].value)
    assert t.type == F
    rw.set_operands(add, [t, add.operands[1]])
    rw.commit()
    assert [i.op for i in fn.body] == ["exp", "tanh", "add", "neg"]
    ids = [i.id for i in fn.body]
    assert len(set(ids)) == 4 and fn.body[1].id == 3  # a fresh id, never reused
    verify(fn)


def test_erase_of_a_used_instruction_fails() -> None:
    fn = _chain()
    rw = Rewriter(fn)
    with pytest.raises(VerificationError, match="still has uses"):
        rw.erase(fn.body[0])


def test_set_operands_checks_result_types() -> None:
    b = Builder()
    x = b.input(F)
    y = b.input(TensorType((3, 2), float32))
    fn = b.build([b.emit("neg", x)])
    rw = Rewriter(fn)
    with pytest.raises(VerificationError, match="alters result types"):
        rw.set_operands(fn.body[0], [y])


def test_erase_dead_is_transitive() -> None:
    b = Builder()
    x = b.input(F)
    a = b.emit("exp", x)
    b.emit("neg", b.emit("tanh", a))
    fn = b.build([x])
    rw = Rewriter(fn)
    assert rw.erase_dead() == 3
    assert rw.commit().body == []


def test_splat_value_looks_through_broadcasts() -> None:
    b = Builder()
    c = b.constant(np.float32(2.5))
    s = b.emit("broadcast_in_dim", c, shape=(2, 3), dims=())
    r = b.emit("reshape", s, shape=(3, 2))
    full = b.constant(np.array([1.0, 2.0], np.float32))
    fn = b.build([r, full])
    rw = Rewriter(fn)
    assert splat_value(rw, r) == np.float32(2.5)
    assert splat_value(rw, full) is None


def _never(calls: list[int]) -> Pattern:
    def fn(rw: Rewriter, inst: Instruction) -> bool:
        calls.append(inst.id)
        return False

    return Pattern("test_never", "test", fn, frozenset({"neg"}), "never fires")


def _exp_to_tanh() -> Pattern:
    def fn(rw: Rewriter, inst: Instruction) -> bool:
        rw.replace_with(inst, "tanh", inst.operands[0])
        return True

    return Pattern("test_exp_to_tanh", "test", fn, frozenset({"exp"}), "exp -> tanh")


def test_failure_cache_prevents_repeated_attempts() -> None:
    # `tanh` is rewritten after both `neg`s failed; the rewrite changes the producer of the
    # second neg's operand in place, so only that neg is retried: the other one stays cached.
    b = Builder()
    x = b.input(F)
    x2 = b.input(F)
    n1 = b.emit("neg", x)  # #0: unaffected, must not be retried
    e = b.emit("exp", x)  # #1: changed in place by the tanh pattern
    n2 = b.emit("neg", e)  # #2: its operand's producer changes: retried once
    t = b.emit("tanh", n2)  # #3
    fn = b.build([n1, t])
    calls: list[int] = []

    def touch(rw: Rewriter, inst: Instruction) -> bool:
        exp = fn.body[1]
        if exp.operands[0] is x2:
            return False
        rw.set_operands(exp, [x2])
        return True

    touch_pattern = Pattern("test_touch", "test", touch, frozenset({"tanh"}), "")
    result = apply_patterns(fn, [_never(calls), touch_pattern])
    assert result.rewrites["test_touch"] == 1
    assert fn.body[1].version == 1
    assert calls.count(0) == 1, calls
    assert calls.count(2) == 2, calls
    verify(fn)
    # the cache is per driver run: a new run tries each pattern once per instruction
    calls.clear()
    again = apply_patterns(fn, [_never(calls)])
    assert not again.changed and sorted(calls) == [0, 2]


def test_failure_cache_counts_skips() -> None:
    b = Builder()
    x = b.input(F)
    n = b.emit("neg", x)
    fn = b.build([n])
    calls: list[int] = []
    pat = _never(calls)

    # A pattern that re-enqueues `neg` without changing it (via on_change of an unrelated edit)
    # must hit the failure cache rather than run again.
    def poke(rw: Rewriter, inst: Instruction) -> bool:
        if inst.op == "neg" and not poke.done:  # type: ignore[attr-defined]
            poke.done = True  # type: ignore[attr-defined]
            rw.emit_before(inst, "exp", inst.operands[0])  # dead: erased, notifies x's users
            return True
        return False

    poke.done = False  # type: ignore[attr-defined]
    result = apply_patterns(fn, [pat, Pattern("test_poke", "test", poke, None, "")])
    assert result.attempts["test_never"] == 1
    assert result.cache_skips["test_never"] >= 1
    assert result.erased_dead == 1


def test_driver_erases_dead_pure_ops_only_when_asked() -> None:
    b = Builder()
    x = b.input(F)
    b.emit("exp", x)
    fn = b.build([x])
    kept = fn.copy()
    apply_patterns(kept, [], erase_dead=False)
    assert len(kept.body) == 1
    result = apply_patterns(fn, [])
    assert result.erased_dead == 1 and fn.body == []
