"""dequantize and qmatmul: shape/format rules via Builder.input(QTensorType), reference kernels."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from omnitensor import dtypes
from omnitensor.errors import DTypeError, OmnitensorError, ShapeError
from omnitensor.ir import Builder, QTensorType, TensorType, get_op, quant_blocks
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.opdef import Trait

F32 = dtypes.float32
FORMATS = ["q8_0", "q4_0", "q4_k", "q6_k"]


def quantized(fmt: str, shape: tuple[int, ...], seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(blocks, their float32 dequantization) for Gaussian data of `shape`."""
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    blocks = quant_blocks.quantize(x, fmt)
    return blocks, quant_blocks.dequantize(blocks, fmt)


def test_declarations() -> None:
    deq, qmm = get_op("dequantize"), get_op("qmatmul")
    assert deq.has(Trait.QUANTIZED | Trait.NON_DIFFERENTIABLE)
    assert qmm.has(Trait.QUANTIZED) and not qmm.has(Trait.NON_DIFFERENTIABLE)
    assert [o.quantized for o in deq.operands] == [True]
    assert [o.quantized for o in qmm.operands] == [False, True]
    assert deq.attr_defaults({"format": "q8_0"})["dtype"] == F32
    assert "Differentiable in `x` only" in qmm.doc


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.float64])
def test_dequantize(fmt: str, dtype: dtypes.DType) -> None:
    shape = (2, 3, 512)
    b = Builder()
    q = b.input(QTensorType(fmt, shape))
    out = b.emit("dequantize", q, format=fmt, dtype=dtype)
    assert out.type == TensorType(shape, dtype)
    blocks, expected = quantized(fmt, shape)
    (result,) = evaluate(b.build([out]), [blocks])
    assert result.dtype == dtype.np
    np.testing.assert_array_equal(result, expected.astype(dtype.np))


def test_dequantize_errors() -> None:
    b = Builder()
    q = b.input(QTensorType("q4_0", (4, 64)))
    with pytest.raises(
        DTypeError,
        match=r"dequantize: attribute format 'q8_0' does not match "
        r"the operand \(got q4_0\[4,64\], expected format='q4_0'",
    ):
        b.emit("dequantize", q, format="q8_0")
    with pytest.raises(DTypeError, match=r"dequantize: unknown quantization format 'q7_k'"):
        b.emit("dequantize", q, format="q7_k")
    with pytest.raises(DTypeError, match=r"dequantize: result dtype has dtype int32"):
        b.emit("dequantize", q, format="q4_0", dtype=dtypes.int32)
    with pytest.raises(OmnitensorError, match=r"dequantize: operand 'q' must be a quantized"):
        b.emit("dequantize", b.input(TensorType((4, 64), F32)), format="q4_0")
    with pytest.raises(OmnitensorError, match=r"dequantize: missing required attribute 'format'"):
        b.emit("dequantize", q)


@pytest.mark.parametrize(
    ("x", "w", "expected"),
    [((3, 64), (5, 64), (3, 5)), ((2, 4, 64), (7, 64), (2, 4, 7)), ((64,), (5, 64), (5,))],
)
def test_qmatmul_shape(x: tuple[int, ...], w: tuple[int, ...], expected: tuple[int, ...]) -> None:
    b = Builder()
    out = b.emit(
        "qmatmul",
        b.input(TensorType(x, dtypes.float16)),
        b.input(QTensorType("q8_0", w)),
        format="q8_0",
    )
    assert out.type == TensorType(expected, dtypes.float16)


def test_qmatmul_errors() -> None:
    b = Builder()
    x = b.input(TensorType((3, 64), F32))
    w = b.input(QTensorType("q8_0", (5, 64)))
    with pytest.raises(ShapeError, match=r"qmatmul: contraction sizes differ \(got x \(3, 32\)"):
        b.emit("qmatmul", b.input(TensorType((3, 32), F32)), w, format="q8_0")
    with pytest.raises(ShapeError, match=r"qmatmul: weight must be rank 2"):
        b.emit("qmatmul", x, b.input(QTensorType("q8_0", (2, 5, 64))), format="q8_0")
    with pytest.raises(DTypeError, match=r"qmatmul: attribute format 'q4_0' does not match"):
        b.emit("qmatmul", x, w, format="q4_0")
    with pytest.raises(DTypeError, match=r"qmatmul: operand 'x' has dtype int32"):
        b.emit("qmatmul", b.input(TensorType((3, 64), dtypes.int32)), w, format="q8_0")
    with pytest.raises(OmnitensorError, match=r"qmatmul: operand 'w' must be a quantized"):
        b.emit("qmatmul", x, b.input(TensorType((5, 64), F32)), format="q8_0")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.float64])
def test_qmatmul_reference(fmt: str, dtype: Any) -> None:
    n, k = 6, 512
    blocks, weight = quantized(fmt, (n, k), seed=1)
    x = np.random.default_rng(2).standard_normal((2, 3, k)).astype(dtype)
    b = Builder()
    xv = b.input(TensorType(x.shape, dtypes.as_dtype(x.dtype)))
    out = b.emit("qmatmul", xv, b.input(QTensorType(fmt, (n, k))), format=fmt)
    (result,) = evaluate(b.build([out]), [x, blocks])
    assert result.dtype == np.dtype(dtype) and result.shape == (2, 3, n)
    work = np.float64 if dtype == np.float64 else np.float32
    expected = np.matmul(x.astype(work), weight.astype(work).T).astype(dtype)
    # f16/bf16 accumulate in float32 and round once: equal to the float32 result rounded, up to
    # summation order (one unit in the last place of the narrow type).
    tol = {np.float32: 1e-5, np.float64: 1e-12}.get(dtype, 1e-2)
    np.testing.assert_allclose(
        result.astype(np.float64), expected.astype(np.float64), rtol=tol, atol=tol
    )


def test_qmatmul_float16_does_not_overflow_in_accumulation() -> None:
    # Partial sums above float16's 65504 must not become inf when the final result fits.
    k = 64
    blocks = quant_blocks.quantize(np.full((1, k), 1.0, np.float32), "q8_0")
    x = np.concatenate([np.full(k // 2, 60000.0), np.full(k // 2, -60000.0)]).astype(np.float16)
    b = Builder()
    out = b.emit(
        "qmatmul",
        b.input(TensorType((k,), dtypes.float16)),
        b.input(QTensorType("q8_0", (1, k))),
        format="q8_0",
    )
    (result,) = evaluate(b.build([out]), [x, blocks])
    assert np.isfinite(result).all() and abs(float(result[0])) < 1.0
