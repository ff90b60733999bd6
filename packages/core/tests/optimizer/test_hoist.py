"""Tests of param-only hoisting (`split_param_only`, `plan_hoist`) and `HoistCache`."""

from __future__ import annotations

from typing import Any

import numpy as np

from omnitensor.dtypes import float32, int32
from omnitensor.ir.builder import Builder
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.program import Function, Role
from omnitensor.ir.types import TensorType
from omnitensor.ir.verify import verify
from omnitensor.optimizer import HoistCache, PassContext, optimize, plan_hoist, split_param_only
from omnitensor.optimizer.passes.hoist import is_hoisted_input

from .conftest import same_arrays, sample_inputs


def _layer() -> Function:
    """y = x @ transpose(convert(w)) * scale + rope-ish table; w and scale are parameters."""
    b = Builder()
    x = b.input(TensorType((2, 4), float32), Role.DATA, "x")
    w = b.input(TensorType((3, 4), int32), Role.PARAMETER, "w")
    scale = b.input(TensorType((3,), float32), Role.PARAMETER, "scale")
    wt = b.emit("transpose", b.emit("convert", w, dtype=float32), perm=(1, 0))  # (4, 3)
    y = b.emit("dot_general", x, wt, contracting=((1,), (0,)))  # (2, 3)
    s = b.emit("broadcast_in_dim", b.emit("exp", scale), shape=(2, 3), dims=(1,))
    table = b.emit("sin", b.emit("convert", b.emit("iota", shape=(2, 3), dimension=1,
                                                  dtype=int32), dtype=float32))
    return b.build([b.emit("add", b.emit("mul", y, s), table)])


def _run_split(fn: Function, inputs: list[Any]) -> list[Any]:
    split = plan_hoist(fn)
    assert split.prelude is not None
    verify(split.prelude)
    verify(split.main)
    hoisted = evaluate(split.prelude, [inputs[i] for i in split.prelude_inputs])
    return evaluate(split.main, [*inputs, *hoisted])


def test_split_moves_param_only_work_to_the_prelude() -> None:
    fn = _layer()
    prelude, main = split_param_only(fn)
    assert prelude is not None
    print(f"--- prelude\n{prelude.text()}\n--- main\n{main.text()}")
    assert {i.op for i in prelude.body} == {"convert", "transpose", "exp", "iota", "sin"}
    assert [i.name for i in prelude.inputs] == ["w", "scale"]
    hoisted = [i for i in main.inputs if is_hoisted_input(i)]
    assert [i.name for i in hoisted] == ["hoisted:0", "hoisted:1", "hoisted:2"]
    assert main.inputs[:3] == fn.inputs
    # the broadcast of exp(scale) stays in main (it is free), the exp is hoisted
    assert "broadcast_in_dim" in [i.op for i in main.body]
    assert "transpose" not in [i.op for i in main.body]
    inputs = sample_inputs(fn)
    for e, a in zip(evaluate(fn, inputs), _run_split(fn, inputs), strict=True):
        assert same_arrays(e, a)


def test_nothing_to_hoist_returns_the_function() -> None:
    b = Builder()
    x = b.input(TensorType((2,), float32))
    w = b.input(TensorType((2,), float32), Role.PARAMETER, "w")
    fn = b.build([b.emit("add", x, b.emit("reshape", w, shape=(2,)))])
    prelude, main = split_param_only(fn)
    assert prelude is None and main is fn


def test_optimize_with_hoist_reports_the_prelude() -> None:
    fn = _layer()
    out, stats = optimize(fn, PassContext(hoist=True))
    assert stats.prelude is not None and stats.hoisted_instructions >= 3
    inputs = sample_inputs(fn)
    hoisted = evaluate(stats.prelude, [inputs[i] for i in stats.prelude_inputs])
    for e, a in zip(evaluate(fn, inputs), evaluate(out, [*inputs, *hoisted]), strict=True):
        assert same_arrays(e, a)


def test_hoist_cache_hits_then_recomputes_after_a_version_change() -> None:
    fn = _layer()
    split = plan_hoist(fn)
    assert split.prelude is not None
    inputs = sample_inputs(fn)
    cache: HoistCache[list[Any]] = HoistCache()
    runs = []

    def call(params: list[Any], versions: tuple[int, ...]) -> list[Any]:
        def compute() -> list[Any]:
            runs.append(versions)
            assert split.prelude is not None
            return evaluate(split.prelude, [params[i] for i in split.prelude_inputs])

        hoisted = cache.get_or_compute(fn.signature(), versions, compute)
        return evaluate(split.main, [*params, *hoisted])

    first = call(inputs, (0, 0))
    second = call(inputs, (0, 0))
    assert (cache.hits, cache.misses, cache.recomputes) == (1, 1, 0)
    assert all(same_arrays(a, b) for a, b in zip(first, second, strict=True))
    # an SGD step writes the weights and bumps their versions: recomputed, never stale
    stepped = list(inputs)
    stepped[2] = (inputs[2] - np.float32(0.5)).astype(np.float32)
    third = call(stepped, (0, 1))
    assert (cache.hits, cache.misses, cache.recomputes) == (1, 2, 1)
    expected = evaluate(fn, stepped)
    assert all(same_arrays(a, b) for a, b in zip(expected, third, strict=True))
    assert len(runs) == 2
