"""Decode-path kernels: RMS norm rows, Q8_0 `qmatmul`, in-place `dynamic_update_slice`."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from omnitensor.dtypes import DType, float32, float64, int32
from omnitensor.ir import quant_blocks
from omnitensor.ir.builder import Builder
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.types import QTensorType, TensorType
from omnitensor_backend_cpu import plugin, pool, quant
from omnitensor_backend_cpu.backend import CpuBackend


def _rms(shape: tuple[int, ...], dtype, weighted: bool):  # type: ignore[no-untyped-def]
    b = Builder()
    x = b.input(TensorType(shape, dtype))
    w = b.input(TensorType(shape, dtype))
    last = len(shape) - 1
    s = b.emit("reduce_sum", b.emit("mul", x, x), axes=(last,))
    s = b.emit("reshape", s, shape=shape[:-1] + (1,))
    keep = shape[:-1] + (1,)
    n = b.emit("broadcast_in_dim", b.constant(float(shape[-1]), dtype.name), shape=keep, dims=())
    eps = b.emit("broadcast_in_dim", b.constant(1e-6, dtype.name), shape=keep, dims=())
    r = b.emit("rsqrt", b.emit("add", b.emit("div", s, n), eps))
    y = b.emit("mul", x, b.emit("broadcast_in_dim", r, shape=shape, dims=tuple(range(len(shape)))))
    if weighted:
        y = b.emit("mul", y, w)
    return b.build([y])


@pytest.mark.parametrize("dtype", [float32, float64])
@pytest.mark.parametrize("shape", [(1, 1, 64), (3, 5, 33), (600, 300)])
@pytest.mark.parametrize("weighted", [True, False])
def test_rms_norm_is_one_row_kernel(backend: CpuBackend, compile_optimized: Any, dtype: DType,
                                    shape: tuple[int, ...], weighted: bool) -> None:
    fn = _rms(shape, dtype, weighted)
    exe = compile_optimized(fn)  # raised into the rms_norm composite, then lowered
    # NOTE: a weight given at x's full shape stays a `mul` after the composite: numpy's when
    # small, a fused kernel split over the threads when large
    lone = "fused" if math.prod(shape) >= pool.MIN_SPLIT else "ref"
    assert exe.plan.kinds == (["rows", lone] if weighted else ["rows"])
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=shape).astype(dtype.np) for _ in range(2)]
    (got,) = backend.run(exe, xs)
    (want,) = evaluate(fn, xs)
    np.testing.assert_allclose(got, want, rtol=2e-6 if dtype == float32 else 1e-12, atol=1e-7)


@pytest.mark.parametrize("m", [1, 5])
@pytest.mark.parametrize("n,k", [(8, 64), (96, 320)])
def test_q8_0_qmatmul_matches_the_reference(backend: CpuBackend, m: int, n: int, k: int,
                                            assert_qmatmul_close: Any) -> None:
    rng = np.random.default_rng(1)
    blocks = quant_blocks.quantize(rng.normal(size=(n, k)).astype(np.float32), "q8_0")
    b = Builder()
    x = b.input(TensorType((1, m, k), float32))
    w = b.input(QTensorType("q8_0", (n, k)))
    fn = b.build([b.emit("qmatmul", x, w, format="q8_0")])
    exe = backend.compile(fn)
    assert exe.plan.kinds == ["quant"]
    xs = [rng.normal(size=(1, m, k)).astype(np.float32), backend.upload(blocks)]
    # prepared at load, then found by identity
    assert plugin.omnitensor_prepare_weight(backend, "w", xs[1], QTensorType("q8_0", (n, k))) \
        is xs[1]
    before = len(quant._CACHE)
    (got,) = backend.run(exe, xs)
    assert len(quant._CACHE) == before
    (want,) = evaluate(fn, [xs[0], blocks])
    assert_qmatmul_close(got, want)


def _cache_update(shape: tuple[int, ...]):  # type: ignore[no-untyped-def]
    b = Builder()
    cache = b.input(TensorType(shape, float32))
    row = b.input(TensorType((1, shape[1]), float32))
    at = b.input(TensorType((), int32))
    zero = b.constant(0, "int32")
    new = b.emit("dynamic_update_slice", cache, row, at, zero)
    total = b.emit("reduce_sum", new, axes=(0, 1))
    return b.build([total, new])


def test_donated_cache_is_updated_in_place(backend: CpuBackend) -> None:
    fn = _cache_update((8, 4))
    exe = backend.compile(fn)
    cache = backend.upload(np.zeros((8, 4), np.float32))
    row = np.ones((1, 4), np.float32)
    at = np.array(3, np.int32)
    total, new = backend.run(exe, [cache, row, at], donated=frozenset({0}))
    assert new is cache and float(total) == 4.0
    np.testing.assert_array_equal(new[3], 1.0)
    total, again = backend.run(exe, [new, row * 2, np.array(99, np.int32)], donated=frozenset({0}))
    assert again is cache and float(total) == 12.0  # clamped to the last row


def test_cache_not_donated_is_copied(backend: CpuBackend) -> None:
    fn = _cache_update((8, 4))
    exe = backend.compile(fn)
    cache = backend.upload(np.zeros((8, 4), np.float32))
    _, new = backend.run(exe, [cache, np.ones((1, 4), np.float32), np.array(2, np.int32)])
    assert new is not cache and not cache.any()
    np.testing.assert_array_equal(new, evaluate(fn, [np.zeros((8, 4), np.float32), np.ones(
        (1, 4), np.float32), np.array(2, np.int32)])[1])
