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
    deep = b.input(TensorType((1,) * 9, float32))
    fn = b.build([b.emit("neg", x), b.emit("neg", deep)])
    assert supports(fn.body[0]) is None
    assert supports(fn.body[1]) == "neg: rank 9 exceeds 8"  # refused at check, before any work


@pytest.mark.parametrize("kind", ["softmax", "log_softmax", "layer_norm", "rms_norm"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_row_composites_lower_to_one_row_kernel(nvcc: str, kind: str, dtype: DType) -> None:
    b = Builder()
    x = b.input(TensorType((3, 2, 33), dtype))
    n_params = {"layer_norm": 2, "rms_norm": 1}.get(kind, 0)
    params = [b.input(TensorType((2, 33), dtype)) for _ in range(n_params)]
    if kind.endswith("softmax"):  # one axis of a strided (transposed) operand
        fn = b.build([b.emit(kind, b.emit("transpose", x, perm=(1, 0, 2)), axes=(2,))])
    else:  # the norms over both trailing axes, with their weight (and bias)
        fn = b.build([b.emit(kind, x, *params, axes=(1, 2), eps=1e-5)])
    low = lower(fn)
    assert [s.name for s in low.steps][-1] == f"ot_{kind}_{dtype.name}"
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=t.value.type.shape).astype(dtype.np) for t in fn.inputs]
    library = compile_checked({s.name: s.source for s in low.steps})
    (got,) = run_on_host(low, xs, library=library)
    tol = {float32: 1e-5, float16: 2e-3, bfloat16: 2e-2}[dtype]
    want = evaluate(fn, xs)[0]
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol,
                               atol=tol)


def test_collectives_lower_in_one_process_and_are_refused_beyond() -> None:
    from omnitensor_backend_cuda.backend import supports

    b = Builder()
    x = b.input(TensorType((4, 3), float32))
    fn = b.build([b.emit("all_reduce", x, reduction="sum", world_size=1),
                  b.emit("all_gather", x, axis=0, world_size=2)])
    assert supports(fn.body[0]) is None  # world size 1: the operand itself
    reason = supports(fn.body[1])
    assert reason is not None and "world size 2" in reason and "cpu" in reason
