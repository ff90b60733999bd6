"""The toy's lowering table: capabilities derived from it, silu lowered, 0-d results kept 0-d.

Imports the example from its source tree (the install test covers the installed distribution).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from omnitensor.dtypes import float32, float64  # noqa: E402
from omnitensor.ir import Builder, TensorType  # noqa: E402
from omnitensor.ir.interpret import evaluate  # noqa: E402
from omnitensor.optimizer import PassContext, optimize  # noqa: E402
from omnitensor_backend_toy.backend import LOWERINGS, ToyBackend  # noqa: E402


def test_capabilities_are_the_lowering_table() -> None:
    caps = ToyBackend().capabilities().ops
    assert caps == LOWERINGS.capabilities()
    assert set(caps) == {"add", "mul", "exp", "silu"}
    assert all(d == frozenset({float32}) for d in caps.values())


def test_silu_is_lowered_and_softmax_expanded() -> None:
    backend = ToyBackend()
    b = Builder()
    x = b.input(TensorType((2, 3), float32))
    fn = b.build([b.emit("add", b.emit("silu", x), b.emit("softmax", x, axes=(1,)))])
    out, _ = optimize(fn, PassContext(backend="toy", supports=backend.supports))
    ops = {i.op for i in out.body}
    assert "silu" in ops and "softmax" not in ops and "reduce_max" in ops
    b = Builder()
    x = b.input(TensorType((2, 3), float32))
    only_silu = b.build([b.emit("silu", x)])
    data = np.linspace(-4, 4, 6, dtype=np.float32).reshape(2, 3)
    (got,) = backend.run(backend.compile(only_silu), [backend.upload(data)])
    np.testing.assert_allclose(got, evaluate(only_silu, [data])[0], rtol=1e-6)
    b = Builder()
    y = b.input(TensorType((2,), float64))
    assert backend.supports(b.build([b.emit("silu", y)]).body[0]) is not None


def test_zero_d_results_stay_zero_d() -> None:
    backend = ToyBackend()
    b = Builder()
    x = b.input(TensorType((), float32))
    fn = b.build([b.emit("exp", x)])
    (out,) = backend.run(backend.compile(fn), [backend.upload(np.float32(0.5))])
    assert backend.download(out).shape == ()
