"""The transformer program of ``benchmarks/optimizer_shrink.py`` shrinks, hoists and stays exact."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from omnitensor.ir.interpret import evaluate
from omnitensor.ir.program import Role
from omnitensor.optimizer import HoistCache, PassContext, optimize

_BENCH = Path(__file__).resolve().parents[4] / "benchmarks" / "optimizer_shrink.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    if not _BENCH.exists():
        pytest.skip(f"{_BENCH} is not in this checkout")
    spec = importlib.util.spec_from_file_location("optimizer_shrink", _BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_transformer_shrinks_hoists_and_recomputes_after_a_step(
        bench: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    fn = bench.build_transformer(layers=2, t=8, c=16, heads=2, ff=32)
    main, stats = optimize(fn, PassContext(hoist=True))
    assert stats.prelude is not None
    assert len(main.body) < 0.7 * len(fn.body)
    assert {i.op for i in stats.prelude.body} == {"convert", "transpose"}
    assert "transpose" in {i.op for i in main.body}  # the head split stays, weights do not
    assert stats.pattern_rewrites["transpose_transpose"] == 2 * 6

    monkeypatch.setenv("OMNITENSOR_OPT", "0")
    unoptimized, off = optimize(fn)
    assert unoptimized is fn and not off.enabled

    prelude = stats.prelude
    inputs = bench.random_inputs(fn)
    versions = [0] * len(fn.inputs)
    cache: HoistCache[list[Any]] = HoistCache()

    def call(args: list[Any]) -> list[Any]:
        hoisted = cache.get_or_compute(
            fn.signature(), tuple(versions[i] for i in stats.prelude_inputs),
            lambda: evaluate(prelude, [args[i] for i in stats.prelude_inputs]))
        return evaluate(main, [*args, *hoisted])

    for _ in range(2):
        np.testing.assert_array_equal(call(inputs)[0], evaluate(unoptimized, inputs)[0])
    assert (cache.hits, cache.misses) == (1, 1)
    stepped = list(inputs)
    for k, inp in enumerate(fn.inputs):
        if inp.role is Role.PARAMETER:
            stepped[k] = (inputs[k] * np.float16(0.9)).astype(inputs[k].dtype)
            versions[k] += 1
    np.testing.assert_array_equal(call(stepped)[0], evaluate(unoptimized, stepped)[0])
    assert cache.recomputes == 1 and cache.misses == 2
