"""Indexing ops: shape rules through Builder.emit, errors, reference kernels vs numpy, edge cases.

Covers gather/scatter_add clamping and duplicate accumulation, StableHLO clamping of
dynamic_slice/dynamic_update_slice starts, stable NaN-aware sort and top_k.
"""

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
I32 = dtypes.int32


def _typed(b: Builder, a: np.ndarray) -> Any:
    return b.input(TensorType(a.shape, dtypes.as_dtype(a.dtype)))


def run_multi(op: str, *arrays: np.ndarray, **attrs: Any) -> list[np.ndarray]:
    """Record `op` on inputs typed like `arrays`; evaluate all results with the reference."""
    b = Builder()
    values = [_typed(b, a) for a in arrays]
    outs = b.emit_multi(op, *values, **attrs)
    return evaluate(b.build(list(outs)), list(arrays))


def run(op: str, *arrays: np.ndarray, **attrs: Any) -> np.ndarray:
    (out,) = run_multi(op, *arrays, **attrs)
    return out


def infer(op: str, *types: TensorType, **attrs: Any) -> tuple[TensorType, ...]:
    b = Builder()
    outs = b.emit_multi(op, *[b.input(t) for t in types], **attrs)
    return tuple(v.type for v in outs)  # type: ignore[misc]


def t(*shape: int, dtype: dtypes.DType = F32) -> TensorType:
    return TensorType(shape, dtype)


def idx(values: Any, dtype: Any = np.int32) -> np.ndarray:
    return np.asarray(values, dtype)


@pytest.mark.parametrize(
    ("op", "traits", "absent"),
    [
        ("gather", Trait.INDEXING, Trait.NON_DIFFERENTIABLE | Trait.MULTI_RESULT),
        ("scatter_add", Trait.INDEXING, Trait.NON_DIFFERENTIABLE | Trait.MULTI_RESULT),
        ("dynamic_slice", Trait.INDEXING, Trait.NON_DIFFERENTIABLE),
        ("dynamic_update_slice", Trait.INDEXING, Trait.NON_DIFFERENTIABLE),
        ("sort", Trait.MULTI_RESULT, Trait.NON_DIFFERENTIABLE),
        ("top_k", Trait.MULTI_RESULT, Trait.NON_DIFFERENTIABLE),
    ],
)
def test_declarations(op: str, traits: Trait, absent: Trait) -> None:
    opdef = get_op(op)
    assert opdef.has(traits)
    assert not opdef.traits & absent
    assert opdef.doc
    for spec in opdef.operands:
        if spec.name in ("indices", "start_indices"):
            assert spec.dtypes == dtypes.INTEGER


# --- gather -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("operand", "indices", "axis", "batch_dims", "expected"),
    [
        ((5, 3), (4,), 0, 0, (4, 3)),
        ((5, 3), (2, 4), 1, 0, (5, 2, 4)),
        ((5, 3), (), 0, 0, (3,)),
        ((2, 5, 3), (2, 4), 1, 1, (2, 4, 3)),
        ((2, 6, 5, 3), (2, 7), -2, 1, (2, 6, 7, 3)),
        ((0, 3), (0,), 0, 0, (0, 3)),
    ],
)
def test_gather_shape(
    operand: tuple[int, ...],
    indices: tuple[int, ...],
    axis: int,
    batch_dims: int,
    expected: tuple[int, ...],
) -> None:
    (out,) = infer("gather", t(*operand), t(*indices, dtype=I32), axis=axis, batch_dims=batch_dims)
    assert out == TensorType(expected, F32)


@pytest.mark.parametrize(
    ("operand", "indices", "axis", "batch_dims", "match"),
    [
        ((5, 3), (4,), 2, 0, r"gather: axis 2 is out of range"),
        ((2, 5), (3, 4), 1, 1, r"gather: leading batch dims differ"),
        ((2, 5), (2, 4), 0, 1, r"gather: batch_dims 1 is out of range"),
        ((), (4,), 0, 0, r"gather: operand must have rank >= 1"),
        ((0, 3), (2,), 0, 0, r"gather: cannot index an empty axis"),
    ],
)
def test_gather_shape_errors(
    operand: tuple[int, ...], indices: tuple[int, ...], axis: int, batch_dims: int, match: str
) -> None:
    with pytest.raises(ShapeError, match=match):
        infer("gather", t(*operand), t(*indices, dtype=I32), axis=axis, batch_dims=batch_dims)


def test_gather_index_dtype() -> None:
    with pytest.raises(DTypeError, match=r"gather: operand 'indices' has dtype float32"):
        infer("gather", t(5, 3), t(4), axis=0)


@pytest.mark.parametrize("index_dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint32])
def test_gather_matches_take(index_dtype: Any) -> None:
    x = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    indices = idx([[0, 2], [3, 1], [1, 1]], index_dtype)
    out = run("gather", x, indices, axis=1)
    np.testing.assert_array_equal(out, np.take(x, indices.astype(np.int64), axis=1))


def test_gather_batch_dims_matches_take_along_axis() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 6, 4)).astype(np.float32)
    indices = rng.integers(0, 6, (2, 3, 5)).astype(np.int32)
    out = run("gather", x, indices, axis=2, batch_dims=2)
    expected = np.take_along_axis(x, indices[..., None].astype(np.int64), axis=2)
    np.testing.assert_array_equal(out, expected)
    # batch_dims=1 with axis=2: out[b, p, i..., q] = x[b, p, indices[b, i...], q]
    ind1 = rng.integers(0, 6, (2, 7)).astype(np.int64)
    out1 = run("gather", x, ind1, axis=2, batch_dims=1)
    expected1 = np.stack([np.take(x[b], ind1[b], axis=1) for b in range(2)])
    np.testing.assert_array_equal(out1, expected1)


def test_gather_clamps_out_of_range() -> None:
    x = np.array([10, 11, 12, 13], np.int32)
    out = run("gather", x, idx([-5, -1, 0, 3, 4, 1000]), axis=0)
    np.testing.assert_array_equal(out, [10, 10, 10, 13, 13, 13])
    big = run("gather", x, idx([2**31 - 1, 0], np.uint32), axis=0)
    np.testing.assert_array_equal(big, [13, 10])


# --- scatter_add --------------------------------------------------------------------------------


def test_scatter_add_shape_and_errors() -> None:
    (out,) = infer("scatter_add", t(5, 3), t(4, dtype=I32), t(4, 3), axis=0)
    assert out == t(5, 3)
    with pytest.raises(
        ShapeError,
        match=r"scatter_add: updates shape .* \(got \(4, 2\), "
        r"expected \(4, 3\)",
    ):
        infer("scatter_add", t(5, 3), t(4, dtype=I32), t(4, 2), axis=0)
    with pytest.raises(DTypeError, match=r"scatter_add: updates dtype differs"):
        infer("scatter_add", t(5, 3), t(4, dtype=I32), t(4, 3, dtype=dtypes.float16), axis=0)
    with pytest.raises(DTypeError, match=r"scatter_add: operand 'operand' has dtype bool"):
        infer(
            "scatter_add",
            t(5, dtype=dtypes.bool_),
            t(4, dtype=I32),
            t(4, dtype=dtypes.bool_),
            axis=0,
        )


def test_scatter_add_duplicates_accumulate_and_clamp() -> None:
    operand = np.zeros((4, 2), np.float32)
    indices = idx([1, 1, 3, -7, 9])  # -7 -> 0, 9 -> 3
    updates = np.arange(10, dtype=np.float32).reshape(5, 2)
    out = run("scatter_add", operand, indices, updates, axis=0)
    expected = np.zeros((4, 2), np.float32)
    np.add.at(expected, np.clip(indices, 0, 3), updates)
    np.testing.assert_array_equal(out, expected)
    assert out[1].tolist() == [2.0, 4.0] and out[3].tolist() == [12.0, 14.0]


def test_scatter_add_is_gather_transpose_with_batch_dims() -> None:
    # <gather(x, i), u> == <x, scatter_add(0, i, u)> for every x, u.
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 6, 4))
    indices = rng.integers(-2, 8, (2, 5, 2)).astype(np.int32)
    g = run("gather", x, indices, axis=2, batch_dims=1)
    u = rng.standard_normal(g.shape)
    s = run("scatter_add", np.zeros_like(x), indices, u, axis=2, batch_dims=1)
    assert np.isclose(np.sum(g * u), np.sum(x * s))


def test_scatter_add_float16_accumulates_in_float32() -> None:
    # 2048 + 1 + 1 in float16: each +1 alone rounds away (ulp 2 at 2048); in float32 the sum of
    # the duplicates is kept and 2050 is representable.
    operand = np.array([2048.0], np.float16)
    out = run("scatter_add", operand, idx([0, 0]), np.array([1.0, 1.0], np.float16), axis=0)
    assert out.dtype == np.float16 and float(out[0]) == 2050.0


def test_scatter_add_integers_wrap() -> None:
    out = run(
        "scatter_add", np.array([120], np.int8), idx([0, 0]), np.array([5, 5], np.int8), axis=0
    )
    assert out.tolist() == [-126]


# --- dynamic_slice / dynamic_update_slice -------------------------------------------------------


def test_dynamic_slice_shape_and_errors() -> None:
    i = t(dtype=I32)
    (out,) = infer("dynamic_slice", t(5, 6), i, t(dtype=dtypes.int64), sizes=(2, 3))
    assert out == t(2, 3)
    (scalar,) = infer("dynamic_slice", t(), sizes=())
    assert scalar == t()
    with pytest.raises(ShapeError, match=r"dynamic_slice: one start index per dimension"):
        infer("dynamic_slice", t(5, 6), i, sizes=(2, 3))
    with pytest.raises(ShapeError, match=r"dynamic_slice: sizes exceed the operand"):
        infer("dynamic_slice", t(5, 6), i, i, sizes=(6, 3))
    with pytest.raises(ShapeError, match=r"dynamic_slice: start index 1 must be a 0-d"):
        infer("dynamic_slice", t(5, 6), i, t(1, dtype=I32), sizes=(2, 3))
    with pytest.raises(DTypeError, match=r"dynamic_slice: operand 'start_indices' has dtype"):
        infer("dynamic_slice", t(5, 6), i, t(), sizes=(2, 3))


@pytest.mark.parametrize(
    ("starts", "expected_begin"),
    [((1, 2), (1, 2)), ((-3, 0), (0, 0)), ((4, 9), (3, 3)), ((3, 3), (3, 3))],
)
def test_dynamic_slice_clamps(starts: tuple[int, int], expected_begin: tuple[int, int]) -> None:
    x = np.arange(30, dtype=np.float32).reshape(5, 6)
    out = run("dynamic_slice", x, idx(starts[0]), idx(starts[1], np.int64), sizes=(2, 3))
    r, c = expected_begin
    np.testing.assert_array_equal(out, x[r : r + 2, c : c + 3])


def test_dynamic_update_slice() -> None:
    i = t(dtype=I32)
    (out,) = infer("dynamic_update_slice", t(5, 6), t(2, 3), i, i)
    assert out == t(5, 6)
    with pytest.raises(ShapeError, match=r"dynamic_update_slice: update does not fit"):
        infer("dynamic_update_slice", t(5, 6), t(6, 3), i, i)
    with pytest.raises(DTypeError, match=r"dynamic_update_slice: update dtype differs"):
        infer("dynamic_update_slice", t(5, 6), t(2, 3, dtype=dtypes.float16), i, i)
    x = np.zeros((5, 6), np.float32)
    update = np.ones((2, 3), np.float32)
    result = run("dynamic_update_slice", x, update, idx(4), idx(-1, np.int8))  # -> (3, 0)
    expected = x.copy()
    expected[3:5, 0:3] = 1
    np.testing.assert_array_equal(result, expected)
    assert not x.any()  # the operand is not written


# --- sort / top_k -------------------------------------------------------------------------------


def test_sort_shapes_and_errors() -> None:
    values, indices = infer("sort", t(3, 4), axis=0)
    assert values == t(3, 4) and indices == t(3, 4, dtype=I32)
    with pytest.raises(ShapeError, match=r"sort: operand must have rank >= 1"):
        infer("sort", t())
    with pytest.raises(ShapeError, match=r"sort: axis 2 is out of range"):
        infer("sort", t(3, 4), axis=2)
    with pytest.raises(OmnitensorError, match=r"sort: wrong number of operands"):
        infer("sort", t(3), t(3))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.float64])
def test_sort_stable_with_nan(dtype: Any) -> None:
    x = np.array([2.0, np.nan, 1.0, 2.0, -np.inf, np.nan, 1.0, 0.0, -0.0], dtype)
    values, indices = run_multi("sort", x)
    assert indices.tolist() == [4, 7, 8, 2, 6, 0, 3, 1, 5]
    np.testing.assert_array_equal(values.astype(np.float64), x[indices].astype(np.float64))
    values, indices = run_multi("sort", x, descending=True)
    assert indices.tolist() == [1, 5, 0, 3, 2, 6, 7, 8, 4]
    assert values.dtype == np.dtype(dtype) and indices.dtype == np.int32


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.uint32, np.int64])
def test_sort_integers_along_axis(dtype: Any) -> None:
    rng = np.random.default_rng(2)
    x = rng.integers(0, 5, (4, 7)).astype(dtype)
    values, indices = run_multi("sort", x, axis=0)
    np.testing.assert_array_equal(indices, np.argsort(x, axis=0, kind="stable"))
    np.testing.assert_array_equal(values, np.sort(x, axis=0))
    values, indices = run_multi("sort", x, axis=-1, descending=True)
    # stable descending: the key (-x, index) ascending
    expected = np.lexsort((np.broadcast_to(np.arange(7), x.shape), -x.astype(np.int64)), axis=-1)
    np.testing.assert_array_equal(indices, expected)
    np.testing.assert_array_equal(values, np.take_along_axis(x, expected, axis=-1))


def test_top_k() -> None:
    values, indices = infer("top_k", t(2, 6), k=3)
    assert values == t(2, 3) and indices == t(2, 3, dtype=I32)
    with pytest.raises(ShapeError, match=r"top_k: k out of range \(got k=7 for shape \(2, 6\)"):
        infer("top_k", t(2, 6), k=7)
    with pytest.raises(ShapeError, match=r"top_k: k out of range"):
        infer("top_k", t(), k=0)
    x = np.array(
        [[1.0, 5.0, np.nan, 5.0, 3.0, np.nan], [0.0, -1.0, 2.0, 2.0, 2.0, 7.0]], np.float32
    )
    v, i = run_multi("top_k", x, k=4)
    assert i.tolist() == [[2, 5, 1, 3], [5, 2, 3, 4]]
    np.testing.assert_array_equal(v, np.take_along_axis(x, i, axis=-1))
    v0, i0 = run_multi("top_k", x, k=0)
    assert v0.shape == (2, 0) and i0.shape == (2, 0)
