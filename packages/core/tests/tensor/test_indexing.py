"""NumPy-style indexing and assignment."""

import numpy as np
import pytest

import omnitensor as ot
from omnitensor.errors import ShapeError, TraceError

A = np.arange(60, dtype=np.float32).reshape(3, 4, 5)

KEYS = [
    1, -1, (1, 2), (slice(None), 2), (Ellipsis, 1), (None, 1), (slice(None, None, 2),),
    (slice(None, None, -1),), (slice(3, 0, -2), slice(1, None)), (1, Ellipsis, None),
    ([2, 0],), (slice(None), [3, -1, 0]), (Ellipsis, [[0, 1], [4, 4]]), (0, slice(None), [1]),
]


@pytest.mark.parametrize("key", KEYS, ids=[repr(k) for k in KEYS])
def test_getitem_matches_numpy(key: object) -> None:
    np.testing.assert_array_equal(ot.tensor(A)[key].numpy(), A[key])


def test_boolean_mask_realizes_first() -> None:
    x = ot.tensor(A)
    np.testing.assert_array_equal(x[x > 30].numpy(), A[A > 30])
    mask = A.sum(axis=2) > 100
    np.testing.assert_array_equal(x[ot.tensor(mask)].numpy(), A[mask])


def test_boolean_mask_inside_compile_raises_with_advice() -> None:
    f = ot.compile(lambda x: x[x > 0])
    with pytest.raises(TraceError, match="where"):
        f(ot.ones(3))


def test_dynamic_index_by_0d_tensor() -> None:
    x = ot.tensor(A)
    np.testing.assert_array_equal(x[ot.tensor(2)].numpy(), A[2])
    np.testing.assert_array_equal(x[:, ot.tensor(1)].numpy(), A[:, 1])


@pytest.mark.parametrize("key", [(1,), (slice(None), 2), (slice(0, 2), slice(1, 3)),
                                 (slice(None, None, 2),), (Ellipsis, [0, 4]),
                                 (slice(None), slice(None, None, -1))])
def test_setitem_rebinds_like_numpy(key: object) -> None:
    x = ot.tensor(A)
    derived = x * 1  # computed from the value x held before the assignment
    expected = A.copy()
    expected[key] = -1.0
    x[key] = -1.0
    np.testing.assert_array_equal(x.numpy(), expected)
    np.testing.assert_array_equal(derived.numpy(), A)  # values are immutable; x was rebound


def test_setitem_with_mask_and_dynamic_position() -> None:
    x = ot.tensor(A)
    x[x > 50] = 0.0
    expected = A.copy()
    expected[expected > 50] = 0
    np.testing.assert_array_equal(x.numpy(), expected)
    cache = ot.zeros(4, 3)
    cache[ot.tensor(2)] = ot.ones(3)
    assert cache.numpy()[2].tolist() == [1, 1, 1] and cache.numpy().sum() == 3


@pytest.mark.parametrize("key", [(slice(None, None, 2),), ([0, 2, 2],), ([],)])
def test_setitem_of_a_bool_tensor_by_positions(key: object) -> None:
    # scattered positions (a strided slice, repeated and empty index lists) on bool values
    values = np.array([True, False, False, True, False])
    x = ot.tensor(values)
    expected = values.copy()
    expected[key] = [True, False, True][: len(expected[key])] if len(expected[key]) else []
    x[key] = ot.tensor(np.array([True, False, True][: len(values[key])], np.bool_))
    assert x.dtype == ot.bool_
    np.testing.assert_array_equal(x.numpy(), expected)


def test_index_errors() -> None:
    x = ot.tensor(A)
    with pytest.raises(ShapeError, match="out of range"):
        x[3]
    with pytest.raises(ShapeError, match="too many"):
        x[0, 0, 0, 0]
