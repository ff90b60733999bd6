"""The WGSL dialect of `CPrinter`, and the float32 math library its expressions call.

Transcendentals are our own (Cephes-style range reduction + minimax polynomials) because WGSL
lets drivers approximate `exp`/`log` loosely (lavapipe's `exp` is ~20 ulp off near overflow).
float16 values are loaded to float32, computed there and rounded once on store, exactly as the
reference's `_wide` kernels do; bool is stored as a u32 0/1.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from omnitensor.dtypes import DType

from .printer import CPrinter

__all__ = ["MATHLIB", "WGSL", "WgslPrinter"]

#: PTIR op -> WGSL built-in (everything else float is ``m_<op>`` of `MATHLIB`).
_BUILTIN: Final = {"abs": "abs", "floor": "floor", "ceil": "ceil", "round": "round"}

MATHLIB: Final = """
fn m_isnan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn m_isinf(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u; }
fn m_inf() -> f32 { return bitcast<f32>(0x7f800000u); }
fn m_nan() -> f32 { return bitcast<f32>(0x7fc00000u); }
fn m_max(a: f32, b: f32) -> f32 { return select(max(a, b), a + b, m_isnan(a) || m_isnan(b)); }
fn m_min(a: f32, b: f32) -> f32 { return select(min(a, b), a + b, m_isnan(a) || m_isnan(b)); }
fn m_ldexp(x: f32, e: i32) -> f32 {
  let h = e / 2;
  return x * bitcast<f32>(u32(h + 127) << 23u) * bitcast<f32>(u32(e - h + 127) << 23u);
}
fn m_exp(x0: f32) -> f32 {
  if (m_isnan(x0)) { return x0; }
  if (x0 > 88.72283935546875) { return m_inf(); }
  if (x0 < -103.972084045410) { return 0.0; }
  let z = floor(1.44269504088896341 * x0 + 0.5);
  var x = x0 - z * 0.693359375;
  x = x + z * 2.12194440e-4;
  let xx = x * x;
  let p = ((((( 1.9875691500e-4 * x + 1.3981999507e-3) * x + 8.3334519073e-3) * x
            + 4.1665795894e-2) * x + 1.6666665459e-1) * x + 5.0000001201e-1) * xx + x + 1.0;
  return m_ldexp(p, i32(z));
}
fn m_log(x0: f32) -> f32 {
  if (m_isnan(x0) || x0 == m_inf()) { return x0; }
  if (x0 < 0.0) { return m_nan(); }
  if (x0 == 0.0) { return -m_inf(); }
  var bits = bitcast<u32>(x0);
  var e = i32((bits >> 23u) & 0xffu) - 126;
  if ((bits & 0x7f800000u) == 0u) {  // subnormal: scale into the normal range first
    bits = bitcast<u32>(x0 * 16777216.0);
    e = i32((bits >> 23u) & 0xffu) - 126 - 24;
  }
  var x = bitcast<f32>((bits & 0x807fffffu) | 0x3f000000u);  // in [0.5, 1)
  if (x < 0.707106781186547524) { e = e - 1; x = x + x - 1.0; } else { x = x - 1.0; }
  let z = x * x;
  var y = (((((((( 7.0376836292e-2 * x - 1.1514610310e-1) * x + 1.1676998740e-1) * x
          - 1.2420140846e-1) * x + 1.4249322787e-1) * x - 1.6668057665e-1) * x
          + 2.0000714765e-1) * x - 2.4999993993e-1) * x + 3.3333331174e-1) * x * z;
  let fe = f32(e);
  y = y + -2.12194440e-4 * fe;
  y = y + -0.5 * z;
  return x + y + 0.693359375 * fe;
}
fn m_log1p(x: f32) -> f32 {
  if (abs(x) > 0.5 || m_isnan(x)) { return m_log(1.0 + x); }
  // NOTE: 2 atanh(s), s = x / (2 + x): no (1 + x) - 1, which drivers may simplify away.
  let s = x / (2.0 + x);
  let z = s * s;
  let q = ((((((((z / 17.0 + 1.0 / 15.0) * z + 1.0 / 13.0) * z + 1.0 / 11.0) * z + 1.0 / 9.0)
           * z + 1.0 / 7.0) * z + 0.2) * z + 1.0 / 3.0) * z);
  return 2.0 * s + 2.0 * s * q;
}
fn m_expm1(x: f32) -> f32 {
  if (m_isnan(x)) { return x; }
  if (abs(x) < 1e-10) { return x; }
  let u = m_exp(x);
  if (u == 1.0) { return x; }
  let um1 = u - 1.0;
  if (um1 == -1.0) { return -1.0; }
  if (m_isinf(u)) { return u; }
  return um1 * (x / m_log(u));
}
fn m_tanh(x: f32) -> f32 {
  if (m_isnan(x)) { return x; }
  let a = abs(x);
  if (a > 9.01091334) { return sign(x); }
  if (a >= 0.625) {
    let s = m_exp(2.0 * a);
    let z = 1.0 - 2.0 / (s + 1.0);
    return select(z, -z, x < 0.0);
  }
  let z = x * x;
  return ((((-5.70498872745e-3 * z + 2.06390887954e-2) * z - 5.37397155531e-2) * z
          + 1.33314422036e-1) * z - 3.33332819422e-1) * z * x + x;
}
fn m_logistic(x: f32) -> f32 {
  if (m_isnan(x)) { return x; }
  let e = m_exp(-abs(x));
  return select(e / (1.0 + e), 1.0 / (1.0 + e), x >= 0.0);
}
fn m_sign(x: f32) -> f32 {
  if (m_isnan(x)) { return x; }
  return select(select(x, -1.0, x < 0.0), 1.0, x > 0.0);
}
fn m_sqrt(x: f32) -> f32 {
  if (x < 0.0) { return m_nan(); }
  if (x == 0.0 || m_isnan(x) || m_isinf(x)) { return x; }
  return sqrt(x);
}
fn m_fmod(x: f32, y: f32) -> f32 {
  // musl's fmodf: exact, integer-only long division of the significands.
  var ux = bitcast<u32>(x);
  var uy = bitcast<u32>(y);
  var ex = i32((ux >> 23u) & 0xffu);
  var ey = i32((uy >> 23u) & 0xffu);
  let sx = ux & 0x80000000u;
  if ((uy << 1u) == 0u || m_isnan(y) || ex == 0xff) { return (x * y) / (x * y); }
  if ((ux << 1u) <= (uy << 1u)) {
    if ((ux << 1u) == (uy << 1u)) { return 0.0 * x; }
    return x;
  }
  if (ex == 0) {
    var i = ux << 9u;
    ex = 0;
    loop { if ((i >> 31u) != 0u) { break; } ex = ex - 1; i = i << 1u; }
    ux = ux << u32(-ex + 1);
  } else { ux = (ux & 0x7fffffu) | 0x800000u; }
  if (ey == 0) {
    var i = uy << 9u;
    ey = 0;
    loop { if ((i >> 31u) != 0u) { break; } ey = ey - 1; i = i << 1u; }
    uy = uy << u32(-ey + 1);
  } else { uy = (uy & 0x7fffffu) | 0x800000u; }
  loop {
    if (ex <= ey) { break; }
    let i = ux - uy;
    if ((i >> 31u) == 0u) {
      if (i == 0u) { return 0.0 * x; }
      ux = i;
    }
    ux = ux << 1u;
    ex = ex - 1;
  }
  let i = ux - uy;
  if ((i >> 31u) == 0u) {
    if (i == 0u) { return 0.0 * x; }
    ux = i;
  }
  loop { if ((ux >> 23u) != 0u) { break; } ux = ux << 1u; ex = ex - 1; }
  if (ex > 0) {
    ux = ux - 0x800000u;
    ux = ux | (u32(ex) << 23u);
  } else {
    ux = ux >> u32(-ex + 1);
  }
  return bitcast<f32>(ux | sx);
}
fn m_2opi(i: u32) -> u32 {
  // Bits of 2/pi, 32 per word, after two zero words (a window may start left of the point).
  switch i {
    case 2u: { return 0xa2f9836eu; }
    case 3u: { return 0x4e441529u; }
    case 4u: { return 0xfc2757d1u; }
    case 5u: { return 0xf534ddc0u; }
    case 6u: { return 0xdb629599u; }
    case 7u: { return 0x3c439041u; }
    case 8u: { return 0xfe5163abu; }
    default: { return 0u; }
  }
}
fn m_2opi_window(b: u32, j: u32) -> u32 {
  let s = b % 32u;
  let hi = m_2opi(b / 32u + j);
  if (s == 0u) { return hi; }
  return (hi << s) | (m_2opi(b / 32u + j + 1u) >> (32u - s));
}
fn m_mul32(a: u32, b: u32) -> vec2<u32> {
  // The 64-bit product of two u32 as (low, high) words, from 16-bit halves.
  let al = a & 0xffffu; let ah = a >> 16u; let bl = b & 0xffffu; let bh = b >> 16u;
  let ll = al * bl; let lh = al * bh; let hl = ah * bl;
  let mid = (ll >> 16u) + (lh & 0xffffu) + (hl & 0xffffu);
  let high = ah * bh + (lh >> 16u) + (hl >> 16u) + (mid >> 16u);
  return vec2<u32>((mid << 16u) | (ll & 0xffffu), high);
}
struct m_Reduced { r: f32, q: u32, }
fn m_rem_pio2(a: f32) -> m_Reduced {
  // Payne-Hanek: a = m 2^e exactly; m * (96 bits of 2/pi from bit e - 1) mod 2^96 holds the
  // quadrant in bits 95..94 and the fraction below, exact to 2^-70 (integer math only, so no
  // driver's float contraction or reassociation can spoil the reduction near multiples of pi/2).
  let bits = bitcast<u32>(a);
  let e = i32(bits >> 23u) - 150;
  let m = (bits & 0x7fffffu) | 0x800000u;
  let b = u32(e + 62);
  let t2 = m_mul32(m, m_2opi_window(b, 2u));
  let t1 = m_mul32(m, m_2opi_window(b, 1u));
  let t0 = m_mul32(m, m_2opi_window(b, 0u));
  var p0 = t2.x;
  var p1 = t2.y + t1.x;
  var p2 = t1.y + t0.x + select(0u, 1u, p1 < t1.x);
  var q = p2 >> 30u;
  p2 = p2 & 0x3fffffffu;
  let upper = (p2 & 0x20000000u) != 0u;
  if (upper) {  // fraction >= 1/2: next quadrant, r = -(1 - fraction) pi/2
    q = q + 1u;
    p0 = ~p0 + 1u;
    p1 = ~p1 + select(0u, 1u, p0 == 0u);
    p2 = (~p2 + select(0u, 1u, p0 == 0u && p1 == 0u)) & 0x3fffffffu;
  }
  var shift = 0u;
  if (p2 == 0u) { p2 = p1; p1 = p0; p0 = 0u; shift = 32u; }
  if (p2 == 0u) { p2 = p1; p1 = 0u; shift = shift + 32u; }
  if (p2 == 0u) { return m_Reduced(0.0, q & 3u); }
  let lz = countLeadingZeros(p2);
  if (lz != 0u) {
    p2 = (p2 << lz) | (p1 >> (32u - lz));
    p1 = (p1 << lz) | (p0 >> (32u - lz));
  }
  let t = i32(shift + lz);
  let fh = m_ldexp(f32(p2 >> 8u), -22 - t);
  let fl = m_ldexp(f32(((p2 & 0xffu) << 16u) | (p1 >> 16u)), -46 - t);
  let r = fh * 1.57079637050628662109375
          + (fh * -4.37113900018624283e-8 + fl * 1.57079637050628662109375);
  return m_Reduced(select(r, -r, upper), q & 3u);
}
fn m_sin_poly(r: f32) -> f32 {
  let z = r * r;
  return ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z * r + r;
}
fn m_cos_poly(r: f32) -> f32 {
  let z = r * r;
  return ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2) * z * z
         - 0.5 * z + 1.0;
}
fn m_sincos(x: f32, cosine: bool) -> f32 {
  if (m_isnan(x) || m_isinf(x)) { return m_nan(); }
  let a = abs(x);
  if (a < 2.44140625e-4) { return select(x, 1.0, cosine); }  // below 2^-12 both round exactly
  var r = a;
  var q = 0u;
  if (a > 0.785398185253143310546875) {
    let reduced = m_rem_pio2(a);
    r = reduced.r;
    q = reduced.q;
  }
  if (cosine) {  // cos(q pi/2 + r) = cos r, -sin r, -cos r, sin r
    let c = select(m_cos_poly(r), m_sin_poly(r), (q & 1u) == 1u);
    return select(c, -c, q == 1u || q == 2u);
  }
  let s = select(m_sin_poly(r), m_cos_poly(r), (q & 1u) == 1u);  // sin r, cos r, -sin r, -cos r
  return select(s, -s, (q >= 2u) != (x < 0.0));
}
fn m_poly(c: array<f32, 9>, n: i32, z: f32) -> f32 {
  var k = c;  // NOTE: a var, because not every backend indexes an array value dynamically
  var r = k[n - 1];
  for (var i = n - 2; i >= 0; i = i - 1) { r = r * z + k[i]; }
  return r;
}
fn m_erf(x: f32) -> f32 {
  // fdlibm's erff: rational approximations on [0, 0.84375), [0.84375, 1.25), then
  // 1 - exp(-x^2 - 0.5625 + R/S) / x, with x^2 split (z = x rounded to 11 bits) so its error
  // does not reach the exponential.
  if (m_isnan(x)) { return x; }
  let a = abs(x);
  if (a < 0.84375) {
    if (a < 3.7252902984e-09) { return x + 1.2837916613e-01 * x; }
    let z = x * x;
    let r = m_poly(array<f32, 9>(1.2837916613e-01, -3.2504209876e-01, -2.8481749818e-02,
                                 -5.7702702470e-03, -2.3763017452e-05, 0.0, 0.0, 0.0, 0.0), 5, z);
    let s = m_poly(array<f32, 9>(1.0, 3.9791721106e-01, 6.5022252500e-02, 5.0813062117e-03,
                                 1.3249473704e-04, -3.9602282413e-06, 0.0, 0.0, 0.0), 6, z);
    return x + x * (r / s);
  }
  var v: f32;
  if (a < 1.25) {
    let s = a - 1.0;
    let p = m_poly(array<f32, 9>(-2.3621185683e-03, 4.1485610604e-01, -3.7220788002e-01,
                                 3.1834661961e-01, -1.1089469492e-01, 3.5478305072e-02,
                                 -2.1663755178e-03, 0.0, 0.0), 7, s);
    let q = m_poly(array<f32, 9>(1.0, 1.0642088205e-01, 5.4039794207e-01, 7.1828655899e-02,
                                 1.2617121637e-01, 1.3637083583e-02, 1.1984500103e-02, 0.0,
                                 0.0), 7, s);
    v = 8.4506291151e-01 + p / q;
  } else if (a >= 6.0) {
    v = 1.0;
  } else {
    let s = 1.0 / (a * a);
    var r: f32;
    var q: f32;
    if (a < 2.85714285714) {
      r = m_poly(array<f32, 9>(-9.8649440333e-03, -6.9385856390e-01, -1.0558626175e+01,
                               -6.2375331879e+01, -1.6239666748e+02, -1.8460508728e+02,
                               -8.1287437439e+01, -9.8143291473e+00, 0.0), 8, s);
      q = m_poly(array<f32, 9>(1.0, 1.9651271820e+01, 1.3765776062e+02, 4.3456588745e+02,
                               6.4538726807e+02, 4.2900814819e+02, 1.0863500214e+02,
                               6.5702495575e+00, -6.0424413532e-02), 9, s);
    } else {
      r = m_poly(array<f32, 9>(-9.8649431020e-03, -7.9928326607e-01, -1.7757955551e+01,
                               -1.6063638306e+02, -6.3756646729e+02, -1.0250950928e+03,
                               -4.8351919556e+02, 0.0, 0.0), 7, s);
      q = m_poly(array<f32, 9>(1.0, 3.0338060379e+01, 3.2579251099e+02, 1.5367296143e+03,
                               3.1998581543e+03, 2.5530502930e+03, 4.7452853394e+02,
                               -2.2440952301e+01, 0.0), 8, s);
    }
    let z = bitcast<f32>(bitcast<u32>(a) & 0xffffe000u);
    let e = m_exp(-z * z - 0.5625) * m_exp((z - a) * (z + a) + r / q);
    v = 1.0 - e / a;
  }
  return select(v, -v, x < 0.0);
}
fn m_atan01(t0: f32) -> f32 {
  // Cephes atanf on [0, 1]: reduce by tan(pi/8) then a degree-9 odd polynomial.
  var t = t0;
  var y0 = 0.0;
  var y0lo = 0.0;
  if (t0 > 0.4142135623730950) {
    t = (t0 - 1.0) / (t0 + 1.0);
    y0 = 0.785398185253143310546875;
    y0lo = -2.18556948e-8;
  }
  let z = t * t;
  let p = (((8.05374449538e-2 * z - 1.38776856032e-1) * z + 1.99777106478e-1) * z
           - 3.33329491539e-1) * z * t;
  return y0 + (t + (p + y0lo));
}
fn m_atan2(y: f32, x: f32) -> f32 {
  if (m_isnan(x) || m_isnan(y)) { return x + y; }
  let neg_x = x < 0.0 || (x == 0.0 && (bitcast<u32>(x) & 0x80000000u) != 0u);
  let sy = select(1.0, -1.0, (bitcast<u32>(y) & 0x80000000u) != 0u);
  let ay = abs(y);
  let ax = abs(x);
  var r: f32;
  if (ay == 0.0) {
    r = select(0.0, 3.1415927410125732, neg_x);
  } else if (m_isinf(ax) && m_isinf(ay)) {
    r = select(0.785398185253143310546875, 2.35619449615478515625, neg_x);
  } else if (m_isinf(ax)) {
    r = select(0.0, 3.1415927410125732, neg_x);
  } else if (ax == 0.0 || m_isinf(ay)) {
    r = 1.57079637050628662109375;
  } else {
    // NOTE: a ratio in [0, 1] and the complement from pi/2 (split in two words), so the
    // quotient neither overflows nor loses the small angle.
    var t: f32;
    if (ay > ax) {
      t = (1.57079637050628662109375 - m_atan01(ax / ay)) + -4.37113900018624283e-8;
    } else {
      t = m_atan01(ay / ax);
    }
    r = select(t, (3.1415927410125732 - t) + -8.74227800037248566e-8, neg_x);
  }
  return sy * r;
}
fn m_ipow_i(b: i32, e: i32) -> i32 {
  var r = 1; var x = b; var n = e;
  loop { if (n <= 0) { break; } if ((n & 1) == 1) { r = r * x; } x = x * x; n = n >> 1u; }
  return r;
}
fn m_ipow_u(b: u32, e: u32) -> u32 {
  var r = 1u; var x = b; var n = e;
  loop { if (n == 0u) { break; } if ((n & 1u) == 1u) { r = r * x; } x = x * x; n = n >> 1u; }
  return r;
}
"""


class WgslPrinter(CPrinter):
    """WGSL: f16 computed in f32, bool stored as u32, float math from `MATHLIB`."""

    language = "WGSL"
    storage_types = {"float32": "f32", "float16": "f16", "int32": "i32", "uint32": "u32",
                     "bool": "u32"}
    compute_types = {"float32": "f32", "float16": "f32", "int32": "i32", "uint32": "u32",
                     "bool": "bool"}
    float_types = ("f32",)
    bool_ops = {"and": "&", "or": "|", "xor": "!="}
    float_literals = {"f32": "f32({!r})"}
    int_literal = "{ctype}({value})"
    loads = {"float16": "f32({})", "bool": "({} != 0u)"}
    stores = {"float16": "f16({})", "bool": "select(0u, 1u, {})"}

    def cast(self, src: str, dst: str, value: str) -> str:
        """Int <-> int wraps (bitcast); float -> int truncates (out of range saturates)."""
        if src in ("i32", "u32") and dst in ("i32", "u32"):
            return f"bitcast<{dst}>({value})"
        if src == "f32" and dst in ("i32", "u32"):
            return f"{dst}(trunc({value}))"
        return f"{dst}({value})"

    def bitcast(self, src: DType, dst: DType, value: str) -> str:
        """WGSL's ``bitcast``."""
        return f"bitcast<{self.compute_type(dst)}>({value})"

    def ternary(self, cond: str, a: str, b: str) -> str:
        """WGSL's ``select(false_value, true_value, cond)``."""
        return f"select({b}, {a}, {cond})"

    def declare(self, name: str, ctype: str, code: str) -> str:
        """``  let name: T = code;``."""
        return f"  let {name}: {ctype} = {code};"

    def math(self, fn: str, ctype: str, args: Sequence[str]) -> str:
        """A WGSL built-in or an ``m_`` function of `MATHLIB`."""
        if fn in ("sin", "cos"):
            return f"m_sincos({args[0]}, {'true' if fn == 'cos' else 'false'})"
        name = _BUILTIN.get(fn) or "m_" + {"rem": "fmod"}.get(fn, fn)
        return f"{name}({', '.join(args)})"

    def int_neg(self, ctype: str, a: str) -> str:
        """In u32 (i32 overflow is not defined to wrap)."""
        if ctype == "u32":
            return f"(0u - {a})"
        return f"bitcast<i32>(0u - bitcast<u32>({a}))"

    def int_div(self, ctype: str, args: Sequence[str]) -> str:
        """x/0 divides by 1 instead (unspecified in PTIR; no driver may trap)."""
        one, zero = self.literal(ctype, 1), self.literal(ctype, 0)
        return f"({args[0]} / select({args[1]}, {one}, {args[1]} == {zero}))"

    def int_rem(self, ctype: str, args: Sequence[str]) -> str:
        """x%0 takes the remainder by 1 instead."""
        one, zero = self.literal(ctype, 1), self.literal(ctype, 0)
        return f"({args[0]} % select({args[1]}, {one}, {args[1]} == {zero}))"

    def int_call(self, fn: str, ctype: str, args: Sequence[str]) -> str:
        """``max``/``min`` built-ins; ``m_ipow_u``/``m_ipow_i`` of `MATHLIB`."""
        if fn == "pow":
            fn = "m_ipow_u" if ctype == "u32" else "m_ipow_i"
        return f"{fn}({', '.join(args)})"

    def compare(self, symbol: str, ctype: str, args: Sequence[str]) -> str:
        """Bools compare as 0/1 (WGSL orders none); ``!=`` as ``!(==)`` (true on NaN)."""
        x, y = args
        if ctype == "bool":
            x, y = f"select(0u, 1u, {x})", f"select(0u, 1u, {y})"
        if symbol == "!=":
            return f"(!({x} == {y}))"
        return f"({x} {symbol} {y})"


#: The printer the WebGPU backend uses.
WGSL: Final = WgslPrinter("wgpu")
