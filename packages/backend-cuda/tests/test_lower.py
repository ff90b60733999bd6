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


def test_capabilities_are_the_lowering_table() -> None:
    from omnitensor.ir import all_ops
    from omnitensor.ir.opdef import Trait
    from omnitensor_backend_cuda.backend import supports
    from omnitensor_backend_cuda.table import LOWERINGS

    composite = getattr(Trait, "COMPOSITE", None)  # composites without a lowering are expanded
    primitives = {n for n, o in all_ops().items() if composite is None or not o.has(composite)}
    assert primitives <= set(LOWERINGS.capabilities())  # every primitive has a CUDA lowering
    b = Builder()
    x = b.input(TensorType((4, 3), float32))
    fn = b.build([b.emit("neg", x)])
    assert supports(fn.body[0]) is None


@pytest.mark.parametrize("kind", ["softmax", "log_softmax", "layer_norm", "rms_norm"])
def test_row_composite_lowering_on_host(nvcc: str, kind: str) -> None:
    from omnitensor_backend_cuda.lower import _Lower

    b = Builder()
    x = b.input(TensorType((3, 2, 33), float32))
    w, bias = b.input(TensorType((2, 33), float32)), b.input(TensorType((2, 33), float32))
    fn = b.build([x])
    lw = _Lower()
    for value in fn.inputs:
        t = value.value.type
        lw.env[id(value.value)] = lw.new_slot(t.shape, t.dtype)
    lw.out.n_inputs = 3
    axes = 1 if kind.endswith("softmax") else 2  # norms over both trailing axes
    norm = kind.endswith("norm")
    out = lw.rows(kind, x, w if norm else None, bias if kind == "layer_norm" else None, 1e-5,
                  axes)
    lw.out.outputs.append(out)
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=s).astype(np.float32) for s in ((3, 2, 33), (2, 33), (2, 33))]
    library = compile_checked({s.name: s.source for s in lw.out.steps})
    (got,) = run_on_host(lw.out, xs, library=library)
    a = xs[0].astype(np.float64)
    if kind.endswith("softmax"):
        shifted = a - a.max(-1, keepdims=True)
        log = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
        want = log if kind == "log_softmax" else np.exp(log)
    elif kind == "layer_norm":
        c = a - a.mean((1, 2), keepdims=True)
        want = c / np.sqrt((c * c).mean((1, 2), keepdims=True) + 1e-5) * xs[1] + xs[2]
    else:
        want = a / np.sqrt((a * a).mean((1, 2), keepdims=True) + 1e-5) * xs[1]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
