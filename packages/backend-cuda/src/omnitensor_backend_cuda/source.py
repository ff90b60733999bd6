"""CUDA C building blocks: the shared prelude, dtype mapping, elementwise templates, kernel shells.

Every kernel is plain C++ whose logic lives in ``OT_HD`` (``__host__ __device__``) functions;
the ``__global__`` shell around them only maps threads to work (and, for warp kernels, combines
lane states with shuffles). The same text therefore compiles to PTX (NVRTC on a GPU, nvcc in the
tests) and, with ``-DOT_HOST_HARNESS``, to a host library whose ``<name>_host`` entry points run
the very same logic functions over the whole grid on the CPU (`nvcc.HostLibrary`).
float16/bfloat16 are stored as 16-bit words and computed in float32 with our own conversions
(identical on host and device; no ``cuda_fp16.h``). Nothing here knows about buffers or CuPy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from omnitensor.dtypes import DType, bfloat16, bool_, float16, float32, float64
from omnitensor.errors import UnsupportedError

__all__ = [
    "PRELUDE",
    "WARP",
    "Arg",
    "compute_type",
    "convert_expr",
    "elementwise_expr",
    "load_expr",
    "narrow_expr",
    "storage_type",
    "store_expr",
    "thread_kernel",
    "warp_kernel",
]

#: Lanes per warp: warp kernels combine lane states with butterfly shuffles over this many lanes.
WARP: Final = 32

_STORAGE: Final = {
    "float32": "float", "float64": "double", "float16": "unsigned short",
    "bfloat16": "unsigned short", "int8": "signed char", "int16": "short", "int32": "int",
    "int64": "long long", "uint8": "unsigned char", "uint32": "unsigned int", "bool": "bool",
}
_UNSIGNED: Final = {
    "signed char": "unsigned char", "short": "unsigned short", "int": "unsigned int",
    "long long": "unsigned long long",
}

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


def storage_type(dtype: DType) -> str:
    """C type of one stored element of `dtype` (float16/bfloat16 as 16-bit words)."""
    return _STORAGE[dtype.name]


def compute_type(dtype: DType) -> str:
    """C type values of `dtype` are computed in (float16/bfloat16 in float)."""
    if dtype in (float16, bfloat16):
        return "float"
    return _STORAGE[dtype.name]


def load_expr(dtype: DType, raw: str) -> str:
    """A stored element `raw` as a compute-type value."""
    if dtype == float16:
        return f"ot_h2f({raw})"
    if dtype == bfloat16:
        return f"ot_bf2f({raw})"
    return raw


def store_expr(dtype: DType, value: str) -> str:
    """A compute-type value as the element it is stored as (rounding once)."""
    if dtype == float16:
        return f"ot_f2h({value})"
    if dtype == bfloat16:
        return f"ot_f2bf({value})"
    return value


def narrow_expr(dtype: DType, value: str) -> str:
    """`value` rounded to `dtype` but kept in the compute type (what a fused op's result holds)."""
    if dtype == float16:
        return f"ot_rh({value})"
    if dtype == bfloat16:
        return f"ot_rbf({value})"
    if compute_type(dtype) in _UNSIGNED or dtype.name in ("uint8", "uint32"):
        return f"({compute_type(dtype)})({value})"
    return value


def _literal(ctype: str, value: float) -> str:
    if ctype == "float":
        return f"{float(value)!r}f"
    if ctype == "double":
        return f"{float(value)!r}"
    if ctype == "bool":
        return "true" if value else "false"
    return f"({ctype}){int(value)}"


def convert_expr(src: DType, dst: DType, value: str) -> str:
    """`value` (compute type of `src`) as the compute type of `dst` (PTIR `convert`)."""
    s, d = compute_type(src), compute_type(dst)
    if dst == bool_:
        return f"({value} != {_literal(s, 0)})" if s != "bool" else value
    if s == "bool":
        return f"({value} ? {_literal(d, 1)} : {_literal(d, 0)})"
    if s in ("float", "double") and d not in ("float", "double"):
        # NOTE: out-of-range float -> int is unspecified in PTIR; go through a wide integer so
        # the host harness never hits C's undefined narrowing of huge floats.
        return f"({d})(long long)({value})"
    return f"({d})({value})"


Expr = Callable[[str, Sequence[str]], str]


def _is_float(ctype: str) -> bool:
    return ctype in ("float", "double")


def _math(name: str) -> Expr:
    def make(ctype: str, a: Sequence[str]) -> str:
        return f"{name}{'f' if ctype == 'float' else ''}({', '.join(a)})"

    return make


def _wrap(symbol: str) -> Expr:
    """Integer arithmetic that wraps: done in the unsigned type of the same width."""

    def make(ctype: str, a: Sequence[str]) -> str:
        if _is_float(ctype):
            return f"({a[0]} {symbol} {a[1]})"
        unsigned = _UNSIGNED.get(ctype, ctype)
        return f"({ctype})(({unsigned}){a[0]} {symbol} ({unsigned}){a[1]})"

    return make


def _neg(ctype: str, a: Sequence[str]) -> str:
    if _is_float(ctype):
        return f"(-{a[0]})"
    unsigned = _UNSIGNED.get(ctype, ctype)
    return f"({ctype})(({unsigned})0 - ({unsigned}){a[0]})"


def _abs(ctype: str, a: Sequence[str]) -> str:
    if _is_float(ctype):
        return _math("fabs")(ctype, a)
    if ctype not in _UNSIGNED:
        return a[0]
    return f"({a[0]} < 0 ? {_neg(ctype, a)} : {a[0]})"


def _sign(ctype: str, a: Sequence[str]) -> str:
    if _is_float(ctype):
        return f"ot_fsign<{ctype}>({a[0]})"
    return f"({ctype})(({a[0]} > 0) - ({a[0]} < 0))" if ctype in _UNSIGNED else \
        f"({ctype})({a[0]} > 0)"


def _div(ctype: str, a: Sequence[str]) -> str:
    if _is_float(ctype):
        return f"({a[0]} / {a[1]})"
    if ctype not in _UNSIGNED:
        return f"({a[1]} == 0 ? ({ctype})0 : ({ctype})({a[0]} / {a[1]}))"
    # NOTE: x/0 and INT_MIN/-1 are unspecified in PTIR but trap on x86; never divide by them.
    return (f"({a[1]} == 0 ? ({ctype})0 : ({a[1]} == ({ctype})-1 ? {_neg(ctype, a[:1])} : "
            f"({ctype})({a[0]} / {a[1]})))")


def _rem(ctype: str, a: Sequence[str]) -> str:
    if _is_float(ctype):
        return _math("fmod")(ctype, a)
    if ctype not in _UNSIGNED:
        return f"({a[1]} == 0 ? ({ctype})0 : ({ctype})({a[0]} % {a[1]}))"
    return f"(({a[1]} == 0 || {a[1]} == ({ctype})-1) ? ({ctype})0 : ({ctype})({a[0]} % {a[1]}))"


def _pow(ctype: str, a: Sequence[str]) -> str:
    if _is_float(ctype):
        return _math("pow")(ctype, a)
    return f"ot_ipow<{ctype}, {_UNSIGNED.get(ctype, ctype)}>({a[0]}, {a[1]})"


def _minmax(name: str) -> Expr:
    def make(ctype: str, a: Sequence[str]) -> str:
        if _is_float(ctype):
            return f"ot_f{name}({a[0]}, {a[1]})"
        return f"ot_i{name}<{ctype}>({a[0]}, {a[1]})"

    return make


def _logic(int_symbol: str, bool_symbol: str) -> Expr:
    def make(ctype: str, a: Sequence[str]) -> str:
        if ctype == "bool":
            return f"({a[0]} {bool_symbol} {a[1]})"
        return f"({ctype})({a[0]} {int_symbol} {a[1]})"

    return make


def _compare(symbol: str) -> Expr:
    return lambda ctype, a: f"({a[0]} {symbol} {a[1]})"


def _clamp(ctype: str, a: Sequence[str]) -> str:
    lo, x, hi = a
    kind = "f" if _is_float(ctype) else "i"
    tmpl = "" if _is_float(ctype) else f"<{ctype}>"
    return f"ot_{kind}min{tmpl}(ot_{kind}max{tmpl}({x}, {lo}), {hi})"


#: op name -> template(compute type, operand expressions) -> C expression.
ELEMENTWISE_OPS: Final[dict[str, Expr]] = {
    "neg": _neg, "abs": _abs, "sign": _sign,
    "exp": _math("exp"), "log": _math("log"), "log1p": _math("log1p"), "expm1": _math("expm1"),
    "sqrt": _math("sqrt"), "tanh": _math("tanh"), "sin": _math("sin"), "cos": _math("cos"),
    "erf": _math("erf"), "floor": _math("floor"), "ceil": _math("ceil"), "round": _math("rint"),
    "rsqrt": lambda c, a: f"(({c})1 / {_math('sqrt')(c, a)})",
    "logistic": lambda c, a: f"ot_logistic({a[0]})",
    "not": lambda c, a: f"(!{a[0]})" if c == "bool" else f"({c})(~{a[0]})",
    "add": _wrap("+"), "sub": _wrap("-"), "mul": _wrap("*"), "div": _div, "rem": _rem,
    "pow": _pow, "max": _minmax("max"), "min": _minmax("min"), "atan2": _math("atan2"),
    "and": _logic("&", "&&"), "or": _logic("|", "||"), "xor": _logic("^", "!="),
    "eq": _compare("=="), "ne": _compare("!="), "lt": _compare("<"), "le": _compare("<="),
    "gt": _compare(">"), "ge": _compare(">="),
    "select": lambda c, a: f"({a[0]} ? {a[1]} : {a[2]})",
    "clamp": _clamp,
}


def elementwise_expr(op: str, dtype: DType, args: Sequence[str], attrs: dict[str, Any],
                     result: DType) -> str:
    """The C expression of elementwise `op` on compute-type `args`, rounded to `result`.

    Args:
        op: the PTIR op name.
        dtype: the dtype of the op's (main) operands (`select`: of its branches).
        args: C expressions of the operands, already in compute types.
        attrs: the instruction's attributes (``dtype`` of `convert`/`bitcast`).
        result: the result dtype.
    """
    if op == "convert":
        return narrow_expr(result, convert_expr(dtype, result, args[0]))
    if op == "bitcast":
        bits = f"ot_bitcast<{storage_type(result)}>({store_expr(dtype, args[0])})"
        return load_expr(result, f"({storage_type(result)})({bits})")
    template = ELEMENTWISE_OPS.get(op)
    if template is None:
        raise UnsupportedError(f"{op}: no CUDA C template (backend 'cuda')", op=op,
                               backend="cuda")
    return narrow_expr(result, template(compute_type(dtype), args))


# --- kernel shells -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Arg:
    """One pointer argument of a kernel: its C name and pointer type (``const float*``)."""

    name: str
    ctype: str


def _params(args: Sequence[Arg]) -> str:
    return ", ".join(f"{a.ctype} __restrict__ {a.name}" for a in args)


def _host_casts(args: Sequence[Arg]) -> str:
    return ", ".join(f"({a.ctype})A[{k}]" for k, a in enumerate(args))


def thread_kernel(name: str, args: Sequence[Arg], body: str) -> str:
    """A kernel whose thread t (of n) runs `body` (C statements using t, P and the args).

    Emits ``<name>_body`` (the logic, host and device), the ``__global__`` grid-stride shell
    ``<name>(n, P, args...)`` and, under ``OT_HOST_HARNESS``, ``<name>_host(n, P, A)``.
    """
    names = ", ".join(a.name for a in args)
    return f"""
OT_HD void {name}_body(long long t, const long long* __restrict__ P, {_params(args)}) {{
{body}
}}
extern "C" __global__ void {name}(long long n, const long long* __restrict__ P, {_params(args)}) {{
  for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < n;
       t += (long long)gridDim.x * blockDim.x) {name}_body(t, P, {names});
}}
#ifdef OT_HOST_HARNESS
extern "C" void {name}_host(long long n, const long long* P, void** A) {{
  for (long long t = 0; t < n; ++t) {name}_body(t, P, {_host_casts(args)});
}}
#endif
"""


def warp_kernel(name: str, args: Sequence[Arg], state: Sequence[tuple[str, str, int]],
                partial: str, combine: str, finish: str, *, warps: int = 4) -> str:
    """A kernel where one warp handles one row: lane partials, butterfly combine, finish.

    Args:
        name: the kernel name.
        args: its pointer arguments.
        state: the per-lane state struct fields as (C type, name, array length; 1 = scalar).
        partial: C statements of ``<name>_partial(row, lane, P, args..., S& s)`` (init + fold).
        combine: C statements of ``<name>_combine(S& a, const S& b)`` (a = a op b).
        finish: C statements of ``<name>_finish(row, lane, P, args..., const S& s)``.
        warps: warps per block.

    The host harness ``<name>_host(rows, P, A)`` emulates the butterfly exactly (lane l combines
    with lane l ^ offset for offset = 16 .. 1), so it meets the same float results as the GPU.
    """
    names = ", ".join(a.name for a in args)
    fields = "\n".join(f"  {t} {n}{f'[{k}]' if k > 1 else ''};" for t, n, k in state)
    shuffles = []
    for _, n, k in state:
        if k > 1:
            shuffles.append(f"  for (int i = 0; i < {k}; ++i) o.{n}[i] = "
                            f"__shfl_xor_sync(0xffffffffu, s.{n}[i], off);")
        else:
            shuffles.append(f"  o.{n} = __shfl_xor_sync(0xffffffffu, s.{n}, off);")
    shuffle_body = "\n".join(shuffles)
    return f"""
struct {name}_S {{
{fields}
}};
OT_HD void {name}_partial(long long row, int lane, const long long* __restrict__ P, {_params(args)}, {name}_S& s) {{
{partial}
}}
OT_HD void {name}_combine({name}_S& a, const {name}_S& b) {{
{combine}
}}
OT_HD void {name}_finish(long long row, int lane, const long long* __restrict__ P, {_params(args)}, const {name}_S& s) {{
{finish}
}}
__device__ __forceinline__ {name}_S {name}_shfl(const {name}_S& s, int off) {{
  {name}_S o;
{shuffle_body}
  return o;
}}
extern "C" __global__ void __launch_bounds__({warps * WARP}) {name}(long long rows, const long long* __restrict__ P, {_params(args)}) {{
  long long row = blockIdx.x * (long long){warps} + threadIdx.x / {WARP};
  int lane = threadIdx.x % {WARP};
  if (row >= rows) return;  // whole warps leave together: the shuffles below stay converged
  {name}_S s;
  {name}_partial(row, lane, P, {names}, s);
  for (int off = {WARP // 2}; off > 0; off >>= 1) {{ {name}_S o = {name}_shfl(s, off); {name}_combine(s, o); }}
  {name}_finish(row, lane, P, {names}, s);
}}
#ifdef OT_HOST_HARNESS
extern "C" void {name}_host(long long rows, const long long* P, void** A) {{
  static {name}_S s[{WARP}], o[{WARP}];
  for (long long row = 0; row < rows; ++row) {{
    for (int l = 0; l < {WARP}; ++l) {name}_partial(row, l, P, {_host_casts(args)}, s[l]);
    for (int off = {WARP // 2}; off > 0; off >>= 1) {{
      for (int l = 0; l < {WARP}; ++l) o[l] = s[l ^ off];
      for (int l = 0; l < {WARP}; ++l) {name}_combine(s[l], o[l]);
    }}
    for (int l = 0; l < {WARP}; ++l) {name}_finish(row, l, P, {_host_casts(args)}, s[l]);
  }}
}}
#endif
"""


def is_float(dtype: DType) -> bool:
    """float16/bfloat16/float32/float64."""
    return dtype in (float16, bfloat16, float32, float64)
