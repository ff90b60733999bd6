"""Q4_1/Q5_0/Q5_1/Q2_K/Q3_K/Q5_K/IQ4_NL/IQ4_XS: repacked weights and qmatmul vs the reference."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from omnitensor.dtypes import float32
from omnitensor.ir import quant_blocks
from omnitensor.ir.builder import Builder
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.types import QTensorType, TensorType
from omnitensor_backend_cpu import plugin, quant
from omnitensor_backend_cpu.backend import CpuBackend
from omnitensor_backend_cpu.quant_more import MORE_FORMATS

FORMATS = sorted(MORE_FORMATS)


def test_every_more_format_is_claimed() -> None:
    assert {"q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q5_k", "iq4_nl", "iq4_xs"} <= quant.FORMATS


@pytest.mark.parametrize("fmt", FORMATS)
def test_repacked_weight_dequantizes_like_the_reference(fmt: str) -> None:
    rng = np.random.default_rng(3)
    n, k = 6, 512
    blocks = quant_blocks.quantize(rng.normal(size=(n, k)).astype(np.float32), fmt)
    packed = quant.pack(blocks, fmt, (n, k))
    assert packed.qs.dtype == np.int8 and packed.qs.shape == (n, k)
    values = packed.qs.astype(np.float32) * np.repeat(packed.scales, 1 << packed.shift, axis=1)
    if packed.offsets is not None:
        values -= np.repeat(packed.offsets, k // packed.offsets.shape[1], axis=1)
    np.testing.assert_array_equal(values, quant_blocks.dequantize(blocks, fmt))


@pytest.mark.parametrize("fmt", FORMATS)
# integer dots (13: passes of 8, 4 and 1 rows); BLAS tiles
@pytest.mark.parametrize("m", [1, 3, 13, 40, quant.BLAS_MIN_ROWS + 8])
def test_qmatmul_kernel_matches_the_reference(backend: CpuBackend, fmt: str, m: int,
                                              assert_qmatmul_close: Any) -> None:
    rng = np.random.default_rng(1)
    n, k = 40, 768
    blocks = quant_blocks.quantize(rng.normal(size=(n, k)).astype(np.float32), fmt)
    b = Builder()
    x = b.input(TensorType((1, m, k), float32))
    w = b.input(QTensorType(fmt, (n, k)))
    fn = b.build([b.emit("qmatmul", x, w, format=fmt)])
    exe = backend.compile(fn)
    assert exe.plan.kinds == ["quant"]  # the repacked kernel, not the reference fallback
    xs = [rng.normal(size=(1, m, k)).astype(np.float32), backend.upload(blocks)]
    assert plugin.omnitensor_prepare_weight(backend, "w", xs[1], QTensorType(fmt, (n, k))) \
        is xs[1]
    (got,) = backend.run(exe, xs)
    (want,) = evaluate(fn, [xs[0], blocks])
    assert_qmatmul_close(got, want)


FIVE_BIT = sorted(quant.FIVE_BIT_FORMATS)


@pytest.mark.parametrize("fmt", FIVE_BIT)
def test_5_bit_weights_stay_5_bit(fmt: str) -> None:
    # nibbles plus a plane of fifth bits: Q5_0 holds exactly its ggml blocks' bytes where the
    # CPU widens halves (its scales stay the file's halves)
    from omnitensor_backend_cpu._compat import HALF_CONVERSION

    rng = np.random.default_rng(7)
    n, k = 8, 512
    blocks = quant_blocks.quantize(rng.normal(size=(n, k)).astype(np.float32), fmt)
    packed = quant.pack(blocks, fmt, (n, k))
    assert packed.nibbles is not None and packed.highs is not None
    assert packed.highs.shape == (n, k // 8)
    held = packed.nbytes
    if fmt == "q5_0":
        assert held == (blocks.nbytes if HALF_CONVERSION else blocks.nbytes * 24 // 22)
    assert held <= 1.3 * blocks.nbytes


@pytest.mark.parametrize("k", [160, 224])  # rows that are not whole lines of 128
def test_5_bit_rows_of_partial_lines_stay_one_byte_a_weight(k: int,
                                                            assert_qmatmul_close: Any) -> None:
    rng = np.random.default_rng(8)
    n = 24
    blocks = quant_blocks.quantize(rng.normal(size=(n, k)).astype(np.float32), "q5_0")
    packed = quant.pack(blocks, "q5_0", (n, k))
    assert packed.highs is None and packed.nibbles is None
    x = rng.normal(size=(3, k)).astype(np.float32)
    out = np.empty((3, n), np.float32)
    quant.qmatmul(x, packed, out)
    assert_qmatmul_close(out, x @ quant_blocks.dequantize(blocks, "q5_0").T)


def test_fifth_bit_plane_round_trips_every_level() -> None:
    from omnitensor_backend_cpu import fivebit

    rng = np.random.default_rng(9)
    q = rng.integers(-16, 16, size=(5, 3 * fivebit.LINE)).astype(np.int8)
    q[0, :32] = np.arange(-16, 16)
    nibbles, plane = fivebit.split(q)
    assert nibbles.shape == (5, 3 * 64) and plane.shape == (5, 3 * 16)
    np.testing.assert_array_equal(fivebit.join(nibbles, plane), q)


def test_integer_product_refuses_a_plane_of_the_wrong_shape() -> None:
    from omnitensor_backend_cpu import intdot

    packed = quant.pack(quant_blocks.quantize(np.ones((4, 256), np.float32), "q5_0"), "q5_0",
                        (4, 256))
    assert packed.nibbles is not None and packed.highs is not None
    out = np.empty((1, 4), np.float32)
    with pytest.raises(ValueError, match="plane"):
        intdot.run(np.ones((1, 256), np.float32), packed.nibbles, packed.d,
                   np.zeros((4, 0), np.float32), out, 5, packed.highs[:, :8])
