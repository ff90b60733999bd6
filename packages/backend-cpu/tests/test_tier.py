"""Small kernel steps run numpy forms until their plan has spent its budget, then compile."""

from __future__ import annotations

import numpy as np
import pytest

from omnitensor.dtypes import float32
from omnitensor.ir.builder import Builder
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.types import TensorType
from omnitensor_backend_cpu import codegen
from omnitensor_backend_cpu.backend import CpuBackend


def _gelu_like(n: int) -> object:
    b = Builder()
    x = b.input(TensorType((n,), float32))
    half = b.emit("broadcast_in_dim", b.constant(0.5, "float32"), shape=(n,), dims=())
    y = b.emit("mul", b.emit("mul", x, half), b.emit("tanh", x))
    return b.build([b.emit("add", y, x)])


@pytest.mark.parametrize("budget_ms", ["1000000", "0", "0.000001"])
def test_small_group_runs_numpy_until_the_budget_is_spent(
        backend: CpuBackend, monkeypatch: pytest.MonkeyPatch, budget_ms: str) -> None:
    monkeypatch.setenv(codegen.MIN_ELEMENTS_ENV, "100000")
    monkeypatch.setenv("OMNITENSOR_CPU_TIER_BUDGET_MS", budget_ms)
    loads: list[object] = []
    original = codegen.kernel_for
    monkeypatch.setattr(codegen, "kernel_for", lambda g: loads.append(g) or original(g))
    fn = _gelu_like(1000)
    exe = backend.compile(fn)
    assert exe.plan.kinds == ["fused"]
    monkeypatch.setattr("omnitensor_backend_cpu.tier.MIN_CALL_S", 0.0)
    x = np.linspace(-4, 4, 1000, dtype=np.float32)
    for _ in range(3):
        (got,) = backend.run(exe, [x])
        np.testing.assert_allclose(got, evaluate(fn, [x])[0], rtol=1e-6, atol=1e-7)
    # a huge budget never compiles; none compiles at once; a tiny one after the first run
    assert len(loads) == (0 if budget_ms == "1000000" else 1)


def test_cheap_numpy_steps_never_compile(backend: CpuBackend,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(codegen.MIN_ELEMENTS_ENV, "100000")
    monkeypatch.setenv("OMNITENSOR_CPU_TIER_BUDGET_MS", "0.000001")
    monkeypatch.setattr("omnitensor_backend_cpu.tier.MIN_CALL_S", 10.0)
    loads: list[object] = []
    original = codegen.kernel_for
    monkeypatch.setattr(codegen, "kernel_for", lambda g: loads.append(g) or original(g))
    exe = backend.compile(_gelu_like(100))
    for _ in range(5):
        backend.run(exe, [np.ones(100, np.float32)])
    assert loads == []  # the plan switched, but this step costs far less than 10 s a call
