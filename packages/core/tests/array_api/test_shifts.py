"""Bitwise shifts of the array API namespace against numpy, at every shift of every width."""

from __future__ import annotations

import numpy as np
import pytest

import omnitensor.array_api as xp


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8"])
def test_shifts_match_numpy_up_to_the_width(dtype: str) -> None:
    # the largest in-range shift (bits - 1) once overflowed 2**b: int16 1 >> 15 gave -1
    bits = np.dtype(dtype).itemsize * 8
    info = np.iinfo(dtype)
    values = np.array([info.min, -5 if info.min < 0 else 0, 1, 7, info.max], dtype)
    shifts = np.arange(bits, dtype=dtype)
    a, s = np.meshgrid(values, shifts, indexing="ij")
    got_right = np.asarray(xp.asarray(a) >> xp.asarray(s))
    got_left = np.asarray(xp.asarray(a) << xp.asarray(s))
    np.testing.assert_array_equal(got_right, a >> s)
    np.testing.assert_array_equal(got_left, a << s)
