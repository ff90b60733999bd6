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
    if packed.mins is not None:
        values -= np.repeat(packed.mins, k // packed.mins.shape[1], axis=1)
    np.testing.assert_array_equal(values, quant_blocks.dequantize(blocks, fmt))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("m", [1, 3, 40, quant.BLAS_MIN_ROWS + 8])  # integer dots; BLAS tiles
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
