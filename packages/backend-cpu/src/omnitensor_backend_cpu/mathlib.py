"""Vectorizable exp/tanh/erf/logistic for float32 results (there is no SVML here).

numba lowers ``math.exp``/``math.tanh`` to scalar libm calls, which stop LLVM from vectorizing a
loop (a tanh-GELU over 16M floats: 170 ms). These helpers evaluate in float64 with polynomials,
range reduction and a bit-cast, so loops vectorize, and their error after rounding to float32 is
well inside the ops' ULP budgets (`OpDef.ulp` = 4; the tests measure it). They are *not* accurate
enough for float64 results: float64 kernels use ``math.*``.

Only ``contract`` (FMA) is allowed here: ``reassoc`` could undo the range reduction.
"""

from __future__ import annotations

import hashlib
import inspect
import math
from typing import Any, Final

import numpy as np

from ._compat import f32_from_bits, f64_from_bits, jit

__all__ = [
    "SOURCE_HASH", "activation64", "erf32", "erf32f", "exp32", "exp32f", "gelu_erf32f",
    "softmax_weight32f",
    "gelu_tanh32f", "logistic32", "logistic32f", "silu32f", "tanh32", "tanh32f",
]

_LOG2E: Final = 1.4426950408889634
_LN2: Final = 0.6931471805599453
_TWO_OVER_SQRTPI: Final = 1.1283791670955126
_INV_SQRTPI: Final = 0.5641895835477563

_helper = jit(fastmath=frozenset({"contract"}), inline=True)


@_helper
def _exp_reduced(x: float) -> float:
    """e**x for x in [-110, 110] (float64, relative error < 1e-12)."""
    # NOTE: x = n ln2 + r with |r| <= ln2/2; e**r by its Taylor polynomial to r**10 (the next
    # term is < 2e-13 relative), 2**n by building the exponent bits (n in [-159, 159] keeps them
    # normal). floor() and the i32 conversion vectorize with AVX2; an i64 conversion would not.
    n = math.floor(x * _LOG2E + 0.5)
    r = x - n * _LN2
    p = 2.755731922398589e-07
    p = p * r + 2.7557319223985893e-06
    p = p * r + 2.48015873015873e-05
    p = p * r + 0.0001984126984126984
    p = p * r + 0.001388888888888889
    p = p * r + 0.008333333333333333
    p = p * r + 0.041666666666666664
    p = p * r + 0.16666666666666666
    p = p * r + 0.5
    p = p * r + 1.0
    p = p * r + 1.0
    bits = (int(n) + 1023) << 52
    scale: float = f64_from_bits(bits)
    return p * scale


@_helper
def exp32(x: float) -> float:
    """e**x, accurate to float32 (NaN propagates; overflow gives inf, underflow 0)."""
    clamped = min(max(x, -110.0), 100.0)
    y = _exp_reduced(clamped)
    return x if x != x else y


@_helper
def tanh32(x: float) -> float:
    """Hyperbolic tangent, accurate to float32; NaN propagates, saturates to ±1."""
    a = min(abs(x), 20.0)
    e = _exp_reduced(2.0 * a)
    big = 1.0 - 2.0 / (e + 1.0)
    # NOTE: below 2**-10 the exp form cancels; tanh x = x - x**3/3 + 2x**5/15 is exact enough.
    a2 = a * a
    small = a - a * a2 * (0.3333333333333333 - a2 * 0.13333333333333333)
    t = small if a < 0.0009765625 else big
    t = -t if x < 0.0 else t
    return x if x != x else t


# --- float32 arithmetic (8 lanes per AVX2 register instead of 4) -----------------------------


@_helper
def _exp_f32(x: float) -> float:
    """e**x in float32 arithmetic for x in [-104, 89] (Cephes' expf: 1 ulp)."""
    # NOTE: n = round(x log2 e); r = x - n ln2 in two parts (the high part is exact in float32);
    # e**r by a degree-7 polynomial; 2**n as two factors 2**(n//2) 2**(n - n//2), so that
    # n in [-150, 128] needs no special case (denormal results round once more: harmless).
    n = np.floor(x * np.float32(1.4426950408889634) + np.float32(0.5))
    r = x - n * np.float32(0.693359375)
    r = r - n * np.float32(-2.12194440e-4)
    p = np.float32(1.9875691500e-4)
    p = p * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    p = p * (r * r) + r + np.float32(1.0)
    ni = np.int32(n)
    half = ni >> 1
    s1: float = f32_from_bits((half + np.int32(127)) << 23)
    s2: float = f32_from_bits((ni - half + np.int32(127)) << 23)
    result: float = p * s1 * s2
    return result


@_helper
def exp32f(x: float) -> float:
    """e**x for a float32 `x`, in float32 arithmetic (1 ulp; NaN propagates, inf/0 at the ends)."""
    y = _exp_f32(min(max(x, np.float32(-104.0)), np.float32(89.0)))
    return x if x != x else y


@_helper
def softmax_weight32f(x: float) -> float:
    """e**x for a softmax weight x = value - max <= 0, float32: 0 below -87 (no denormals).

    A masked score (the lowest float) gives e**-104 in `exp32f`, a denormal, and x86 computes
    with denormals some hundred times slower: a causal 512-token attention spent 8 ms a layer
    in its softmax against 4 without the mask. Weights under e**-87 (1.6e-38) are dropped, a
    change of at most that much in a sum whose largest term is 1.
    """
    y: Any = _exp_f32(max(x, np.float32(-87.0)))
    y = np.float32(0.0) if x < np.float32(-87.0) else y
    return x if x != x else y


@_helper
def tanh32f(x: float) -> float:
    """Tanh of a float32 `x` in float32 arithmetic: 2 ulp against numpy, saturates to ±1."""
    # NOTE: below 0.55 the odd Taylor series to x**19 (terms shrink by (2x/pi)**2 < 0.123, the
    # rest is < 1e-9 relative); above, 1 - 2/(e**2a + 1), where tanh > 0.5 so the subtraction
    # loses nothing. Both are computed and one is selected, so the loop stays branch-free.
    a: Any = min(abs(x), np.float32(10.0))
    x2 = a * a
    p = np.float32(-0.00023912911424355248)
    p = p * x2 + np.float32(0.000590027440945586)
    p = p * x2 + np.float32(-0.0014558343870513183)
    p = p * x2 + np.float32(0.003592128036572481)
    p = p * x2 + np.float32(-0.008863235529902197)
    p = p * x2 + np.float32(0.021869488536155203)
    p = p * x2 + np.float32(-0.05396825396825397)
    p = p * x2 + np.float32(0.13333333333333333)
    p = p * x2 + np.float32(-0.3333333333333333)
    small = a + a * x2 * p
    big = np.float32(1.0) - np.float32(2.0) / (_exp_f32(a + a) + np.float32(1.0))
    t = small if a < np.float32(0.55) else big
    t = -t if x < 0 else t
    return x if x != x else t


@_helper
def erf32f(x: float) -> float:
    """The error function of a float32 `x` in float32 arithmetic: 2 ulp, branch-free.

    Norbert Juffa's minimax forms: below |x| = 0.9277 an odd polynomial in x, above it
    ``1 - e**p(|x|)`` with a polynomial exponent (evaluated by `_exp_f32`, which also saturates
    it to 1). Both are computed and one is selected, so the loop vectorizes.
    """
    a: Any = min(abs(x), np.float32(9.0))
    s = a * a
    r = np.float32(-1.72853470e-5) * a + np.float32(3.83197126e-4)
    u = np.float32(-3.88396438e-3) * a + np.float32(2.42546219e-2)
    r = r * s + u
    r = r * a + np.float32(-1.06777877e-1)
    r = r * a + np.float32(-6.34846687e-1)
    r = r * a + np.float32(-1.28717512e-1)
    r = r * a - a
    big = np.float32(1.0) - _exp_f32(max(r, np.float32(-104.0)))
    p = np.float32(-5.96761703e-4)
    p = p * s + np.float32(4.99119423e-3)
    p = p * s + np.float32(-2.67681349e-2)
    p = p * s + np.float32(1.12819925e-1)
    p = p * s + np.float32(-3.76125336e-1)
    p = p * s + np.float32(1.28379166e-1)
    small = p * a + a
    y = big if a > np.float32(0.927734375) else small
    y = -y if x < 0 else y
    return x if x != x else y


@_helper
def logistic32f(x: float) -> float:
    """1 / (1 + e**-x) of a float32 `x` in float32 arithmetic (3 ulp, denormal results too).

    With e = e**-|x| (never overflows): 1 / (1 + e) for x >= 0, e / (1 + e) below.
    """
    e = _exp_f32(max(-abs(x), np.float32(-104.0)))
    y = (np.float32(1.0) if x >= 0 else e) / (np.float32(1.0) + e)
    return x if x != x else y


@_helper
def logistic32(x: float) -> float:
    """1 / (1 + e**-x), accurate to float32; never overflows."""
    e = _exp_reduced(min(max(-x, -110.0), 110.0))
    y = 1.0 / (1.0 + e)
    return x if x != x else y


@_helper
def _erf_series(x: float) -> float:
    # erf x = 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1)); 36 terms reach 1e-13 at |x| = 2.5.
    x2 = x * x
    p = 0.0
    term = 1.0
    for n in range(36):
        p += term / (2 * n + 1)
        term = -term * x2 / (n + 1)
    return _TWO_OVER_SQRTPI * x * p


@_helper
def _erfc_fraction(a: float) -> float:
    # erfc a = e**-a^2 / sqrt(pi) / (a + (1/2)/(a + 1/(a + (3/2)/(a + ...)))), a >= 2.5;
    # 24 levels, evaluated bottom-up, are below 1e-10 relative there.
    f = a
    for k in range(24, 0, -1):
        f = a + (0.5 * k) / f
    tail: float = _exp_reduced(-(a * a))
    return tail * _INV_SQRTPI / f


@_helper
def erf32(x: float) -> float:
    """The error function, accurate to float32; erf(±inf) = ±1, NaN propagates."""
    a = min(abs(x), 6.0)
    small = _erf_series(min(a, 2.5))
    large = 1.0 - _erfc_fraction(max(a, 2.5))
    y = small if a < 2.5 else large
    y = -y if x < 0.0 else y
    return x if x != x else y


_SQRT_2_OVER_PI: Final = 0.7978845608028654
_INV_SQRT2: Final = 0.7071067811865476


# --- the activation composites' scalar forms (`pointwise` and fused kernels call them) ----------


@_helper
def gelu_erf32f(x: Any) -> Any:
    """0.5 x (1 + erf(x / sqrt 2)) in float32 arithmetic."""
    return np.float32(0.5) * x * (np.float32(1.0) + erf32f(x * np.float32(_INV_SQRT2)))


@_helper
def gelu_tanh32f(x: Any) -> Any:
    """The tanh form of GELU in float32 arithmetic."""
    # NOTE: 0.5 x (1 + tanh u) = x / (1 + e**(-2u)): one exp and one division instead of a
    # tanh (no cancellation for negative u either).
    inner = np.float32(2 * _SQRT_2_OVER_PI) * (x + np.float32(0.044715) * (x * x * x))
    y = x * logistic32f(inner)
    return y if x != -np.inf else x - x  # -inf: NaN (-inf * 0), as the decomposition gives


@_helper
def silu32f(x: Any) -> Any:
    """SiLU, x * logistic(x), in float32 arithmetic (-inf gives NaN, as its decomposition)."""
    y = x * logistic32f(x)
    return y if x != -np.inf else x - x


@_helper
def activation64(x: Any, mode: int) -> Any:
    """A float64 activation by ``math``: mode 0 erf-GELU, 1 tanh-GELU, 2 SiLU."""
    if mode == 0:
        return 0.5 * x * (1.0 + math.erf(x * _INV_SQRT2))
    if mode == 1:
        return 0.5 * x * (1.0 + math.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * (x * x * x))))
    return x * (1.0 / (1.0 + math.exp(-x)))


def _source_hash() -> str:
    import sys

    text = inspect.getsource(sys.modules[__name__])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


#: Hash of this file: generated kernels that inline these helpers embed it, so editing a helper
#: gives new kernel files (numba's cache does not notice changes in called functions).
SOURCE_HASH: Final[str] = _source_hash()

