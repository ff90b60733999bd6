"""Comparing a backend's outputs with the reference's: exact, ULP-budgeted, or normalized error.

* Integers and booleans must be equal.
* Floats: NaN positions must match everywhere (payloads are free), infinities must match, and
  -0.0 equals 0.0. Single elementwise and movement ops are checked per element against the op's
  ULP budget (``OpDef.ulp``), so a fast ``exp`` within budget passes. Anything that accumulates
  (reductions, dot products, fused graphs) is checked with a normalized mean squared error
  (NMSE, as ggml's test-backend-ops does) against a per-dtype tolerance, because the order of
  summation is unspecified.
* Elements the op's docstring calls unspecified are masked out before any check.
* A backend may loosen a dtype by a factor (``Capabilities.loosened``), capped at `MAX_LOOSEN`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from omnitensor.dtypes import DType, as_dtype

__all__ = [
    "MAX_LOOSEN",
    "NMSE_TOLERANCE",
    "Mismatch",
    "Tolerance",
    "compare",
    "nmse",
    "tolerance_for",
    "ulp_distance",
]

Array = np.ndarray[Any, Any]

#: Per-dtype NMSE tolerance for accumulating computations. float32's leaves room for any
#: summation order over 64k elements; float16/bfloat16 results are rounded to 11/8 bits.
NMSE_TOLERANCE: Final[dict[str, float]] = {
    "float64": 1e-20,
    "float32": 1e-9,
    "float16": 1e-5,
    "bfloat16": 3e-4,
}
#: The most a backend may loosen a dtype (a larger request is clamped and reported as capped).
MAX_LOOSEN: Final = 64.0
#: Extra ULPs for float16/bfloat16 ops with a non-zero budget: computing in float32 and rounding
#: once may differ by one unit from native half-precision arithmetic (double rounding).
HALF_EXTRA_ULP: Final = 1


@dataclass(frozen=True)
class Tolerance:
    """The tolerance applied to one output.

    Attributes:
        kind: ``exact``, ``ulp`` or ``nmse``.
        ulp: per-element ULP budget (``ulp`` kind).
        nmse: NMSE bound (``nmse`` kind).
        loosen: factor the backend asked for on this dtype (1.0: none).
    """

    kind: str
    ulp: int = 0
    nmse: float = 0.0
    loosen: float = 1.0

    def __str__(self) -> str:
        loose = f", loosened x{self.loosen:g}" if self.loosen != 1.0 else ""
        if self.kind == "ulp":
            return f"<= {self.ulp} ulp{loose}"
        if self.kind == "nmse":
            return f"NMSE <= {self.nmse:.1e}{loose}"
        return "exact"


@dataclass(frozen=True)
class Mismatch:
    """Why one output did not match: a one-line summary and the worst element."""

    summary: str
    index: tuple[int, ...] | None = None
    actual: Any = None
    expected: Any = None

    def __str__(self) -> str:
        if self.index is None:
            return self.summary
        return (f"{self.summary}; worst at index {self.index}: got {self.actual!r}, "
                f"expected {self.expected!r}")


def tolerance_for(dtype: DType | str, kind: str, *, ulp: int = 0,
                  loosen: float = 1.0, nmse: float = 0.0) -> Tolerance:
    """The tolerance for an output of `dtype` checked as `kind` (``exact``/``ulp``/``nmse``).

    Args:
        dtype: the output dtype.
        kind: requested comparison; integers and bools are always ``exact``.
        ulp: the op's ULP budget (``ulp`` kind).
        loosen: the backend's factor for this dtype, clamped to `MAX_LOOSEN`.
        nmse: the ops' own NMSE budget (`OpDef.nmse`), which raises the default for float32
            and narrower dtypes (float64 keeps its own).
    """
    d = as_dtype(dtype)
    if not d.is_floating or kind == "exact":
        return Tolerance("exact")
    factor = min(max(loosen, 1.0), MAX_LOOSEN)
    if kind == "ulp":
        budget = ulp + (HALF_EXTRA_ULP if d.bits == 16 and ulp > 0 else 0)
        if factor > 1.0:
            budget = int(np.ceil(max(budget, 1) * factor))
        return Tolerance("ulp", ulp=budget, loosen=factor)
    base = NMSE_TOLERANCE[d.name]
    if d.bits <= 32:
        base = max(base, nmse)
    return Tolerance("nmse", nmse=base * factor, loosen=factor)


def _ordered(x: Array) -> Array:
    """Float bits mapped to integers whose order is the float order (-0.0 and 0.0 map to 0)."""
    bits = x.dtype.itemsize * 8
    signed = {16: np.int16, 32: np.int32, 64: np.int64}[bits]
    raw = np.array(x, order="C").view(signed).astype(np.int64)
    magnitude = raw & ((1 << (bits - 1)) - 1)
    ordered: Array = np.where(raw < 0, -magnitude, magnitude)
    return ordered


def ulp_distance(actual: Array, expected: Array) -> Array:
    """Units in the last place between two float arrays of one dtype (elementwise, int64).

    Infinity is one unit past the largest finite value; NaN entries give 0 (callers check NaN
    positions separately).
    """
    distance = np.abs(_ordered(actual) - _ordered(expected))
    return np.where(np.isnan(actual.astype(np.float64)) | np.isnan(expected.astype(np.float64)),
                    0, distance)


def nmse(actual: Array, expected: Array) -> float:
    """Normalized mean squared error over finite entries: sum((a-e)^2) / sum(e^2).

    The denominator is at least ``1e-2`` per element: inputs are O(1) by construction, and a
    result that cancels to nearly zero must not turn rounding noise into a failure.
    """
    a = actual.astype(np.float64).ravel()
    e = expected.astype(np.float64).ravel()
    finite = np.isfinite(a) & np.isfinite(e)
    if not finite.any():
        return 0.0
    a, e = a[finite], e[finite]
    num = float(np.sum((a - e) ** 2))
    den = max(float(np.sum(e**2)), 1e-2 * e.size)
    return num / den


def _worst(flags: Array, score: Array, actual: Array, expected: Array, what: str) -> Mismatch:
    count = int(flags.sum())
    flat = int(np.argmax(np.where(flags, score, -1)))
    index = tuple(int(i) for i in np.unravel_index(flat, flags.shape))
    return Mismatch(f"{count} of {flags.size} elements {what}", index,
                    actual[index].item(), expected[index].item())


def compare(actual: Array, expected: Array, tol: Tolerance,
            mask: Array | None = None) -> Mismatch | None:
    """Compare one backend output with the reference output (see `_compare`)."""
    with np.errstate(all="ignore"):
        return _compare(actual, expected, tol, mask)


def _compare(actual: Array, expected: Array, tol: Tolerance,
             mask: Array | None = None) -> Mismatch | None:
    """Compare one backend output with the reference output.

    Args:
        actual: the backend's result (downloaded).
        expected: the reference result.
        tol: from `tolerance_for`.
        mask: True where the result is unspecified (ignored), or None.

    Returns:
        None when they match, else a `Mismatch` describing the worst element.
    """
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return Mismatch(f"result is {actual.dtype}{list(actual.shape)} "
                        f"(expected {expected.dtype}{list(expected.shape)})")
    keep = np.ones(expected.shape, bool) if mask is None else ~np.asarray(mask, bool)
    if tol.kind == "exact" or expected.dtype.kind not in "fV":
        if expected.dtype.kind in "fV":
            a64, e64 = actual.astype(np.float64), expected.astype(np.float64)
            same = (a64 == e64) | (np.isnan(a64) & np.isnan(e64))
        else:
            same = actual == expected
        bad = ~same & keep
        if bad.any():
            return _worst(bad, bad.astype(np.int64), actual, expected, "differ (exact)")
        return None
    a64, e64 = actual.astype(np.float64), expected.astype(np.float64)
    nan_bad = (np.isnan(a64) != np.isnan(e64)) & keep
    if nan_bad.any():
        return _worst(nan_bad, nan_bad.astype(np.int64), actual, expected,
                      "have NaN where the reference has none, or lack one it has")
    if tol.kind == "ulp":
        distance = ulp_distance(actual, expected)
        bad = (distance > tol.ulp) & keep
        if bad.any():
            worst = int(distance[bad].max())
            return _worst(bad, distance, actual, expected,
                          f"differ by more than {tol.ulp} ulp (max {worst})")
        return None
    inf_bad = (np.isinf(a64) | np.isinf(e64)) & (a64 != e64) & keep
    if inf_bad.any():
        return _worst(inf_bad, inf_bad.astype(np.int64), actual, expected,
                      "differ in infinities")
    error = nmse(actual[keep], expected[keep])
    if error > tol.nmse:
        diff = np.where(keep & np.isfinite(a64) & np.isfinite(e64), np.abs(a64 - e64), -1.0)
        return _worst(diff > 0, diff, actual, expected,
                      f"differ: NMSE {error:.3e} > {tol.nmse:.1e}")
    return None
