"""Movement ops: shape rules through Builder.emit, error messages, reference kernels vs numpy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omnitensor import dtypes
from omnitensor.errors import DTypeError, OmnitensorError, ShapeError
from omnitensor.ir import Builder, TensorType, get_op
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.opdef import Trait

F32 = dtypes.float32


def run(op: str, *arrays: np.ndarray, **attrs: Any) -> np.ndarray:
    """Record `op` on inputs typed like `arrays`, evaluate it with the reference kernels."""
    b = Builder()
    values = [b.input(TensorType(a.shape, dtypes.as_dtype(a.dtype))) for a in arrays]
    out = b.emit(op, *values, **attrs)
    return evaluate(b.build([out]), list(arrays))[0]


def infer(op: str, *types: TensorType, **attrs: Any) -> TensorType:
    """The result type `Builder.emit` records."""
    b = Builder()
    out = b.emit(op, *[b.input(t) for t in types], **attrs)
    assert isinstance(out.type, TensorType)
    return out.type


def t(*shape: int, dtype: dtypes.DType = F32) -> TensorType:
    return TensorType(shape, dtype)


def arange(*shape: int, dtype: Any = np.float32) -> np.ndarray:
    return np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape).astype(dtype)


@pytest.mark.parametrize(
    ("op", "traits"),
    [
        ("reshape", Trait.MOVEMENT | Trait.VIEW),
        ("broadcast_in_dim", Trait.MOVEMENT | Trait.VIEW),
        ("transpose", Trait.MOVEMENT | Trait.VIEW),
        ("slice", Trait.MOVEMENT | Trait.VIEW),
        ("reverse", Trait.MOVEMENT | Trait.VIEW),
        ("concatenate", Trait.MOVEMENT),
        ("pad", Trait.MOVEMENT),
    ],
)
def test_traits_and_dtypes(op: str, traits: Trait) -> None:
    opdef = get_op(op)
    assert opdef.traits == traits
    assert opdef.dtypes == dtypes.ALL
    assert opdef.doc


# --- reshape -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("src", "dst"), [((2, 3), (3, 2)), ((2, 3), (6,)), ((), (1, 1)), ((0, 4), (2, 0, 3))]
)
def test_reshape(src: tuple[int, ...], dst: tuple[int, ...]) -> None:
    assert infer("reshape", t(*src), shape=dst) == t(*dst)
    x = arange(*src)
    np.testing.assert_array_equal(run("reshape", x, shape=dst), x.reshape(dst))


def test_reshape_errors() -> None:
    with pytest.raises(ShapeError, match=r"reshape: element counts differ .*\(2, 3\).*\(4,\)"):
        infer("reshape", t(2, 3), shape=(4,))
    with pytest.raises(ShapeError, match="negative dimension"):
        infer("reshape", t(2, 3), shape=(-1, 3))
    with pytest.raises(OmnitensorError, match="must be a tuple of ints"):
        infer("reshape", t(2, 3), shape=6)


def test_reshape_returns_view() -> None:
    x = arange(2, 3)
    assert np.shares_memory(get_op("reshape").reference(x, shape=(3, 2)), x)


# --- broadcast_in_dim --------------------------------------------------------------------------


def test_broadcast_in_dim_shapes() -> None:
    assert infer("broadcast_in_dim", t(3), shape=(2, 3), dims=(1,)) == t(2, 3)
    assert infer("broadcast_in_dim", t(1, 3), shape=(4, 2, 3), dims=(1, 2)) == t(4, 2, 3)
    assert infer("broadcast_in_dim", t(), shape=(2, 2), dims=()) == t(2, 2)
    assert infer("broadcast_in_dim", t(3, 2), shape=(2, 5, 3), dims=(2, 0)) == t(2, 5, 3)


def test_broadcast_in_dim_values() -> None:
    x = arange(3)
    np.testing.assert_array_equal(
        run("broadcast_in_dim", x, shape=(2, 3), dims=(1,)), np.broadcast_to(x, (2, 3))
    )
    col = arange(2, 1)
    np.testing.assert_array_equal(
        run("broadcast_in_dim", col, shape=(2, 4), dims=(0, 1)), np.broadcast_to(col, (2, 4))
    )
    # Unsorted dims transpose too: operand dim 0 -> result dim 2, operand dim 1 -> result dim 0.
    y = arange(3, 2)
    out = run("broadcast_in_dim", y, shape=(2, 5, 3), dims=(2, 0))
    np.testing.assert_array_equal(out, np.broadcast_to(y.T[:, None, :], (2, 5, 3)))
    s = np.asarray(7, np.int8)
    np.testing.assert_array_equal(run("broadcast_in_dim", s, shape=(2,), dims=()), [7, 7])


def test_broadcast_in_dim_is_view() -> None:
    x = arange(3)
    out = get_op("broadcast_in_dim").reference(x, shape=(4, 3), dims=(1,))
    assert np.shares_memory(out, x)
    assert out.strides[0] == 0


def test_broadcast_in_dim_errors() -> None:
    with pytest.raises(ShapeError, match=r"broadcast_in_dim: cannot broadcast \(3,\) to \(2, 4\)"):
        infer("broadcast_in_dim", t(3), shape=(2, 4), dims=(1,))
    with pytest.raises(ShapeError, match="unique result dimensions"):
        infer("broadcast_in_dim", t(1, 1), shape=(2, 4), dims=(1, 1))
    with pytest.raises(ShapeError, match="unique result dimensions"):
        infer("broadcast_in_dim", t(3), shape=(3,), dims=(1,))
    with pytest.raises(ShapeError, match="has 2 entries"):
        infer("broadcast_in_dim", t(3), shape=(3, 3), dims=(0, 1))


# --- transpose ---------------------------------------------------------------------------------


def test_transpose() -> None:
    assert infer("transpose", t(2, 3, 4), perm=(2, 0, 1)) == t(4, 2, 3)
    assert infer("transpose", t(), perm=()) == t()
    x = arange(2, 3, 4)
    out = run("transpose", x, perm=(2, 0, 1))
    np.testing.assert_array_equal(out, x.transpose(2, 0, 1))
    assert np.shares_memory(get_op("transpose").reference(x, perm=(1, 0, 2)), x)


@pytest.mark.parametrize("perm", [(0, 0), (0, 2), (0,), (1, 0, 2)])
def test_transpose_errors(perm: tuple[int, ...]) -> None:
    with pytest.raises(ShapeError, match=r"transpose: .*\(2, 3\)"):
        infer("transpose", t(2, 3), perm=perm)


# --- slice -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "start", "limit", "stride"),
    [
        ((5,), (0,), (5,), (1,)),
        ((5,), (1,), (5,), (2,)),
        ((5,), (1,), (4,), (2,)),
        ((5,), (2,), (2,), (3,)),
        ((4, 6), (1, 0), (3, 6), (1, 4)),
        ((0, 3), (0, 1), (0, 3), (1, 1)),
        ((), (), (), ()),
    ],
)
def test_slice(shape: tuple[int, ...], start: tuple[int, ...], limit: tuple[int, ...],
               stride: tuple[int, ...]) -> None:
    x = arange(*shape)
    expected = x[tuple(slice(a, b, s) for a, b, s in zip(start, limit, stride, strict=True))]
    assert infer("slice", t(*shape), start=start, limit=limit, stride=stride) == t(
        *expected.shape
    )
    out = run("slice", x, start=start, limit=limit, stride=stride)
    np.testing.assert_array_equal(out, expected)


def test_slice_is_view() -> None:
    x = arange(4, 6)
    out = get_op("slice").reference(x, start=(1, 0), limit=(3, 6), stride=(1, 2))
    assert np.shares_memory(out, x)


def test_slice_errors() -> None:
    with pytest.raises(ShapeError, match=r"slice: stride must be >= 1 .*\(5,\)\); .*reverse"):
        infer("slice", t(5), start=(0,), limit=(5,), stride=(0,))
    with pytest.raises(ShapeError, match=r"slice: stride must be >= 1"):
        infer("slice", t(5), start=(4,), limit=(0,), stride=(-1,))
    with pytest.raises(ShapeError, match=r"slice: bounds out of range in dim 0 .*\(5,\)"):
        infer("slice", t(5), start=(0,), limit=(6,), stride=(1,))
    with pytest.raises(ShapeError, match="bounds out of range"):
        infer("slice", t(5), start=(3,), limit=(2,), stride=(1,))
    with pytest.raises(ShapeError, match="bounds out of range"):
        infer("slice", t(5), start=(-1,), limit=(5,), stride=(1,))
    with pytest.raises(ShapeError, match="'limit' has 1 entries"):
        infer("slice", t(5, 2), start=(0, 0), limit=(5,), stride=(1, 1))


# --- concatenate -------------------------------------------------------------------------------


def test_concatenate() -> None:
    assert infer("concatenate", t(2, 3), t(4, 3), axis=0) == t(6, 3)
    assert infer("concatenate", t(2, 3), t(2, 0), t(2, 1), axis=-1) == t(2, 4)
    assert infer("concatenate", t(2, 3), axis=1) == t(2, 3)
    a, b, c = arange(2, 3), arange(2, 0), arange(2, 1) + 100
    np.testing.assert_array_equal(
        run("concatenate", a, b, c, axis=1), np.concatenate([a, b, c], axis=1)
    )


def test_concatenate_errors() -> None:
    with pytest.raises(ShapeError, match=r"concatenate: shapes differ .*\(2, 3\) and \(2, 4\)"):
        infer("concatenate", t(2, 3), t(2, 4), axis=0)
    with pytest.raises(ShapeError, match="shapes differ"):
        infer("concatenate", t(2, 3), t(2, 3, 1), axis=0)
    with pytest.raises(DTypeError, match="concatenate: operand dtypes differ"):
        infer("concatenate", t(2), t(2, dtype=dtypes.int32), axis=0)
    with pytest.raises(ShapeError, match="axis 2 is out of range"):
        infer("concatenate", t(2, 3), t(2, 3), axis=2)
    with pytest.raises(ShapeError, match="0-d"):
        infer("concatenate", t(), t(), axis=0)
    with pytest.raises(OmnitensorError, match="wrong number of operands"):
        Builder().emit("concatenate", axis=0)


# --- pad ---------------------------------------------------------------------------------------


def _pad_expected(x: np.ndarray, value: Any, low: tuple[int, ...], high: tuple[int, ...],
                  interior: tuple[int, ...]) -> np.ndarray:
    """Independent 1-element-at-a-time construction of StableHLO pad."""
    out = x
    for ax in range(x.ndim):
        parts: list[np.ndarray] = []
        idx = [slice(None)] * out.ndim
        fill_shape = list(out.shape)
        fill_shape[ax] = interior[ax]
        for i in range(out.shape[ax]):
            if i:
                parts.append(np.full(fill_shape, value, x.dtype))
            idx[ax] = slice(i, i + 1)
            parts.append(out[tuple(idx)])
        edge = list(out.shape)
        edge[ax] = max(low[ax], 0)
        body_shape = list(out.shape)
        body_shape[ax] = 0
        body = np.concatenate(parts, axis=ax) if parts else np.zeros(body_shape, x.dtype)
        edge_hi = list(out.shape)
        edge_hi[ax] = max(high[ax], 0)
        grown = np.concatenate(
            [np.full(edge, value, x.dtype), body, np.full(edge_hi, value, x.dtype)], axis=ax
        )
        idx = [slice(None)] * out.ndim
        idx[ax] = slice(max(-low[ax], 0), grown.shape[ax] - max(-high[ax], 0))
        out = grown[tuple(idx)]
    return out


@pytest.mark.parametrize(
    ("shape", "low", "high", "interior"),
    [
        ((3,), (1,), (2,), (0,)),
        ((3,), (0,), (0,), (2,)),
        ((3,), (-1,), (1,), (1,)),
        ((3,), (-5,), (4,), (0,)),
        ((3,), (-2,), (-1,), (0,)),
        ((0,), (1,), (1,), (3,)),
        ((2, 3), (1, -1), (0, 2), (1, 1)),
        ((), (), (), ()),
    ],
)
def test_pad(shape: tuple[int, ...], low: tuple[int, ...], high: tuple[int, ...],
             interior: tuple[int, ...]) -> None:
    x = arange(*shape) + 1
    value = np.asarray(-9, np.float32)
    expected = _pad_expected(x, -9, low, high, interior)
    assert infer("pad", t(*shape), t(), low=low, high=high, interior=interior) == t(
        *expected.shape
    )
    out = run("pad", x, value, low=low, high=high, interior=interior)
    np.testing.assert_array_equal(out, expected)


def test_pad_known_values() -> None:
    x = np.array([1, 2, 3], np.int32)
    v = np.asarray(0, np.int32)
    out = run("pad", x, v, low=(-1,), high=(2,), interior=(1,))
    np.testing.assert_array_equal(out, [0, 2, 0, 3, 0, 0])
    out = run("pad", x, v, low=(-5,), high=(4,), interior=(0,))
    np.testing.assert_array_equal(out, [0, 0])


def test_pad_errors() -> None:
    with pytest.raises(ShapeError, match=r"pad: padding_value must be 0-d \(got \(1,\)"):
        infer("pad", t(3), t(1), low=(0,), high=(0,), interior=(0,))
    with pytest.raises(DTypeError, match="pad: padding_value dtype differs"):
        infer("pad", t(3), t(dtype=dtypes.int32), low=(0,), high=(0,), interior=(0,))
    with pytest.raises(ShapeError, match="interior padding must be >= 0"):
        infer("pad", t(3), t(), low=(0,), high=(0,), interior=(-1,))
    with pytest.raises(ShapeError, match=r"pad: negative result size .*\(3,\)"):
        infer("pad", t(3), t(), low=(-2,), high=(-2,), interior=(0,))


# --- reverse -----------------------------------------------------------------------------------


def test_reverse() -> None:
    assert infer("reverse", t(2, 3), axes=(0, -1)) == t(2, 3)
    x = arange(2, 3, 4)
    np.testing.assert_array_equal(run("reverse", x, axes=(0, 2)), x[::-1, :, ::-1])
    np.testing.assert_array_equal(run("reverse", x, axes=()), x)
    assert np.shares_memory(get_op("reverse").reference(x, axes=(1,)), x)


def test_reverse_errors() -> None:
    with pytest.raises(ShapeError, match=r"reverse: axis 2 is out of range .*\(2, 3\)"):
        infer("reverse", t(2, 3), axes=(2,))
    with pytest.raises(ShapeError, match="reverse: repeated axes"):
        infer("reverse", t(2, 3), axes=(1, -1))


@pytest.mark.parametrize("dtype", dtypes.ALL, ids=str)
def test_every_dtype_moves_exactly(dtype: dtypes.DType) -> None:
    x = (np.arange(6) % 2).reshape(2, 3).astype(dtype.np)
    np.testing.assert_array_equal(run("transpose", x, perm=(1, 0)), x.T)
    np.testing.assert_array_equal(run("reverse", x, axes=(1,)), x[:, ::-1])
    pad_value = np.asarray(1, dtype.np)
    out = run("pad", x, pad_value, low=(1, 0), high=(0, 1), interior=(0, 0))
    assert out.dtype == dtype.np and out.shape == (3, 4)


# --- properties --------------------------------------------------------------------------------


@st.composite
def _slices(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...],
                                      tuple[int, ...]]:
    shape = tuple(draw(st.lists(st.integers(0, 5), min_size=0, max_size=3)))
    start, limit, stride = [], [], []
    for d in shape:
        a = draw(st.integers(0, d))
        start.append(a)
        limit.append(draw(st.integers(a, d)))
        stride.append(draw(st.integers(1, 4)))
    return shape, tuple(start), tuple(limit), tuple(stride)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(_slices())
def test_slice_matches_numpy(
    case: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]],
) -> None:
    shape, start, limit, stride = case
    x = arange(*shape)
    expected = x[tuple(slice(a, b, s) for a, b, s in zip(start, limit, stride, strict=True))]
    assert infer("slice", t(*shape), start=start, limit=limit, stride=stride).shape == (
        expected.shape
    )
    np.testing.assert_array_equal(run("slice", x, start=start, limit=limit, stride=stride),
                                  expected)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    st.lists(st.tuples(st.integers(0, 4), st.integers(-4, 3), st.integers(-4, 3),
                       st.integers(0, 2)), min_size=1, max_size=3)
)
def test_pad_matches_construction(dims: list[tuple[int, int, int, int]]) -> None:
    shape = tuple(d[0] for d in dims)
    low, high, interior = (tuple(d[i] for d in dims) for i in (1, 2, 3))
    if any(n + lo + hi + max(n - 1, 0) * i < 0 for n, lo, hi, i in dims):
        with pytest.raises(ShapeError, match="pad: negative result size"):
            infer("pad", t(*shape), t(), low=low, high=high, interior=interior)
        return
    x = arange(*shape) + 1
    out = run("pad", x, np.asarray(-1, np.float32), low=low, high=high, interior=interior)
    np.testing.assert_array_equal(out, _pad_expected(x, -1, low, high, interior))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.lists(st.integers(1, 3), min_size=0, max_size=3), st.data())
def test_broadcast_in_dim_matches_numpy(shape: list[int], data: st.DataObject) -> None:
    rank = data.draw(st.integers(len(shape), len(shape) + 2))
    dims = tuple(sorted(data.draw(st.permutations(range(rank)))[: len(shape)]))
    out_shape = [data.draw(st.integers(1, 3)) for _ in range(rank)]
    for i, d in enumerate(dims):
        out_shape[d] = shape[i]
    operand_shape = tuple(1 if data.draw(st.booleans()) else n for n in shape)
    x = arange(*operand_shape)
    expanded = [1] * rank
    for i, d in enumerate(dims):
        expanded[d] = operand_shape[i]
    expected = np.broadcast_to(x.reshape(expanded), out_shape)
    out = run("broadcast_in_dim", x, shape=tuple(out_shape), dims=dims)
    np.testing.assert_array_equal(out, expected)
