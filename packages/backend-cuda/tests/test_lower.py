"""Whole launch lists (fusion, views, reductions, products) run on the host vs the reference."""

from __future__ import annotations

import numpy as np
import pytest

from omnitensor.dtypes import bfloat16, float16, float32, int32
from omnitensor.ir.builder import Builder
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.types import TensorType
from omnitensor_backend_cuda.lower import lower
from omnitensor_backend_cuda.nvcc import compile_ptx, run_on_host


def _program(dtype):  # type: ignore[no-untyped-def]
    b = Builder()
    x = b.input(TensorType((6, 5), dtype))
    bias = b.input(TensorType((6,), dtype))
    xt = b.emit("transpose", x, perm=(1, 0))  # (5, 6), strided view
    v = b.emit("add", xt, b.emit("broadcast_in_dim", bias, shape=(5, 6), dims=(1,)))
    v = b.emit("tanh", b.emit("mul", v, v))
    s = b.emit("reduce_sum", v, axes=(1,))
    m = b.emit("argmax", v, axis=0)
    c = b.emit("concatenate", v, b.emit("reverse", v, axes=(0,)), axis=0)  # (10, 6)
    p = b.emit("dot_general", c, xt, contracting=((1,), (1,)))  # (10, 5)
    return b.build([v, s, m, p])


@pytest.mark.parametrize("dtype", [float32, float16, bfloat16])
def test_launch_list_matches_reference(nvcc: str, dtype) -> None:  # type: ignore[no-untyped-def]
    fn = _program(dtype)
    low = lower(fn)
    fused = [s for s in low.steps if s.name.startswith("ot_fused_")]
    assert low.steps and all(s.kind in ("thread", "warp", "matmul") for s in low.steps)
    for step in {s.name: s for s in low.steps if s.kind != "matmul"}.values():
        assert f".entry {step.name}(" in compile_ptx(step.source)
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(6, 5)).astype(dtype.np), rng.normal(size=(6,)).astype(dtype.np)]
    got = run_on_host(low, xs)
    want = evaluate(fn, xs)
    tol = {float32: 1e-5, float16: 2e-3, bfloat16: 2e-2}[dtype]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol,
                                   atol=tol * 4)
    assert len(fused) >= 1


def test_integer_wraparound_and_division(nvcc: str) -> None:
    b = Builder()
    x, y = b.input(TensorType((8,), int32)), b.input(TensorType((8,), int32))
    fn = b.build([b.emit("add", x, y), b.emit("div", x, y), b.emit("rem", x, y)])
    xs = [np.array([2**31 - 1, -7, 7, 0, 5, -2**31, 9, 1], np.int32),
          np.array([1, 2, -2, 3, 5, 3, -4, 1], np.int32)]
    for g, w in zip(run_on_host(lower(fn), xs), evaluate(fn, xs), strict=True):
        np.testing.assert_array_equal(g, w)
