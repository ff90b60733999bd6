"""Internals of the wgpu backend: pipeline cache, one submit per run, buffer pool, fusion,
honest capabilities. Op semantics are tested by the conformance suite, not here."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest

from omnitensor.dtypes import bfloat16, float32, float64, int32, int64
from omnitensor.errors import UnsupportedError
from omnitensor.ir.builder import Builder
from omnitensor.ir.program import Function
from omnitensor.ir.types import TensorType


def _chain(shape: tuple[int, ...] = (64, 32)) -> Function:
    """exp(x * y + bias) - x with a broadcast bias: one fusable chain of four ops."""
    b = Builder("chain")
    x = b.input(TensorType(shape, float32))
    y = b.input(TensorType(shape, float32))
    bias = b.input(TensorType(shape[-1:], float32))
    wide = b.emit("broadcast_in_dim", bias, shape=shape, dims=(len(shape) - 1,))
    out = b.emit("sub", b.emit("exp", b.emit("add", b.emit("mul", x, y), wide)), x)
    return b.build([out])


def _inputs(shape: tuple[int, ...] = (64, 32)) -> list[np.ndarray[Any, Any]]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal(shape).astype(np.float32) * 0.1 for _ in range(2)] + [
        rng.standard_normal(shape[-1:]).astype(np.float32) * 0.1]


def test_plugin_module_is_light() -> None:
    import subprocess

    code = ("import sys, omnitensor_backend_wgpu.plugin as p; p.omnitensor_register_backends(); "
            "print('wgpu' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "False"


def test_chain_fuses_into_one_kernel(backend: Any) -> None:
    exe = backend.compile(_chain())
    assert exe.kernel_count == 1
    x, y, bias = _inputs()
    out = backend.run(exe, [backend.upload(a) for a in (x, y, bias)])
    want = np.exp(x * y + bias) - x
    np.testing.assert_allclose(backend.download(out[0]), want, rtol=1e-6)


def test_one_submit_per_run(backend: Any) -> None:
    b = Builder("two_kernels")
    x = b.input(TensorType((16, 8), float32))
    s = b.emit("reduce_sum", b.emit("exp", x), axes=(1,))
    fn = b.build([b.emit("mul", s, s)])
    exe = backend.compile(fn)
    assert exe.kernel_count == 3  # exp, the reduction, mul
    buffers = [backend.upload(np.ones((16, 8), np.float32))]
    before = backend.stats()
    backend.run(exe, buffers)
    after = backend.stats()
    assert after["submits"] - before["submits"] == 1
    assert after["dispatches"] - before["dispatches"] == 3


def test_pipeline_cache_hits_across_shapes(backend: Any) -> None:
    backend.compile(_chain((64, 32)))
    before = backend.stats()
    backend.compile(_chain((8, 3, 5)))  # another shape and rank: the same pipeline
    after = backend.stats()
    assert after["pipeline_hits"] - before["pipeline_hits"] == 1
    assert after["pipeline_misses"] == before["pipeline_misses"]


def test_buffer_pool_reuses_freed_buffers(backend: Any) -> None:
    exe = backend.compile(_chain())
    buffers = [backend.upload(a) for a in _inputs()]
    out = backend.run(exe, buffers)
    del out
    before = backend.stats()
    out = backend.run(exe, buffers)
    after = backend.stats()
    assert after["pool_misses"] == before["pool_misses"]
    assert after["pool_hits"] > before["pool_hits"]
    del out


def test_handed_out_buffers_are_not_recycled(backend: Any) -> None:
    exe = backend.compile(_chain())
    buffers = [backend.upload(a) for a in _inputs()]
    first = backend.run(exe, buffers)[0]
    kept = backend.download(first)
    backend.run(exe, [backend.upload(a * 2) for a in _inputs()])
    np.testing.assert_array_equal(backend.download(first), kept)


@pytest.mark.parametrize("dtype", [float64, int64, bfloat16])
def test_unsupported_dtype_raises_before_work(backend: Any, dtype: Any) -> None:
    b = Builder("wide")
    x = b.input(TensorType((4,), dtype))
    fn = b.build([b.emit("add", x, x)])
    before = backend.stats()
    with pytest.raises(UnsupportedError, match="wgpu"):
        backend.compile(fn)
    assert backend.stats()["pipeline_misses"] == before["pipeline_misses"]
    assert dtype not in backend.capabilities().ops["add"]


def test_upload_refuses_unsupported_dtype(backend: Any) -> None:
    with pytest.raises(UnsupportedError, match="float64"):
        backend.upload(np.zeros(3, np.float64))


def test_bool_and_empty_round_trip(backend: Any) -> None:
    flags = np.array([[True, False, True]])
    np.testing.assert_array_equal(backend.download(backend.upload(flags)), flags)
    empty = np.zeros((0, 3), np.int32)
    assert backend.download(backend.upload(empty)).shape == (0, 3)


def test_large_dispatch_uses_two_dimensions(backend: Any) -> None:
    from omnitensor_backend_wgpu.lower import linear_groups

    assert linear_groups(64 * 70000, 65535) == (65535, 2, 1)


def test_capabilities_are_honest(backend: Any) -> None:
    caps = backend.capabilities()
    assert caps.strided_inputs is False
    for missing in ("sort", "top_k", "qmatmul", "dequantize"):
        assert missing not in caps.ops
    assert int32 in caps.ops["dot_general"]
