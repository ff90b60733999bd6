"""The WGSL math library against float64 numpy, within each op's ULP budget.

Random inputs over several scales, the branch boundaries of each approximation, and every pair
of special values (signed zeros, subnormals, the largest finite, infinities, NaN).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from omnitensor.dtypes import float16, float32
from omnitensor.ir.builder import Builder
from omnitensor.ir.opdef import get_op
from omnitensor.ir.types import TensorType

Array = np.ndarray[Any, Any]
DTYPES = pytest.mark.parametrize("dtype", [float32, float16], ids=["f32", "f16"])
SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 3.0, 1e-3, -7.25, 88.5, -88.5, 1e4, -1e4,
           3.4e38, -3.4e38, 1.17549435e-38, -1.17549435e-38, 2.9e-39, math.inf, -math.inf,
           math.nan]


def _ulps(got: Array, want: Array) -> Array:
    bits = {4: (np.int32, 0x7FFFFFFF), 2: (np.int16, 0x7FFF)}[got.dtype.itemsize]

    def ordered(a: Array) -> Array:
        i = a.view(bits[0]).astype(np.int64)
        return np.where(i < 0, -(i & bits[1]), i)

    return np.asarray(np.abs(ordered(got) - ordered(want.astype(got.dtype))))


def _run(backend: Any, op: str, dtype: Any, *hosts: Array) -> Array:
    if dtype not in backend.dtypes:
        pytest.skip("no shader-f16 on this adapter")
    b = Builder(op)
    args = [b.input(TensorType(h.shape, dtype)) for h in hosts]
    exe = backend.compile(b.build([b.emit(op, *args)]))
    return np.asarray(backend.download(backend.run(exe, [backend.upload(h) for h in hosts])[0]))


def _check(op: str, got: Array, want: Array) -> None:
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all()
    distance = _ulps(got[~nan], want[~nan])
    assert distance.max() <= get_op(op).ulp, f"{op}: {distance.max()} ulp"


@DTYPES
def test_erf(backend: Any, dtype: Any) -> None:
    rng = np.random.default_rng(0)
    xs = np.concatenate([rng.uniform(-6, 6, 30000), rng.standard_normal(3000) * 1e-3,
                         np.linspace(0.8, 1.3, 2001), np.linspace(2.8, 2.9, 1001),
                         [3.9, 4.0, 10.0, -10.0, 0.84375, 1.25, 6.0, 2.857142857, 1e-5, 1e-45],
                         SPECIAL])
    with np.errstate(over="ignore"):
        host = xs.astype(dtype.np)
    got = _run(backend, "erf", dtype, host)
    want = np.array([math.erf(v) if not math.isnan(v) else math.nan
                     for v in host.astype(np.float64)])
    _check("erf", got, want)
    zeros = host == 0
    assert np.signbit(got[zeros]).tolist() == np.signbit(host[zeros]).tolist()


@DTYPES
def test_atan2(backend: Any, dtype: Any) -> None:
    rng = np.random.default_rng(1)
    n = 20000
    scaled = 10.0 ** rng.uniform(-8, 8, (2, n)) * np.sign(rng.standard_normal((2, n)))
    ey, ex = np.meshgrid(SPECIAL, SPECIAL)
    ys = np.concatenate([rng.standard_normal(n), scaled[0], ey.ravel()])
    xs = np.concatenate([rng.standard_normal(n), scaled[1], ex.ravel()])
    with np.errstate(over="ignore"):
        hy, hx = ys.astype(dtype.np), xs.astype(dtype.np)
    got = _run(backend, "atan2", dtype, hy, hx)
    _check("atan2", got, np.arctan2(hy.astype(np.float64), hx.astype(np.float64)))
    zeros = (hy == 0) & ~np.isnan(hx)
    assert np.signbit(got[zeros]).tolist() == np.signbit(hy[zeros]).tolist()
