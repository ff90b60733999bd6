"""Composites in the pipeline: expanded for backends without a lowering, kept otherwise."""

from __future__ import annotations

import numpy as np

from omnitensor.dtypes import float32
from omnitensor.ir.builder import Builder
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.opdef import Trait, get_op
from omnitensor.ir.program import Function, Instruction
from omnitensor.ir.types import TensorType
from omnitensor.optimizer import PassContext, optimize
from omnitensor.optimizer.passes import expand_composites


def _norm_softmax() -> Function:
    b = Builder()
    x = b.input(TensorType((3, 5), float32))
    w = b.input(TensorType((5,), float32))
    y = b.emit("rms_norm", x, w, axes=(1,), eps=1e-6)
    return b.build([b.emit("softmax", b.emit("gelu", y, approximate="tanh"), axes=(1,))])


def _none(inst: Instruction) -> str | None:
    return "no lowering" if get_op(inst.op).has(Trait.COMPOSITE) else None


def test_expand_inlines_every_unsupported_composite_and_keeps_the_values() -> None:
    fn = _norm_softmax()
    rng = np.random.default_rng(0)
    inputs = [rng.normal(size=(3, 5)).astype(np.float32), rng.normal(size=5).astype(np.float32)]
    want = evaluate(fn, inputs)[0]
    expanded = fn.copy()
    assert expand_composites(expanded, _none) == 3
    assert not any(get_op(i.op).has(Trait.COMPOSITE) for i in expanded.body)
    assert {"rsqrt", "tanh", "exp", "reduce_max"} <= {i.op for i in expanded.body}
    np.testing.assert_allclose(evaluate(expanded, inputs)[0], want, rtol=1e-6, atol=1e-7)


def test_expand_keeps_what_the_backend_lowers() -> None:
    fn = _norm_softmax()

    def only_softmax(inst: Instruction) -> str | None:
        return None if inst.op == "softmax" else _none(inst)

    assert expand_composites(fn, only_softmax) == 2
    assert [i.op for i in fn.body].count("softmax") == 1


def test_pipeline_expands_only_with_a_backend() -> None:
    portable, _ = optimize(_norm_softmax())
    assert {"rms_norm", "gelu", "softmax"} <= {i.op for i in portable.body}
    lowered, stats = optimize(_norm_softmax(), PassContext(backend="x", supports=_none))
    assert stats.passes["expand_composites"].rewrites == 3
    assert not {"rms_norm", "gelu", "softmax"} & {i.op for i in lowered.body}


def test_pipeline_raises_bare_softmax_for_a_backend_that_lowers_it() -> None:
    b = Builder()
    x = b.input(TensorType((3, 5), float32))
    e = b.emit("exp", x)
    total = b.emit("broadcast_in_dim", b.emit("reduce_sum", e, axes=(1,)), shape=(3, 5),
                   dims=(0,))
    fn = b.build([b.emit("div", e, total)])
    out, stats = optimize(fn, PassContext(backend="x", supports=lambda inst: None))
    assert stats.passes["raise_composites"].rewrites == 1
    assert [i.op for i in out.body] == ["softmax"]
    expanded, _ = optimize(fn, PassContext(backend="x", supports=_none))
    assert "softmax" not in {i.op for i in expanded.body}
