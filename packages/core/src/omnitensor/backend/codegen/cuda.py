"""The CUDA C dialect of `CPrinter`, and the prelude of helpers its expressions call.

float16/bfloat16 are stored as 16-bit words and computed in float32 with our own conversions
(identical on host and device; no ``cuda_fp16.h``): every op rounds its result once
(`narrow`). Integer arithmetic wraps (done in the unsigned type of the same width); x/0 and
INT_MIN/-1 are unspecified in PTIR but trap on x86, so they are never computed. The helpers are
``OT_HD`` (``__host__ __device__``) so a kernel's logic also compiles for the host harness.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from omnitensor.dtypes import DType

from .printer import CPrinter

__all__ = ["CUDA", "PRELUDE", "CudaPrinter"]

_STORAGE: Final = {
    "float32": "float", "float64": "double", "float16": "unsigned short",
    "bfloat16": "unsigned short", "int8": "signed char", "int16": "short", "int32": "int",
    "int64": "long long", "uint8": "unsigned char", "uint32": "unsigned int", "bool": "bool",
}
_UNSIGNED: Final = {
    "signed char": "unsigned char", "short": "unsigned short", "int": "unsigned int",
    "long long": "unsigned long long",
}
#: PTIR op -> C math function (float; the ``f`` suffix is added for float).
_LIBM: Final = {"abs": "fabs", "round": "rint", "rem": "fmod"}
#: PTIR op -> overloaded prelude helper.
_HELPERS: Final = {"logistic": "ot_logistic", "max": "ot_fmax", "min": "ot_fmin"}

PRELUDE: Final = r"""
#ifndef OT_PRELUDE
#define OT_PRELUDE
#define OT_HD __host__ __device__ __forceinline__
#ifndef __CUDACC_RTC__
#include <math.h>
#include <string.h>
#endif
OT_HD float ot_as_float(unsigned int u) { float f; memcpy(&f, &u, 4); return f; }
OT_HD unsigned int ot_as_uint(float f) { unsigned int u; memcpy(&u, &f, 4); return u; }
template <typename D, typename S> OT_HD D ot_bitcast(S s) { D d; memcpy(&d, &s, sizeof(D)); return d; }
// float16 <-> float32, exact widening and round-to-nearest-even narrowing (IEEE binary16).
OT_HD float ot_h2f(unsigned short h) {
  unsigned int sign = ((unsigned int)h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) { float f = (float)m * 5.9604644775390625e-8f; return sign ? -f : f; }
  if (e == 31) return ot_as_float(sign | 0x7f800000u | (m << 13));
  return ot_as_float(sign | ((e + 112u) << 23) | (m << 13));
}
OT_HD unsigned short ot_f2h(float f) {
  unsigned int x = ot_as_uint(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return (unsigned short)(sign | 0x7e00u);
  if (ax >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);
  if (ax < 0x38800000u) return (unsigned short)(sign | (unsigned int)rintf(ot_as_float(ax) * 16777216.0f));
  return (unsigned short)(sign | ((ax + 0xc8000fffu + ((ax >> 13) & 1u)) >> 13));
}
OT_HD float ot_bf2f(unsigned short b) { return ot_as_float((unsigned int)b << 16); }
OT_HD unsigned short ot_f2bf(float f) {
  unsigned int x = ot_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u);
  return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
OT_HD float ot_rh(float f) { return ot_h2f(ot_f2h(f)); }
OT_HD float ot_rbf(float f) { return ot_bf2f(ot_f2bf(f)); }
// NaN-propagating max/min (fmaxf drops NaN).
OT_HD float ot_fmax(float a, float b) { return (a != a || b != b) ? a + b : (a > b ? a : b); }
OT_HD float ot_fmin(float a, float b) { return (a != a || b != b) ? a + b : (a < b ? a : b); }
OT_HD double ot_fmax(double a, double b) { return (a != a || b != b) ? a + b : (a > b ? a : b); }
OT_HD double ot_fmin(double a, double b) { return (a != a || b != b) ? a + b : (a < b ? a : b); }
template <typename T> OT_HD T ot_imax(T a, T b) { return a > b ? a : b; }
template <typename T> OT_HD T ot_imin(T a, T b) { return a < b ? a : b; }
template <typename T> OT_HD T ot_fsign(T a) { return a > (T)0 ? (T)1 : (a < (T)0 ? (T)-1 : a); }
template <typename T, typename U> OT_HD T ot_ipow(T b, T e) {
  U r = 1, x = (U)b;  // a negative exponent is unspecified in PTIR; it acts as 0 here
  for (T n = e; n > (T)0; n = (T)(n >> 1)) { if (n & (T)1) r = (U)(r * x); x = (U)(x * x); }
  return (T)r;
}
OT_HD float ot_logistic(float x) { return 1.0f / (1.0f + expf(-x)); }
OT_HD double ot_logistic(double x) { return 1.0 / (1.0 + exp(-x)); }
// 64-bit element offset of the linear index t in a strided view of rank r (shape at P[s]).
OT_HD long long ot_offset(long long t, const long long* P, int rank, int shape_at, int off_at,
                          int strides_at) {
  long long off = P[off_at];
  for (int d = rank - 1; d >= 0; --d) {
    long long size = P[shape_at + d];
    off += (t % size) * P[strides_at + d];
    t /= size;
  }
  return off;
}
#endif
"""


class CudaPrinter(CPrinter):
    """CUDA C: float16/bfloat16 computed in float, integers wrap through unsigned types."""

    language = "CUDA C"
    storage_types = _STORAGE
    compute_types = {**_STORAGE, "float16": "float", "bfloat16": "float"}
    float_types = ("float", "double")
    float_literals = {"float": "{!r}f", "double": "{!r}"}
    loads = {"float16": "ot_h2f({})", "bfloat16": "ot_bf2f({})"}
    stores = {"float16": "ot_f2h({})", "bfloat16": "ot_f2bf({})"}
    # NOTE: C promotes narrow integers to int: integer results are cast back (they wrap).
    narrows = {"float16": "ot_rh({})", "bfloat16": "ot_rbf({})",
               **{name: f"({ctype})({{}})" for name, ctype in _STORAGE.items()
                  if name.startswith(("int", "uint"))}}

    def cast(self, src: str, dst: str, value: str) -> str:
        """A C cast; float -> int through a wide integer (huge floats never narrow UB)."""
        if self.is_float(src) and not self.is_float(dst):
            return f"({dst})(long long)({value})"
        return f"({dst})({value})"

    def bitcast(self, src: DType, dst: DType, value: str) -> str:
        """Through the stored words (`ot_bitcast`)."""
        st = self.storage_type(dst)
        return self.load(dst, f"({st})(ot_bitcast<{st}>({self.store(src, value)}))")

    def declare(self, name: str, ctype: str, code: str) -> str:
        """``  T name = code;``."""
        return f"  {ctype} {name} = {code};"

    def math(self, fn: str, ctype: str, args: Sequence[str]) -> str:
        """Libm (``expf`` for float) or an overloaded prelude helper."""
        if fn == "sign":
            return f"ot_fsign<{ctype}>({args[0]})"
        if fn in _HELPERS:
            return f"{_HELPERS[fn]}({', '.join(args)})"
        name = _LIBM.get(fn, fn)
        return f"{name}{'f' if ctype == 'float' else ''}({', '.join(args)})"

    def int_result(self, ctype: str, code: str) -> str:
        """Cast back: C computes narrow integers in int."""
        return f"({ctype})({code})"

    def wrapping(self, symbol: str, ctype: str, args: Sequence[str]) -> str:
        """In the unsigned type of the same width (signed overflow is UB in C)."""
        unsigned = _UNSIGNED.get(ctype, ctype)
        return f"({ctype})(({unsigned}){args[0]} {symbol} ({unsigned}){args[1]})"

    def int_div(self, ctype: str, args: Sequence[str]) -> str:
        """Guarded: x/0 is 0, x/-1 is a wrapping negation."""
        a, b = args
        if ctype not in _UNSIGNED:
            return f"({b} == 0 ? ({ctype})0 : ({ctype})({a} / {b}))"
        return (f"({b} == 0 ? ({ctype})0 : ({b} == ({ctype})-1 ? {self.int_neg(ctype, a)} : "
                f"({ctype})({a} / {b})))")

    def int_rem(self, ctype: str, args: Sequence[str]) -> str:
        """Guarded: x%0 and x%-1 are 0."""
        a, b = args
        if ctype not in _UNSIGNED:
            return f"({b} == 0 ? ({ctype})0 : ({ctype})({a} % {b}))"
        return f"(({b} == 0 || {b} == ({ctype})-1) ? ({ctype})0 : ({ctype})({a} % {b}))"

    def int_call(self, fn: str, ctype: str, args: Sequence[str]) -> str:
        """``ot_ipow``/``ot_imax``/``ot_imin`` templates of the prelude."""
        if fn == "pow":
            return f"ot_ipow<{ctype}, {_UNSIGNED.get(ctype, ctype)}>({args[0]}, {args[1]})"
        return f"ot_i{fn}<{ctype}>({', '.join(args)})"


#: The printer the CUDA backend uses.
CUDA: Final = CudaPrinter("cuda")
