"""Whole launch lists (fusion, views, reductions, products) run on the host vs the reference."""

from __future__ import annotations

import numpy as np
import pytest

from omnitensor.dtypes import DType, bfloat16, float16, float32, int32
from omnitensor.ir.builder import Builder
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.program import Function
from omnitensor.ir.types import TensorType
from omnitensor_backend_cuda.lower import lower
from omnitensor_backend_cuda.nvcc import HostLibrary, compile_checked, run_on_host

FLOATS = (float32, float16, bfloat16)


def _program(dtype: DType) -> Function:
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


def _integer_program() -> Function:
    b = Builder()
    x, y = b.input(TensorType((8,), int32)), b.input(TensorType((8,), int32))
    return b.build([b.emit("add", x, y), b.emit("div", x, y), b.emit("rem", x, y)])


@pytest.fixture(scope="module")
def library(nvcc: str) -> HostLibrary:
    """PTX and one host library of every kernel of this module's launch lists."""
    programs = [_program(d) for d in FLOATS] + [_integer_program()]
    return compile_checked({s.name: s.source for fn in programs for s in lower(fn).steps
                            if s.kind != "matmul"})


@pytest.mark.parametrize("dtype", FLOATS)
def test_launch_list_matches_reference(library: HostLibrary, dtype: DType) -> None:
    fn = _program(dtype)
    low = lower(fn)
    fused = [s for s in low.steps if s.name.startswith("ot_fused_")]
    assert low.steps and all(s.kind in ("thread", "warp", "matmul") for s in low.steps)
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(6, 5)).astype(dtype.np), rng.normal(size=(6,)).astype(dtype.np)]
    got = run_on_host(low, xs, library=library)
    want = evaluate(fn, xs)
    tol = {float32: 1e-5, float16: 2e-3, bfloat16: 2e-2}[dtype]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol,
                                   atol=tol * 4)
    assert len(fused) >= 1


def test_integer_wraparound_and_division(library: HostLibrary) -> None:
    fn = _integer_program()
    xs = [np.array([2**31 - 1, -7, 7, 0, 5, -2**31, 9, 1], np.int32),
          np.array([1, 2, -2, 3, 5, 3, -4, 1], np.int32)]
    for g, w in zip(run_on_host(lower(fn), xs, library=library), evaluate(fn, xs), strict=True):
        np.testing.assert_array_equal(g, w)


def test_unknown_ops_are_refused_before_any_work() -> None:
    from omnitensor.ir import all_ops
    from omnitensor_backend_cuda.backend import SUPPORTED_OPS

    assert SUPPORTED_OPS == frozenset(all_ops())  # every declared op has a CUDA lowering
