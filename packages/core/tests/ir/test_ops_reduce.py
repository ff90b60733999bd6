"""Reductions: shape rules, errors, accumulation, wrapping, NaN and empty-input semantics."""

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
REDUCE = ("reduce_sum", "reduce_prod", "reduce_max", "reduce_min")


def run(op: str, *arrays: np.ndarray, **attrs: Any) -> np.ndarray:
    """Record `op` on inputs typed like `arrays`, evaluate it with the reference kernels."""
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


def test_declarations() -> None:
    for op in REDUCE:
        assert get_op(op).has(Trait.REDUCTION)
    assert get_op("reduce_sum").dtypes == dtypes.NUMERIC
    assert get_op("reduce_prod").dtypes == dtypes.NUMERIC
    assert dtypes.bool_ in get_op("reduce_max").dtypes
    assert dtypes.bool_ in get_op("reduce_min").dtypes
    for op in ("argmax", "argmin"):
        assert get_op(op).has(Trait.NON_DIFFERENTIABLE)
        assert get_op(op).dtypes == dtypes.NUMERIC


@pytest.mark.parametrize("op", REDUCE)
@pytest.mark.parametrize(
    ("shape", "axes", "expected"),
    [
        ((2, 3, 4), (1,), (2, 4)),
        ((2, 3, 4), (0, 2), (3,)),
        ((2, 3, 4), (-1,), (2, 3)),
        ((2, 3, 4), (), (2, 3, 4)),
        ((2, 3), (0, 1), ()),
        ((0, 3), (0,), (3,)),
    ],
)
def test_reduce_shapes(op: str, shape: tuple[int, ...], axes: tuple[int, ...],
                       expected: tuple[int, ...]) -> None:
    assert infer(op, t(*shape), axes=axes) == t(*expected)


@pytest.mark.parametrize("op", REDUCE)
def test_reduce_errors(op: str) -> None:
    with pytest.raises(ShapeError, match=rf"{op}: axis 2 is out of range .*\(2, 3\)"):
        infer(op, t(2, 3), axes=(2,))
    with pytest.raises(ShapeError, match=rf"{op}: repeated axes"):
        infer(op, t(2, 3), axes=(0, -2))
    with pytest.raises(OmnitensorError, match="must be a tuple of ints"):
        infer(op, t(2, 3), axes=0)
    with pytest.raises(OmnitensorError, match="missing required attribute 'axes'"):
        infer(op, t(2, 3))


def test_reduce_sum_rejects_bool() -> None:
    with pytest.raises(DTypeError, match="reduce_sum: operand 'x' has dtype bool"):
        infer("reduce_sum", t(3, dtype=dtypes.bool_), axes=(0,))


@pytest.mark.parametrize(
    ("op", "fn"),
    [("reduce_sum", np.sum), ("reduce_prod", np.prod), ("reduce_max", np.max),
     ("reduce_min", np.min)],
)
@pytest.mark.parametrize("axes", [(0,), (1,), (0, 1), ()])
def test_reduce_matches_numpy(op: str, fn: Any, axes: tuple[int, ...]) -> None:
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(run(op, x, axes=axes), fn(x, axis=axes), rtol=1e-6)


def test_empty_reductions_give_identity() -> None:
    e = np.zeros((0, 2), np.float32)
    np.testing.assert_array_equal(run("reduce_sum", e, axes=(0,)), [0, 0])
    np.testing.assert_array_equal(run("reduce_prod", e, axes=(0,)), [1, 1])
    np.testing.assert_array_equal(run("reduce_max", e, axes=(0,)), [-np.inf, -np.inf])
    np.testing.assert_array_equal(run("reduce_min", e, axes=(0,)), [np.inf, np.inf])
    i8 = np.zeros((2, 0), np.int8)
    np.testing.assert_array_equal(run("reduce_max", i8, axes=(1,)), [-128, -128])
    np.testing.assert_array_equal(run("reduce_min", i8, axes=(1,)), [127, 127])
    u32 = np.zeros((0,), np.uint32)
    assert run("reduce_max", u32, axes=(0,)) == 0
    assert run("reduce_min", u32, axes=(0,)) == 0xFFFFFFFF
    b = np.zeros((0,), bool)
    assert run("reduce_max", b, axes=(0,)).item() is False
    assert run("reduce_min", b, axes=(0,)).item() is True
    bf = np.zeros((0,), ml_dtypes.bfloat16)
    assert run("reduce_max", bf, axes=(0,)).astype(np.float32) == -np.inf


def test_bool_max_is_or_min_is_and() -> None:
    x = np.array([[True, False], [False, False]])
    np.testing.assert_array_equal(run("reduce_max", x, axes=(1,)), [True, False])
    np.testing.assert_array_equal(run("reduce_min", x, axes=(0,)), [False, False])
    np.testing.assert_array_equal(run("reduce_min", np.ones((2, 2), bool), axes=(0,)),
                                  [True, True])


def test_nan_propagates() -> None:
    x = np.array([[1.0, np.nan, 3.0], [1.0, 2.0, 3.0]], np.float32)
    for op in REDUCE:
        out = run(op, x, axes=(1,))
        assert np.isnan(out[0]) and not np.isnan(out[1]), op
    h = x.astype(np.float16)
    assert np.isnan(run("reduce_max", h, axes=(1,))[0])
    assert np.isnan(run("reduce_min", h, axes=(1,))[0])


def test_integers_wrap() -> None:
    x = np.array([100, 100, 100], np.int8)
    assert run("reduce_sum", x, axes=(0,)) == np.int8(44)  # 300 mod 256
    assert run("reduce_prod", np.array([16, 16], np.int8), axes=(0,)) == 0
    u = np.array([0xFFFFFFFF, 2], np.uint32)
    assert run("reduce_sum", u, axes=(0,)) == 1
    assert run("reduce_sum", u, axes=(0,)).dtype == np.uint32


@pytest.mark.parametrize("np_dtype", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
def test_half_sums_accumulate_in_float32(np_dtype: Any) -> None:
    # 4096 ones: a float16 running sum sticks at 2048; bfloat16 at 256.
    x = np.ones(4096, np_dtype)
    out = run("reduce_sum", x, axes=(0,))
    assert out.dtype == np.dtype(np_dtype)
    assert float(out) == 4096.0
    # 1 + 1e-3 * 1000: rounding once from float32 vs rounding each step.
    y = np.concatenate([np.ones(1), np.full(1000, 1e-3)]).astype(np_dtype)
    expected = y.astype(np.float32).sum(dtype=np.float32).astype(np_dtype)
    assert run("reduce_sum", y, axes=(0,)) == expected
    c = run("cumsum", x, axis=0)
    assert c.dtype == np.dtype(np_dtype) and float(c[-1]) == 4096.0


def test_half_prod_accumulates_in_float32() -> None:
    # 256 * 256 overflows float16 (max 65504) but the product ends at 1.
    x = np.array([256, 256, 2**-16], np.float16)
    assert run("reduce_prod", x, axes=(0,)) == np.float16(1.0)


# --- argmax / argmin ---------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_shapes_and_errors(op: str) -> None:
    assert infer(op, t(2, 3, 4), axis=1) == TensorType((2, 4), dtypes.int32)
    assert infer(op, t(5), axis=-1) == TensorType((), dtypes.int32)
    assert infer(op, t(0, 3), axis=1) == TensorType((0,), dtypes.int32)
    with pytest.raises(ShapeError, match=rf"{op}: cannot take {op} of an empty axis .*\(3, 0\)"):
        infer(op, t(3, 0), axis=1)
    with pytest.raises(ShapeError, match=rf"{op}: axis 2 is out of range"):
        infer(op, t(3, 2), axis=2)
    with pytest.raises(ShapeError, match="out of range"):
        infer(op, t(), axis=0)
    with pytest.raises(DTypeError, match=f"{op}: operand 'x' has dtype bool"):
        infer(op, t(3, dtype=dtypes.bool_), axis=0)


def test_arg_ties_and_nan() -> None:
    x = np.array([[1, 3, 3, 0], [2, 2, 0, 0]], np.int32)
    np.testing.assert_array_equal(run("argmax", x, axis=1), [1, 0])
    np.testing.assert_array_equal(run("argmin", x, axis=1), [3, 2])
    f = np.array([1.0, np.nan, 5.0, np.nan, -1.0], np.float32)
    assert run("argmax", f, axis=0) == 1
    assert run("argmin", f, axis=0) == 1
    h = f.astype(ml_dtypes.bfloat16)
    assert run("argmax", h, axis=0) == 1
    inf = np.array([-np.inf, np.inf, np.inf], np.float16)
    assert run("argmax", inf, axis=0) == 1
    assert run("argmin", inf, axis=0) == 0
    out = run("argmax", np.random.default_rng(1).standard_normal((3, 4, 5)), axis=1)
    assert out.dtype == np.int32 and out.shape == (3, 5)


# --- cumsum ------------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum(axis: int, reverse: bool) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    expected = (
        np.flip(np.cumsum(np.flip(x, axis), axis=axis), axis) if reverse
        else np.cumsum(x, axis=axis)
    )
    assert infer("cumsum", t(3, 4), axis=axis, reverse=reverse) == t(3, 4)
    np.testing.assert_array_equal(run("cumsum", x, axis=axis, reverse=reverse), expected)


def test_cumsum_edge_cases() -> None:
    np.testing.assert_array_equal(
        run("cumsum", np.array([1, 2, 3], np.int32), axis=0, reverse=True), [6, 5, 3]
    )
    np.testing.assert_array_equal(
        run("cumsum", np.array([100, 100, 100], np.int8), axis=0), [100, -56, 44]
    )
    out = run("cumsum", np.array([1.0, np.nan, 2.0], np.float32), axis=0)
    assert out[0] == 1 and np.isnan(out[1:]).all()
    assert run("cumsum", np.zeros((0, 3), np.float32), axis=0).shape == (0, 3)
    with pytest.raises(ShapeError, match=r"cumsum: axis 1 is out of range .*\(3,\)"):
        infer("cumsum", t(3), axis=1)
    with pytest.raises(OmnitensorError, match="'reverse' must be a bool"):
        infer("cumsum", t(3), axis=0, reverse=1)
