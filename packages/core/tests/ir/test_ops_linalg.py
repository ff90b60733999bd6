"""dot_general: shape rule through Builder.emit, error messages, reference kernel vs numpy."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from omnitensor import dtypes
from omnitensor.errors import DTypeError, OmnitensorError, ShapeError
from omnitensor.ir import Builder, TensorType, get_op
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.opdef import Trait

F32 = dtypes.float32


def run(op: str, *arrays: np.ndarray, **attrs: Any) -> np.ndarray:
    """Record `op` on inputs typed like `arrays` and evaluate it with the reference kernels."""
    b = Builder()
    values = [b.input(TensorType(a.shape, dtypes.as_dtype(a.dtype))) for a in arrays]
    out = b.emit(op, *values, **attrs)
    return evaluate(b.build([out]), list(arrays))[0]


def infer(op: str, *types: TensorType, **attrs: Any) -> TensorType:
    b = Builder()
    out = b.emit(op, *[b.input(t) for t in types], **attrs)
    assert isinstance(out.type, TensorType)
    return out.type


def t(*shape: int, dtype: dtypes.DType = F32) -> TensorType:
    return TensorType(shape, dtype)


def test_declaration() -> None:
    opdef = get_op("dot_general")
    assert opdef.has(Trait.LINALG)
    assert not opdef.has(Trait.NON_DIFFERENTIABLE)
    assert [o.name for o in opdef.operands] == ["lhs", "rhs"]
    assert opdef.attr_defaults({"contracting": ((1,), (0,))})["batch"] == ((), ())
    assert set(opdef.dtypes) == set(dtypes.NUMERIC)
    assert "float32" in opdef.doc and "wrap" in opdef.doc


@pytest.mark.parametrize(
    ("lhs", "rhs", "contracting", "batch", "expected"),
    [
        ((2, 3), (3, 4), ((1,), (0,)), ((), ()), (2, 4)),  # matmul
        ((3,), (3,), ((0,), (0,)), ((), ()), ()),  # inner product
        ((2,), (3,), ((), ()), ((), ()), (2, 3)),  # outer product
        ((5, 2, 3), (5, 3, 4), ((2,), (1,)), ((0,), (0,)), (5, 2, 4)),  # bmm
        ((2, 5, 3), (4, 3, 5), ((2,), (1,)), ((1,), (2,)), (5, 2, 4)),  # batch dims come first
        ((3, 2), (4, 3), ((0,), (1,)), ((), ()), (2, 4)),  # lhs free then rhs free
        ((2, 3, 7), (7, 3), ((-1, 1), (0, 1)), ((), ()), (2,)),  # negative dims, two contracted
        ((2, 0), (0, 4), ((1,), (0,)), ((), ()), (2, 4)),  # empty contraction
    ],
)
def test_shape_rule(
    lhs: tuple[int, ...],
    rhs: tuple[int, ...],
    contracting: Any,
    batch: Any,
    expected: tuple[int, ...],
) -> None:
    out = infer("dot_general", t(*lhs), t(*rhs), contracting=contracting, batch=batch)
    assert out == TensorType(expected, F32)


@pytest.mark.parametrize(
    ("lhs", "rhs", "contracting", "batch", "error", "match"),
    [
        ((2, 3), (4, 4), ((1,), (0,)), ((), ()), ShapeError, r"contracting dimension sizes differ"),
        ((2, 3), (3, 4), ((2,), (0,)), ((), ()), ShapeError, r"out of range"),
        ((2, 3), (3, 4), ((1,), (0, 1)), ((), ()), ShapeError, r"pair up one to one"),
        ((3, 3), (3, 3), ((0,), (0,)), ((0,), (1,)), ShapeError, r"used twice"),
        ((5, 3), (6, 3), ((1,), (1,)), ((0,), (0,)), ShapeError, r"batch dimension sizes differ"),
        ((2, 3), (3, 4), (1, 0), ((), ()), OmnitensorError, r"pair of tuples of ints"),
    ],
)
def test_shape_errors(
    lhs: tuple[int, ...],
    rhs: tuple[int, ...],
    contracting: Any,
    batch: Any,
    error: type[Exception],
    match: str,
) -> None:
    with pytest.raises(error, match=match) as info:
        infer("dot_general", t(*lhs), t(*rhs), contracting=contracting, batch=batch)
    assert str(info.value).startswith("dot_general: ")


def test_dtype_errors() -> None:
    with pytest.raises(DTypeError, match=r"dot_general: operand dtypes differ .*float32.*float16"):
        infer("dot_general", t(2, 3), t(3, 2, dtype=dtypes.float16), contracting=((1,), (0,)))
    with pytest.raises(DTypeError, match=r"dot_general: operand 'lhs' has dtype bool"):
        infer(
            "dot_general",
            t(2, 3, dtype=dtypes.bool_),
            t(3, 2, dtype=dtypes.bool_),
            contracting=((1,), (0,)),
        )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_reference_matches_einsum(dtype: Any) -> None:
    rng = np.random.default_rng(0)
    lhs = rng.standard_normal((4, 2, 5, 3)).astype(dtype)  # (B, M, C, K)
    rhs = rng.standard_normal((3, 4, 6, 5)).astype(dtype)  # (K, B, N, C)
    out = run("dot_general", lhs, rhs, contracting=((2, 3), (3, 0)), batch=((0,), (1,)))
    expected = np.einsum("bmck,kbnc->bmn", lhs.astype(np.float64), rhs.astype(np.float64))
    assert out.dtype == dtype and out.shape == (4, 2, 6)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_half_precision_accumulates_in_float32(dtype: Any) -> None:
    # 4096 terms of 2**-4: summed in the narrow type the running sum stalls once its ulp
    # exceeds 2**-3 (f16 at 128, bf16 at 32); in float32 it reaches 256 and rounds once.
    k = 4096
    lhs = np.ones((1, k), dtype)
    rhs = np.full((k, 1), 2.0**-4, dtype)
    out = run("dot_general", lhs, rhs, contracting=((1,), (0,)))
    assert out.dtype == np.dtype(dtype)
    assert float(out[0, 0]) == 256.0
    # A sum that is only exact in float32: 1 + 2048 * 2**-11 ... rounded once to the result.
    lhs = np.ones((1, 2049), dtype)
    rhs = np.concatenate([np.ones((1, 1)), np.full((2048, 1), 2.0**-11)]).astype(dtype)
    exact = np.float32(1.0) + np.float32(2048 * 2.0**-11)
    out = run("dot_general", lhs, rhs, contracting=((1,), (0,)))
    assert out[0, 0] == exact.astype(dtype)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.uint32, np.int64])
def test_integers_wrap(dtype: Any) -> None:
    info = np.iinfo(dtype)
    lhs = np.full((1, 3), info.max, dtype)
    rhs = np.full((3, 1), 2, dtype)
    out = run("dot_general", lhs, rhs, contracting=((1,), (0,)))
    expected = (int(info.max) * 6) % (1 << info.bits)
    if info.min < 0 and expected > info.max:
        expected -= 1 << info.bits
    assert out.dtype == dtype and int(out[0, 0]) == expected


def test_nan_and_empty_contraction() -> None:
    lhs = np.array([[np.nan, 1.0], [0.0, 1.0]], np.float32)
    rhs = np.array([[np.inf], [1.0]], np.float32)
    out = run("dot_general", lhs, rhs, contracting=((1,), (0,)))
    assert np.isnan(out[0, 0]) and np.isnan(out[1, 0])  # 0 * inf = NaN
    empty = run(
        "dot_general",
        np.ones((2, 0), np.float32),
        np.ones((0, 3), np.float32),
        contracting=((1,), (0,)),
    )
    np.testing.assert_array_equal(empty, np.zeros((2, 3), np.float32))
