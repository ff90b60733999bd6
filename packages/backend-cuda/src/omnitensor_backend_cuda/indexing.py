"""CUDA C sources of the data-dependent kernels: gather, scatter_add, pad, cumsum, sort/top_k, rng.

Built like `kernels`: ``(kernel name, source)`` pairs of thread kernels whose logic is host-
checkable, parameters in the int64 array ``P`` (layouts documented per kernel). Pure copies
(gather, pad) depend only on the element size; `dynamic_slice`/`dynamic_update_slice` are
generated per call site by the fused-kernel generator in `lower` (their starts are fused in).
"""

from __future__ import annotations

from typing import Final

from omnitensor.dtypes import DType, bfloat16, float16, float32, float64, uint32

from .kernels import MAX_RANK
from .source import CUDA, PRELUDE, Arg, thread_kernel

__all__ = [
    "BITS",
    "RNG_DISTRIBUTIONS",
    "cumsum_source",
    "gather_source",
    "pad_source",
    "rng_source",
    "scatter_add_source",
    "sort_source",
]

#: Element size in bytes -> the unsigned C type pure copies move.
BITS: Final = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}
#: distribution -> the dtypes `rng` produces with it.
RNG_DISTRIBUTIONS: Final = {"bits": (uint32,),
                            "uniform": (float32, float16, bfloat16, float64),
                            "normal": (float32, float16, bfloat16, float64)}

_CLAMP: Final = "  {v} = {v} < 0 ? 0 : ({v} >= {n} ? {n} - 1 : {v});\n"


def gather_source(itemsize: int, index: DType) -> tuple[str, str]:
    """``gather`` of a dense operand seen as (B, P, n, Q) at dense (B, I) indices: y (B, P, I, Q).

    Thread t copies output element t. P layout: [P, n, Q, I]. Indices are clamped to [0, n).
    """
    name = f"ot_gather_b{itemsize}_{index.name}"
    raw = BITS[itemsize]
    args = [Arg("x", f"const {raw}*"), Arg("ix", f"const {CUDA.storage_type(index)}*"),
            Arg("y", f"{raw}*")]
    body = ("  long long Pn = P[0], n = P[1], Q = P[2], I = P[3];\n"
            "  long long q = t % Q, r = t / Q, i = r % I;\n  r /= I;\n"
            "  long long p = r % Pn, b = r / Pn, j = (long long)ix[b * I + i];\n"
            + _CLAMP.format(v="j", n="n")
            + "  y[t] = x[((b * Pn + p) * n + j) * Q + q];")
    return name, PRELUDE + thread_kernel(name, args, body)


def scatter_add_source(dtype: DType, index: DType) -> tuple[str, str]:
    """``scatter_add`` into y (already holding the operand, dense (B, P, n, Q)), in place.

    Thread t owns the column (b, p, q) and adds the dense updates (B, P, I, Q) in index order,
    so duplicates accumulate deterministically without atomics (the reference's order too).
    float16/bfloat16 are lowered through a float32 copy (one rounding, as the reference).
    P layout: [P, n, Q, I].
    """
    name = f"ot_scatter_add_{dtype.name}_{index.name}"
    st, ct = CUDA.storage_type(dtype), CUDA.compute_type(dtype)
    args = [Arg("ix", f"const {CUDA.storage_type(index)}*"), Arg("u", f"const {st}*"),
            Arg("y", f"{st}*")]
    add = CUDA.op("add", ct, ["y[at]", "u[((b * Pn + p) * I + i) * Q + q]"])
    body = ("  long long Pn = P[0], n = P[1], Q = P[2], I = P[3];\n"
            "  long long q = t % Q, r = t / Q, p = r % Pn, b = r / Pn;\n"
            "  for (long long i = 0; i < I; ++i) {\n"
            "    long long j = (long long)ix[b * I + i];\n"
            + "  " + _CLAMP.format(v="j", n="n")
            + "    long long at = ((b * Pn + p) * n + j) * Q + q;\n"
            f"    y[at] = {add};\n  }}")
    return name, PRELUDE + thread_kernel(name, args, body)


# P layout of pad: [rank, out shape[8], x offset, x strides[8], padding offset, low[8],
# interior[8], x shape[8]]; the output is dense.
_PAD_X: Final = 1 + MAX_RANK
_PAD_V: Final = _PAD_X + 1 + MAX_RANK
_PAD_LOW: Final = _PAD_V + 1
_PAD_IN: Final = _PAD_LOW + MAX_RANK
_PAD_SHAPE: Final = _PAD_IN + MAX_RANK


def pad_source(itemsize: int) -> tuple[str, str]:
    """``pad`` (StableHLO: low/high may crop, interior spacing) of a strided x: y is dense.

    P layout: [rank, out shape[8], x offset, x strides[8], padding-value offset, low[8],
    interior[8], x shape[8]].
    """
    name = f"ot_pad_b{itemsize}"
    raw = BITS[itemsize]
    args = [Arg("x", f"const {raw}*"), Arg("pv", f"const {raw}*"), Arg("y", f"{raw}*")]
    body = (f"  long long r = t, off = P[{_PAD_X}];\n  bool inside = true;\n"
            "  for (int d = (int)P[0] - 1; d >= 0; --d) {\n"
            "    long long c = r % P[1 + d];\n    r /= P[1 + d];\n"
            f"    long long pos = c - P[{_PAD_LOW} + d], step = P[{_PAD_IN} + d] + 1;\n"
            f"    if (pos < 0 || pos % step != 0 || pos / step >= P[{_PAD_SHAPE} + d]) "
            "inside = false;\n"
            f"    else off += (pos / step) * P[{_PAD_X + 1} + d];\n  }}\n"
            f"  y[t] = inside ? x[off] : pv[P[{_PAD_V}]];")
    return name, PRELUDE + thread_kernel(name, args, body)


# P layout of line kernels (cumsum, sort, top_k): [kept rank, n, x offset, param, kept shape[8],
# x kept strides[8], x axis stride, y kept strides[8], y axis stride, 0 (the y offset)].
_LINE_XS: Final = 4 + MAX_RANK
_LINE_XA: Final = _LINE_XS + MAX_RANK
_LINE_YS: Final = _LINE_XA + 1
_LINE_YA: Final = _LINE_YS + MAX_RANK
_LINE_Y0: Final = _LINE_YA + 1
_LINE_BASES: Final = (f"  long long xb = ot_offset(line, P, (int)P[0], 4, 2, {_LINE_XS});\n"
                      f"  long long yb = ot_offset(line, P, (int)P[0], 4, {_LINE_Y0}, {_LINE_YS});\n")


def cumsum_source(dtype: DType) -> tuple[str, str]:
    """``cumsum`` along one axis of a strided x into a strided y: thread t scans line t.

    Sequential in the line order (as numpy's ``cumsum``); float16/bfloat16 accumulate in float
    and round each output once; integers wrap. P: the line layout, param = reverse.
    """
    name = f"ot_cumsum_{dtype.name}"
    st, ct = CUDA.storage_type(dtype), CUDA.compute_type(dtype)
    args = [Arg("x", f"const {st}*"), Arg("y", f"{st}*")]
    add = CUDA.op("add", ct, ["acc", CUDA.load(dtype, f"x[xb + j * P[{_LINE_XA}]]")])
    body = ("  long long line = t, n = P[1];\n" + _LINE_BASES
            + f"  {ct} acc = ({ct})0;\n"
            "  for (long long k = 0; k < n; ++k) {\n"
            "    long long j = P[3] ? n - 1 - k : k;\n"
            f"    acc = {add};\n"
            f"    y[yb + j * P[{_LINE_YA}]] = {CUDA.store(dtype, 'acc')};\n  }}")
    return name, PRELUDE + thread_kernel(name, args, body)


def sort_source(dtype: DType, *, top_k: bool) -> tuple[str, str]:
    """Stable ``sort`` along one axis, or ``top_k`` along the last: thread t places one element.

    The rank of element j is the number of elements of its line that come before it (NaN
    largest, ties by index, in both directions): O(n) per thread, no scratch memory. Values go to
    y, int32 indices to yi (both dense, the same strides). P: the line layout; param =
    descending (sort) or k (top_k, always descending).
    """
    name = f"ot_{'top_k' if top_k else 'sort'}_{dtype.name}"
    st, ct = CUDA.storage_type(dtype), CUDA.compute_type(dtype)
    args = [Arg("x", f"const {st}*"), Arg("y", f"{st}*"), Arg("yi", "int*")]
    desc, keep = ("true", "P[3]") if top_k else ("P[3] != 0", "n")
    at = f"x[xb + {{i}} * P[{_LINE_XA}]]"
    body = ("  long long n = P[1], line = t / n, j = t % n;\n" + _LINE_BASES
            + f"  bool desc = {desc};\n"
            f"  {ct} v = {CUDA.load(dtype, at.format(i='j'))};\n  bool vn = v != v;\n"
            "  long long rank = 0;\n"
            "  for (long long i = 0; i < n; ++i) {\n"
            f"    {ct} w = {CUDA.load(dtype, at.format(i='i'))};\n    bool wn = w != w;\n"
            "    bool before;\n"
            "    if ((wn && vn) || (!wn && !vn && w == v)) before = i < j;\n"
            "    else if (desc) before = wn || (!vn && w > v);\n"
            "    else before = vn || (!wn && w < v);\n"
            "    rank += before ? 1 : 0;\n  }\n"
            f"  if (rank < {keep}) {{\n"
            f"    y[yb + rank * P[{_LINE_YA}]] = {at.format(i='j')};\n"
            f"    yi[yb + rank * P[{_LINE_YA}]] = (int)j;\n  }}")
    return name, PRELUDE + thread_kernel(name, args, body)


_THREEFRY: Final = r"""
#ifndef OT_THREEFRY
#define OT_THREEFRY
// Threefry-2x32, 20 rounds (Random123 / JAX), as omnitensor.ir.ops.creation.threefry2x32.
OT_HD void ot_threefry2x32(unsigned int k0, unsigned int k1, unsigned int c0, unsigned int c1,
                           unsigned int& o0, unsigned int& o1) {
  const unsigned int ks[3] = {k0, k1, k0 ^ k1 ^ 0x1BD11BDAu};
  const int rot[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};
  unsigned int x0 = c0 + ks[0], x1 = c1 + ks[1];
  for (int g = 0; g < 5; ++g) {
    for (int r = 0; r < 4; ++r) {
      x0 += x1;
      x1 = (x1 << rot[g % 2][r]) | (x1 >> (32 - rot[g % 2][r]));
      x1 ^= x0;
    }
    x0 += ks[(g + 1) % 3];
    x1 += ks[(g + 2) % 3] + (unsigned int)(g + 1);
  }
  o0 = x0;
  o1 = x1;
}
#endif
"""
_MANTISSA: Final = {"float16": 10, "bfloat16": 7, "float32": 23}


def rng_source(dtype: DType, distribution: str) -> tuple[str, str]:
    """``rng``: thread t draws element t (its row-major index is the counter), bit-exact.

    P layout: [key offset, key stride, stream]. ``uniform`` is exact in every dtype;
    ``normal`` is Box-Muller in double, rounded to float then to float16/bfloat16.
    """
    name = f"ot_rng_{distribution}_{dtype.name}"
    st = CUDA.storage_type(dtype)
    args = [Arg("key", "const unsigned int*"), Arg("y", f"{st}*")]
    body = ("  unsigned int w0, w1;\n"
            "  ot_threefry2x32(key[P[0]], key[P[0] + P[1]], (unsigned int)t, "
            "(unsigned int)P[2], w0, w1);\n")
    if distribution == "bits":
        body += "  y[t] = w0;"
    elif distribution == "uniform" and dtype == float64:
        body += ("  unsigned long long m = ((unsigned long long)w0 << 20) | (w1 >> 12);\n"
                 "  y[t] = (double)m * 2.220446049250313e-16;")
    elif distribution == "uniform":
        m = _MANTISSA[dtype.name]
        value = f"(float)(w0 >> {32 - m}) * {2.0 ** -m!r}f"
        body += f"  y[t] = {CUDA.store(dtype, value)};"
    else:
        body += ("  double u1 = (double)w0 * 2.3283064365386963e-10;\n"
                 "  double u2 = (double)w1 * 2.3283064365386963e-10;\n"
                 "  double z = sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * 3.141592653589793 * u2);\n")
        body += "  y[t] = z;" if dtype == float64 else f"  y[t] = {CUDA.store(dtype, '(float)z')};"
    return name, PRELUDE + _THREEFRY + thread_kernel(name, args, body)
