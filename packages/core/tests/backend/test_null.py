"""The recording null backend."""

from __future__ import annotations

import numpy as np

from omnitensor.backend.null import NullBackend
from omnitensor.dtypes import float32, int32
from omnitensor.ir import Builder, TensorType


def test_records_compiles_and_runs_and_returns_typed_zeros() -> None:
    builder = Builder()
    x = builder.input(TensorType((2, 3), float32))
    i = builder.input(TensorType((4,), int32))
    fn = builder.build([builder.emit("exp", x), builder.emit("neg", i)])
    backend = NullBackend()
    backend.check(fn)
    exe = backend.compile(fn)
    inputs = [np.ones((2, 3), np.float32), np.ones(4, np.int32)]
    outs = backend.run(exe, inputs, donated=frozenset({1}))
    assert backend.compiled == [fn]
    assert len(backend.runs) == 1 and backend.runs[0][2] == frozenset({1})
    assert outs[0].dtype == np.float32 and outs[0].shape == (2, 3) and not outs[0].any()
    assert outs[1].dtype == np.int32 and outs[1].shape == (4,)
