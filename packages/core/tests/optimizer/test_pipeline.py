"""Tests of the pipeline: knobs, counters, backend passes, pass stats logging and dumps."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from omnitensor.dtypes import float32
from omnitensor.errors import OmnitensorError
from omnitensor.ir.builder import Builder
from omnitensor.ir.program import Function, Instruction, Role
from omnitensor.ir.types import TensorType
from omnitensor.ir.verify import verify
from omnitensor.optimizer import (
    PassContext,
    PassResult,
    Pattern,
    PipelineOptimizer,
    Rewriter,
    optimize,
    start_trace,
    stats,
)
from omnitensor.optimizer.dump import set_dump_dir

F = TensorType((2, 3), float32)
Check = Callable[[Function, Function], None]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OMNITENSOR_OPT", "OMNITENSOR_OPT_PRE_ITERS", "OMNITENSOR_OPT_POST_ITERS",
                 "OMNITENSOR_PASS_STATS", "OMNITENSOR_DUMP_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OMNITENSOR_OPT_VERIFY", "1")
    set_dump_dir(None)


def _redundant() -> Function:
    b = Builder()
    x = b.input(F, Role.DATA, "x")
    w = b.input(TensorType((3, 2), float32), Role.PARAMETER, "w")
    wt1 = b.emit("transpose", w, perm=(1, 0))
    wt2 = b.emit("transpose", w, perm=(1, 0))
    one = b.emit("broadcast_in_dim", b.constant(np.float32(1.0)), shape=(2, 3), dims=())
    y = b.emit("mul", b.emit("add", x, wt1), one)
    z = b.emit("neg", b.emit("neg", b.emit("add", x, wt2)))
    b.emit("exp", y)  # dead
    c = b.emit("convert", b.emit("convert", y, dtype=float32), dtype=float32)
    return b.build([b.emit("sub", c, z)])


def test_pipeline_shrinks_and_keeps_results(check: Check) -> None:
    fn = _redundant()
    before_text = fn.text()
    out, st = optimize(fn)
    print(f"--- before\n{fn.text()}\n--- after\n{out.text()}")
    assert fn.text() == before_text  # the input is never modified
    verify(out)
    assert st.instructions_before == 13 and st.instructions_after == 3
    assert [i.op for i in out.body] == ["transpose", "add", "sub"]
    check(fn, out)


def test_opt_zero_returns_the_function_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMNITENSOR_OPT", "0")
    fn = _redundant()
    runs = stats.pass_runs
    out, st = optimize(fn)
    assert out is fn and not st.enabled and st.pass_runs == 0
    assert stats.pass_runs == runs


def test_iteration_knobs_bound_the_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMNITENSOR_OPT_PRE_ITERS", "0")
    monkeypatch.setenv("OMNITENSOR_OPT_POST_ITERS", "1")
    out, st = optimize(_redundant())
    assert st.pre_iterations == 0 and st.post_iterations == 1
    assert st.passes["cse"].runs == 1 and "fold" not in st.passes
    monkeypatch.setenv("OMNITENSOR_OPT_PRE_ITERS", "5")
    monkeypatch.setenv("OMNITENSOR_OPT_POST_ITERS", "5")
    _, st = optimize(_redundant())
    # fixed point: the loops stop as soon as an iteration changes nothing
    assert 1 <= st.pre_iterations < 5 and 1 <= st.post_iterations < 5


def test_bad_knob_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMNITENSOR_OPT_PRE_ITERS", "two")
    with pytest.raises(OmnitensorError, match="OMNITENSOR_OPT_PRE_ITERS: not an integer"):
        optimize(_redundant())


def test_counters_count_runs_and_passes() -> None:
    stats.reset()
    optimize(_redundant())
    assert stats.optimize_runs == 1 and stats.pass_runs > 0
    assert stats.passes["canonicalize"].runs >= 1


def test_pass_stats_are_logged(monkeypatch: pytest.MonkeyPatch,
                               caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("OMNITENSOR_PASS_STATS", "1")
    with caplog.at_level(logging.WARNING, logger="omnitensor.optimizer"):
        optimize(_redundant())
    text = caplog.text
    assert "optimizer stats" in text and "canonicalize" in text and "time ms" in text


class _CountingPass:
    name = "backend_count"

    def __init__(self) -> None:
        self.seen: list[int] = []

    def run(self, fn: Function, ctx: PassContext) -> PassResult:
        self.seen.append(len(fn.body))
        return PassResult()


def _tanh_to_tanh_pattern() -> Pattern:
    def fn(rw: Rewriter, inst: Instruction) -> bool:
        return False

    return Pattern("backend_noop", "backend", fn, frozenset({"tanh"}), "")


def test_backend_passes_run_between_the_loops() -> None:
    counting = _CountingPass()
    calls: list[str] = []

    def callable_pass(fn: Function) -> Function | None:
        calls.append(fn.name)
        return None

    ctx = PassContext(backend="test", backend_passes=[counting, callable_pass,
                                                      [_tanh_to_tanh_pattern()]])
    _, st = optimize(_redundant(), ctx)
    assert counting.seen and counting.seen[0] < 13  # after the first loop simplified
    assert calls == ["main"]
    assert {"backend_count", "callable_pass", "backend_noop"} <= set(st.passes)


def test_dumps_before_after_and_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMNITENSOR_DUMP_DIR", str(tmp_path))
    fn = _redundant()
    with start_trace(fn.signature(), cache_hit=False, backend="ref") as trace:
        optimize(fn, PassContext(trace=trace, hoist=True))
    with start_trace(fn.signature(), cache_hit=True, backend="ref"):
        pass  # a plan-cache hit runs no pass but still leaves a trace
    names = sorted(p.name for p in tmp_path.iterdir())
    traces = [n for n in names if n.endswith(".trace.json")]
    assert len(traces) == 2
    assert any(n.endswith(".before.ptir") for n in names)
    assert any(n.endswith(".after.ptir") for n in names)
    assert any(n.endswith(".prelude.ptir") for n in names)
    miss, hit = (json.loads((tmp_path / n).read_text()) for n in traces)
    assert miss["plan_cache"] == "miss" and hit["plan_cache"] == "hit"
    assert miss["signature"] == fn.signature()
    kinds = {e["kind"] for e in miss["events"]}
    assert {"pass", "rewrite", "hoist"} <= kinds
    assert any(e.get("pattern") == "neg_neg" for e in miss["events"])
    assert hit["events"] == []
    before = (tmp_path / miss["programs"]["before"]).read_text()
    assert before.startswith("func @main")


def test_optimize_without_trace_dumps_when_dir_set(tmp_path: Path) -> None:
    set_dump_dir(tmp_path)
    try:
        optimize(_redundant())
    finally:
        set_dump_dir(None)
    assert len(list(tmp_path.glob("*.trace.json"))) == 1


def test_custom_pipeline() -> None:
    out, st = PipelineOptimizer(pre_passes=[], post_passes=[]).run(_redundant())
    assert st.pass_runs == 0 and len(out.body) == 13


def test_optimize_for_backend_keeps_inputs(check: Check) -> None:
    from omnitensor.optimizer import optimize_for_backend

    counting = _CountingPass()
    fn = _redundant()
    out = optimize_for_backend(fn, "ref", passes=[counting])
    assert out.inputs == fn.inputs and counting.seen
    check(fn, out)
